// Package lockertest is the conformance suite every orthrus engine, and the
// switcher, must pass, in the spirit of testing/fstest: one Run call, one
// subtest per property of the locker contract, against real servers.
//
// Each subtest has a watchdog (a hang fails with every goroutine's stack)
// and checks that no goroutine outlives it. RunFaults checks what callers
// see when the server freezes or dies; its factory starts a server per
// case. Engines that implement
// Inspector also get their operator calls checked. Handoff is the
// contended benchmark, run on an engine and on its native peer alike.
//
//	func TestConformance(t *testing.T) {
//		client := goredis.NewClient(&goredis.Options{Addr: addr})
//		defer client.Close()
//		lockertest.Run(t, func(t *testing.T) lockertest.Harness {
//			e, err := redis.New(client)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return lockertest.Harness{Engine: e}
//		})
//	}
package lockertest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"go.uber.org/goleak"
)

// Harness is what a factory gives the suite: an engine and optional hooks
// into the server behind it.
type Harness struct {
	// Engine is the engine under test. The suite closes it.
	Engine locker.Engine
	// Expire, when set, removes the current hold of name on the server as
	// an expiry or an operator would, to check that the holder sees Lost.
	Expire func(ctx context.Context, name string) error
	// Residue, when set, counts what the server keeps for name besides a
	// hold: waiter nodes or keys, subscriptions. It must reach 0 after a
	// cancelled wait.
	Residue func(ctx context.Context, name string) (int, error)
	// Delete, when set, deletes the key or node of the hold of kind on
	// name with token on the server, behind its holder's back, as an
	// operator would by hand. The suite then wants the holder's Lost
	// closed within NoticeDeleted, with the default TTL: so no renewal nor
	// lease check is what finds it, but the engine watching its holds.
	Delete        func(ctx context.Context, kind inspect.Kind, name string, token uint64) error
	NoticeDeleted time.Duration
	// Causes, when set, is the Observer the engine reports to: the suite
	// checks why the holds it ends ended.
	Causes *Causes
}

// Factory returns a new engine over the same servers each time it is
// called; the suite calls it once or twice per subtest.
type Factory func(t *testing.T) Harness

// caseTimeout fails a subtest that hangs instead of waiting for go test's
// global timeout; invariantTimeout is the invariant runs' (InvariantOps
// acquisitions take etcd about 50s under -race on 2 loaded cores).
const (
	caseTimeout      = 60 * time.Second
	invariantTimeout = 4 * time.Minute
)

// Run runs the conformance suite. Every subtest uses names unique to it, so
// the servers need no cleaning between subtests.
func Run(t *testing.T, factory Factory) {
	runCases(t, factory, []suiteCase{
		{"Exclusion", testExclusion},
		{"Reentry", testReentry},
		{"TryLock", testTryLock},
		{"TryLockTimeout", testTryLockTimeout},
		{"LockCtxCancel", testLockCtxCancel},
		{"ContendedIsNotUnavailable", testContendedIsNotUnavailable},
		{"LockCtxBadContext", testLockCtxBadContext},
		{"UnlockNotHeld", testUnlockNotHeld},
		{"FixedLease", testFixedLease},
		{"Lost", testLost},
		{"Deleted", testDeleted(inspect.KindMutex)},
		{"TokensIncrease", testTokensIncrease},
		{"SharedLocker", testSharedLocker},
		{"Names", testNames},
		{"BadOptions", testBadOptions},
		{"MinTTL", testMinTTL},
		{"Closed", testClosed},
		{"Inspect", testInspect},
		{"EpochRecord", testEpochRecord},
		{"WithLock", testWithLock},
		{"Weighted", testWeighted},
	})
}

// suiteCase is one subtest of a suite.
type suiteCase struct {
	name string
	fn   func(t *testing.T, f Factory)
}

// runCases runs each case as a guarded subtest; the invariant runs get
// the longer watchdog.
func runCases(t *testing.T, factory Factory, cases []suiteCase) {
	for _, c := range cases {
		d := caseTimeout
		if c.name == "Invariant" {
			d = invariantTimeout
		}
		t.Run(c.name, func(t *testing.T) { guardFor(t, d, func() { c.fn(t, factory) }) })
	}
}

