package lockertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// forcedTTL is the TTL of the holds an operator forces out: short, so that
// engines which tell a forced-out owner at its next renewal tell it soon
// (or the engine's minimum, see shortTTL).
const forcedTTL = 900 * time.Millisecond

// shortTTL is d, or the largest minimum TTL of engines when that is
// longer: the suites' short TTLs make what waits on a hold end soon, on
// every engine that can keep them.
func shortTTL(d time.Duration, engines ...locker.Engine) time.Duration {
	for _, e := range engines {
		d = max(d, driver.MinTTL(e))
	}
	return d
}

// WantLost checks that h, a hold ended under its owner (forced out,
// expired), learns it within 10s, and that its Unlock then returns
// ErrLockLost; what names the hold in failures.
func WantLost(t testing.TB, h locker.Handle, what string) {
	t.Helper()
	select {
	case <-h.Lost():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Lost() not closed within 10s", what)
	}
	if err := h.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("%s: Unlock() = %v; want ErrLockLost", what, err)
	}
}

// forceFamily calls ForceUnlockFamily and checks that it ended exactly the
// holds of the tokens want.
func forceFamily(t *testing.T, e locker.Engine, kind inspect.Kind, name string, token uint64, want ...uint64) []inspect.FamilyHolder {
	t.Helper()
	ended, err := familyInspector(t, e).ForceUnlockFamily(context.Background(), kind, name, token)
	if err != nil {
		t.Fatalf("ForceUnlockFamily(%v, %q, %d) = %v", kind, name, token, err)
	}
	got := map[uint64]bool{}
	for _, h := range ended {
		got[h.Token] = true
	}
	if len(ended) != len(want) {
		t.Fatalf("ForceUnlockFamily(%v, %q, %d) ended %+v; want the holds of tokens %v", kind, name, token, ended, want)
	}
	for _, tok := range want {
		if !got[tok] {
			t.Fatalf("ForceUnlockFamily(%v, %q, %d) ended %+v; want the holds of tokens %v", kind, name, token, ended, want)
		}
	}
	return ended
}

// testRWForceUnlock: an operator ends one reader by its token, then every
// hold; the forced-out owners learn it, the waiting writer gets its turn,
// and a free name, an unknown token and a closed engine are refused.
func testRWForceUnlock(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "fu")
	ttl := locker.WithTTL(shortTTL(forcedTTL, e1, e2))
	a := newRW(t, e1, name, locker.WithOwner("reader-a"), ttl)
	b := newRW(t, e2, name, locker.WithOwner("reader-b"), ttl)
	mustLock(t, a.ReadLock())
	mustLock(t, b.ReadLock())
	ctx := context.Background()
	if _, err := familyInspector(t, e1).ForceUnlockFamily(ctx, inspect.KindRead, name, 1<<62); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("ForceUnlockFamily(an unknown token) = %v; want ErrNotHeld", err)
	}
	ended := forceFamily(t, e1, inspect.KindRead, name, a.ReadLock().Token(), a.ReadLock().Token())
	if ended[0].Owner != "reader-a" || ended[0].Kind != inspect.KindRead {
		t.Errorf("ForceUnlockFamily(reader-a's token) ended %+v; want reader-a's read hold", ended[0])
	}
	WantLost(t, a.ReadLock(), "forced-out reader")
	if in := inspectFamily(t, e2, inspect.KindRead, name); len(in.Holders) != 1 || in.Holders[0].Owner != "reader-b" {
		t.Errorf("InspectFamily() after forcing reader-a out = %+v; want reader-b alone", in.Holders)
	}

	w := newRW(t, e1, name, locker.WithOwner("writer"))
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done := lockAsync(wctx, w.WriteLock())
	awaitWaiters(t, e1, inspect.KindWrite, name, 1)
	forceFamily(t, e2, inspect.KindWrite, name, 0, b.ReadLock().Token())
	WantGranted(t, done, "writer waiting when every hold was forced out")
	WantLost(t, b.ReadLock(), "reader forced out by token 0")
	mustUnlock(t, w.WriteLock())
	if _, err := familyInspector(t, e1).ForceUnlockFamily(ctx, inspect.KindWrite, name, 0); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("ForceUnlockFamily(free) = %v; want ErrNotHeld", err)
	}
	if _, err := familyInspector(t, e1).ForceUnlockFamily(ctx, inspect.KindRead, "", 0); !errors.Is(err, locker.ErrInvalidName) {
		t.Errorf("ForceUnlockFamily(\"\") = %v; want ErrInvalidName", err)
	}
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := familyInspector(t, e1).ForceUnlockFamily(ctx, inspect.KindRead, name, 0); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("ForceUnlockFamily() after Close = %v; want ErrClosed", err)
	}
}

