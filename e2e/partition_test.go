package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/internal/netfault"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/switcher"
)

// cutResult is one process of a fleet cut off from the primary, as the
// fleet saw it.
type cutResult struct {
	switches      int           // by any process
	otherEngine   int           // writes granted on an engine other than the primary
	healthyErrors int           // caller errors in the processes that reach the primary
	refused       int           // fenced writes of those processes refused
	cutErrors     int           // caller errors in the cut-off process
	worstError    time.Duration // its slowest error, past the callers' budget
	rejoined      time.Duration // heal to its first accepted write on the primary; -1 if none
}

// fleetCutOff runs a fleet of n processes on a Redis primary (each through
// a link of its own) and an etcd secondary that holds the switch key,
// written with the primary's name or never written; cuts process 0's link
// (blackhole or refuse) for cut, heals it, and runs two more seconds.
func fleetCutOff(tb testing.TB, fault string, written bool, cut time.Duration, n int) cutResult {
	primary, secondary, resource := testserver.Redis(tb), testserver.Etcd(tb), testserver.Redis(tb)
	if written {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{secondary.Addr()}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			tb.Fatal(err)
		}
		_, err = c.Put(context.Background(), fleetKey, "redis")
		_ = c.Close()
		if err != nil {
			tb.Fatal(err)
		}
	}
	links := make([]*netfault.Link, n)
	configs := make([]string, n)
	for i := range configs {
		links[i] = netfault.New(tb, primary.Addr())
		configs[i] = fleetConfig(tb, links[i].Addr(), secondary.Addr())
	}
	procs := startFleet(tb, configs, resource.Addr())
	time.Sleep(500 * time.Millisecond) // load on the primary before the fault
	switch fault {
	case "blackhole":
		if err := links[0].Blackhole(); err != nil {
			tb.Fatal(err)
		}
	case "refuse":
		links[0].Refuse()
	}
	time.Sleep(cut)
	if err := links[0].Heal(); err != nil {
		tb.Fatal(err)
	}
	healed := time.Now()
	time.Sleep(2 * time.Second)
	return readCutOff(tb, stopFleet(procs), healed)
}

// readCutOff reads the reports of a fleetCutOff run.
func readCutOff(tb testing.TB, procs [][]string, healed time.Time) cutResult {
	r := cutResult{rejoined: -1}
	for i, lines := range procs {
		for _, line := range lines {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			nanos, _ := strconv.ParseInt(f[1], 10, 64)
			at := time.Unix(0, nanos)
			switch {
			case f[0] == "switch" && f[4] != string(switcher.ReasonDeferred):
				r.switches++
				tb.Logf("process %d: %s", i, line)
			case f[0] == "write" && f[3] != "redis":
				r.otherEngine++
			case f[0] == "write" && i > 0 && f[2] == "0":
				r.refused++
			case f[0] == "write" && i == 0 && f[2] == "1" && at.After(healed) && r.rejoined < 0:
				r.rejoined = at.Sub(healed)
			case f[0] == "error" && i > 0:
				r.healthyErrors++
				tb.Logf("process %d: %s", i, line)
			case f[0] == "error":
				r.cutErrors++
				took, _ := strconv.ParseInt(f[2], 10, 64)
				r.worstError = max(r.worstError, time.Duration(took)-lockBudget)
			}
		}
	}
	return r
}

// One process of three loses its link to the Redis primary while the other
// two reach it: nobody switches, nothing is granted on the secondary, the
// healthy processes see no error and no refused write, the cut-off
// process's callers fail within their budget, and it writes again soon
// after the heal: within a second when its bytes were dropped; when its
// connections were refused, go-redis's pool has stopped dialling after
// PoolSize failed dials and probes the address once a second
// (internal/pool tryDial), and the breaker's next probe follows within its
// open timeout.
func TestFleetOneProcessCutOff(t *testing.T) {
	for _, c := range []struct {
		fault   string
		written bool
		rejoin  time.Duration
	}{
		{"blackhole", false, time.Second},
		{"refuse", true, time.Second + switcher.DefaultOpenTimeout},
	} {
		t.Run(c.fault, func(t *testing.T) {
			r := fleetCutOff(t, c.fault, c.written, 3*time.Second, 3)
			t.Logf("%+v", r)
			checkCutOff(t, r, c.rejoin)
		})
	}
}

func checkCutOff(t *testing.T, r cutResult, rejoin time.Duration) {
	t.Helper()
	if r.switches != 0 {
		t.Errorf("%d switches; want 0", r.switches)
	}
	if r.otherEngine != 0 {
		t.Errorf("%d writes granted on another engine than the primary; want 0", r.otherEngine)
	}
	if r.healthyErrors != 0 || r.refused != 0 {
		t.Errorf("the healthy processes had %d caller errors and %d refused writes; want 0 and 0", r.healthyErrors, r.refused)
	}
	if r.worstError > 100*time.Millisecond {
		t.Errorf("a caller of the cut-off process failed %v past its budget; want <= 100ms", r.worstError)
	}
	if r.rejoined < 0 || r.rejoined > rejoin {
		t.Errorf("the cut-off process's first write after the heal came %v after it; want <= %v", r.rejoined, rejoin)
	}
}

// The per-process faults of a fleet of 3, 10 s each, with the key written
// and never written:
//
//	go test -run '^$' -bench FleetCutOff -benchtime 5x ./e2e/
func BenchmarkFleetCutOff(b *testing.B) {
	for _, fault := range []string{"blackhole", "refuse"} {
		for _, written := range []bool{false, true} {
			b.Run(fault+"/written="+strconv.FormatBool(written), func(b *testing.B) {
				var rejoined []time.Duration
				var sum cutResult
				for range b.N {
					r := fleetCutOff(b, fault, written, 10*time.Second, 3)
					rejoined = append(rejoined, r.rejoined)
					sum.switches += r.switches
					sum.otherEngine += r.otherEngine
					sum.healthyErrors += r.healthyErrors
					sum.refused += r.refused
					sum.cutErrors += r.cutErrors
					sum.worstError = max(sum.worstError, r.worstError)
				}
				b.ReportMetric(ms(median(rejoined)), "rejoin-ms")
				b.ReportMetric(float64(sum.switches), "switches")
				b.Logf("%s, key written %v, n=%d: switches %d; writes on another engine %d; healthy processes: errors %d, refused writes %d; cut-off process: errors %d, worst past budget %v; heal to first write %s",
					fault, written, b.N, sum.switches, sum.otherEngine, sum.healthyErrors, sum.refused, sum.cutErrors, sum.worstError, spread(rejoined))
			})
		}
	}
}