// guard runs one subtest's body with a watchdog, and checks that no
// goroutine outlives the subtest.
func guard(t *testing.T, body func()) { guardFor(t, caseTimeout, body) }

// guardFor is guard with a watchdog of d.
func guardFor(t *testing.T, d time.Duration, body func()) {
	// Registered first, so it runs after every cleanup of the case.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if !t.Failed() {
			// go-redis starts this per node of a Cluster client the first
			// time it reaches the node; it belongs to the caller's client,
			// which an engine never closes.
			goleak.VerifyNone(t, before, goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"))
		}
	})
	watchdog := time.AfterFunc(d, func() {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		panic(fmt.Sprintf("lockertest: %s hung for %v\n%s", t.Name(), d, buf[:n]))
	})
	defer watchdog.Stop()
	body()
}

// open calls the factory and closes the engine when the subtest ends.
func open(t *testing.T, f Factory) Harness {
	t.Helper()
	h := f(t)
	t.Cleanup(func() {
		if err := h.Engine.Close(); err != nil {
			t.Errorf("Engine.Close() = %v", err)
		}
	})
	return h
}

// lockName is unique per subtest and run, so reruns never meet old state.
func lockName(t *testing.T, suffix string) string {
	return fmt.Sprintf("%s/%d/%s", t.Name(), time.Now().UnixNano(), suffix)
}

func newLocker(t *testing.T, e locker.Engine, name string, opts ...locker.Option) locker.Handle {
	t.Helper()
	l, err := e.NewLocker(name, opts...)
	if err != nil {
		t.Fatalf("NewLocker(%q) = %v", name, err)
	}
	return l
}

func mustLock(t *testing.T, l locker.Locker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := l.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() = %v; want nil", err)
	}
}

// mustUnlock releases l's hold. When the engine answers later than the
// release bound (it is slow, on a loaded machine), Unlock returns what the
// contract says: an error wrapping ErrUnavailable, the release going on in
// the background. The cases that are not about that bound (the fault
// suite is) accept it, and wait until the release is done, so that the
// case goes on from the state it expects.
func mustUnlock(t *testing.T, l locker.Locker) {
	t.Helper()
	late, err := unlock(l)
	if err != nil {
		t.Fatalf("Unlock() = %v; want nil", err)
	}
	if !late {
		return
	}
	t.Logf("Unlock() answered after the release bound; waiting for the release to finish in the background")
	// The name is free again once its owner can take it.
	eventually(t, driver.DefaultReleaseTimeout+caseSlack, "the late release to finish", func() bool {
		ok, _ := l.TryLock()
		return ok
	})
	mustUnlock(t, l)
}

// caseSlack is what a loaded machine adds to a bound the suite waits out.
const caseSlack = 5 * time.Second

// unlock calls l.Unlock and reports whether it returned the late-release
// outcome, which it then does not return as an error: ErrUnavailable after
// the whole release bound.
func unlock(l locker.Locker) (late bool, err error) {
	start := time.Now()
	err = l.Unlock()
	if errors.Is(err, locker.ErrUnavailable) && time.Since(start) >= driver.DefaultReleaseWait {
		return true, nil
	}
	return false, err
}

func wantTry(t *testing.T, l locker.Locker, want bool) {
	t.Helper()
	got, err := l.TryLock()
	if got != want || err != nil {
		t.Fatalf("TryLock() = %v, %v; want %v, nil", got, err, want)
	}
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testExclusion(t *testing.T, f Factory) {
	const owners, rounds = 16, 12
	e := open(t, f).Engine
	name := lockName(t, "x")
	ls := make([]locker.Locker, owners)
	for i := range ls {
		ls[i] = newLocker(t, e, name)
	}
	contend(t, ls, rounds, 1)
}

func testReentry(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "r")
	a, b := newLocker(t, e, name), newLocker(t, e, name)
	mustLock(t, a)
	tok := a.Token()
	mustLock(t, a)
	wantTry(t, a, true)
	if got := a.Token(); got != tok {
		t.Errorf("Token() after re-entry = %d; want %d (same hold)", got, tok)
	}
	wantTry(t, b, false)
	mustUnlock(t, a)
	mustUnlock(t, a)
	wantTry(t, b, false) // one count left
	mustUnlock(t, a)
	wantTry(t, b, true)
	mustUnlock(t, b)
}

