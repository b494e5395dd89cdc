package lockertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// RunMulti runs the conformance suite of locker.MultiLock over the
// engine's Lockers: all-or-nothing, one wait budget, release of what was
// taken when a wait fails, no deadlock between owners that list the same
// names in opposite orders, Lost on any part, one Unlock for all. Each
// subtest calls the factory twice and spreads its parts over both engines,
// as a multi-lock over two engines (or two switchers) would.
func RunMulti(t *testing.T, factory Factory) {
	runCases(t, factory, []suiteCase{
		{"AllOrNothing", testMultiAllOrNothing},
		{"LockCtxCancel", testMultiLockCtxCancel},
		{"Reentry", testMultiReentry},
		{"Lease", testMultiLease},
		{"OppositeOrder", testMultiOppositeOrder},
		{"Lost", testMultiLost},
		{"BadArguments", testMultiBadArguments},
	})
}

// multiRig is two engines over the same servers, and a lock name per
// suffix; part i of a multi-lock lives on engine i%2.
type multiRig struct {
	t  *testing.T
	hs [2]Harness
}

func newMultiRig(t *testing.T, f Factory) multiRig {
	return multiRig{t: t, hs: [2]Harness{open(t, f), open(t, f)}}
}

// names returns n lock names unique to the subtest.
func (r multiRig) names(n int) []string {
	base := lockName(r.t, "m")
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%c", base, 'a'+i)
	}
	return out
}

// engine returns the engine of the part for names[i].
func (r multiRig) engine(i int) locker.Engine { return r.hs[i%2].Engine }

// handles returns one owner's handles on names, part i on engine i%2.
func (r multiRig) handles(names []string, opts ...locker.Option) []locker.Handle {
	r.t.Helper()
	out := make([]locker.Handle, len(names))
	for i, n := range names {
		out[i] = newLocker(r.t, r.engine(i), n, opts...)
	}
	return out
}

// multi returns one owner's multi-lock over names.
func (r multiRig) multi(names []string, opts ...locker.Option) *locker.MultiLock {
	r.t.Helper()
	m, err := locker.NewMultiLock(r.handles(names, opts...)...)
	if err != nil {
		r.t.Fatalf("NewMultiLock(%q) = %v", names, err)
	}
	return m
}

// free checks that another owner can take each of names within a few
// seconds, far below the holds' TTL: an engine may delete what a cancelled
// wait left in the background (driver.Core.Go), after LockCtx returned.
func (r multiRig) free(what string, names ...string) {
	r.t.Helper()
	for i, n := range names {
		probe := newLocker(r.t, r.engine(i), n)
		var ok bool
		var err error
		for deadline := time.Now().Add(5 * time.Second); ; {
			if ok, err = probe.TryLock(); ok || err != nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond) // polling, bounded by the deadline
		}
		if !ok || err != nil {
			r.t.Errorf("%s: TryLock(%q) by another owner = %v, %v for 5s; want true, nil (nothing left held)", what, n, ok, err)
			continue
		}
		mustUnlock(r.t, probe)
	}
}

func testMultiAllOrNothing(t *testing.T, f Factory) {
	r := newMultiRig(t, f)
	names := r.names(3)
	m := r.multi(names)
	// Another owner holds the middle part.
	blocker := newLocker(t, r.engine(1), names[1])
	mustLock(t, blocker)

	wantTry(t, m, false)
	r.free("after a failed TryLock", names[0], names[2])

	const wait, slack = 300 * time.Millisecond, 700 * time.Millisecond
	start := time.Now()
	if ok, err := m.TryLockTimeout(wait); ok || err != nil {
		t.Fatalf("TryLockTimeout(%v) with a part held elsewhere = %v, %v; want false, nil", wait, ok, err)
	}
	if elapsed := time.Since(start); elapsed < wait || elapsed > wait+slack {
		t.Errorf("TryLockTimeout(%v) returned after %v; want within [%v, %v] (one budget for all parts)", wait, elapsed, wait, wait+slack)
	}
	r.free("after a TryLockTimeout that ran out", names[0], names[2])

	// The raw path: running out while contended is not an engine failure.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	ok, err := m.Acquire(ctx, true)
	cancel()
	if ok || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Acquire(150ms deadline, true) while contended = %v, %v; want false, DeadlineExceeded and not ErrUnavailable", ok, err)
	}
	r.free("after a raw Acquire that ran out", names[0], names[2])

	// A release during the wait lets the whole set in.
	done := make(chan error, 1)
	go func() {
		ok, err := m.TryLockTimeout(20 * time.Second)
		if err == nil && !ok {
			err = errors.New("timed out")
		}
		done <- err
	}()
	mustUnlock(t, blocker)
	if err := <-done; err != nil {
		t.Fatalf("TryLockTimeout(20s) after the part was released = %v; want true, nil", err)
	}
	for i, n := range names {
		wantTry(t, newLocker(t, r.engine(i), n), false)
	}
	// One Unlock releases all.
	mustUnlock(t, m)
	r.free("after Unlock", names...)
	if err := m.Unlock(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Unlock() without a hold = %v; want ErrNotHeld", err)
	}
}

