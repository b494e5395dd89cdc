package switcher_test

// Failover paths covered in milliseconds, without servers: every engine is
// an in-process mem engine behind a fault wrapper that fails or hangs on
// demand. Each test sets the options it relies on explicitly.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/sony/gobreaker/v2"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/faults"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/switcher"
)

// Options fast enough for tests of a few tens of milliseconds: a dead
// engine is pinged within 2ms, trips its breaker at the first failure, and
// may be tried again 10ms later.
const (
	faultHealthEvery   = 2 * time.Millisecond
	faultHealthTimeout = 10 * time.Millisecond
	faultOpenFor       = 10 * time.Millisecond
)

// faultyFleet is a switcher over a primary and a secondary, each a mem
// engine of its own (two servers) behind a fault wrapper.
type faultyFleet struct {
	sw                 *switcher.Switcher
	primary, secondary *faults.Engine
	inner              map[string]*mem.Engine // by engine name, to inspect
	events             chan switcher.Event
}

func newFaultyFleet(t *testing.T, opts ...switcher.Option) *faultyFleet {
	t.Helper()
	f := &faultyFleet{inner: make(map[string]*mem.Engine), events: make(chan switcher.Event, 16)}
	wrap := func(name string) *faults.Engine {
		e, err := mem.New(mem.WithName(name + "-store"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := faults.Wrap(e, faults.WithName(name))
		if err != nil {
			t.Fatal(err)
		}
		f.inner[name] = e
		return w
	}
	f.primary, f.secondary = wrap("primary"), wrap("secondary")
	opts = append([]switcher.Option{
		switcher.WithHealthCheck(faultHealthEvery, faultHealthTimeout),
		switcher.WithBreaker(1, faultOpenFor),
		switcher.OnSwitch(func(ev switcher.Event) { f.events <- ev }),
	}, opts...)
	sw, err := switcher.New([]locker.Engine{f.primary, f.secondary}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	f.sw = sw
	t.Cleanup(func() {
		if err := sw.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return f
}

func (f *faultyFleet) locker(t *testing.T, name string) locker.Handle {
	t.Helper()
	l, err := f.sw.NewLocker(name)
	if err != nil {
		t.Fatalf("NewLocker(%q) = %v", name, err)
	}
	return l
}

// nextEvent returns the next switch, failing the test after a second.
func (f *faultyFleet) nextEvent(t *testing.T) switcher.Event {
	t.Helper()
	select {
	case ev := <-f.events:
		return ev
	case <-time.After(time.Second):
		t.Fatalf("no switch within 1s; Current() = %q, States() = %+v", f.sw.Current(), f.sw.States())
		return switcher.Event{}
	}
}

func wantEvent(t *testing.T, ev switcher.Event, from, to string, reason switcher.Reason) {
	t.Helper()
	if ev.From != from || ev.To != to || ev.Reason != reason {
		t.Errorf("switch = %s -> %s (%s); want %s -> %s (%s)", ev.From, ev.To, ev.Reason, from, to, reason)
	}
}

// within polls cond every millisecond for up to a second, for states that
// raise no event, and reports whether cond came true.
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

// waitQueuedOn waits until n waiters queue for name on the named engine.
func (f *faultyFleet) waitQueuedOn(t *testing.T, engine, name string, n int) {
	t.Helper()
	var in inspect.Inspection
	var err error
	if !within(func() bool {
		in, err = f.inner[engine].Inspect(context.Background(), name)
		return err != nil || len(in.Waiters) == n
	}) || err != nil {
		t.Fatalf("%s: Inspect(%q) = %+v, %v; want %d waiters within 1s", engine, name, in, err, n)
	}
}

// waitBreaker waits until the breaker of engine i is in state.
func (f *faultyFleet) waitBreaker(t *testing.T, i int, state gobreaker.State) {
	t.Helper()
	if !within(func() bool { return f.sw.States()[i].Breaker == state }) {
		t.Fatalf("States() = %+v; want engine %d's breaker %v within 1s", f.sw.States(), i, state)
	}
}

// waitBreakers waits until every engine's breaker is in state.
func (f *faultyFleet) waitBreakers(t *testing.T, state gobreaker.State) {
	t.Helper()
	for i := range f.sw.States() {
		f.waitBreaker(t, i, state)
	}
}

func engineOf(l locker.Handle) string { return l.Engine() }

// A failing engine trips its breaker, and new acquisitions go to the next
// engine; holds granted before stay where they are.
func TestFaultsBreakerTripMovesAcquisitions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(*faults.Engine)
	}{
		{"Fail", (*faults.Engine).Fail},
		{"Refuse", (*faults.Engine).Refuse},
		{"Hang", (*faults.Engine).Hang},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFaultyFleet(t)
			before := f.locker(t, "before")
			if err := before.Lock(); err != nil {
				t.Fatal(err)
			}
			tc.fault(f.primary)
			wantEvent(t, f.nextEvent(t), "primary", "secondary", switcher.ReasonBreaker)

			l := f.locker(t, "after")
			ok, err := l.TryLock()
			if !ok || err != nil {
				t.Fatalf("TryLock() after the trip = %v, %v; want true, nil", ok, err)
			}
			if got := engineOf(l); got != "secondary" {
				t.Errorf("Engine() of a hold granted after the trip = %q; want secondary", got)
			}
			if got := engineOf(before); got != "primary" {
				t.Errorf("Engine() of a hold granted before the trip = %q; want primary (pinned)", got)
			}
			if err := l.Unlock(); err != nil {
				t.Errorf("Unlock() = %v", err)
			}
		})
	}
}

// A caller's first acquisition on a failing engine whose breaker has not
// tripped yet trips it and is retried on the next engine, within the same
// call: the caller sees a lock, not an error.
func TestFaultsFailedAcquisitionRetriedOnNextEngine(t *testing.T) {
	// Health checks too rare to trip the breaker first.
	f := newFaultyFleet(t, switcher.WithHealthCheck(time.Hour, faultHealthTimeout))
	f.primary.Fail()
	l := f.locker(t, "job")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := l.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() with the primary failing = %v; want nil", err)
	}
	if got := engineOf(l); got != "secondary" {
		t.Errorf("Engine() = %q; want secondary", got)
	}
	wantEvent(t, f.nextEvent(t), "primary", "secondary", switcher.ReasonBreaker)
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// An acquisition waiting on an engine when the switcher switches away from
// it goes to the new engine and gets its lock there, without an error.
func TestFaultsWaitDuringSwitch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reason  switcher.Reason
		trigger func(*testing.T, *faultyFleet)
	}{
		// The primary stops answering, its waiter included; the health check
		// trips the breaker.
		{"breaker", switcher.ReasonBreaker, func(_ *testing.T, f *faultyFleet) { f.primary.Hang() }},
		// An operator moves everyone while the primary is healthy and held.
		{"manual", switcher.ReasonManual, func(t *testing.T, f *faultyFleet) {
			if _, err := f.sw.SwitchEngineTo("secondary"); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFaultyFleet(t)
			holder := f.locker(t, "job")
			if err := holder.Lock(); err != nil {
				t.Fatal(err)
			}
			waiter := f.locker(t, "job")
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				done <- waiter.LockCtx(ctx)
			}()
			f.waitQueuedOn(t, "primary", "job", 1)

			tc.trigger(t, f)
			wantEvent(t, f.nextEvent(t), "primary", "secondary", tc.reason)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("LockCtx() waiting during the switch = %v; want nil", err)
				}
			case <-time.After(time.Second):
				t.Fatal("LockCtx() waiting during the switch not granted within 1s")
			}
			if got := engineOf(waiter); got != "secondary" {
				t.Errorf("Engine() of the waiter = %q; want secondary", got)
			}
			if got := engineOf(holder); got != "primary" {
				t.Errorf("Engine() of the holder = %q; want primary (pinned)", got)
			}
			if err := waiter.Unlock(); err != nil {
				t.Errorf("waiter Unlock() = %v", err)
			}
		})
	}
}