func testTryLock(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "t")
	a, b := newLocker(t, e, name), newLocker(t, e, name)
	wantTry(t, a, true)
	// A switcher names the engine it delegated to, not itself.
	if got := a.Engine(); got == "" {
		t.Errorf("Engine() of the holder = \"\"; want the granting engine's name")
	}
	wantTry(t, b, false)
	if got := b.Token(); got != 0 {
		t.Errorf("Token() of a non-holder = %d; want 0", got)
	}
	if got := b.Engine(); got != "" {
		t.Errorf("Engine() of a non-holder = %q; want \"\"", got)
	}
	mustUnlock(t, a)
	wantTry(t, b, true)
	mustUnlock(t, b)
}

func testTryLockTimeout(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "tt")
	a, b := newLocker(t, e, name), newLocker(t, e, name)
	mustLock(t, a)
	const wait, slack = 300 * time.Millisecond, 500 * time.Millisecond
	start := time.Now()
	ok, err := b.TryLockTimeout(wait)
	elapsed := time.Since(start)
	if ok || err != nil {
		t.Fatalf("TryLockTimeout(%v) while held = %v, %v; want false, nil", wait, ok, err)
	}
	if elapsed < wait || elapsed > wait+slack {
		t.Errorf("TryLockTimeout(%v) returned after %v; want within [%v, %v]", wait, elapsed, wait, wait+slack)
	}
	if ok, err := b.TryLockTimeout(-time.Second); ok || !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), "wait") {
		t.Errorf("TryLockTimeout(-1s) = %v, %v; want false, ErrInvalidArgument naming the wait", ok, err)
	}
	// 0 is one attempt, as TryLock.
	start = time.Now()
	if ok, err := b.TryLockTimeout(0); ok || err != nil {
		t.Errorf("TryLockTimeout(0) while held = %v, %v; want false, nil", ok, err)
	}
	if elapsed := time.Since(start); elapsed > slack {
		t.Errorf("TryLockTimeout(0) returned after %v; want one attempt, within %v", elapsed, slack)
	}
	// A release during the wait hands the lock over.
	done := make(chan error, 1)
	go func() {
		ok, err := b.TryLockTimeout(20 * time.Second)
		if err == nil && !ok {
			err = errors.New("timed out")
		}
		done <- err
	}()
	mustUnlock(t, a)
	if err := <-done; err != nil {
		t.Fatalf("TryLockTimeout(20s) after release = %v; want true, nil", err)
	}
	mustUnlock(t, b)
	if ok, err := a.TryLockTimeout(0); !ok || err != nil {
		t.Fatalf("TryLockTimeout(0) on a free lock = %v, %v; want true, nil", ok, err)
	}
	mustUnlock(t, a)
}

