package drill

import (
	"context"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// The report's duration is the load's, however long a fault takes to
// finish (an embedded etcd server takes seconds to stop), and its timeline
// ends with a bucket of at least half a tick, not a sliver whose rate
// means nothing.
func TestDurationIsTheLoads(t *testing.T) {
	var engines []locker.Engine
	for _, name := range []string{"a", "b"} {
		e, err := mem.New(mem.WithName(name))
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	d := New(Config{Workers: 2, Names: 4, Duration: 600 * ms, Tick: 100 * ms})
	sw, err := switcher.New(engines, switcher.OnSwitch(d.OnSwitch))
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	d.SetFaults([]Fault{{At: 100 * ms, Name: "slow", Do: func() error {
		<-time.After(time.Second)
		return nil
	}}})
	r, err := d.Run(context.Background(), sw)
	if err != nil {
		t.Fatal(err)
	}
	if r.Duration < 600*ms || r.Duration > 800*ms {
		t.Errorf("Duration = %v; want the load's 600ms (and a little)", r.Duration)
	}
	last := r.Timeline[len(r.Timeline)-1]
	if r.Duration-last.At < r.Tick/2 {
		t.Errorf("last bucket at %v of a %v drill; want at least half a tick (%v) long", last.At, r.Duration, r.Tick/2)
	}
}

// lateTimer is a context whose deadline has passed and whose timer has not
// fired yet, as on a loaded machine.
type lateTimer struct{ context.Context }

func (lateTimer) Deadline() (time.Time, bool) { return time.Now().Add(-ms), true }

// A drill whose deadline has passed is over although its context's timer
// has not fired: an acquisition the Core ended with DeadlineExceeded then
// is the drill ending, not a failure (a clean-clone run beside a CPU hog
// reported "failed 1: drill/1: context deadline exceeded").
func TestOverAtTheDeadline(t *testing.T) {
	if !over(lateTimer{context.Background()}) {
		t.Error("over(a context past its deadline, timer not fired) = false; want true")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if over(ctx) {
		t.Error("over(a context a minute from its deadline) = true; want false")
	}
}
