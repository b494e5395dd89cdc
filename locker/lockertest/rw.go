package lockertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// InvariantOps is how many acquisitions the invariant subtests of RunRW
// and RunSemaphore make, spread over owners on two engines.
const InvariantOps = 10_000

// RunRW runs the conformance suite of locker.RWLock: readers share,
// writers exclude everyone, re-entry on both sides, downgrade (with a
// writer that queued before it kept out), upgrade refused, a reader behind
// a waiting writer waits, one token sequence for both sides, cancelled
// waits leave nothing, fixed leases, and the invariant under contention
// from two engines. Engines must implement inspect.FamilyInspector.
func RunRW(t *testing.T, factory Factory) {
	runCases(t, factory, []suiteCase{
		{"ReadersShare", testRWReadersShare},
		{"Reentry", testRWReentry},
		{"Downgrade", testRWDowngrade},
		{"WriterBehindDowngrade", testRWWriterBehindDowngrade},
		{"UpgradeRefused", testRWUpgradeRefused},
		{"ReaderBehindWaitingWriter", testRWReaderBehindWriter},
		{"TokensShared", testRWTokens},
		{"LockCtxCancel", testRWCancel},
		{"FixedLease", testRWLease},
		{"Inspect", testRWInspect},
		{"InspectWaiters", testRWInspectWaiters},
		{"ForceUnlock", testRWForceUnlock},
		{"Deleted", testDeleted(inspect.KindRead, inspect.KindWrite)},
		{"Closed", testRWClosed},
		{"Invariant", testRWInvariant},
	})
}

func newRW(t *testing.T, e locker.Engine, name string, opts ...locker.Option) locker.RWLock {
	t.Helper()
	l, err := e.NewRWLock(name, opts...)
	if err != nil {
		t.Fatalf("NewRWLock(%q) = %v", name, err)
	}
	return l
}

func familyInspector(t *testing.T, e locker.Engine) inspect.FamilyInspector {
	t.Helper()
	op, ok := e.(inspect.FamilyInspector)
	if !ok {
		t.Fatalf("%T does not implement inspect.FamilyInspector", e)
	}
	return op
}

func inspectFamily(t *testing.T, e locker.Engine, kind inspect.Kind, name string) inspect.FamilyInspection {
	t.Helper()
	in, err := familyInspector(t, e).InspectFamily(context.Background(), kind, name)
	if err != nil {
		t.Fatalf("InspectFamily(%v, %q) = %v", kind, name, err)
	}
	return in
}

// awaitWaiters waits until the server shows n waiters of name.
func awaitWaiters(t *testing.T, e locker.Engine, kind inspect.Kind, name string, n int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d waiters of %q visible", n, name), func() bool {
		return len(inspectFamily(t, e, kind, name).Waiters) == n
	})
}

// lockAsync starts LockCtx on l and returns its result channel.
func lockAsync(ctx context.Context, l locker.Locker) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.LockCtx(ctx) }()
	return done
}

// WantPending checks that the acquisition whose result done carries is
// still waiting 300ms on: what must not happen has had the time to.
func WantPending(t testing.TB, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s: returned %v; want still waiting", what, err)
	case <-time.After(300 * time.Millisecond):
	}
}

// WantGranted waits up to 20s for the acquisition whose result done
// carries, and checks that it was granted.
func WantGranted(t testing.TB, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: LockCtx() = %v; want nil", what, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not granted within 20s", what)
	}
}

func testRWReadersShare(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "rw")
	r1, r2, w := newRW(t, e1, name), newRW(t, e2, name), newRW(t, e1, name)
	wantTry(t, r1.ReadLock(), true)
	wantTry(t, r2.ReadLock(), true)
	if r1.ReadLock().Token() == 0 || r1.ReadLock().Engine() == "" {
		t.Errorf("reader Token, Engine = %d, %q; want set", r1.ReadLock().Token(), r1.ReadLock().Engine())
	}
	wantTry(t, w.WriteLock(), false)
	mustUnlock(t, r1.ReadLock())
	wantTry(t, w.WriteLock(), false)
	mustUnlock(t, r2.ReadLock())
	wantTry(t, w.WriteLock(), true)
	wantTry(t, r1.ReadLock(), false)
	wantTry(t, r2.WriteLock(), false)
	mustUnlock(t, w.WriteLock())
	// The mutex of the same name is another lock.
	m := newLocker(t, e2, name)
	wantTry(t, r1.WriteLock(), true)
	wantTry(t, m, true)
	mustUnlock(t, m)
	mustUnlock(t, r1.WriteLock())
}

