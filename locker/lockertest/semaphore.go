package lockertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// RunSemaphore runs the conformance suite of locker.Semaphore: never more
// permits out than the count, weighted all-or-nothing acquisitions, the
// count stored with the semaphore (mismatch refused, SetPermits honoured),
// hand-off to a waiter, cancelled waits leave nothing, fixed leases, tokens,
// and the invariant under contention from two engines. Engines must
// implement inspect.FamilyInspector.
func RunSemaphore(t *testing.T, factory Factory) {
	runCases(t, factory, []suiteCase{
		{"Permits", testSemPermits},
		{"Weighted", testSemWeighted},
		{"StoredCount", testSemStoredCount},
		{"Handoff", testSemHandoff},
		{"LockCtxCancel", testSemCancel},
		{"FixedLease", testSemLease},
		{"PermitHandle", testSemPermitHandle},
		{"TokensIncrease", testSemTokens},
		{"BadArguments", testSemBadArguments},
		{"Inspect", testSemInspect},
		{"ForceUnlock", testSemForceUnlock},
		{"Deleted", testDeleted(inspect.KindPermit)},
		{"Invariant", testSemInvariant},
	})
}

func newSem(t *testing.T, e locker.Engine, name string, permits int, opts ...locker.Option) locker.Semaphore {
	t.Helper()
	s, err := e.NewSemaphore(name, permits, opts...)
	if err != nil {
		t.Fatalf("NewSemaphore(%q, %d) = %v", name, permits, err)
	}
	return s
}

// tryAcquire wants TryAcquire(n) to succeed or not, and returns the permit.
func tryAcquire(t *testing.T, s locker.Semaphore, n int, want bool) locker.Handle {
	t.Helper()
	p, ok, err := s.TryAcquire(n)
	if err != nil || ok != want || (p != nil) != ok {
		t.Fatalf("TryAcquire(%d) = %v, %v, %v; want granted %v, nil", n, p, ok, err, want)
	}
	return p
}

func testSemPermits(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "p")
	s1, s2 := newSem(t, e1, name, 3), newSem(t, e2, name, 3)
	a := tryAcquire(t, s1, 1, true)
	b := tryAcquire(t, s2, 1, true)
	c := tryAcquire(t, s1, 1, true)
	tryAcquire(t, s2, 1, false)
	if a.Token() == 0 || a.Engine() == "" {
		t.Errorf("permit Token, Engine = %d, %q; want set", a.Token(), a.Engine())
	}
	mustUnlock(t, b)
	d := tryAcquire(t, s2, 1, true)
	tryAcquire(t, s1, 1, false)
	for _, p := range []locker.Handle{a, c, d} {
		mustUnlock(t, p)
	}
	if err := a.Unlock(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("second Unlock() of a permit = %v; want ErrNotHeld", err)
	}
	// The mutex of the same name is another lock.
	m := newLocker(t, e1, name)
	all := tryAcquire(t, s1, 3, true)
	wantTry(t, m, true)
	mustUnlock(t, m)
	mustUnlock(t, all)
}

func testSemWeighted(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "w")
	s := newSem(t, e, name, 3)
	two := tryAcquire(t, s, 2, true)
	tryAcquire(t, s, 2, false) // all or nothing: one is free, not two
	one := tryAcquire(t, s, 1, true)
	tryAcquire(t, s, 1, false)
	mustUnlock(t, two)
	again := tryAcquire(t, s, 2, true)
	mustUnlock(t, again)
	mustUnlock(t, one)
}

