package zk_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// A request larger than the stored count waits for SetPermits to raise
// it, as mem's does; it used to fail with ErrPermitsMismatch.
func TestSemaphoreLargeRequestWaits(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	s := semaphore(t, es[0], name, 3)
	p := acquire(t, s, 1) // stores 3, and checks s's count
	unlock(t, p)
	setPermits(t, es[1], name, 1)
	big, done := queueWaiter(t, es[0], s, 2, 1)
	grantedAfterSetPermits(t, es[1], name, 2, big, done)
}

// queueWaiter starts the Lock of a permit of s for n permits, cancelled
// when the test ends, and waits until s has queued nodes in line, as e
// sees it.
func queueWaiter(t *testing.T, e *zk.Engine, s locker.Semaphore, n, queued int) (locker.Locker, <-chan error) {
	t.Helper()
	w, err := s.NewPermit(n)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := lockAsync(ctx, w)
	waitQueued(t, admin(t), e.FamilyPath(inspect.KindPermit, s.Name()), queued)
	return w, done
}

// acquire takes n permits of s.
func acquire(t *testing.T, s locker.Semaphore, n int) locker.Handle {
	t.Helper()
	p, err := s.Acquire(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// setPermits stores n as the count of semaphore name with e.
func setPermits(t *testing.T, e *zk.Engine, name string, n int) {
	t.Helper()
	if err := e.SetPermits(context.Background(), name, n); err != nil {
		t.Fatal(err)
	}
}

// granted wants the Lock of w that reports to done granted within 10s,
// and releases w.
func granted(t *testing.T, done <-chan error, w locker.Locker, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s = %v; want granted", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not granted within 10s", what)
	}
	unlock(t, w)
}

// grantedAfterSetPermits wants the waiter w, whose Lock reports to done,
// still waiting; then stores n as the count of semaphore name with e,
// wants w granted, and releases it.
func grantedAfterSetPermits(t *testing.T, e *zk.Engine, name string, n int, w locker.Locker, done <-chan error) {
	t.Helper()
	lockertest.WantPending(t, done, "waiter before SetPermits raised the count")
	setPermits(t, e, name, n)
	granted(t, done, w, fmt.Sprintf("waiter after SetPermits(%d)", n))
}

// A waiter whose request exceeds the count SetPermits lowered keeps
// waiting, and is granted once the count fits it again.
func TestSemaphoreWaiterOutlivesLowering(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	s := semaphore(t, es[0], name, 3)
	held := acquire(t, s, 2)
	w, done := queueWaiter(t, es[0], s, 2, 2)
	setPermits(t, es[1], name, 1)
	unlock(t, held)
	grantedAfterSetPermits(t, es[1], name, 2, w, done)
}

// A Semaphore's first acquisition compares the counts once, on arrival: a
// count changed while it waits does not fail it.
func TestSemaphoreFirstWaitCheckedOnce(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	held := acquire(t, semaphore(t, es[0], name, 3), 3)
	w, done := queueWaiter(t, es[0], semaphore(t, es[1], name, 3), 1, 2) // its first acquisition
	setPermits(t, es[0], name, 2)
	unlock(t, held)
	granted(t, done, w, "first acquisition, count changed while it waited")
}

// After SetPermits lowers the count, the holds granted under the old one
// are still reported as holds, by any process, and waiters as waiters.
func TestSemaphoreInspectAfterLowering(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	s := semaphore(t, es[1], name, 3)
	var held []locker.Handle
	for _, n := range []int{1, 2} {
		held = append(held, acquire(t, s, n))
	}
	w, done := queueWaiter(t, es[0], s, 1, 3)
	setPermits(t, es[0], name, 1)
	in, err := es[0].InspectFamily(context.Background(), inspect.KindPermit, name)
	if err != nil || in.Permits != 1 || len(in.Holders) != 2 || len(in.Waiters) != 1 {
		t.Fatalf("InspectFamily() after lowering 3 to 1 = %+v, %v; want 2 holders, 1 waiter, 1 permit", in, err)
	}
	for _, p := range held {
		unlock(t, p)
	}
	granted(t, done, w, "waiter")
}

// A waiter behind holds granted under a higher count is woken when a hold
// before them goes: the hold just before it, granted already, will not
// tell it (a missed wake-up the model found).
func TestSemaphoreWaiterBehindOldHolds(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	s := semaphore(t, es[0], name, 5)
	first := acquire(t, s, 2)
	rest := []locker.Handle{acquire(t, s, 2), acquire(t, s, 1)}
	setPermits(t, es[1], name, 4) // 2+2+1 held, over the count
	w, done := queueWaiter(t, es[0], s, 1, 4)
	unlock(t, first) // 2+1 held: w's 1 fits the 4
	granted(t, done, w, "waiter after the hold before the others went")
	for _, p := range rest {
		unlock(t, p)
	}
}