func testMultiLockCtxCancel(t *testing.T, f Factory) {
	r := newMultiRig(t, f)
	names := r.names(3)
	m := r.multi(names)
	blocker := newLocker(t, r.engine(2), names[2])
	mustLock(t, blocker)
	probe := newLocker(t, r.engine(0), names[0])
	for _, cause := range []error{context.Canceled, context.DeadlineExceeded} {
		ctx, cancel := context.WithCancel(context.Background())
		if cause == context.DeadlineExceeded {
			ctx, cancel = context.WithTimeout(context.Background(), 400*time.Millisecond)
		}
		done := make(chan error, 1)
		go func() { done <- m.LockCtx(ctx) }()
		if cause == context.Canceled {
			// Cancel once the multi-lock holds the first part and waits for
			// the last: the probe cannot take the first part any more.
			eventually(t, 10*time.Second, "multi-lock holding its first part", func() bool {
				ok, err := probe.TryLock()
				if ok {
					_ = probe.Unlock()
				}
				return !ok && err == nil
			})
			cancel()
		}
		err := <-done
		cancel()
		if err != cause {
			t.Fatalf("LockCtx() = %v; want %v (ctx.Err() itself)", err, cause)
		}
		if got := m.Token(); got != 0 {
			t.Errorf("Token() after a cancelled wait = %d; want 0", got)
		}
		r.free("after a cancelled LockCtx", names[0], names[1])
	}
	// Nothing of the cancelled waits stands in the last part's queue.
	mustUnlock(t, blocker)
	r.free("after the blocker's release", names...)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.LockCtx(ctx); err != context.Canceled {
		t.Errorf("LockCtx(cancelled) = %v; want context.Canceled", err)
	}
}

func testMultiReentry(t *testing.T, f Factory) {
	r := newMultiRig(t, f)
	names := r.names(2)
	m := r.multi(names)
	mustLock(t, m)
	tok := m.Token()
	mustLock(t, m)
	wantTry(t, m, true)
	if got := m.Token(); got != tok {
		t.Errorf("Token() after re-entry = %d; want %d (same hold)", got, tok)
	}
	other := newLocker(t, r.engine(1), names[1])
	for i := 0; i < 2; i++ {
		mustUnlock(t, m)
		wantTry(t, other, false) // counts left
	}
	mustUnlock(t, m)
	wantTry(t, other, true)
	mustUnlock(t, other)
}

func testMultiLease(t *testing.T, f Factory) {
	r := newMultiRig(t, f)
	names := r.names(3)
	hs := r.handles(names)
	// Given in reverse, acquired in name order.
	m, err := locker.NewMultiLock(hs[2], hs[0], hs[1])
	if err != nil {
		t.Fatalf("NewMultiLock() = %v", err)
	}
	if got, want := m.Name(), fmt.Sprintf("%q", names); got != want {
		t.Errorf("Name() = %s; want %s", got, want)
	}
	for i, p := range m.Parts() {
		if p.Name() != names[i] {
			t.Errorf("Parts()[%d].Name() = %q; want %q (name order)", i, p.Name(), names[i])
		}
	}
	if tok, eng, lost := m.Token(), m.Engine(), m.Lost(); tok != 0 || eng != "" || lost != nil {
		t.Errorf("not held: Token(), Engine(), Lost() = %d, %q, %v; want 0, \"\", nil", tok, eng, lost)
	}
	var last uint64
	for round := 0; round < 3; round++ {
		mustLock(t, m)
		var top uint64
		for _, p := range m.Parts() {
			top = max(top, p.Token())
		}
		if got := m.Token(); got == 0 || got != top || got <= last {
			t.Errorf("round %d: Token() = %d; want the largest part token %d, above the last grant's %d", round, got, top, last)
		}
		last = m.Token()
		if got := m.Engine(); got == "" {
			t.Errorf("Engine() of the holder = \"\"; want the granting engines")
		}
		lost := m.Lost()
		if lost == nil {
			t.Fatalf("Lost() of the holder = nil")
		}
		select {
		case <-lost:
			t.Errorf("Lost() closed while every part is held")
		default:
		}
		mustUnlock(t, m)
	}
}

