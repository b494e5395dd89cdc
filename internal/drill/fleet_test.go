package drill

import (
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/internal/testmain"
)

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) { return func() {}, nil })
}

const ms = time.Millisecond

// Merge finds how the fleet followed a fault, how long it was split, and
// which writes a shared fenced resource would have refused.
func TestMerge(t *testing.T) {
	tick := 100 * ms
	proc := func(name string, switchAt time.Duration, grants ...Grant) *Report {
		r := &Report{Process: name, Engines: []string{"a", "b"}, Tick: tick, Duration: time.Second, Workers: 2, Initial: "a",
			Acquired: map[string]int64{"a": 1}, Grants: grants}
		for k := range 10 {
			r.Timeline = append(r.Timeline, Bucket{At: time.Duration(k) * tick, Acquired: map[string]int64{"a": 1}, Failed: 1})
		}
		if switchAt > 0 {
			r.Marks = []Mark{{At: switchAt, Kind: "switch", Label: "a → b", To: "b"}}
		}
		return r
	}
	fault := Mark{At: 400 * ms, Kind: "fault", Label: "switch to b"}
	p1 := proc("p1", 450*ms,
		Grant{At: 100 * ms, Name: "x", Token: 10, Wait: 2 * ms},
		Grant{At: 500 * ms, Name: "x", Token: 1 << 44, Wait: 4 * ms})
	p2 := proc("p2", 700*ms,
		Grant{At: 200 * ms, Name: "x", Token: 11, Wait: 2 * ms},
		Grant{At: 600 * ms, Name: "x", Token: 12, Wait: 2 * ms}, // still on a: refused, p1 went higher
		Grant{At: 800 * ms, Name: "x", Token: 2 << 44, Wait: 2 * ms})
	p3 := proc("p3", 0) // never followed
	r := Merge([]*Report{p1, p2, p3}, []Mark{fault})

	if r.Workers != 6 || r.Acquired["a"] != 3 || len(r.Timeline) != 10 || r.Timeline[0].Failed != 3 {
		t.Errorf("Merge() workers %d, acquired %v, %d ticks, failed in tick 0 %d; want 6, a:3, 10, 3",
			r.Workers, r.Acquired, len(r.Timeline), r.Timeline[0].Failed)
	}
	if got := r.Timeline[5].P99; got != 4*ms {
		t.Errorf("tick 5 p99 = %v; want 4ms", got)
	}
	f := r.Fleet
	if len(f.Switches) != 1 {
		t.Fatalf("Switches = %+v; want one", f.Switches)
	}
	if s := f.Switches[0]; s.Switched != 2 || s.First != 450*ms || s.Last != 700*ms || s.Spread != 250*ms {
		t.Errorf("Switches[0] = %+v; want 2 processes, first 450ms, last 700ms, spread 250ms", s)
	}
	if r.SwitchLatency != 50*ms {
		t.Errorf("SwitchLatency = %v; want 50ms", r.SwitchLatency)
	}
	// p1 on b from 450ms, p2 from 700ms, p3 never: split from 450ms to the end.
	if f.Split != 550*ms || f.LongestSplit != 550*ms {
		t.Errorf("Split, LongestSplit = %v, %v; want 550ms, 550ms", f.Split, f.LongestSplit)
	}
	want := []Fencing{
		{Process: "p1", Writes: 2},
		{Process: "p2", Writes: 3, Refused: 1, FencedOut: 200 * ms, FencedOutTotal: 200 * ms},
		{Process: "p3"},
	}
	for i, w := range want {
		if f.Fencing[i] != w {
			t.Errorf("Fencing[%d] = %+v; want %+v", i, f.Fencing[i], w)
		}
	}
	for _, p := range f.Processes {
		if p.Grants != nil {
			t.Errorf("process %s keeps %d grants in the merged report; want none", p.Process, len(p.Grants))
		}
	}
}

func TestRound(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{20004554528, 20 * time.Second},
		{1006991234, 1007 * ms},
		{754321 * time.Microsecond, 754 * ms},
		{1234567, 1 * ms},
		{754321, 754 * time.Microsecond},
		{83*time.Second + 600*ms, 84 * time.Second},
	} {
		if got := Round(tc.in); got != tc.want {
			t.Errorf("Round(%v) = %v; want %v", tc.in, got, tc.want)
		}
	}
}
