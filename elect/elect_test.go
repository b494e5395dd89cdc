package elect_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/orthrus-go/orthrus/elect"
	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
)

func newCandidate(t *testing.T, e locker.Engine, name string, opts ...elect.Option) *elect.Candidate {
	t.Helper()
	c, err := elect.New(e, name, opts...)
	if err != nil {
		t.Fatalf("New(%q) = %v", name, err)
	}
	return c
}

func TestBadInput(t *testing.T) {
	e := servers.Processes(t)["mem"](t)
	for _, tc := range []struct {
		opts []elect.Option
		want string
	}{
		{[]elect.Option{elect.WithTTL(0)}, "WithTTL(0s)"},
		{[]elect.Option{elect.WithValue(strings.Repeat("v", elect.MaxValueLen+1))}, "WithValue"},
		{[]elect.Option{nil}, "nil Option"},
	} {
		if _, err := elect.New(e, "leader", tc.opts...); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("New(%s) = %v; want ErrInvalidArgument naming it", tc.want, err)
		}
	}
	if _, err := elect.New(e, ""); !errors.Is(err, locker.ErrInvalidName) {
		t.Errorf("New(\"\") = %v; want ErrInvalidName", err)
	}

	a, b := newCandidate(t, e, "leader"), newCandidate(t, e, "leader")
	if err := a.Resign(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Resign() without the leadership = %v; want ErrNotHeld", err)
	}
	if _, err := a.Campaign(context.Background()); err != nil {
		t.Fatalf("Campaign() = %v", err)
	}
	if _, err := a.Campaign(context.Background()); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Campaign() while leading = %v; want ErrInvalidArgument", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		for { // again if the refusal below was its own
			_, err := b.Campaign(ctx)
			if !errors.Is(err, locker.ErrInvalidArgument) {
				done <- err
				return
			}
		}
	}()
	// Once b campaigns, a second Campaign of b is refused (until then, it
	// returns at once: its context is done).
	gone, stop := context.WithCancel(context.Background())
	stop()
	var err error
	for range 1000 {
		if _, err = b.Campaign(gone); !errors.Is(err, context.Canceled) {
			break
		}
		runtime.Gosched()
	}
	if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), "already campaigning") {
		t.Errorf("second Campaign() of a campaigning candidate = %v; want ErrInvalidArgument", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Campaign() = %v; want context.Canceled", err)
	}
	if err := b.Resign(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Resign() after a cancelled campaign = %v; want ErrNotHeld", err)
	}
	if err := a.Resign(); err != nil {
		t.Errorf("Resign() = %v", err)
	}
}

// fenced is a resource that accepts a write only with a token at least as
// high as the highest it has seen.
type fenced struct {
	mu                 sync.Mutex
	max                uint64
	accepted, rejected int
}

func (f *fenced) write(token uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.max {
		f.rejected++
		return
	}
	f.max = token
	f.accepted++
}

// Five candidates on three processes take turns: one leader at a time,
// every leader's writes accepted by the fenced resource, and an observer
// on a fourth process sees every leadership, in order.
func TestElection(t *testing.T) {
	for kind, newProcess := range servers.Processes(t) {
		t.Run(kind, func(t *testing.T) {
			name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
			procs := []locker.Engine{newProcess(t), newProcess(t), newProcess(t)}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			observed := elect.Observe(ctx, newProcess(t), name, 50*time.Millisecond)

			var leaders, overlaps, terms atomic.Int32
			res := &fenced{}
			var wg sync.WaitGroup
			for i := range 5 {
				c := newCandidate(t, procs[i%3], name, elect.WithValue(fmt.Sprint("candidate-", i)), elect.WithTTL(2*time.Second))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						lctx, err := c.Campaign(ctx)
						if err != nil {
							return
						}
						terms.Add(1)
						if leaders.Add(1) > 1 {
							overlaps.Add(1)
						}
						for range 10 { // lead for 300ms, writing every 30ms
							if lctx.Err() != nil {
								break
							}
							res.write(c.Token())
							time.Sleep(30 * time.Millisecond)
						}
						leaders.Add(-1)
						if err := c.Resign(); err != nil {
							t.Errorf("Resign() = %v", err)
						}
					}
				}()
			}
			var seen []elect.Leader
			for l := range observed {
				if l.Owner != "" {
					seen = append(seen, l)
				}
			}
			wg.Wait()
			if n := overlaps.Load(); n > 0 {
				t.Errorf("%d leaderships began while another was on", n)
			}
			if res.rejected > 0 {
				t.Errorf("fenced resource rejected %d writes; want 0", res.rejected)
			}
			for i := 1; i < len(seen); i++ {
				if seen[i].Engine == seen[i-1].Engine && seen[i].Token <= seen[i-1].Token {
					t.Errorf("observed leader %d (token %d) after %d (token %d): out of order", i, seen[i].Token, i-1, seen[i-1].Token)
				}
				if seen[i].Owner == seen[i-1].Owner && seen[i].Token == seen[i-1].Token {
					t.Errorf("observed leader %d twice in a row", i)
				}
			}
			if len(seen) > 0 && (!strings.HasPrefix(seen[0].Value, "candidate-") || seen[0].PID == 0 || seen[0].Host == "") {
				t.Errorf("observed leader %+v; want its value, host and pid", seen[0])
			}
			t.Logf("%d terms, %d seen by the observer, %d writes accepted", terms.Load(), len(seen), res.accepted)
			if got, want := len(seen), int(terms.Load()); got < want-1 { // the last may end with the observer
				t.Errorf("observer saw %d leaderships of %d", got, want)
			}
		})
	}
}

// A lost leadership ends the leadership context with ErrLockLost, and the
// candidate may campaign again without Resign.
func TestLostLeadership(t *testing.T) {
	clock := clockwork.NewFakeClock()
	store, err := mem.NewStore(mem.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	e, err := mem.New(mem.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := newCandidate(t, e, "leader", elect.WithTTL(time.Minute))
	lctx, err := c.Campaign(context.Background())
	if err != nil {
		t.Fatalf("Campaign() = %v", err)
	}
	clock.Advance(time.Minute) // the store expires the hold
	<-lctx.Done()
	if cause := context.Cause(lctx); !errors.Is(cause, locker.ErrLockLost) {
		t.Errorf("leadership context's cause = %v; want ErrLockLost", cause)
	}
	if _, err := c.Campaign(context.Background()); err != nil {
		t.Fatalf("Campaign() after the loss = %v", err)
	}
	if err := c.Resign(); err != nil {
		t.Errorf("Resign() = %v", err)
	}
}