// testMultiOppositeOrder: owners list the same names in different orders
// and lock them concurrently; the global order keeps them out of a cycle,
// and no name is ever held by two owners.
func testMultiOppositeOrder(t *testing.T, f Factory) {
	const owners, rounds = 6, 25
	r := newMultiRig(t, f)
	names := r.names(3)
	ls := make([]locker.Locker, owners)
	for o := range ls {
		// Each owner lists the names in its own order.
		perm := rand.Perm(len(names))
		parts := make([]locker.Handle, len(names))
		for i, j := range perm {
			parts[i] = newLocker(t, r.engine(j), names[j])
		}
		m, err := locker.NewMultiLock(parts...)
		if err != nil {
			t.Fatalf("NewMultiLock() = %v", err)
		}
		ls[o] = m
	}
	contend(t, ls, rounds, len(names))
}

// contend has each Locker run rounds critical sections on its own
// goroutine, each inside all of names resources, and checks that no
// resource ever has two owners inside and that every section ran. A
// deadlock shows as a LockCtx that runs out.
func contend(t *testing.T, ls []locker.Locker, rounds, names int) {
	t.Helper()
	inside := make([]atomic.Int64, names)
	var overlaps, total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(ls))
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := l.LockCtx(ctx)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("LockCtx() = %w", err)
					return
				}
				for i := range inside {
					if inside[i].Add(1) != 1 {
						overlaps.Add(1)
					}
				}
				total.Add(1)
				runtime.Gosched()
				for i := range inside {
					inside[i].Add(-1)
				}
				if _, err := unlock(l); err != nil {
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
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping holds among %d owners; want 0", n, len(ls))
	}
	if got, want := total.Load(), int64(len(ls)*rounds); got != want {
		t.Errorf("%d critical sections ran; want %d", got, want)
	}
}

func testMultiLost(t *testing.T, f Factory) {
	r := newMultiRig(t, f)
	if r.hs[0].Expire == nil || r.hs[1].Expire == nil {
		t.Skip("the factory offers no Expire hook")
	}
	names := r.names(3)
	m := r.multi(names, locker.WithTTL(shortTTL(900*time.Millisecond, r.hs[0].Engine, r.hs[1].Engine)))
	mustLock(t, m)
	mustLock(t, m)
	lost := m.Lost()
	// The middle part vanishes on its engine.
	if err := r.hs[1].Expire(context.Background(), names[1]); err != nil {
		t.Fatalf("Expire(%q) = %v", names[1], err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatalf("Lost() not closed 10s after a part vanished")
	}
	if err := m.LockCtx(context.Background()); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("re-entry after loss = %v; want ErrLockLost", err)
	}
	for i := 0; i < 2; i++ {
		err := m.Unlock()
		if !errors.Is(err, locker.ErrLockLost) || !strings.Contains(err.Error(), names[1]) {
			t.Errorf("Unlock() #%d after loss = %v; want ErrLockLost naming %q", i+1, err, names[1])
		}
	}
	if err := m.Unlock(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Unlock() past the count after loss = %v; want ErrNotHeld", err)
	}
	// The last Unlock released the parts that were not lost.
	r.free("after Unlock of a lost multi-lock", names...)
	// A new hold starts afresh.
	mustLock(t, m)
	select {
	case <-m.Lost():
		t.Errorf("Lost() of a new hold closed")
	default:
	}
	mustUnlock(t, m)
}

func testMultiBadArguments(t *testing.T, f Factory) {
	r := newMultiRig(t, f)
	names := r.names(2)
	hs := r.handles(names)
	twin := newLocker(t, r.engine(0), names[0])
	m, err := locker.NewMultiLock(hs...)
	if err != nil {
		t.Fatalf("NewMultiLock() = %v", err)
	}
	for _, tc := range []struct {
		desc  string
		parts []locker.Handle
		want  string
	}{
		{"no parts", nil, "parts is empty"},
		{"a nil part", []locker.Handle{hs[0], nil}, "parts[1] is nil"},
		{"one handle twice", []locker.Handle{hs[0], hs[1], hs[0]}, "parts[0] and parts[2]"},
		{"two handles on one name", []locker.Handle{hs[0], twin}, "parts[0] and parts[1]"},
		{"a multi-lock", []locker.Handle{m}, "parts[0] is a *MultiLock"},
	} {
		got, err := locker.NewMultiLock(tc.parts...)
		if got != nil || !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewMultiLock(%s) = %v, %v; want nil, ErrInvalidArgument naming %q", tc.desc, got, err, tc.want)
		}
	}
	//lint:ignore SA1012 checking that a nil context is refused, not a panic
	if err := m.LockCtx(nil); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("LockCtx(nil) = %v; want ErrInvalidArgument", err)
	}
	if ok, err := m.TryLockTimeout(-time.Second); ok || !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("TryLockTimeout(-1s) = %v, %v; want false, ErrInvalidArgument", ok, err)
	}
}