func testLockCtxCancel(t *testing.T, f Factory) {
	h := open(t, f)
	name := lockName(t, "c")
	a, b, c := newLocker(t, h.Engine, name), newLocker(t, h.Engine, name), newLocker(t, h.Engine, name)
	mustLock(t, a)
	// The baseline is taken after the first wait, which may start what an
	// engine keeps for all its waiters (a subscription connection, say):
	// one that runs to its deadline, so that it surely got that far.
	var baseline goleak.Option
	for _, cause := range []error{context.DeadlineExceeded, context.Canceled, context.Canceled} {
		ctx, cancel := context.WithCancel(context.Background())
		if cause == context.DeadlineExceeded {
			ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
		}
		done := make(chan error, 1)
		go func() { done <- b.LockCtx(ctx) }()
		if h.Residue != nil {
			// The waiter is queued once the server has something of it.
			eventually(t, 10*time.Second, "waiter visible on the server", func() bool {
				n, err := h.Residue(context.Background(), name)
				return err == nil && n > 0
			})
		}
		if cause == context.Canceled {
			cancel()
		}
		err := <-done
		cancel()
		if err != cause {
			t.Fatalf("LockCtx() = %v; want %v (ctx.Err() itself)", err, cause)
		}
		if got := b.Token(); got != 0 {
			t.Errorf("Token() after a cancelled wait = %d; want 0", got)
		}
		if baseline == nil {
			baseline = goleak.IgnoreCurrent()
		}
	}
	if h.Residue != nil {
		eventually(t, 10*time.Second, "nothing left on the server after cancelled waits", func() bool {
			n, err := h.Residue(context.Background(), name)
			return err == nil && n == 0
		})
	}
	// Idle workers of the engine's Core (driver.Core.Go) are the engine's,
	// kept for its next requests; Close ends them, which guard checks.
	eventually(t, 10*time.Second, "no goroutine left by the cancelled waits", func() bool {
		return goleak.Find(baseline, goleak.IgnoreAnyFunction("github.com/orthrus-go/orthrus/locker.(*Core).worker")) == nil
	})
	// Nothing of the cancelled waiter stands in the queue.
	mustUnlock(t, a)
	wantTry(t, c, true)
	mustUnlock(t, c)

	// An already-cancelled context fails at once, without touching the engine.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.LockCtx(ctx); err != context.Canceled {
		t.Errorf("LockCtx(cancelled) = %v; want context.Canceled", err)
	}
}

// testContendedIsNotUnavailable: a wait that runs out while another owner
// holds the name is contention, on the raw path too: a breaker must not
// count it as the engine failing. That holds for a deadline that passes
// before the engine's first answer too, as long as that request had been
// sent less than driver.OutageAfter before (a slow engine, a loaded
// machine): the caller only ran out of time.
func testContendedIsNotUnavailable(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "d")
	a, b := newLocker(t, e, name), newLocker(t, e, name)
	acq, ok := b.(Acquirer)
	if !ok {
		t.Skipf("%T has no Acquire(ctx, wait) method", b)
	}
	mustLock(t, a)
	// Deadlines land at different points of the wait: before the engine's
	// first answer, wherever that comes below driver.OutageAfter, and long
	// after it.
	for _, d := range []time.Duration{time.Millisecond, 100 * time.Millisecond, driver.OutageAfter - 50*time.Millisecond, time.Second} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err := b.LockCtx(ctx)
		cancel()
		if err != context.DeadlineExceeded {
			t.Errorf("LockCtx(%v deadline) while held = %v; want context.DeadlineExceeded itself", d, err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), d)
		ok, err := acq.Acquire(ctx, true)
		cancel()
		if ok || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, locker.ErrUnavailable) {
			t.Errorf("Acquire(%v deadline, true) while held = %v, %v; want false, DeadlineExceeded and not ErrUnavailable", d, ok, err)
		}
		if ok, err := b.TryLockTimeout(d); ok || err != nil {
			t.Errorf("TryLockTimeout(%v) while held = %v, %v; want false, nil", d, ok, err)
		}
	}
	mustUnlock(t, a)
}

func testLockCtxBadContext(t *testing.T, f Factory) {
	e := open(t, f).Engine
	l := newLocker(t, e, lockName(t, "n"))
	//lint:ignore SA1012 checking that a nil context is refused, not a panic
	if err := l.LockCtx(nil); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("LockCtx(nil) = %v; want ErrInvalidArgument", err)
	}
}

func testUnlockNotHeld(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "u")
	a, b := newLocker(t, e, name), newLocker(t, e, name)
	if err := a.Unlock(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Unlock() without a hold = %v; want ErrNotHeld", err)
	}
	mustLock(t, a)
	if err := b.Unlock(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Unlock() by another owner = %v; want ErrNotHeld", err)
	}
	mustUnlock(t, a)
	if err := a.Unlock(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("second Unlock() = %v; want ErrNotHeld", err)
	}
}