// With every engine down, a waiting acquisition keeps trying for
// WithOutageWait, and gets its lock when an engine comes back meanwhile.
func TestFaultsOutageWait(t *testing.T) {
	f := newFaultyFleet(t, switcher.WithOutageWait(time.Second))
	f.primary.Fail()
	f.secondary.Fail()
	f.waitBreakers(t, gobreaker.StateOpen)

	l := f.locker(t, "job")
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		done <- l.LockCtx(ctx)
	}()
	select {
	case err := <-done:
		t.Fatalf("LockCtx() returned %v while every engine was down; want it to wait", err)
	case <-time.After(20 * time.Millisecond):
	}
	f.primary.Heal()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("LockCtx() after the primary came back = %v; want nil", err)
		}
	case <-time.After(time.Second):
		t.Fatal("LockCtx() not granted within 1s of the primary coming back")
	}
	t.Logf("granted %v after the wait began", time.Since(start))
	if got := engineOf(l); got != "primary" {
		t.Errorf("Engine() = %q; want primary, the engine that came back", got)
	}
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// With every engine down for longer than WithOutageWait, a waiting
// acquisition fails with ErrUnavailable once the outage wait is over,
// well within its own budget.
func TestFaultsOutageWaitRunsOut(t *testing.T) {
	const outageWait = 10 * time.Millisecond
	// Breakers that stay open: nothing comes back.
	f := newFaultyFleet(t, switcher.WithOutageWait(outageWait), switcher.WithBreaker(1, time.Minute))
	f.primary.Fail()
	f.secondary.Fail()
	f.waitBreakers(t, gobreaker.StateOpen)

	l := f.locker(t, "job")
	// TryLock never waits.
	if ok, err := l.TryLock(); ok || !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("TryLock() with every engine down = %v, %v; want false, ErrUnavailable", ok, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err := l.LockCtx(ctx)
	elapsed := time.Since(start)
	if !errors.Is(err, locker.ErrUnavailable) || ctx.Err() != nil {
		t.Errorf("LockCtx() with every engine down = %v (ctx %v); want ErrUnavailable before the context ends", err, ctx.Err())
	}
	if elapsed < outageWait {
		t.Errorf("LockCtx() failed after %v; want after the outage wait %v", elapsed, outageWait)
	}
}

// With WithFailback, the switcher goes back to the primary once it has been
// healthy for the period; holds granted on the secondary stay there.
func TestFaultsFailback(t *testing.T) {
	const healthyFor = 20 * time.Millisecond
	f := newFaultyFleet(t, switcher.WithFailback(healthyFor))
	f.primary.Fail()
	wantEvent(t, f.nextEvent(t), "primary", "secondary", switcher.ReasonBreaker)
	during := f.locker(t, "job")
	if err := during.Lock(); err != nil {
		t.Fatal(err)
	}

	healed := time.Now()
	f.primary.Heal()
	ev := f.nextEvent(t)
	wantEvent(t, ev, "secondary", "primary", switcher.ReasonFailback)
	if d := ev.At.Sub(healed); d < healthyFor {
		t.Errorf("failback %v after the primary came back; want after the healthy period %v", d, healthyFor)
	}
	after := f.locker(t, "other")
	if err := after.Lock(); err != nil {
		t.Fatal(err)
	}
	if got := engineOf(after); got != "primary" {
		t.Errorf("Engine() after failback = %q; want primary", got)
	}
	if got := engineOf(during); got != "secondary" {
		t.Errorf("Engine() of a hold from the outage = %q; want secondary (pinned)", got)
	}
	for _, l := range []locker.Locker{during, after} {
		if err := l.Unlock(); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
	}
}

// Without WithFailback, failback is manual: the primary coming back moves
// nothing.
func TestFaultsNoFailbackByDefault(t *testing.T) {
	f := newFaultyFleet(t)
	f.primary.Fail()
	wantEvent(t, f.nextEvent(t), "primary", "secondary", switcher.ReasonBreaker)
	f.primary.Heal()
	f.waitBreakers(t, gobreaker.StateClosed)
	select {
	case ev := <-f.events:
		t.Errorf("switch %s -> %s (%s) without WithFailback; want none", ev.From, ev.To, ev.Reason)
	case <-time.After(3 * faultOpenFor):
	}
	if got := f.sw.Current(); got != "secondary" {
		t.Errorf("Current() = %q; want secondary", got)
	}
}

// When the source names an engine whose breaker is open, acquisitions
// still succeed on an engine that works; once the named engine is back, the
// switcher follows the source to it (DESIGN: "a process that cannot use the
// engine the source names says so and follows as soon as it can").
func TestFaultsSourceNamesADeadEngine(t *testing.T) {
	src := make(chanSource) // switcher_test.go
	f := newFaultyFleet(t, switcher.WithSource(src))
	f.secondary.Fail()
	f.waitBreaker(t, 1, gobreaker.StateOpen)

	src <- switcher.Desired{Engine: "secondary"}
	// The value is applied: a switch, or an event saying it waits (the
	// reason is the switcher's business; its target is the source's).
	if ev := f.nextEvent(t); ev.To != "secondary" {
		t.Fatalf("event after the source named the secondary = %+v; want To secondary", ev)
	}
	l := f.locker(t, "job")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := l.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() while the source names a dead engine = %v; want nil", err)
	}
	if got := engineOf(l); got != "primary" {
		t.Errorf("Engine() = %q; want primary, the engine that works", got)
	}
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}

	f.secondary.Heal()
	if !within(func() bool { return f.sw.Current() == "secondary" }) {
		t.Fatalf("Current() = %q 1s after the engine the source names came back; want secondary", f.sw.Current())
	}
	next := f.locker(t, "job")
	if err := next.Lock(); err != nil {
		t.Fatal(err)
	}
	if got := engineOf(next); got != "secondary" {
		t.Errorf("Engine() after the named engine came back = %q; want secondary", got)
	}
	if err := next.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// A try stuck on an engine that stopped answering ends when the switcher
