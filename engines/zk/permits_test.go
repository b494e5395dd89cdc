package zk_test

import (
	"context"
	"testing"

	"github.com/orthrus-go/orthrus/locker"
)

// A request larger than the stored count waits for SetPermits to raise
// it, as mem's does; it used to fail with ErrPermitsMismatch.
func TestSemaphoreLargeRequestWaits(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	ctx := context.Background()
	s := semaphore(t, es[0], name, 3)
	p, err := s.Acquire(ctx, 1) // stores 3, and checks s's count
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, p)
	if err := es[1].SetPermits(ctx, name, 1); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	big, _ := s.NewPermit(2)
	done := lockAsync(wctx, big)
	waitQueued(t, admin(t), es[0].FamilyPath(locker.KindPermit, name), 1)
	if err := es[1].SetPermits(ctx, name, 2); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Acquire(2) with 1 stored, then 2 = %v; want granted", err)
	}
	unlock(t, big)
}

// A waiter whose request exceeds the count SetPermits lowered keeps
// waiting, and is granted once the count fits it again.
func TestSemaphoreWaiterOutlivesLowering(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	ctx := context.Background()
	s := semaphore(t, es[0], name, 3)
	held, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, _ := s.NewPermit(2)
	done := lockAsync(wctx, w)
	waitQueued(t, admin(t), es[0].FamilyPath(locker.KindPermit, name), 2)
	if err := es[1].SetPermits(ctx, name, 1); err != nil {
		t.Fatal(err)
	}
	unlock(t, held)
	if err := es[1].SetPermits(ctx, name, 2); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter of 2 across counts 3, 1, 2 = %v; want granted", err)
	}
	unlock(t, w)
}

// A Semaphore's first acquisition compares the counts once, on arrival: a
// count changed while it waits does not fail it.
func TestSemaphoreFirstWaitCheckedOnce(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	ctx := context.Background()
	held, err := semaphore(t, es[0], name, 3).Acquire(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, _ := semaphore(t, es[1], name, 3).NewPermit(1) // its first acquisition
	done := lockAsync(wctx, w)
	waitQueued(t, admin(t), es[0].FamilyPath(locker.KindPermit, name), 2)
	if err := es[0].SetPermits(ctx, name, 2); err != nil {
		t.Fatal(err)
	}
	unlock(t, held)
	if err := <-done; err != nil {
		t.Fatalf("first acquisition, count changed while it waited = %v; want granted", err)
	}
	unlock(t, w)
}

// After SetPermits lowers the count, the holds granted under the old one
// are still reported as holds, by any process, and waiters as waiters.
func TestSemaphoreInspectAfterLowering(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	ctx := context.Background()
	s := semaphore(t, es[1], name, 3)
	var held []locker.Handle
	for _, n := range []int{1, 2} {
		p, err := s.Acquire(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, _ := s.NewPermit(1)
	done := lockAsync(wctx, w)
	waitQueued(t, admin(t), es[0].FamilyPath(locker.KindPermit, name), 3)
	if err := es[0].SetPermits(ctx, name, 1); err != nil {
		t.Fatal(err)
	}
	in, err := es[0].InspectFamily(ctx, locker.KindPermit, name)
	if err != nil || in.Permits != 1 || len(in.Holders) != 2 || len(in.Waiters) != 1 {
		t.Fatalf("InspectFamily() after lowering 3 to 1 = %+v, %v; want 2 holders, 1 waiter, 1 permit", in, err)
	}
	for _, p := range held {
		unlock(t, p)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter = %v; want granted", err)
	}
	unlock(t, w)
}