func testRWReentry(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "re")
	a, b := newRW(t, e, name), newRW(t, e, name)
	for _, side := range []func(locker.RWLock) locker.Handle{locker.RWLock.WriteLock, locker.RWLock.ReadLock} {
		mustLock(t, side(a))
		tok := side(a).Token()
		mustLock(t, side(a))
		if got := side(a).Token(); got != tok {
			t.Errorf("Token() after re-entry = %d; want %d", got, tok)
		}
		mustUnlock(t, side(a))
		wantTry(t, b.WriteLock(), false)
		mustUnlock(t, side(a))
		if err := side(a).Unlock(); !errors.Is(err, locker.ErrNotHeld) {
			t.Errorf("Unlock() past the count = %v; want ErrNotHeld", err)
		}
		wantTry(t, b.WriteLock(), true)
		mustUnlock(t, b.WriteLock())
	}
}

func testRWDowngrade(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "dg")
	a, other := newRW(t, e1, name), newRW(t, e2, name)
	mustLock(t, a.WriteLock())
	wtok := a.WriteLock().Token()
	wantTry(t, a.ReadLock(), true) // at once, while holding the write side
	if got := a.ReadLock().Token(); got != wtok {
		t.Errorf("downgraded read Token() = %d; want the writer's %d", got, wtok)
	}
	wantTry(t, other.ReadLock(), false)
	mustUnlock(t, a.WriteLock())
	// Now a reader: other readers share, writers wait.
	wantTry(t, other.ReadLock(), true)
	wantTry(t, newRW(t, e2, name).WriteLock(), false)
	if ok, err := a.WriteLock().TryLock(); ok || !errors.Is(err, locker.ErrUpgrade) {
		t.Errorf("write TryLock() after the downgrade = %v, %v; want false, ErrUpgrade", ok, err)
	}
	mustUnlock(t, a.ReadLock())
	mustUnlock(t, other.ReadLock())
	w := newRW(t, e2, name)
	wantTry(t, w.WriteLock(), true)
	if got := w.WriteLock().Token(); got <= wtok {
		t.Errorf("next writer Token() = %d; want > %d", got, wtok)
	}
	mustUnlock(t, w.WriteLock())
}

// testRWWriterBehindDowngrade: a writer queued while the write side was
// held must not get in when the holder downgrades and releases the write
// side: the downgraded read holds it out.
func testRWWriterBehindDowngrade(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "wbd")
	a, w := newRW(t, e1, name), newRW(t, e2, name)
	mustLock(t, a.WriteLock())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := lockAsync(ctx, w.WriteLock())
	awaitWaiters(t, e1, inspect.KindWrite, name, 1)
	mustLock(t, a.ReadLock())
	rtok := a.ReadLock().Token()
	mustUnlock(t, a.WriteLock())
	WantPending(t, done, "writer queued before the downgrade, while the downgraded read is held")
	mustUnlock(t, a.ReadLock())
	WantGranted(t, done, "writer after the downgraded read ended")
	if got := w.WriteLock().Token(); got <= rtok {
		t.Errorf("writer Token() = %d; want > %d, the downgraded reader's", got, rtok)
	}
	mustUnlock(t, w.WriteLock())
}

func testRWUpgradeRefused(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "up")
	a := newRW(t, e, name)
	mustLock(t, a.ReadLock())
	start := time.Now()
	if err := a.WriteLock().LockCtx(context.Background()); !errors.Is(err, locker.ErrUpgrade) {
		t.Errorf("write LockCtx() while holding only the read side = %v; want ErrUpgrade", err)
	}
	if ok, err := a.WriteLock().TryLockTimeout(time.Minute); ok || !errors.Is(err, locker.ErrUpgrade) {
		t.Errorf("write TryLockTimeout(1m) while reading = %v, %v; want false, ErrUpgrade", ok, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("upgrade refusal took %v; want at once", d)
	}
	if a.ReadLock().Token() == 0 {
		t.Errorf("read hold gone after a refused upgrade")
	}
	mustUnlock(t, a.ReadLock())
	wantTry(t, a.WriteLock(), true)
	mustUnlock(t, a.WriteLock())
}

