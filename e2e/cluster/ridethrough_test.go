package cluster_test

import (
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/cpustall"
)

// bounds are the targets of issue 25 for a fault the cluster survives:
// callers wait at most the engine's election bound + 0.5s (a follower's
// death: 1s), and the first grant after the fault comes as soon.
type bounds struct {
	wait  time.Duration // longest caller wait, and longest time without a grant
	first time.Duration // first grant of a wait begun after the fault
}

// electionBound is the longest a 3-member cluster of the test launcher
// takes to serve again after losing its leader, killed or frozen (see the
// engines' doc.go: "Clusters", "Ensembles").
func electionBound(kind string, f fault) time.Duration {
	if kind == "etcd" {
		// A follower calls an election after 1-2 election timeouts
		// (--election-timeout 1000ms, randomised by raft up to twice
		// that), killed leader or frozen, and the two survivors may split
		// their votes and need a second round (seen in CI: a leader 3.55s
		// after the kill); a request sent before then to the old leader,
		// or to a member that froze, is sent again after an attempt
		// timeout (etcd's default 300ms).
		return 2*2*time.Second + etcd.DefaultAttemptTimeout
	}
	// ZooKeeper: followers see a killed leader's connections close at
	// once and elect within a second; a frozen leader is noticed after
	// syncLimit × tickTime (10 × 200ms in the launcher: 2s). Then the
	// session moves to a server that serves: the frozen one is left after
	// the engine's stall timeout (1s), and go-zookeeper starts each new
	// round of its servers a second after the last.
	if f == pauseLeader {
		return 2*time.Second + 500*time.Millisecond + 2*time.Second
	}
	return time.Second + time.Second
}

func targets(kind string, f fault) bounds {
	if f == killFollower {
		return bounds{wait: time.Second, first: time.Second}
	}
	b := electionBound(kind, f) + 500*time.Millisecond
	return bounds{wait: b, first: b}
}

// loadAllowance is added to the targets' times in the tests, which run
// beside every other package's servers; on a machine short of CPU the
// targets also stretch by the drill's CPU stall (cpustall.Stretch): with
// a CPU hog beside the suite (stall ~70%), a follower's kill once left
// callers 3.4s without a grant against a 1s target. BenchmarkRideThrough,
// run alone, reports the figures the targets are about.
const loadAllowance = time.Second

// allow is a quiet machine's bound d as the drill o judges it: stretched
// by the drill's CPU stall, plus the load allowance.
func (o outcome) allow(d time.Duration) time.Duration {
	return cpustall.Stretch(d, o.stall) + loadAllowance
}

// check fails t for every target o misses.
func check(t *testing.T, kind string, f fault, o outcome) {
	t.Helper()
	t.Logf("%s %s: %v", kind, f, o)
	want := targets(kind, f)
	want.wait, want.first = o.allow(want.wait), o.allow(want.first)
	for _, ev := range o.switches {
		t.Errorf("engine switch %s -> %s (%s) %v after the fault; want none: the cluster kept its quorum", ev.From, ev.To, ev.Reason, ms(o.switchAfter))
	}
	for _, err := range o.errors {
		t.Errorf("caller error: %v", err)
	}
	for _, err := range o.unlockErrs {
		t.Errorf("Unlock error: %v", err)
	}
	if o.lost > 0 {
		t.Errorf("%d of %d long holds lost; want 0", o.lost, longHolds)
	}
	for _, err := range o.longErrs {
		t.Errorf("Unlock of a long hold: %v", err)
	}
	if o.gap > want.wait {
		t.Errorf("longest time without a grant %v; want <= %v", ms(o.gap), want.wait)
	}
	if o.longestLock > want.wait {
		t.Errorf("longest LockCtx %v; want <= %v", ms(o.longestLock), want.wait)
	}
	if o.longestFree > want.wait {
		t.Errorf("longest Unlock %v; want <= %v", ms(o.longestFree), want.wait)
	}
	if o.firstGrant == 0 || o.firstGrant > want.first {
		t.Errorf("first grant after the fault at %v; want within %v", ms(o.firstGrant), want.first)
	}
}

