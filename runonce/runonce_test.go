package runonce_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/runonce"
)

// newMem is a process on store; nil: on a store of its own.
func newMem(t *testing.T, store *mem.Store) locker.Engine {
	var opts []mem.Option
	if store != nil {
		opts = append(opts, mem.WithStore(store))
	}
	e, err := mem.New(opts...)
	return closing(t, e, err)
}

func newRunner(t *testing.T, e locker.Engine, opts ...runonce.Option) *runonce.Runner {
	t.Helper()
	r, err := runonce.New(e, opts...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func nop(context.Context) error { return nil }

func TestBadOptions(t *testing.T) {
	e := newMem(t, nil)
	for _, tc := range []struct {
		opts []runonce.Option
		want string
	}{
		{[]runonce.Option{runonce.AtMostFor(time.Second), runonce.AtLeastFor(2 * time.Second)}, "AtLeastFor(2s) is longer than AtMostFor(1s)"},
		{[]runonce.Option{runonce.AtMostFor(-time.Second)}, "AtMostFor(-1s)"},
		{[]runonce.Option{runonce.AtMostFor(0)}, "AtMostFor(0s)"},
		{[]runonce.Option{runonce.AtLeastFor(-time.Second)}, "AtLeastFor(-1s)"},
		{[]runonce.Option{runonce.WithClock(nil)}, "WithClock"},
		{[]runonce.Option{nil}, "nil Option"},
	} {
		_, err := runonce.New(e, tc.opts...)
		if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("New(%s) = %v; want ErrInvalidArgument naming it", tc.want, err)
		}
		ran, err := runonce.RunOnce(context.Background(), e, "job", nop, tc.opts...)
		if ran || !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("RunOnce(%s) = %v, %v; want false and ErrInvalidArgument naming it", tc.want, ran, err)
		}
	}
	// A run's options are checked against the Runner's.
	r := newRunner(t, e, runonce.AtMostFor(time.Second))
	if _, err := r.Run(context.Background(), "job", nop, runonce.AtLeastFor(2*time.Second)); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Run(AtLeastFor(2s)) on a Runner with AtMostFor(1s) = %v; want ErrInvalidArgument", err)
	}
	if _, err := r.Run(context.Background(), "job", nil); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Run(nil fn) = %v; want ErrInvalidArgument", err)
	}
	if _, err := runonce.New(nil); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v; want ErrInvalidArgument", err)
	}
}

// A run while another process holds the name skips at once; the job's
// context passes AssertHeld, other contexts do not.
func TestSkipsAndAssertHeld(t *testing.T) {
	store, _ := mem.NewStore()
	a, b := newRunner(t, newMem(t, store)), newRunner(t, newMem(t, store))
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	var runCtx context.Context
	go func() {
		ran, err := a.Run(context.Background(), "report", func(ctx context.Context) error {
			runCtx = ctx
			if err := runonce.AssertHeld(ctx); err != nil {
				return fmt.Errorf("AssertHeld() in the run = %w", err)
			}
			close(started)
			<-finish
			return nil
		})
		if !ran && err == nil {
			err = errors.New("Run() skipped with the name free")
		}
		done <- err
	}()
	<-started
	begin := time.Now()
	ran, err := b.Run(context.Background(), "report", func(context.Context) error {
		t.Error("second process ran the job while the first held it")
		return nil
	})
	if ran || err != nil {
		t.Errorf("Run() while held = %v, %v; want false, nil", ran, err)
	}
	t.Logf("skipped in %v", time.Since(begin))
	close(finish)
	if err := <-done; err != nil {
		t.Error(err)
	}
	if err := runonce.AssertHeld(context.Background()); !errors.Is(err, runonce.ErrNotLocked) || !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("AssertHeld() outside a run = %v; want ErrNotLocked", err)
	}
	if err := runonce.AssertHeld(runCtx); !errors.Is(err, runonce.ErrNotLocked) {
		t.Errorf("AssertHeld() on the context of a run that ended = %v; want ErrNotLocked", err)
	}
	if err := runonce.AssertHeld(runonce.HeldForTest(context.Background())); err != nil {
		t.Errorf("AssertHeld(HeldForTest()) = %v; want nil", err)
	}
}

// A job that returns at once keeps its name for AtLeastFor on the
// Runner's clock; Close waits for the window and releases the name.
func TestAtLeastFor(t *testing.T) {
	store, _ := mem.NewStore()
	clock := clockwork.NewFakeClock()
	a := newRunner(t, newMem(t, store), runonce.WithClock(clock), runonce.AtLeastFor(time.Minute))
	b := newRunner(t, newMem(t, store))
	if ran, err := a.Run(context.Background(), "job", nop); !ran || err != nil {
		t.Fatalf("Run() = %v, %v; want true, nil", ran, err)
	}
	clock.Advance(59 * time.Second)
	if ran, err := b.Run(context.Background(), "job", nop); ran || err != nil {
		t.Errorf("Run() 59s into AtLeastFor = %v, %v; want false, nil", ran, err)
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	clock.Advance(time.Second)
	if err := <-closed; err != nil {
		t.Errorf("Close() = %v", err)
	}
	if ran, err := b.Run(context.Background(), "job", nop); !ran || err != nil {
		t.Errorf("Run() after AtLeastFor = %v, %v; want true, nil", ran, err)
	}
	if _, err := a.Run(context.Background(), "job", nop); !errors.Is(err, runonce.ErrClosed) {
		t.Errorf("Run() after Close = %v; want ErrClosed", err)
	}
}

// A job that runs past AtMostFor loses the name: its context ends with
// the loss, and so does Run's error.
func TestAtMostForEndsTheRun(t *testing.T) {
	r := newRunner(t, newMem(t, nil), runonce.AtMostFor(200*time.Millisecond))
	begin := time.Now()
	ran, err := r.Run(context.Background(), "long", func(ctx context.Context) error {
		<-ctx.Done()
		if err := runonce.AssertHeld(ctx); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("AssertHeld() after the loss = %v; want ErrLockLost", err)
		}
		return context.Cause(ctx)
	})
	if !ran || !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Run() past AtMostFor = %v, %v; want true, ErrLockLost", ran, err)
	}
	if d := time.Since(begin); d < 200*time.Millisecond || d > time.Second {
		t.Errorf("run ended after %v; want about AtMostFor (200ms)", d)
	}
}
