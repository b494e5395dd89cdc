package mem_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) { return func() {}, nil })
}

func TestConformance(t *testing.T) {
	// One store for the whole run: the suite's engines share it as
	// processes share a server.
	st := newStore(t)
	lockertest.Run(t, func(t *testing.T) lockertest.Harness {
		e, err := mem.New(mem.WithStore(st))
		if err != nil {
			t.Fatal(err)
		}
		return lockertest.Harness{
			Engine: e,
			Expire: func(ctx context.Context, name string) error {
				_, err := e.ForceUnlock(ctx, name)
				return err
			},
			Residue: func(ctx context.Context, name string) (int, error) {
				in, err := e.Inspect(ctx, name)
				return len(in.Waiters), err
			},
		}
	})
}

func newStore(t *testing.T, opts ...mem.StoreOption) *mem.Store {
	t.Helper()
	st, err := mem.NewStore(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func newEngine(t *testing.T, opts ...mem.Option) *mem.Engine {
	t.Helper()
	e, err := mem.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return e
}

func newLocker(t *testing.T, e locker.Engine, name string, opts ...locker.Option) locker.Handle {
	t.Helper()
	l, err := e.NewLocker(name, opts...)
	if err != nil {
		t.Fatalf("NewLocker(%q) = %v", name, err)
	}
	return l
}

func wantTry(t *testing.T, l locker.Locker, want bool) {
	t.Helper()
	if got, err := l.TryLock(); got != want || err != nil {
		t.Fatalf("TryLock() = %v, %v; want %v, nil", got, err, want)
	}
}

// await fails the test unless ch closes within a second.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatalf("%s: not within 1s", what)
	}
}

// fakeHosts returns two engines on one store whose holds expire by a fake
// clock.
func fakeHosts(t *testing.T) (*clockwork.FakeClock, *mem.Engine, *mem.Engine) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	st := newStore(t, mem.WithClock(clock))
	return clock, newEngine(t, mem.WithStore(st), mem.WithName("host-a")), newEngine(t, mem.WithStore(st), mem.WithName("host-b"))
}

func TestTTLExpiresByTheStoreClock(t *testing.T) {
	clock, a, b := fakeHosts(t)
	holder := newLocker(t, a, "job", locker.WithTTL(10*time.Second))
	next := newLocker(t, b, "job")
	wantTry(t, holder, true)
	lost := holder.Lost()

	clock.Advance(10*time.Second - time.Millisecond)
	wantTry(t, next, false)
	select {
	case <-lost:
		t.Fatal("Lost() closed before the TTL ran out")
	default:
	}

	clock.Advance(time.Millisecond)
	wantTry(t, next, true) // the expiry is seen at once, timer or not
	await(t, lost, "Lost() after the TTL ran out")
	if err := holder.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() after expiry = %v; want ErrLockLost", err)
	}
	if err := next.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

func TestFixedLeaseHandsOverByTheStoreClock(t *testing.T) {
	clock, a, b := fakeHosts(t)
	holder := newLocker(t, a, "report", locker.WithLease(time.Minute))
	waiter := newLocker(t, b, "report")
	wantTry(t, holder, true)
	lost := holder.Lost()

	done := make(chan error, 1)
	go func() { done <- waiter.LockCtx(context.Background()) }()
	waitFor(t, a, "report", func(in inspect.Inspection) bool { return len(in.Waiters) == 1 })
	clock.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatalf("waiter LockCtx() = %v", err)
	}
	await(t, lost, "Lost() at the end of the lease")
	if err := holder.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() after the lease = %v; want ErrLockLost", err)
	}
	if err := waiter.Unlock(); err != nil {
		t.Errorf("waiter Unlock() = %v", err)
	}
}

