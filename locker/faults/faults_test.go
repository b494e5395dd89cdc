package faults_test

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
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/faults"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) { return func() {}, nil })
}

// A healthy wrapper keeps the whole contract of the engine it wraps.
func TestConformance(t *testing.T) {
	st := newStore(t)
	lockertest.Run(t, func(t *testing.T) lockertest.Harness {
		w := wrap(t, st)
		return lockertest.Harness{
			Engine: w,
			Expire: func(ctx context.Context, name string) error {
				if w.ExpireNow(name) == 0 {
					return errors.New("no hold to expire")
				}
				return nil
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

// wrap returns a wrapper around a new mem engine on st. The caller closes
// it (lockertest does), or wrapClosed does.
func wrap(t *testing.T, st *mem.Store, opts ...faults.Option) *faults.Engine {
	t.Helper()
	e, err := mem.New(mem.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	w, err := faults.Wrap(e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func wrapClosed(t *testing.T, st *mem.Store, opts ...faults.Option) *faults.Engine {
	t.Helper()
	w := wrap(t, st, opts...)
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return w
}

// fakeHosts returns a fake clock and two wrapped engines on one store. The
// wrappers run by the clock and the store by real time, so every loss a
// test sees is the wrapper's doing.
func fakeHosts(t *testing.T) (*clockwork.FakeClock, *faults.Engine, *faults.Engine) {
	t.Helper()
	clock, st := clockwork.NewFakeClock(), newStore(t)
	return clock, wrapClosed(t, st, faults.WithClock(clock)), wrapClosed(t, st, faults.WithClock(clock))
}

// operator returns a plain engine on st, to inspect it.
func operator(t *testing.T, st *mem.Store) *mem.Engine {
	t.Helper()
	op, err := mem.New(mem.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Close() })
	return op
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

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatalf("%s: not within 1s", what)
	}
}

func awaitErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(time.Second):
		t.Fatalf("%s: no result within 1s", what)
		return nil
	}
}

// acquire is the raw outcome a switcher sees (the Handle's Acquire).
func acquire(t *testing.T, l locker.Locker, ctx context.Context, wait bool) (bool, error) {
	t.Helper()
	a, ok := l.(interface {
		Acquire(context.Context, bool) (bool, error)
	})
	if !ok {
		t.Fatalf("%T has no Acquire", l)
	}
	return a.Acquire(ctx, wait)
}

func TestFailAndRefuse(t *testing.T) {
	w := wrapClosed(t, newStore(t))
	l := newLocker(t, w, "n")
	for _, tc := range []struct {
		name    string
		set     func()
		refused bool
	}{
		{"Fail", w.Fail, false},
		{"Refuse", w.Refuse, true},
	} {
		tc.set()
		ok, err := l.TryLock()
		if ok || !errors.Is(err, locker.ErrUnavailable) || errors.Is(err, locker.ErrRefused) != tc.refused {
			t.Errorf("%s: TryLock() = %v, %v; want false, ErrUnavailable (ErrRefused: %v)", tc.name, ok, err, tc.refused)
		}
		if err := w.Ping(context.Background()); !errors.Is(err, locker.ErrUnavailable) || errors.Is(err, locker.ErrRefused) != tc.refused {
			t.Errorf("%s: Ping() = %v; want ErrUnavailable (ErrRefused: %v)", tc.name, err, tc.refused)
		}
		w.Heal()
		if err := w.Ping(context.Background()); err != nil {
			t.Errorf("Ping() after Heal = %v", err)
		}
		wantTry(t, l, true)
		if err := l.Unlock(); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
	}
}

func TestHang(t *testing.T) {
	w := wrapClosed(t, newStore(t))
	l := newLocker(t, w, "n")
	w.Hang()
	const budget = 20 * time.Millisecond

	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	if err := l.LockCtx(ctx); err != context.DeadlineExceeded {
		t.Errorf("LockCtx() on a hung engine = %v; want context.DeadlineExceeded itself", err)
	}
	// A wait shorter than OutageAfter merely ran out, as on the engines.
	ctx, cancel = context.WithTimeout(context.Background(), budget)
	defer cancel()
	if ok, err := acquire(t, l, ctx, true); ok || err != context.DeadlineExceeded {
		t.Errorf("Acquire() on a hung engine within %v = %v, %v; want false, context.DeadlineExceeded itself", budget, ok, err)
	}
	if ok, err := l.TryLockTimeout(budget); ok || err != nil {
		t.Errorf("TryLockTimeout(%v) on a hung engine = %v, %v; want false, nil", budget, ok, err)
	}
	long := driver.OutageAfter + budget
	ctx, cancel = context.WithTimeout(context.Background(), long)
	defer cancel()
	if ok, err := acquire(t, l, ctx, true); ok || !errors.Is(err, locker.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire() on a hung engine within %v = %v, %v; want false, ErrUnavailable and DeadlineExceeded", long, ok, err)
	}
	if ok, err := l.TryLockTimeout(long); ok || !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("TryLockTimeout(%v) on a hung engine = %v, %v; want false, ErrUnavailable (not contention)", long, ok, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), budget)
	defer cancel()
	if err := w.Ping(ctx); !errors.Is(err, locker.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Ping() on a hung engine = %v; want ErrUnavailable and DeadlineExceeded", err)
	}

	// A call without a deadline hangs until Heal, then goes through.
	done := make(chan error, 1)
	go func() { done <- l.Lock() }()
	select {
	case err := <-done:
		t.Fatalf("Lock() on a hung engine returned %v", err)
	case <-time.After(budget):
	}
	w.Heal()
	if err := awaitErr(t, done, "Lock() after Heal"); err != nil {
		t.Fatalf("Lock() after Heal = %v", err)
	}
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

func TestCloseEndsHungCalls(t *testing.T) {
	w := wrap(t, newStore(t))
	w.Hang()
	done := make(chan error, 1)
	l := newLocker(t, w, "n")
	go func() { done <- l.Lock() }()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := awaitErr(t, done, "Lock() when the engine closed"); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("hung Lock() at Close = %v; want ErrClosed", err)
	}
}

func TestLatency(t *testing.T) {
	clock, w, _ := fakeHosts(t)
	if err := w.SetLatency(time.Second); err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, w, "slow")
	done := make(chan error, 1)
	go func() {
		ok, err := l.TryLock()
		if err == nil && !ok {
			err = errors.New("not granted")
		}
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("TryLock() never waited on the clock: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("TryLock() returned %v before the latency passed", err)
	default:
	}
	clock.Advance(time.Second)
	if err := awaitErr(t, done, "TryLock() after the latency"); err != nil {
		t.Fatalf("TryLock() = %v", err)
	}
	if err := w.SetLatency(0); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

func TestDropRenewals(t *testing.T) {
	clock, a, b := fakeHosts(t)
	const ttl = 10 * time.Second
	held := newLocker(t, a, "renewed", locker.WithTTL(ttl))
	fixed := newLocker(t, a, "fixed", locker.WithLease(time.Hour))
	wantTry(t, held, true)
	wantTry(t, fixed, true)
	a.DropRenewals()

	clock.Advance(ttl - time.Millisecond)
	wantTry(t, newLocker(t, b, "renewed"), false)
	clock.Advance(time.Millisecond)
	await(t, held.Lost(), "Lost() one TTL after renewals stopped")
	other := newLocker(t, b, "renewed")
	wantTry(t, other, true) // the engine freed the name
	if err := held.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() of the lost hold = %v; want ErrLockLost", err)
	}
	select {
	case <-fixed.Lost():
		t.Error("a fixed lease was lost by dropped renewals")
	default:
	}
	for _, l := range []locker.Locker{other, fixed} {
		if err := l.Unlock(); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
	}
}

func TestShortOutageKeepsHolds(t *testing.T) {
	clock, a, _ := fakeHosts(t)
	const ttl = 10 * time.Second
	l := newLocker(t, a, "n", locker.WithTTL(ttl))
	wantTry(t, l, true)
	a.Fail()
	clock.Advance(ttl / 2)
	a.Heal()
	clock.Advance(ttl)
	// An expiry would run from a timer goroutine: give it time to show.
	select {
	case <-l.Lost():
		t.Error("Lost() closed after an outage shorter than the TTL")
	case <-time.After(10 * time.Millisecond):
	}
	// A long outage loses it.
	a.Hang()
	clock.Advance(ttl)
	await(t, l.Lost(), "Lost() one TTL into an outage")
	a.Heal()
	if err := l.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() = %v; want ErrLockLost", err)
	}
}

func TestExpireNow(t *testing.T) {
	_, a, b := fakeHosts(t)
	l := newLocker(t, a, "n")
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := l.Lock(); err != nil { // re-entry: one hold
		t.Fatal(err)
	}
	if n := a.ExpireNow("n"); n != 1 {
		t.Errorf("ExpireNow() = %d; want 1", n)
	}
	await(t, l.Lost(), "Lost() after ExpireNow")
	if err := l.Lock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("re-entry after expiry = %v; want ErrLockLost", err)
	}
	next := newLocker(t, b, "n")
	wantTry(t, next, true)
	for i := 0; i < 2; i++ {
		if err := l.Unlock(); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("Unlock() #%d after expiry = %v; want ErrLockLost", i+1, err)
		}
	}
	if n := a.ExpireNow("n"); n != 0 {
		t.Errorf("ExpireNow() with nothing held = %d; want 0", n)
	}
	if err := next.Unlock(); err != nil {
		t.Error(err)
	}
}