// testSemForceUnlock: an operator ends a stuck permit hold; the permits go
// to the waiter, and the forced-out owner learns it.
func testSemForceUnlock(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "fu")
	stuck := tryAcquire(t, newSem(t, e1, name, 2, locker.WithOwner("stuck"), locker.WithTTL(shortTTL(forcedTTL, e1))), 2, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next, err := newSem(t, e2, name, 2, locker.WithOwner("next")).NewPermit(1)
	if err != nil {
		t.Fatal(err)
	}
	done := lockAsync(ctx, next)
	awaitWaiters(t, e2, inspect.KindPermit, name, 1)
	in := inspectFamily(t, e2, inspect.KindPermit, name)
	if w := in.Waiters[0]; w.Owner != "next" || w.Kind != inspect.KindPermit || w.Permits != 1 {
		t.Errorf("InspectFamily().Waiters = %+v; want next waiting for 1 permit", in.Waiters)
	}
	ended := forceFamily(t, e2, inspect.KindPermit, name, stuck.Token(), stuck.Token())
	if ended[0].Owner != "stuck" || ended[0].Permits != 2 {
		t.Errorf("ForceUnlockFamily() ended %+v; want stuck's 2 permits", ended[0])
	}
	WantGranted(t, done, "permit waiter after the stuck hold was forced out")
	WantLost(t, stuck, "forced-out permit hold")
	mustUnlock(t, next)
}

// testRWInspectWaiters: waiting readers and writers are visible with their
// owners, and a downgraded read hold shows the writer's token, as its
// Handle does.
func testRWInspectWaiters(t *testing.T, f Factory) {
	e1, e2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "iw")
	w := newRW(t, e1, name, locker.WithOwner("writer"))
	mustLock(t, w.WriteLock())
	mustLock(t, w.ReadLock())
	wtok := w.WriteLock().Token()
	in := inspectFamily(t, e2, inspect.KindRead, name)
	if len(in.Holders) != 2 {
		t.Fatalf("InspectFamily(downgrading writer).Holders = %+v; want its write and read holds", in.Holders)
	}
	for _, h := range in.Holders {
		if h.Owner != "writer" || h.Token != wtok {
			t.Errorf("holder %+v; want the writer's holds, both with its token %d", h, wtok)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newRW(t, e2, name, locker.WithOwner("reader"))
	w2 := newRW(t, e1, name, locker.WithOwner("writer-2"))
	rdone := lockAsync(ctx, r.ReadLock())
	awaitWaiters(t, e2, inspect.KindRead, name, 1)
	wdone := lockAsync(ctx, w2.WriteLock())
	awaitWaiters(t, e2, inspect.KindRead, name, 2)
	kinds := map[string]inspect.Kind{}
	for _, h := range inspectFamily(t, e2, inspect.KindRead, name).Waiters {
		kinds[h.Owner] = h.Kind
	}
	if kinds["reader"] != inspect.KindRead || kinds["writer-2"] != inspect.KindWrite {
		t.Errorf("InspectFamily().Waiters by owner = %v; want reader reading and writer-2 writing", kinds)
	}
	mustUnlock(t, w.ReadLock())
	mustUnlock(t, w.WriteLock())
	// Fair engines grant the reader first, writer-preferring ones the
	// writer: each gets its turn once the other leaves.
	for range 2 {
		select {
		case err := <-rdone:
			if err != nil {
				t.Fatalf("waiting reader: LockCtx() = %v", err)
			}
			mustUnlock(t, r.ReadLock())
		case err := <-wdone:
			if err != nil {
				t.Fatalf("waiting writer: LockCtx() = %v", err)
			}
			mustUnlock(t, w2.WriteLock())
		case <-time.After(20 * time.Second):
			t.Fatal("a waiter not granted within 20s of the writer leaving")
		}
	}
}