func testSemStoredCount(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "sc")
	s3 := newSem(t, e1, name, 3)
	first := tryAcquire(t, s3, 1, true)
	s5 := newSem(t, e2, name, 5)
	if _, ok, err := s5.TryAcquire(1); ok || !errors.Is(err, locker.ErrPermitsMismatch) {
		t.Fatalf("TryAcquire on a semaphore opened with 5, stored 3 = %v, %v; want false, ErrPermitsMismatch", ok, err)
	}
	if p, err := s5.Acquire(context.Background(), 1); p != nil || !errors.Is(err, locker.ErrPermitsMismatch) || errors.Is(err, locker.ErrUnavailable) {
		t.Fatalf("Acquire on a mismatched semaphore = %v, %v; want nil, ErrPermitsMismatch and not ErrUnavailable", p, err)
	}
	if in := inspectFamily(t, e1, inspect.KindPermit, name); in.Permits != 3 {
		t.Errorf("InspectFamily().Permits = %d; want 3, the stored count", in.Permits)
	}
	if err := familyInspector(t, e1).SetPermits(context.Background(), name, 0); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("SetPermits(0) = %v; want ErrInvalidArgument", err)
	}
	if err := familyInspector(t, e1).SetPermits(context.Background(), name, 5); err != nil {
		t.Fatalf("SetPermits(5) = %v", err)
	}
	// The semaphore that already checked follows the stored count: 5 now.
	more := tryAcquire(t, s3, 3, true)
	fresh := newSem(t, e2, name, 5)
	last := tryAcquire(t, fresh, 1, true)
	tryAcquire(t, fresh, 1, false)
	for _, p := range []locker.Handle{first, more, last} {
		mustUnlock(t, p)
	}
	if in := inspectFamily(t, e2, inspect.KindPermit, name); in.Permits != 5 || len(in.Holders) != 0 {
		t.Errorf("InspectFamily() when idle = %+v; want Permits 5 kept, no holders", in)
	}
}

func testSemHandoff(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "h")
	s1, s2 := newSem(t, e1, name, 2), newSem(t, e2, name, 2)
	held := tryAcquire(t, s1, 2, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan locker.Handle, 1)
	errc := make(chan error, 1)
	go func() {
		p, err := s2.Acquire(ctx, 1)
		errc <- err
		got <- p
	}()
	select {
	case err := <-errc:
		t.Fatalf("Acquire while all permits are out returned %v; want it to wait", err)
	case <-time.After(300 * time.Millisecond):
	}
	mustUnlock(t, held)
	if err := <-errc; err != nil {
		t.Fatalf("Acquire after a release = %v", err)
	}
	p := <-got
	if p.Token() <= 0 {
		t.Errorf("handed-off permit Token() = %d; want > 0", p.Token())
	}
	mustUnlock(t, p)
}

func testSemCancel(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "cx")
	s1, s2 := newSem(t, e1, name, 1), newSem(t, e2, name, 1)
	held := tryAcquire(t, s1, 1, true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	p, err := s2.Acquire(ctx, 1)
	cancel()
	if p != nil || err != context.DeadlineExceeded {
		t.Fatalf("Acquire() while none is free = %v, %v; want nil, context.DeadlineExceeded", p, err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	if p, err := s2.Acquire(ctx, 1); p != nil || err != context.Canceled {
		t.Fatalf("Acquire() cancelled = %v, %v; want nil, context.Canceled", p, err)
	}
	eventually(t, 10*time.Second, "no waiter left after cancelled waits", func() bool {
		return len(inspectFamily(t, e1, inspect.KindPermit, name).Waiters) == 0
	})
	mustUnlock(t, held)
	mustUnlock(t, tryAcquire(t, s2, 1, true))
}

func testSemLease(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "ls")
	d := shortTTL(600*time.Millisecond, e)
	leased := newSem(t, e, name, 1, locker.WithLease(d))
	s := newSem(t, e, name, 1)
	start := time.Now()
	p := tryAcquire(t, leased, 1, true)
	lost := p.Lost()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatalf("Acquire() after the lease = %v", err)
	}
	if elapsed := time.Since(start); elapsed < d {
		t.Errorf("permit free after %v; want at least the lease %v", elapsed, d)
	}
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Errorf("Lost() of the leased permit not closed")
	}
	if err := p.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() after the lease = %v; want ErrLockLost", err)
	}
	mustUnlock(t, q)
}