// testRWReaderBehindWriter: writers never starve; a new reader waits
// behind a writer that waits for the current readers.
func testRWReaderBehindWriter(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "rbw")
	r1, w, r2 := newRW(t, e1, name), newRW(t, e2, name), newRW(t, e1, name)
	mustLock(t, r1.ReadLock())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wdone := lockAsync(ctx, w.WriteLock())
	awaitWaiters(t, e1, inspect.KindWrite, name, 1)
	wantTry(t, r2.ReadLock(), false)
	rdone := lockAsync(ctx, r2.ReadLock())
	WantPending(t, rdone, "reader behind a waiting writer")
	mustUnlock(t, r1.ReadLock())
	WantGranted(t, wdone, "writer after the readers left")
	WantPending(t, rdone, "reader while the writer holds")
	mustUnlock(t, w.WriteLock())
	WantGranted(t, rdone, "reader after the writer")
	mustUnlock(t, r2.ReadLock())
}

func testRWTokens(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "tok")
	ls := []locker.RWLock{newRW(t, e1, name), newRW(t, e2, name)}
	var last, lastWrite uint64
	for i := range 20 {
		l := ls[i%2]
		if i%3 == 0 {
			mustLock(t, l.WriteLock())
			tok := l.WriteLock().Token()
			if tok <= last {
				t.Fatalf("write grant %d: Token() = %d; want > %d, every earlier grant's", i, tok, last)
			}
			last, lastWrite = tok, tok
			mustUnlock(t, l.WriteLock())
			continue
		}
		mustLock(t, l.ReadLock())
		tok := l.ReadLock().Token()
		if tok <= lastWrite {
			t.Fatalf("read grant %d: Token() = %d; want > %d, the last writer's", i, tok, lastWrite)
		}
		last = max(last, tok)
		mustUnlock(t, l.ReadLock())
	}
}

func testRWCancel(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "cx")
	holder, waiter := newRW(t, e1, name), newRW(t, e2, name)
	mustLock(t, holder.WriteLock())
	for _, side := range []locker.Handle{waiter.ReadLock(), waiter.WriteLock()} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := side.LockCtx(ctx)
		cancel()
		if err != context.DeadlineExceeded {
			t.Fatalf("LockCtx() while written = %v; want context.DeadlineExceeded", err)
		}
		// Not every engine lists waiting readers (Redis does not): cancel
		// once the wait has surely reached the server.
		ctx, cancel = context.WithCancel(context.Background())
		done := lockAsync(ctx, side)
		time.AfterFunc(300*time.Millisecond, cancel)
		if err := <-done; err != context.Canceled {
			t.Fatalf("LockCtx() cancelled = %v; want context.Canceled", err)
		}
	}
	awaitWaiters(t, e1, inspect.KindWrite, name, 0)
	mustUnlock(t, holder.WriteLock())
	wantTry(t, newRW(t, e2, name).WriteLock(), true)
}

func testRWLease(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "ls")
	d := shortTTL(600*time.Millisecond, e)
	r := newRW(t, e, name, locker.WithLease(d))
	w := newRW(t, e, name)
	start := time.Now()
	mustLock(t, r.ReadLock())
	lost := r.ReadLock().Lost()
	mustLock(t, w.WriteLock())
	if elapsed := time.Since(start); elapsed < d {
		t.Errorf("writer got in after %v; want at least the reader's lease %v", elapsed, d)
	}
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Errorf("reader's Lost() not closed after its lease")
	}
	if err := r.ReadLock().Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() after the lease = %v; want ErrLockLost", err)
	}
	mustUnlock(t, w.WriteLock())
}