func TestFaultEndsWaitInFlight(t *testing.T) {
	clock, st := clockwork.NewFakeClock(), newStore(t)
	a, b, op := wrapClosed(t, st, faults.WithClock(clock)), wrapClosed(t, st, faults.WithClock(clock)), operator(t, st)
	holder := newLocker(t, b, "n")
	wantTry(t, holder, true)
	waiter := newLocker(t, a, "n")

	// Fail: the wait fails at once.
	done := make(chan error, 1)
	go func() { _, err := acquire(t, waiter, context.Background(), true); done <- err }()
	waitQueued(t, op, "n", 1)
	a.Fail()
	if err := awaitErr(t, done, "a wait when the engine failed"); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("waiting Acquire() when the engine failed = %v; want ErrUnavailable", err)
	}
	a.Heal()

	// Hang: the wait is not granted while the engine hangs, and goes
	// through after Heal.
	go func() { done <- waiter.Lock() }()
	waitQueued(t, op, "n", 1)
	a.Hang()
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("Lock() granted by a hung engine: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	a.Heal()
	if err := awaitErr(t, done, "Lock() after Heal"); err != nil {
		t.Fatalf("Lock() after Heal = %v", err)
	}
	if err := waiter.Unlock(); err != nil {
		t.Error(err)
	}
}