func rideThroughAll(t *testing.T, kind string) {
	r := newRig(t, kind)
	for _, f := range []fault{killLeader, killFollower, pauseLeader, rollingRestart} {
		t.Run(string(f), func(t *testing.T) {
			check(t, kind, f, r.drill(t, f))
		})
	}
}

// A cluster that loses its quorum is down: the switcher leaves it once
// its ride-through window has passed (plus a health check's timeout and
// 0.5s), and callers get their locks on the secondary.
func majorityKilled(t *testing.T, kind string) {
	r := newRig(t, kind)
	o := r.drill(t, killMajority)
	t.Logf("%s %s: %v", kind, killMajority, o)
	window := map[string]time.Duration{"etcd": etcd.DefaultRideThrough, "zk": zk.DefaultSessionTimeout * 2 / 3}[kind]
	switch {
	case len(o.switches) == 0:
		t.Fatalf("no switch after a majority was killed; want one within %v", window+800*time.Millisecond)
	case o.switches[0].From != kind || o.switches[0].To != "redis":
		t.Errorf("switch %s -> %s; want %s -> redis", o.switches[0].From, o.switches[0].To, kind)
	case o.switchAfter < window || o.switchAfter > window+cpustall.Stretch(800*time.Millisecond, o.stall):
		t.Errorf("switched %v after the fault; want within the %v window + 0.8s (stretched by a CPU stall of %.0f%%), not before", ms(o.switchAfter), window, 100*o.stall)
	}
	for _, err := range o.errors {
		t.Errorf("caller error: %v", err)
	}
}

func TestEtcdMajorityKilled(t *testing.T) { majorityKilled(t, "etcd") }

func TestZKMajorityKilled(t *testing.T) { majorityKilled(t, "zk") }

// A 3-member etcd cluster that loses its leader or a follower, or whose
// leader freezes, keeps its quorum: the engine rides it out.
func TestEtcdRideThrough(t *testing.T) { rideThroughAll(t, "etcd") }

// The same for a 3-server ZooKeeper ensemble.
func TestZKRideThrough(t *testing.T) { rideThroughAll(t, "zk") }

// BenchmarkRideThrough reports, per engine and fault, min / median / max
// over b.N drills of what the callers saw.
//
//	go test -run '^$' -bench RideThrough -benchtime 5x ./e2e/cluster/
func BenchmarkRideThrough(b *testing.B) {
	for _, kind := range []string{"etcd", "zk"} {
		for _, f := range []fault{killLeader, killFollower, pauseLeader, rollingRestart} {
			b.Run(kind+"/"+string(f), func(b *testing.B) {
				r := newRig(b, kind)
				var gaps, locks, frees, firsts, switchAfter []time.Duration
				switches, errs, lost := 0, 0, 0
				for range b.N {
					o := r.drill(b, f)
					b.Logf("%v", o)
					gaps, locks, firsts = append(gaps, o.gap), append(locks, o.longestLock), append(firsts, o.firstGrant)
					frees = append(frees, o.longestFree)
					if o.switchAfter > 0 {
						switchAfter = append(switchAfter, o.switchAfter)
					}
					switches += len(o.switches)
					errs += len(o.errors) + len(o.unlockErrs)
					lost += o.lost
				}
				b.ReportMetric(float64(switches), "switches")
				b.ReportMetric(float64(errs), "errors")
				b.ReportMetric(float64(lost), "lost")
				b.Logf("%s %s, n=%d: switches %d (after %s); longest gap %s; longest LockCtx %s; longest Unlock %s; first grant %s; caller errors %d; long holds lost %d",
					kind, f, b.N, switches, spread(switchAfter), spread(gaps), spread(locks), spread(frees), spread(firsts), errs, lost)
			})
		}
	}
}