func testRWInspect(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "in")
	if in := inspectFamily(t, e, inspect.KindRead, name); len(in.Holders)+len(in.Waiters) != 0 {
		t.Errorf("InspectFamily(free) = %+v; want nothing", in)
	}
	a, b := newRW(t, e, name, locker.WithOwner("reader-a")), newRW(t, e, name, locker.WithOwner("reader-b"))
	mustLock(t, a.ReadLock())
	mustLock(t, b.ReadLock())
	in := inspectFamily(t, e, inspect.KindRead, name)
	if len(in.Holders) != 2 {
		t.Fatalf("InspectFamily(two readers).Holders = %+v; want 2", in.Holders)
	}
	for _, h := range in.Holders {
		if h.Kind != inspect.KindRead || (h.Owner != "reader-a" && h.Owner != "reader-b") || h.Token == 0 {
			t.Errorf("holder %+v; want a read hold of reader-a or reader-b with a token", h)
		}
	}
	mustUnlock(t, a.ReadLock())
	mustUnlock(t, b.ReadLock())
	w := newRW(t, e, name, locker.WithOwner("writer"))
	mustLock(t, w.WriteLock())
	in = inspectFamily(t, e, inspect.KindWrite, name)
	if len(in.Holders) != 1 || in.Holders[0].Kind != inspect.KindWrite || in.Holders[0].Owner != "writer" || in.Holders[0].Token != w.WriteLock().Token() {
		t.Errorf("InspectFamily(written).Holders = %+v; want the writer with token %d", in.Holders, w.WriteLock().Token())
	}
	mustUnlock(t, w.WriteLock())
}

func testRWClosed(t *testing.T, f Factory) {
	h := f(t)
	name := lockName(t, "cl")
	l := newRW(t, h.Engine, name)
	mustLock(t, l.ReadLock())
	lost := l.ReadLock().Lost()
	if err := h.Engine.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Errorf("Lost() of a read hold not closed by Close")
	}
	if _, err := h.Engine.NewRWLock(name); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("NewRWLock after Close = %v; want ErrClosed", err)
	}
	if ok, err := l.WriteLock().TryLock(); ok || !errors.Is(err, locker.ErrClosed) {
		t.Errorf("TryLock after Close = %v, %v; want false, ErrClosed", ok, err)
	}
}

// testRWInvariant runs InvariantOps acquisitions by owners on two engines,
// one in five a write, and checks that a writer never shares the lock.
func testRWInvariant(t *testing.T, f Factory) {
	engines := []locker.Engine{open(t, f).Engine, open(t, f).Engine}
	name := lockName(t, "inv")
	const owners = 8
	var readers, writers, violations, ops atomic.Int64
	work := func(l locker.RWLock, rng *rand.Rand) error {
		write := rng.IntN(5) == 0
		side := l.ReadLock()
		if write {
			side = l.WriteLock()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := side.LockCtx(ctx); err != nil {
			return fmt.Errorf("LockCtx() = %w", err)
		}
		if write {
			if writers.Add(1) != 1 || readers.Load() != 0 {
				violations.Add(1)
			}
			runtime.Gosched()
			writers.Add(-1)
		} else {
			readers.Add(1)
			if writers.Load() != 0 {
				violations.Add(1)
			}
			runtime.Gosched()
			readers.Add(-1)
		}
		ops.Add(1)
		_, err := unlock(side)
		return err
	}
	runOwners(t, owners, InvariantOps, func(i int) func(*rand.Rand) error {
		l := newRW(t, engines[i%2], name)
		return func(rng *rand.Rand) error { return work(l, rng) }
	})
	if n := violations.Load(); n != 0 {
		t.Errorf("%d of %d acquisitions saw a writer beside another holder; want 0", n, ops.Load())
	}
	t.Logf("%d acquisitions, 0 violations wanted, %d seen", ops.Load(), violations.Load())
}

// runOwners runs total operations spread over owners goroutines; newOwner
// gives owner i its operation.
func runOwners(t *testing.T, owners, total int, newOwner func(i int) func(*rand.Rand) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, owners)
	for i := range owners {
		op := newOwner(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for range total / owners {
				if err := op(rng); err != nil {
					errs <- err
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
}