func testFixedLease(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "l")
	d := shortTTL(600*time.Millisecond, e)
	a := newLocker(t, e, name, locker.WithLease(d))
	b := newLocker(t, e, name)
	start := time.Now()
	mustLock(t, a)
	lost := a.Lost()
	wantTry(t, b, false)
	mustLock(t, b) // granted once the lease has run out
	if elapsed := time.Since(start); elapsed < d {
		t.Errorf("second owner got the lock after %v; want at least the lease %v", elapsed, d)
	}
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Errorf("Lost() not closed 5s after the lease ran out")
	}
	if err := a.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() after the lease ran out = %v; want ErrLockLost", err)
	}
	if got := b.Token(); got == 0 {
		t.Errorf("Token() of the holder = 0; want > 0")
	}
	mustUnlock(t, b)
}

func testLost(t *testing.T, f Factory) {
	h := open(t, f)
	if h.Expire == nil {
		t.Skip("the factory offers no Expire hook")
	}
	name := lockName(t, "lost")
	a := newLocker(t, h.Engine, name, locker.WithTTL(shortTTL(900*time.Millisecond, h.Engine)))
	b := newLocker(t, h.Engine, name)
	mustLock(t, a)
	mustLock(t, a)
	lost := a.Lost()
	if err := h.Expire(context.Background(), name); err != nil {
		t.Fatalf("Expire(%q) = %v", name, err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatalf("Lost() not closed 10s after the hold vanished")
	}
	if err := a.LockCtx(context.Background()); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("re-entry after loss = %v; want ErrLockLost", err)
	}
	for i := 0; i < 2; i++ {
		if err := a.Unlock(); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("Unlock() #%d after loss = %v; want ErrLockLost", i+1, err)
		}
	}
	if err := a.Unlock(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Unlock() past the count after loss = %v; want ErrNotHeld", err)
	}
	wantTry(t, b, true)
	mustUnlock(t, b)
}

func testTokensIncrease(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "f")
	owners := []locker.Handle{newLocker(t, e, name), newLocker(t, e, name)}
	var last uint64
	for i := 0; i < 20; i++ {
		l := owners[i%2]
		mustLock(t, l)
		tok := l.Token()
		if tok <= last {
			t.Fatalf("grant %d: Token() = %d; want > %d", i, tok, last)
		}
		last = tok
		mustUnlock(t, l)
		if got := l.Token(); got != 0 {
			t.Fatalf("Token() after Unlock = %d; want 0", got)
		}
	}
}

