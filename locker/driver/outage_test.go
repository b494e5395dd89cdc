package driver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// silentBackend never grants: it answers that the name is held for held,
// then, asking again (telling the Core when ask is set), gets no answer
// until ctx ends; refused makes that failure a refusal.
type silentBackend struct {
	held    time.Duration
	ask     bool
	refused bool
}

func (b silentBackend) Acquire(ctx context.Context, h *Hold, _ bool) (bool, error) {
	if b.held > 0 {
		t := time.NewTimer(b.held)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false, ctx.Err() // answered: the name was held
		}
		if b.ask {
			h.Asking()
		}
	}
	<-ctx.Done()
	classes := []error{locker.ErrUnavailable}
	if b.refused {
		classes = append(classes, locker.ErrRefused)
	}
	return false, &locker.EngineError{Engine: "silent", Op: "acquire", Name: h.Name, Classes: classes, Err: ctx.Err()}
}

func (silentBackend) Release(context.Context, *Hold) error { return nil }

// TestOutageAfter: a wait whose context ends while a request is unanswered
// is an outage only when the request had gone unanswered for OutageAfter,
// counted from the latest Asking (or from the start of the acquisition).
func TestOutageAfter(t *testing.T) {
	short, long := OutageAfter/3, OutageAfter+150*time.Millisecond
	for _, tc := range []struct {
		name    string
		b       silentBackend
		wait    time.Duration
		outage  bool
		refused bool
	}{
		{"no answer, short wait", silentBackend{}, short, false, false},
		{"no answer, long wait", silentBackend{}, long, true, false},
		{"refused, short wait", silentBackend{refused: true}, short, true, true},
		// Held for most of a long wait, then asked again just before its end.
		{"asked again late", silentBackend{held: long - short, ask: true}, long, false, false},
		{"asked again late, not told", silentBackend{held: long - short}, long, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCore("silent", tc.b, nil)
			defer c.Close(context.Background())
			l, err := c.NewLocker("outage")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.wait)
			ok, err := l.(acquirer).Acquire(ctx, true)
			cancel()
			if ok || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, locker.ErrUnavailable) != tc.outage || errors.Is(err, locker.ErrRefused) != tc.refused {
				t.Errorf("Acquire(%v deadline) = %v, %v; want false, DeadlineExceeded, locker.ErrUnavailable %v, locker.ErrRefused %v", tc.wait, ok, err, tc.outage, tc.refused)
			}
			ok, err = l.TryLockTimeout(tc.wait)
			if tc.outage {
				if ok || !errors.Is(err, locker.ErrUnavailable) {
					t.Errorf("TryLockTimeout(%v) = %v, %v; want false, locker.ErrUnavailable", tc.wait, ok, err)
				}
			} else if ok || err != nil {
				t.Errorf("TryLockTimeout(%v) = %v, %v; want false, nil (ran out of time)", tc.wait, ok, err)
			}
			ctx, cancel = context.WithTimeout(context.Background(), tc.wait)
			if err := l.LockCtx(ctx); err != context.DeadlineExceeded {
				t.Errorf("LockCtx(%v deadline) = %v; want context.DeadlineExceeded itself", tc.wait, err)
			}
			cancel()
		})
	}
}

// TestOutageAfterCancel: a cancellation is judged like a deadline, at the
// moment of the judgement.
func TestOutageAfterCancel(t *testing.T) {
	c := NewCore("silent", silentBackend{}, nil)
	defer c.Close(context.Background())
	l, err := c.NewLocker("outage")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		after  time.Duration
		outage bool
	}{
		{OutageAfter / 3, false},
		{OutageAfter + 150*time.Millisecond, true},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(tc.after, cancel)
		ok, err := l.(acquirer).Acquire(ctx, true)
		stop.Stop()
		cancel()
		if ok || !errors.Is(err, context.Canceled) || errors.Is(err, locker.ErrUnavailable) != tc.outage {
			t.Errorf("Acquire() cancelled after %v = %v, %v; want false, Canceled, locker.ErrUnavailable %v", tc.after, ok, err, tc.outage)
		}
	}
}

// lateBackend answers that the name is held the moment ctx's deadline has
// passed, before ctx's own timer may have fired, as a loaded machine does.
type lateBackend struct{}

func (lateBackend) Acquire(ctx context.Context, _ *Hold, _ bool) (bool, error) {
	d, _ := ctx.Deadline()
	for time.Now().Before(d) { // spin: a timer would race ctx's own
	}
	return false, context.DeadlineExceeded
}

func (lateBackend) Release(context.Context, *Hold) error { return nil }

// TestTryLockTimeoutAnsweredLate: contention until a deadline that passed
// before ctx noticed is still contention, (false, nil), not an error.
func TestTryLockTimeoutAnsweredLate(t *testing.T) {
	c := NewCore("late", lateBackend{}, nil)
	defer c.Close(context.Background())
	l, err := c.NewLocker("late")
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if ok, err := l.TryLockTimeout(time.Millisecond); ok || err != nil {
			t.Fatalf("TryLockTimeout(1ms) = %v, %v; want false, nil", ok, err)
		}
	}
}

// acquirer is the raw acquisition of locker.NewHandle's Handles, whose
// errors keep the engine's outcome beside ctx.Err().
type acquirer interface {
	Acquire(ctx context.Context, wait bool) (bool, error)
}
