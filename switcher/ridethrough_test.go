package switcher_test

import (
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/faults"
	"github.com/orthrus-go/orthrus/switcher"
)

// clusterEngine is a fault-wrapped engine that says it is a cluster with
// a ride-through window, as the etcd and zk engines over several servers do.
type clusterEngine struct {
	*faults.Engine
	window time.Duration
}

func (c clusterEngine) RideThrough() time.Duration { return c.window }

var _ switcher.Cluster = clusterEngine{}

// newClusterFleet is a switcher over a cluster primary with the given
// window and a plain secondary, with the fast options of the fault tests.
func newClusterFleet(t *testing.T, window time.Duration) (*switcher.Switcher, *faults.Engine, chan switcher.Event) {
	t.Helper()
	wrap := func(name string) *faults.Engine {
		e, err := mem.New(mem.WithName(name + "-store"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := faults.Wrap(e, faults.WithName(name))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	primary := wrap("primary")
	events := make(chan switcher.Event, 16)
	sw, err := switcher.New([]locker.Engine{clusterEngine{primary, window}, wrap("secondary")},
		switcher.WithHealthCheck(faultHealthEvery, faultHealthTimeout),
		switcher.WithBreaker(1, faultOpenFor),
		switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sw.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return sw, primary, events
}

// A cluster whose members all refuse for less than its window (an
// election) keeps its breaker closed: no switch, although a refusal would
// trip a single server's breaker at once.
func TestRideThroughShortRefusal(t *testing.T) {
	const window = 500 * time.Millisecond
	sw, primary, events := newClusterFleet(t, window)
	primary.Refuse()
	healed := make(chan struct{})
	if _, err := primary.After(window/2, func() { primary.Heal(); close(healed) }); err != nil {
		t.Fatal(err)
	}
	<-healed
	// Health checks that pass after the heal: the breaker counted the
	// refusals and closed nothing, or it would show.
	if !within(func() bool { return sw.States()[0].Healthy }) {
		t.Fatalf("primary not healthy after the heal: %+v", sw.States())
	}
	select {
	case ev := <-events:
		t.Fatalf("switch %s -> %s (%s) during a refusal shorter than the %v window; want none", ev.From, ev.To, ev.Reason, window)
	default:
	}
	if got := sw.Current(); got != "primary" {
		t.Errorf("Current() = %q; want primary", got)
	}
}

// A cluster that keeps failing past its window is down: the breaker opens
// then, and not before.
func TestRideThroughWindowThenSwitch(t *testing.T) {
	const window = 300 * time.Millisecond
	_, primary, events := newClusterFleet(t, window)
	began := time.Now()
	primary.Refuse()
	select {
	case ev := <-events:
		took := time.Since(began)
		wantEvent(t, ev, "primary", "secondary", switcher.ReasonBreaker)
		if took < window || took > window+500*time.Millisecond {
			t.Errorf("switched %v after the refusals began; want between the window (%v) and 500ms more", took, window)
		}
	case <-time.After(window + 2*time.Second):
		t.Fatalf("no switch within %v of refusals past the %v window", window+2*time.Second, window)
	}
}