// waitFor polls Inspect until cond holds: the store has no event to wait
// on for a waiter joining its queue.
func waitFor(t *testing.T, e *mem.Engine, name string, cond func(inspect.Inspection) bool) inspect.Inspection {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		in, err := e.Inspect(context.Background(), name)
		if err != nil {
			t.Fatalf("Inspect(%q) = %v", name, err)
		}
		if cond(in) {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect(%q) = %+v: condition not met within 1s", name, in)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWatchdogRenewsOnTheStore(t *testing.T) {
	clock, a, _ := fakeHosts(t)
	const ttl = 60 * time.Millisecond // the watchdog renews every 20ms of real time
	l := newLocker(t, a, "long-job", locker.WithTTL(ttl))
	wantTry(t, l, true)
	// Five TTLs pass on the store's clock in steps shorter than a TTL; the
	// watchdog renews in between, so the hold lives on.
	for i := 0; i < 5; i++ {
		clock.Advance(ttl * 2 / 3)
		waitFor(t, a, "long-job", func(in inspect.Inspection) bool { return in.Holder != nil && in.Holder.TTL == ttl })
	}
	select {
	case <-l.Lost():
		t.Fatal("Lost() closed although the watchdog renewed")
	default:
	}
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

func TestFIFO(t *testing.T) {
	e := newEngine(t)
	holder := newLocker(t, e, "queue")
	wantTry(t, holder, true)
	first := holder.Token()

	const waiters = 4
	got := make(chan int, waiters)
	errs := make(chan error, waiters)
	lockers := make([]locker.Handle, waiters)
	for i := range lockers {
		lockers[i] = newLocker(t, e, "queue")
		go func() {
			if err := lockers[i].Lock(); err != nil {
				errs <- err
				return
			}
			got <- i
		}()
		// The next waiter starts once this one is queued.
		waitFor(t, e, "queue", func(in inspect.Inspection) bool { return len(in.Waiters) == i+1 })
	}
	// A TryLock does not jump the queue.
	wantTry(t, newLocker(t, e, "queue"), false)

	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	last := first
	for want := 0; want < waiters; want++ {
		var i int
		select {
		case i = <-got:
		case err := <-errs:
			t.Fatalf("Lock() = %v", err)
		case <-time.After(time.Second):
			t.Fatalf("waiter %d not granted within 1s", want)
		}
		if i != want {
			t.Fatalf("waiter %d granted in turn %d; want arrival order", i, want)
		}
		tok := lockers[i].Token()
		if tok <= last {
			t.Errorf("waiter %d token %d; want above %d", i, tok, last)
		}
		last = tok
		if err := lockers[i].Unlock(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSharedStore(t *testing.T) {
	st := newStore(t)
	a := newEngine(t, mem.WithStore(st), mem.WithName("a"))
	b := newEngine(t, mem.WithStore(st), mem.WithName("b"))
	other := newEngine(t, mem.WithStore(st), mem.WithPrefix("other-app"))
	alone := newEngine(t)

	la := newLocker(t, a, "shared")
	wantTry(t, la, true)
	first := la.Token()
	if got := la.Engine(); got != "a" {
		t.Errorf("Engine() = %q; want a", got)
	}
	wantTry(t, newLocker(t, b, "shared"), false)    // same store, same prefix
	wantTry(t, newLocker(t, other, "shared"), true) // another namespace
	wantTry(t, newLocker(t, alone, "shared"), true) // another server
	if err := la.Unlock(); err != nil {
		t.Fatal(err)
	}
	lb := newLocker(t, b, "shared")
	wantTry(t, lb, true)
	// One counter per store: tokens compare across its engines.
	if got := lb.Token(); got <= first {
		t.Errorf("Token() on b = %d; want above a's %d", got, first)
	}
	if err := lb.Unlock(); err != nil {
		t.Fatal(err)
	}
}

func TestCloseEndsWaits(t *testing.T) {
	st := newStore(t)
	a := newEngine(t, mem.WithStore(st))
	b, err := mem.New(mem.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	wantTry(t, newLocker(t, a, "n"), true)
	done := make(chan error, 1)
	w := newLocker(t, b, "n")
	go func() { done <- w.Lock() }()
	waitFor(t, a, "n", func(in inspect.Inspection) bool { return len(in.Waiters) == 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, locker.ErrClosed) {
		t.Errorf("Lock() waiting when the engine closed = %v; want ErrClosed", err)
	}
	waitFor(t, a, "n", func(in inspect.Inspection) bool { return len(in.Waiters) == 0 })
}

func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  mem.Option
		want string
	}{
		{mem.WithName(""), "WithName"},
		{mem.WithPrefix(""), "WithPrefix"},
		{mem.WithStore(nil), "WithStore"},
		{mem.WithLogger(nil), "WithLogger"},
		{nil, "nil Option"},
	} {
		if _, err := mem.New(tc.opt); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s) = %v; want ErrInvalidArgument naming it", tc.want, err)
		}
	}
	for _, tc := range []struct {
		opt  mem.StoreOption
		want string
	}{
		{mem.WithClock(nil), "WithClock"},
		{nil, "nil StoreOption"},
	} {
		if _, err := mem.NewStore(tc.opt); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewStore(%s) = %v; want ErrInvalidArgument naming it", tc.want, err)
		}
	}
}

// A TTL or lease the engine cannot keep is refused where it is given, with
// an error naming the option, not granted and lost milliseconds later.
func TestBelowMinTTL(t *testing.T) {
	e, err := mem.New()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, tc := range []struct {
		opt  locker.Option
		want string
	}{
		{locker.WithTTL(time.Nanosecond), "WithTTL(1ns)"},
		{locker.WithTTL(time.Millisecond), "WithTTL(1ms)"},
		{locker.WithLease(time.Millisecond), "WithLease(1ms)"},
	} {
		if _, err := e.NewLocker("x", tc.opt); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewLocker(%s) = %v; want ErrInvalidArgument naming %s", tc.want, err, tc.want)
		}
	}
	if l, err := e.NewLocker("x", locker.WithTTL(mem.MinTTL)); err != nil || e.MinTTL() != mem.MinTTL {
		t.Errorf("NewLocker(WithTTL(mem.MinTTL)) = %v, %v, MinTTL() = %v; want a Locker, %v", l, err, e.MinTTL(), mem.MinTTL)
	}
}