// moves away from it, and the caller gets its lock on the new engine at
// once, not when its own deadline or the engine's request timeout ends the
// try.
func TestFaultsTryStuckDuringSwitch(t *testing.T) {
	clock := clockwork.NewFakeClock()
	newEngine := func(name string, opts ...faults.Option) *faults.Engine {
		e, err := mem.New(mem.WithName(name + "-store"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := faults.Wrap(e, append(opts, faults.WithName(name))...)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	primary := newEngine("primary", faults.WithClock(clock))
	// No health check during the test: only the manual switch moves it.
	sw, err := switcher.New([]locker.Engine{primary, newEngine("secondary")}, switcher.WithHealthCheck(time.Hour, faultHealthTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	// Every call to the primary now waits for a clock that never moves.
	if err := primary.SetLatency(time.Hour); err != nil {
		t.Fatal(err)
	}
	l, err := sw.NewLocker("job")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.LockCtx(ctx) }()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("the try never reached the primary: %v", err)
	}
	if _, err := sw.SwitchEngineTo("secondary"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("LockCtx() whose try was stuck on the primary during the switch = %v; want nil", err)
		}
	case <-time.After(time.Second):
		t.Fatal("LockCtx() whose try was stuck on the primary not granted within 1s of the switch")
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("granted %v after the switch; want at once", took)
	}
	if got := l.Engine(); got != "secondary" {
		t.Errorf("Engine() = %q; want secondary", got)
	}
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// Callers whose deadlines cut their requests short do not trip a slow but
// answering engine's breaker: only a request left unanswered for
// driver.OutageAfter counts against it.
func TestFaultsCallerDeadlinesDoNotTrip(t *testing.T) {
	// Under the primary's 1s latency, with room for the secondary's probe
	// before the switch on a loaded machine (200ms missed once in CI).
	const healthTimeout = 600 * time.Millisecond
	f := newFaultyFleet(t, switcher.WithHealthCheck(time.Hour, healthTimeout))
	if err := f.primary.SetLatency(time.Second); err != nil {
		t.Fatal(err)
	}
	lockWithin := func(budget time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		return f.locker(t, "job").LockCtx(ctx)
	}
	for range 5 {
		if err := lockWithin(20 * time.Millisecond); err != context.DeadlineExceeded {
			t.Fatalf("LockCtx() with a 20ms budget on a slow engine = %v; want context.DeadlineExceeded", err)
		}
	}
	select {
	case ev := <-f.events:
		t.Fatalf("switch %+v after callers' short deadlines; want none", ev)
	default:
	}
	if got := f.sw.Current(); got != "primary" {
		t.Fatalf("Current() = %q; want primary", got)
	}

	// Unanswered for longer than OutageAfter: that counts.
	budget := driver.OutageAfter + 100*time.Millisecond
	if err := lockWithin(budget); err != context.DeadlineExceeded {
		t.Fatalf("LockCtx() with a %v budget on a slow engine = %v; want context.DeadlineExceeded", budget, err)
	}
	wantEvent(t, f.nextEvent(t), "primary", "secondary", switcher.ReasonBreaker)
}

// Slow is not dead when nothing else is left: with the primary down, a
// secondary that answers, but later than the health timeout, keeps its
// breaker closed and its callers keep getting locks; timeouts alone open
// a breaker only while another engine's is closed.
func TestFaultsSlowLastEngineKeepsServing(t *testing.T) {
	f := newFaultyFleet(t)
	f.primary.Refuse()
	wantEvent(t, f.nextEvent(t), "primary", "secondary", switcher.ReasonBreaker)
	const slow = 3 * faultHealthTimeout
	if err := f.secondary.SetLatency(slow); err != nil {
		t.Fatal(err)
	}
	l := f.locker(t, "slow")
	var longest time.Duration
	last := time.Now()
	for end := last.Add(50 * slow); time.Now().Before(end); {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := l.LockCtx(ctx)
		cancel()
		if err != nil {
			t.Fatalf("LockCtx() on the slow secondary = %v; want nil", err)
		}
		if err := l.Unlock(); err != nil && !errors.Is(err, locker.ErrUnavailable) {
			t.Fatalf("Unlock() = %v", err)
		}
		longest = max(longest, time.Since(last))
		last = time.Now()
		if st := f.sw.States()[1]; st.Breaker != gobreaker.StateClosed {
			t.Fatalf("the slow secondary's breaker is %v with the primary down; want closed", st.Breaker)
		}
	}
	if limit := 10 * slow; longest > limit {
		t.Errorf("longest time between grants %v; want within %v", longest, limit)
	}
	// Once the primary is back, timeouts count again: the slow secondary
	// is left for it.
	f.primary.Heal()
	f.waitBreaker(t, 1, gobreaker.StateOpen)
}