// testSemPermitHandle: NewPermit gives a Locker over n permits; re-entry
// counts the hold and takes no more permits.
func testSemPermitHandle(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "ph")
	s := newSem(t, e, name, 2)
	p, err := s.NewPermit(1)
	if err != nil {
		t.Fatalf("NewPermit(1) = %v", err)
	}
	mustLock(t, p)
	mustLock(t, p)
	other := tryAcquire(t, s, 1, true) // the re-entry took no second permit
	tryAcquire(t, s, 1, false)
	mustUnlock(t, p)
	tryAcquire(t, s, 1, false) // one count left
	mustUnlock(t, p)
	mustUnlock(t, tryAcquire(t, s, 1, true))
	mustUnlock(t, other)
}

func testSemTokens(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "tok")
	ss := []locker.Semaphore{newSem(t, e1, name, 1), newSem(t, e2, name, 1)}
	var last uint64
	for i := range 10 {
		p := tryAcquire(t, ss[i%2], 1, true)
		if tok := p.Token(); tok <= last {
			t.Fatalf("grant %d: Token() = %d; want > %d", i, tok, last)
		}
		last = p.Token()
		mustUnlock(t, p)
	}
}

func testSemBadArguments(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "bad")
	for _, n := range []int{0, -1} {
		if _, err := e.NewSemaphore(name, n); !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("NewSemaphore(%d permits) = %v; want ErrInvalidArgument", n, err)
		}
	}
	if _, err := e.NewSemaphore("", 1); !errors.Is(err, locker.ErrInvalidName) {
		t.Errorf("NewSemaphore(\"\") = %v; want ErrInvalidName", err)
	}
	s := newSem(t, e, name, 2)
	for _, n := range []int{0, 3} {
		if _, ok, err := s.TryAcquire(n); ok || !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("TryAcquire(%d) of 2 = %v, %v; want false, ErrInvalidArgument", n, ok, err)
		}
	}
	//lint:ignore SA1012 checking that a nil context is refused, not a panic
	if p, err := s.Acquire(nil, 1); p != nil || !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Acquire(nil ctx) = %v, %v; want nil, ErrInvalidArgument", p, err)
	}
}

func testSemInspect(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "in")
	s := newSem(t, e, name, 3, locker.WithOwner("worker-1"))
	p := tryAcquire(t, s, 2, true)
	in := inspectFamily(t, e, inspect.KindPermit, name)
	if in.Permits != 3 || len(in.Holders) != 1 {
		t.Fatalf("InspectFamily() = %+v; want Permits 3 and one holder", in)
	}
	if h := in.Holders[0]; h.Kind != inspect.KindPermit || h.Permits != 2 || h.Owner != "worker-1" || h.Token != p.Token() {
		t.Errorf("holder %+v; want worker-1 holding 2 permits with token %d", h, p.Token())
	}
	mustUnlock(t, p)
}

// testSemInvariant runs InvariantOps acquisitions of 1 or 2 permits by
// owners on two engines and checks that never more than the count are out.
func testSemInvariant(t *testing.T, f Factory) {
	engines := []locker.Engine{open(t, f).Engine, open(t, f).Engine}
	name := lockName(t, "inv")
	const owners, permits = 8, 3
	var out, worst, ops atomic.Int64
	runOwners(t, owners, InvariantOps, func(i int) func(*rand.Rand) error {
		s := newSem(t, engines[i%2], name, permits)
		return func(rng *rand.Rand) error {
			n := 1 + rng.IntN(2)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := s.Acquire(ctx, n)
			if err != nil {
				return fmt.Errorf("Acquire(%d) = %w", n, err)
			}
			now := out.Add(int64(n))
			for w := worst.Load(); now > w && !worst.CompareAndSwap(w, now); w = worst.Load() {
			}
			runtime.Gosched()
			out.Add(-int64(n))
			ops.Add(1)
			_, err = unlock(p)
			return err
		}
	})
	if w := worst.Load(); w > permits {
		t.Errorf("%d permits out at once over %d acquisitions; want at most %d", w, ops.Load(), permits)
	}
	t.Logf("%d acquisitions, at most %d of %d permits out", ops.Load(), worst.Load(), permits)
}