func testSharedLocker(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "s")
	shared, other := newLocker(t, e, name), newLocker(t, e, name)
	const goroutines = 8
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for i := 0; i < goroutines; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 10; r++ {
				if err := shared.Lock(); err != nil {
					errs <- fmt.Errorf("Lock() = %w", err)
					return
				}
				_ = shared.Token()
				if _, err := unlock(shared); err != nil {
					errs <- fmt.Errorf("Unlock() = %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every goroutine's Lock re-enters one hold; the other owner stays out
	// until the last Unlock.
	for i := 0; i < goroutines; i++ {
		mustLock(t, shared)
	}
	wantTry(t, other, false)
	for i := 0; i < goroutines; i++ {
		wantTry(t, other, false)
		mustUnlock(t, shared)
	}
	wantTry(t, other, true)
	mustUnlock(t, other)
}

func testNames(t *testing.T, f Factory) {
	e := open(t, f).Engine
	for _, tc := range []struct {
		name string
		why  string
	}{
		{"", "empty"},
		{strings.Repeat("n", driver.MaxNameLen+1), "over MaxNameLen"},
		{"bad\xffutf8", "not UTF-8"},
		{"nul\x00byte", "NUL"},
	} {
		if _, err := e.NewLocker(tc.name); !errors.Is(err, locker.ErrInvalidName) {
			t.Errorf("NewLocker(%s name) = %v; want ErrInvalidName", tc.why, err)
		}
	}
	// Names that need escaping are distinct locks, and escaping never makes
	// two names collide.
	base := lockName(t, "")
	odd := []string{"a/b", "a%2Fb", "a_b", "a b", "ünï/cødé", "{tag}", "{", "..", ".", "/", "//", "a:b", "*?", "\t", strings.Repeat("L", driver.MaxNameLen-len(base))}
	held := make([]locker.Locker, 0, len(odd))
	for _, n := range odd {
		l := newLocker(t, e, base+n)
		ok, err := l.TryLock()
		if !ok || err != nil {
			t.Fatalf("TryLock() on name %q = %v, %v; want true, nil (names must not collide)", base+n, ok, err)
		}
		held = append(held, l)
	}
	for i, n := range odd {
		other := newLocker(t, e, base+n)
		wantTry(t, other, false)
		mustUnlock(t, held[i])
	}
}

func testBadOptions(t *testing.T, f Factory) {
	e := open(t, f).Engine
	for _, tc := range []struct {
		desc string
		opt  locker.Option
		want string
	}{
		{"WithTTL(0)", locker.WithTTL(0), "WithTTL"},
		{"WithTTL(-1s)", locker.WithTTL(-time.Second), "WithTTL"},
		{"WithLease(0)", locker.WithLease(0), "WithLease"},
		{"WithLease(-1s)", locker.WithLease(-time.Second), "WithLease"},
		{"WithOwner(\"\")", locker.WithOwner(""), "WithOwner"},
		{"WithReleaseTimeout(0)", locker.WithReleaseTimeout(0), "WithReleaseTimeout"},
		{"WithWeight(0)", locker.WithWeight(0), "WithWeight(0)"},
		{"WithWeight(11)", locker.WithWeight(11), "WithWeight(11)"},
		{"nil", nil, "nil Option"},
	} {
		_, err := e.NewLocker(lockName(t, "o"), tc.opt)
		if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewLocker(%s) = %v; want ErrInvalidArgument naming %s", tc.desc, err, tc.want)
		}
	}
}

// testMinTTL: an engine with a minimum TTL (driver.MinTTLer) refuses a
// WithTTL or WithLease below it, for every kind of hold, with an error
// naming the option; a hold of the minimum TTL is granted.
func testMinTTL(t *testing.T, f Factory) {
	e := open(t, f).Engine
	min := driver.MinTTL(e)
	if min <= 0 {
		t.Skip("the engine declares no minimum TTL (driver.MinTTLer)")
	}
	below := min - time.Millisecond
	for _, tc := range []struct {
		opt  string
		with func(time.Duration) locker.Option
	}{
		{"WithTTL", locker.WithTTL},
		{"WithLease", locker.WithLease},
	} {
		want := fmt.Sprintf("%s(%v)", tc.opt, below)
		kinds := []struct {
			kind string
			new  func() error
		}{
			{"NewLocker", func() error { _, err := e.NewLocker(lockName(t, "m"), tc.with(below)); return err }},
			{"NewRWLock", func() error { _, err := e.NewRWLock(lockName(t, "m"), tc.with(below)); return err }},
			{"NewSemaphore", func() error { _, err := e.NewSemaphore(lockName(t, "m"), 2, tc.with(below)); return err }},
		}
		for _, k := range kinds {
			err := k.new()
			if errors.Is(err, errors.ErrUnsupported) {
				continue // the engine does not offer this kind of lock
			}
			if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s(%s) below MinTTL() = %v = %v; want ErrInvalidArgument naming %s", k.kind, want, min, err, want)
			}
		}
	}
	l := newLocker(t, e, lockName(t, "m"), locker.WithTTL(min))
	mustLock(t, l)
	mustUnlock(t, l)
}

func testClosed(t *testing.T, f Factory) {
	h := f(t)
	name := lockName(t, "cl")
	held := newLocker(t, h.Engine, name)
	idle := newLocker(t, h.Engine, lockName(t, "idle"))
	mustLock(t, held)
	lost := held.Lost()
	if err := h.Engine.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := h.Engine.Close(); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
	select {
	case <-lost:
	default:
		t.Errorf("Lost() not closed by Close()")
	}
	if _, err := h.Engine.NewLocker(name); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("NewLocker() after Close = %v; want ErrClosed", err)
	}
	if err := idle.Lock(); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("Lock() after Close = %v; want ErrClosed", err)
	}
	if err := held.Unlock(); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("Unlock() after Close = %v; want ErrClosed", err)
	}
	if err := h.Engine.Ping(context.Background()); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("Ping() after Close = %v; want ErrClosed", err)
	}
	// Close released the hold: another engine gets it at once.
	next := open(t, f).Engine
	wantTry(t, newLocker(t, next, name), true)
}
