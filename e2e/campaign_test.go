package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/internal/netfault"
	"github.com/orthrus-go/orthrus/internal/testserver"
)

// The mixed campaign: a fleet of three processes on a Redis primary (each
// through a link of its own) and an etcd secondary holding the switch key,
// failing back after 2s, under one fault after another for the run's
// length — the primary killed and restarted without its data, frozen, one
// process's link blackholed or refused, one process crashed and started
// again — and checked against the fenced resource's log. Not part of CI:
//
//	E2E_CAMPAIGN=10m go test -run '^$' -bench Campaign -benchtime 1x -timeout 30m ./e2e/
func BenchmarkCampaign(b *testing.B) {
	length, err := time.ParseDuration(os.Getenv("E2E_CAMPAIGN"))
	if err != nil {
		length = time.Minute
	}
	for range b.N {
		r := campaign(b, length)
		b.Logf("\n%s", r)
		b.ReportMetric(float64(r.sameEngineOverlaps), "overlaps")
		b.ReportMetric(float64(r.staleAccepted), "stale-accepted")
	}
}

// campaignResult is what a campaign found, fault by fault.
type campaignResult struct {
	faults             []string
	splits             map[string][]time.Duration // per kind of fault, the fleet's split after each
	fencedOut          []time.Duration            // runs of refused writes of processes on the fleet's engine longer than 1s
	sameEngineOverlaps int
	crossEngine        int
	staleAccepted      int
	writes, refused    int
	errors             int
}

func (r campaignResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d faults; %d fenced writes, %d refused; %d caller errors\n", len(r.faults), r.writes, r.refused, r.errors)
	fmt.Fprintf(&b, "same-engine overlaps %d; cross-engine overlaps %d; stale writes accepted %d; fenced-out stretches > 1s on the fleet's engine %d %v\n",
		r.sameEngineOverlaps, r.crossEngine, r.staleAccepted, len(r.fencedOut), r.fencedOut)
	fmt.Fprintf(&b, "| fault | count | fleet split per fault (min / median / max) |\n| --- | --- | --- |\n")
	kinds := make([]string, 0, len(r.splits))
	for k := range r.splits {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "| %s | %d | %s |\n", k, len(r.splits[k]), spread(r.splits[k]))
	}
	return b.String()
}

