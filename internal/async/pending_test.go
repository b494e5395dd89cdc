package async

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestPendingDelivered(t *testing.T) {
	boom := errors.New("boom")
	for _, wait := range []struct {
		name string
		f    func(*Pending[int]) (int, error)
	}{
		{"Wait", func(p *Pending[int]) (int, error) { return p.Wait(context.Background()) }},
		{"WaitUntil", func(p *Pending[int]) (int, error) {
			return p.WaitUntil(context.Background(), time.Now().Add(time.Hour))
		}},
	} {
		t.Run(wait.name, func(t *testing.T) {
			p := NewPending[int]()
			go func() {
				if !p.Deliver(7, boom) {
					t.Error("Deliver() = false to a waiter; want true")
				}
			}()
			if v, err := wait.f(p); v != 7 || err != boom {
				t.Errorf("%s() = %v, %v; want 7, %v", wait.name, v, err, boom)
			}
		})
	}
}

func TestPendingAbandoned(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, wait := range []struct {
		name string
		f    func(*Pending[int]) (int, error)
		want error
	}{
		{"Wait", func(p *Pending[int]) (int, error) { return p.Wait(ctx) }, context.Canceled},
		{"WaitUntil/ctx", func(p *Pending[int]) (int, error) { return p.WaitUntil(ctx, time.Now().Add(time.Hour)) }, context.Canceled},
		{"WaitUntil/deadline", func(p *Pending[int]) (int, error) {
			return p.WaitUntil(context.Background(), time.Now().Add(time.Millisecond))
		}, ErrTimedOut},
	} {
		t.Run(wait.name, func(t *testing.T) {
			p := NewPending[int]()
			if v, err := wait.f(p); v != 0 || err != wait.want {
				t.Errorf("%s() = %v, %v; want 0, %v", wait.name, v, err, wait.want)
			}
			if p.Deliver(7, nil) {
				t.Error("Deliver() after the waiter left = true; want false: the result is the deliverer's to undo")
			}
		})
	}
}

func TestPendingAbandonTooLate(t *testing.T) {
	p := NewPending[int]()
	p.Deliver(7, nil)
	if r, ok := p.Abandon(); !ok || r.Value != 7 {
		t.Errorf("Abandon() after Deliver = %v, %v; want {7 <nil>}, true", r, ok)
	}
}

// Exactly one of the waiter and the deliverer gets the result, however
// their calls interleave: the waiter when Deliver reports true.
func TestPendingOneOwner(t *testing.T) {
	for range 1000 {
		p := NewPending[int]()
		ctx, cancel := context.WithCancel(context.Background())
		var delivered bool
		var wg sync.WaitGroup
		wg.Go(func() { delivered = p.Deliver(7, nil) })
		wg.Go(cancel)
		v, err := p.Wait(ctx)
		wg.Wait()
		if got := err == nil && v == 7; got != delivered {
			t.Fatalf("Wait() = %v, %v and Deliver() = %v; want the result with the waiter exactly when Deliver reports true", v, err, delivered)
		}
	}
}

func TestPendingResetReuses(t *testing.T) {
	var p Pending[int] // the zero value, made ready by Reset
	cycle := func() {
		p.Reset()
		p.Deliver(7, nil)
		if v, err := p.Wait(context.Background()); v != 7 || err != nil {
			t.Fatalf("Wait() = %v, %v; want 7, nil", v, err)
		}
	}
	cycle()
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Errorf("a reused Pending allocates %v times per request; want 0", n)
	}
}

func TestPendingAnswerWithOtherEvents(t *testing.T) {
	p := NewPending[int]()
	other := make(chan struct{})
	close(other)
	select {
	case <-p.Answer():
		t.Fatal("an answer before Deliver")
	case <-other:
	}
	p.Deliver(7, nil)
	if r := <-p.Answer(); r.Value != 7 || r.Err != nil {
		t.Errorf("<-Answer() = %v; want {7 <nil>}", r)
	}
}

func TestTimerPoolResets(t *testing.T) {
	StopTimer(StartTimer(time.Hour))
	tm := StartTimer(time.Millisecond) // the recycled one, most likely
	defer StopTimer(tm)
	select {
	case <-tm.C:
	case <-time.After(10 * time.Second): // a watchdog
		t.Error("a timer from the pool did not fire at its new duration")
	}
}
