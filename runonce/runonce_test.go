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
		{[]runonce.Option{runonce.WithObserver(nil)}, "WithObserver"},
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

// A job that returns at once keeps its name for AtLeastFor on the
// Runner's clock; Close waits for the window and releases the name. (The
// contract on each engine and through the switcher, in real time, is
// lockertest.RunOnce's, run from the engines' and the switcher's tests.)
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