func campaign(tb testing.TB, length time.Duration) campaignResult {
	primary, secondary, resource := testserver.Redis(tb), testserver.Etcd(tb), testserver.Redis(tb)
	tb.Cleanup(func() { _ = primary.Resume() })
	const n = 3
	links := make([]*netfault.Link, n)
	configs := make([]string, n)
	for i := range configs {
		links[i] = netfault.New(tb, primary.Addr())
		configs[i] = fleetConfig(tb, links[i].Addr(), secondary.Addr())
		withFailback(tb, configs[i])
	}
	procs := startFleet(tb, configs, resource.Addr())
	var retired []*fleetProc       // crashed processes, whose reports count too
	var crashed []time.Time        // when each left the fleet
	joined := make([]time.Time, n) // when the process now at each index joined: zero for the first ones
	type mark struct {
		kind     string
		from, to time.Time
	}
	var marks []mark
	kinds := []string{"kill", "pause", "blackhole", "refuse", "crash"}
	end := time.Now().Add(length)
	for step := 0; time.Now().Before(end); step++ {
		kind, k := kinds[step%len(kinds)], rand.IntN(n)
		from := time.Now()
		switch kind {
		case "kill":
			must(tb, primary.Kill())
			time.Sleep(4 * time.Second)
			must(tb, primary.Restart()) // without its data: the test server keeps none
		case "pause":
			must(tb, primary.Pause())
			time.Sleep(4 * time.Second)
			must(tb, primary.Resume())
		case "blackhole":
			must(tb, links[k].Blackhole())
			time.Sleep(4 * time.Second)
			must(tb, links[k].Heal())
		case "refuse":
			links[k].Refuse()
			time.Sleep(4 * time.Second)
			must(tb, links[k].Heal())
		case "crash":
			_ = procs[k].cmd.Process.Kill()
			<-procs[k].done
			retired, crashed = append(retired, procs[k]), append(crashed, time.Now())
			joined[k] = time.Now()
			procs[k] = startFleet(tb, configs[k:k+1], resource.Addr())[0]
		}
		marks = append(marks, mark{kind, from, time.Now()})
		time.Sleep(6 * time.Second) // recovery, and failback
	}
	reports := stopFleet(append(procs, retired...))

	r := campaignResult{splits: make(map[string][]time.Duration)}
	for _, m := range marks {
		r.faults = append(r.faults, m.kind)
	}
	type interval struct {
		from, to time.Time
		engine   string
		proc     int
	}
	holds := make(map[string][]interval)
	type change struct {
		at     time.Time
		proc   int
		engine string
	}
	var changes []change
	for i, lines := range reports {
		var refusedSince time.Time
		for _, line := range lines {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			at := unixNano(f[1])
			switch f[0] {
			case "ready":
				if i < n {
					changes = append(changes, change{joined[i], i, f[1]})
				}
			case "switch":
				if f[4] != "deferred" {
					changes = append(changes, change{at, i, f[2]})
				}
			case "error":
				r.errors++
			case "write":
				r.writes++
				switch {
				case f[2] == "0":
					r.refused++
					if refusedSince.IsZero() {
						refusedSince = at
					}
				case !refusedSince.IsZero():
					if d := at.Sub(refusedSince); d > time.Second {
						r.fencedOut = append(r.fencedOut, d)
					}
					refusedSince = time.Time{}
				}
			case "hold":
				if f[5] == "false" { // a hold reported lost was not held to its end
					holds[f[4]] = append(holds[f[4]], interval{at, unixNano(f[2]), f[3], i})
				}
			}
		}
	}
	for _, hs := range holds {
		slices.SortFunc(hs, func(a, b interval) int { return a.from.Compare(b.from) })
		for j := 1; j < len(hs); j++ {
			for i := j - 1; i >= 0 && i >= j-8; i-- {
				if hs[i].to.After(hs[j].from) && hs[i].proc != hs[j].proc {
					if hs[i].engine == hs[j].engine {
						r.sameEngineOverlaps++
					} else {
						r.crossEngine++
					}
				}
			}
		}
	}
	// The fleet's split after each fault: time until every process was on
	// one engine again, counting only the splits that began in the fault or
	// its recovery.
	for j, at := range crashed { // a crashed process is on no engine
		changes = append(changes, change{at, n + j, ""})
	}
	slices.SortFunc(changes, func(a, b change) int { return a.at.Compare(b.at) })
	if os.Getenv("E2E_CAMPAIGN_DEBUG") != "" {
		for _, c := range changes {
			fmt.Fprintf(os.Stderr, "%v process %d -> %s\n", c.at.Format("15:04:05.000"), c.proc, c.engine)
		}
		for _, m := range marks {
			fmt.Fprintf(os.Stderr, "%v %s until %v\n", m.from.Format("15:04:05.000"), m.kind, m.to.Format("15:04:05.000"))
		}
	}
	current := make(map[int]string)
	var splitSince time.Time
	var splits []struct{ from, to time.Time }
	for _, c := range changes {
		current[c.proc] = c.engine
		if c.engine == "" {
			delete(current, c.proc)
		}
		together := len(slices.Compact(slices.Sorted(maps.Values(current)))) <= 1
		switch {
		case !together && splitSince.IsZero():
			splitSince = c.at
		case together && !splitSince.IsZero():
			splits = append(splits, struct{ from, to time.Time }{splitSince, c.at})
			splitSince = time.Time{}
		}
	}
	for i, m := range marks {
		until := end.Add(time.Hour)
		if i+1 < len(marks) {
			until = marks[i+1].from
		}
		var d time.Duration
		for _, s := range splits {
			if !s.from.Before(m.from) && s.from.Before(until) {
				d += s.to.Sub(s.from)
			}
		}
		r.splits[m.kind] = append(r.splits[m.kind], d)
	}
	// Accepted writes, in the order the resource took them: tokens rise.
	fence := goredis.NewClient(&goredis.Options{Addr: resource.Addr()})
	defer fence.Close()
	for i := range 8 {
		log, err := fence.LRange(context.Background(), fmt.Sprintf("fence:fleet-%d:log", i), 0, -1).Result()
		must(tb, err)
		for j := 1; j < len(log); j++ {
			if log[j] <= log[j-1] {
				r.staleAccepted++
			}
		}
	}
	return r
}

func unixNano(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Unix(0, n)
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// withFailback adds a failback after 2s to the config file at path.
func withFailback(tb testing.TB, path string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	must(tb, err)
	defer f.Close()
	_, err = f.WriteString("failback: {after: 2s}\n")
	must(tb, err)
}