// within polls cond every millisecond for up to a second, for what
// happens from a timer goroutine or raises no event, and reports whether
// cond came true.
func within(cond func() bool) bool {
	deadline := time.Now().Add(time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// waitQueued waits until n waiters queue for name, as the operator engine
// op on the same store sees it.
func waitQueued(t *testing.T, op *mem.Engine, name string, n int) {
	t.Helper()
	var in inspect.Inspection
	var err error
	if !within(func() bool {
		in, err = op.Inspect(context.Background(), name)
		return err != nil || len(in.Waiters) == n
	}) || err != nil {
		t.Fatalf("Inspect(%q) = %+v, %v; want %d waiters within 1s", name, in, err, n)
	}
}

func TestUnlockDuringOutageLingers(t *testing.T) {
	clock, a, b := fakeHosts(t)
	const ttl = 10 * time.Second
	l := newLocker(t, a, "n", locker.WithTTL(ttl))
	wantTry(t, l, true)
	a.Fail()
	if err := l.Unlock(); !errors.Is(err, locker.ErrUnavailable) {
		t.Fatalf("Unlock() during an outage = %v; want ErrUnavailable", err)
	}
	a.Heal()
	other := newLocker(t, b, "n")
	wantTry(t, other, false) // still held on the engine
	clock.Advance(ttl)
	// The lingering hold ends from a timer goroutine.
	if !within(func() bool { ok, err := other.TryLock(); return ok || err != nil }) {
		t.Fatal("TryLock() not granted within 1s of the lingering hold's TTL")
	}
	if err := other.Unlock(); err != nil {
		t.Error(err)
	}
}

func TestAfter(t *testing.T) {
	clock, a, _ := fakeHosts(t)
	if _, err := a.After(time.Minute, a.Fail); err != nil {
		t.Fatal(err)
	}
	stop, err := a.After(2*time.Minute, a.Heal)
	if err != nil {
		t.Fatal(err)
	}
	if !stop() {
		t.Error("stop() of a pending fault = false; want true")
	}
	if err := a.Ping(context.Background()); err != nil {
		t.Fatalf("Ping() before the scheduled fault = %v", err)
	}
	clock.Advance(time.Minute)
	if !within(func() bool { return errors.Is(a.Ping(context.Background()), locker.ErrUnavailable) }) {
		t.Fatal("the scheduled Fail did not happen within 1s of its time")
	}
}

func TestBadArguments(t *testing.T) {
	inner, err := mem.New()
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	for _, tc := range []struct {
		opt  faults.Option
		want string
	}{
		{faults.WithName(""), "WithName"},
		{faults.WithClock(nil), "WithClock"},
		{nil, "nil Option"},
	} {
		if _, err := faults.Wrap(inner, tc.opt); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Wrap(%s) = %v; want ErrInvalidArgument naming it", tc.want, err)
		}
	}
	if _, err := faults.Wrap(nil); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Wrap(nil) = %v; want ErrInvalidArgument", err)
	}
	w := wrapClosed(t, newStore(t))
	if err := w.SetLatency(-time.Second); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), "SetLatency") {
		t.Errorf("SetLatency(-1s) = %v; want ErrInvalidArgument naming it", err)
	}
	if _, err := w.After(-time.Second, w.Fail); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("After(-1s) = %v; want ErrInvalidArgument", err)
	}
	if _, err := w.After(time.Second, nil); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("After(nil fault) = %v; want ErrInvalidArgument", err)
	}
}
