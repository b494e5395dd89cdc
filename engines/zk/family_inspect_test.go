package zk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// The write token of a writer that downgraded ends both its holds; the
// writer waiting for them takes the lock, and is not ended with them.
func TestForceUnlockFamilyDowngraded(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	a := rwLock(t, es[0], name, locker.WithOwner("a"), locker.WithTTL(600*time.Millisecond))
	lock(t, a.WriteLock())
	lock(t, a.ReadLock())
	wtoken := a.WriteLock().Token()
	b := rwLock(t, es[1], name, locker.WithOwner("b"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bw := lockAsync(ctx, b.WriteLock())
	waitFor(t, 10*time.Second, "the writer waiting", func() bool {
		in, err := es[1].InspectFamily(ctx, inspect.KindWrite, name)
		return err == nil && len(in.Waiters) == 1
	})
	ended, err := es[1].ForceUnlockFamily(ctx, inspect.KindWrite, name, wtoken)
	if err != nil {
		t.Fatalf("ForceUnlockFamily(the write token) = %v", err)
	}
	kinds := map[inspect.Kind]bool{}
	for _, h := range ended {
		if h.Owner != "a" || h.Token != wtoken || h.Permits != 1 {
			t.Errorf("ended %+v; want a's hold of token %d", h, wtoken)
		}
		kinds[h.Kind] = true
	}
	if len(ended) != 2 || !kinds[inspect.KindWrite] || !kinds[inspect.KindRead] {
		t.Fatalf("ForceUnlockFamily(the write token) ended %+v; want a's write and read holds", ended)
	}
	if err := <-bw; err != nil {
		t.Fatalf("waiting writer: LockCtx() = %v", err)
	}
	lockertest.WantLost(t, a.WriteLock(), "forced-out write hold")
	lockertest.WantLost(t, a.ReadLock(), "forced-out downgraded read hold")
	unlock(t, b.WriteLock())
}

// Token 0 ends every permit hold, and only those: the waiter that the
// deletes grant holds on.
func TestForceUnlockFamilyAllPermits(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var held []locker.Handle
	for _, owner := range []string{"p1", "p2"} {
		p, err := semaphore(t, es[0], name, 2, locker.WithOwner(owner), locker.WithTTL(600*time.Millisecond)).Acquire(ctx, 1)
		if err != nil {
			t.Fatalf("Acquire(1) = %v", err)
		}
		held = append(held, p)
	}
	next, err := semaphore(t, es[1], name, 2, locker.WithOwner("next")).NewPermit(2)
	if err != nil {
		t.Fatal(err)
	}
	done := lockAsync(ctx, next)
	waitFor(t, 10*time.Second, "the permit waiter", func() bool {
		in, err := es[1].InspectFamily(ctx, inspect.KindPermit, name)
		return err == nil && len(in.Waiters) == 1
	})
	ended, err := es[1].ForceUnlockFamily(ctx, inspect.KindPermit, name, 0)
	if err != nil {
		t.Fatalf("ForceUnlockFamily(0) = %v", err)
	}
	if len(ended) != 2 || ended[0].Token != held[0].Token() || ended[1].Token != held[1].Token() {
		t.Fatalf("ForceUnlockFamily(0) ended %+v; want the holds of tokens %d and %d, in line order", ended, held[0].Token(), held[1].Token())
	}
	for _, h := range ended {
		if h.Kind != inspect.KindPermit || h.Permits != 1 {
			t.Errorf("ended %+v; want a hold of 1 permit", h)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("permit waiter: LockCtx() = %v", err)
	}
	for i, h := range held {
		lockertest.WantLost(t, h, ended[i].Owner)
	}
	in, err := es[0].InspectFamily(ctx, inspect.KindPermit, name)
	if err != nil || len(in.Holders) != 1 || in.Holders[0].Owner != "next" || len(in.Waiters) != 0 {
		t.Errorf("InspectFamily() after the force = %+v, %v; want next holding alone", in, err)
	}
	unlock(t, next)
}

// A hold whose node changed since it was read (a semaphore hold wakes its
// successor so) is read again and deleted; a node gone is not.
func TestForceNodeVersionChanged(t *testing.T) {
	c := admin(t)
	e := familyEngines(t, 1)[0]
	name := t.Name()
	p, err := semaphore(t, e, name, 1, locker.WithTTL(600*time.Millisecond)).Acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	parent := e.FamilyPath(inspect.KindPermit, name)
	nodes, err := familyNodes(c, parent)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes = %v, %v; want one", nodes, err)
	}
	path := parent + "/" + nodes[0]
	_, st, err := c.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Set(path, []byte("changed"), st.Version); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.ForceNode(context.Background(), path, st.Version); !ok || err != nil {
		t.Fatalf("ForceNode(the version before the change) = %v, %v; want true, nil", ok, err)
	}
	lockertest.WantLost(t, p, "forced-out permit hold")
	if ok, err := e.ForceNode(context.Background(), path, st.Version); ok || err != nil {
		t.Errorf("ForceNode(a node gone) = %v, %v; want false, nil", ok, err)
	}
}

// Only read-write lock and semaphore kinds are accepted.
func TestForceUnlockFamilyBadKind(t *testing.T) {
	e := familyEngines(t, 1)[0]
	for _, k := range []inspect.Kind{inspect.KindMutex, inspect.Kind(99)} {
		if _, err := e.ForceUnlockFamily(context.Background(), k, "x", 0); !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("ForceUnlockFamily(kind %v) = %v; want ErrInvalidArgument", k, err)
		}
	}
}
