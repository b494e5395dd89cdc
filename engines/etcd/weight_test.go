package etcd_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// waitersOf returns the owners of the waiters of name's kind (KindMutex:
// the mutex), in the engine's order, and the holders'.
func waitersOf(t *testing.T, e *etcd.Engine, kind inspect.Kind, name string) (holders, waiters []string) {
	t.Helper()
	if kind == inspect.KindMutex {
		in, err := e.Inspect(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if in.Holder != nil {
			holders = append(holders, in.Holder.Owner)
		}
		for _, w := range in.Waiters {
			waiters = append(waiters, w.Owner)
		}
		return holders, waiters
	}
	in, err := e.InspectFamily(context.Background(), kind, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range in.Holders {
		holders = append(holders, h.Owner)
	}
	for _, w := range in.Waiters {
		waiters = append(waiters, w.Owner)
	}
	return holders, waiters
}

// queued starts l's LockCtx, waits until the engine shows n waiters of
// kind on name, and returns the result channel.
func queued(t *testing.T, e *etcd.Engine, kind inspect.Kind, name string, l locker.Locker, n int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- l.LockCtx(t.Context()) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, w := waitersOf(t, e, kind, name); len(w) == n {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: want %d waiters within 10s", name, n)
		}
		time.Sleep(time.Millisecond) // a poll of etcd's state, not a wait for an event
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func rwLock(t *testing.T, e *etcd.Engine, name, owner string, weight int) locker.RWLock {
	t.Helper()
	rw, err := e.NewRWLock(name, locker.WithOwner(owner), locker.WithWeight(weight))
	noErr(t, err)
	return rw
}

func mutex(t *testing.T, e *etcd.Engine, name, owner string, weight int) locker.Handle {
	t.Helper()
	l, err := e.NewLocker(name, locker.WithOwner(owner), locker.WithWeight(weight))
	noErr(t, err)
	return l
}

func wantOwners(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: %q; want %q", what, got, want)
	}
}

// TestWeightedRW: behind a writer, a heavier writer that came after a
// reader is granted before it (and InspectFamily shows it holding,
// although the reader's key is older); the tokens still grow, although
// the reader's key is older than the writer's. A heavier reader passes an
// older waiting writer.
func TestWeightedRW(t *testing.T) {
	e := newEngine(t, newClient(t, endpoint))
	name := t.Name()
	holder, reader, writer := rwLock(t, e, name, "holder", 1), rwLock(t, e, name, "reader", 1), rwLock(t, e, name, "writer", 5)
	noErr(t, holder.WriteLock().Lock())
	readDone := queued(t, e, inspect.KindRead, name, reader.ReadLock(), 1)
	writeDone := queued(t, e, inspect.KindWrite, name, writer.WriteLock(), 2)
	held := holder.WriteLock().Token()
	noErr(t, holder.WriteLock().Unlock())
	lockertest.WantGranted(t, writeDone, "the weight-5 writer")
	lockertest.WantPending(t, readDone, "the weight-1 reader while the writer holds")
	holders, waiters := waitersOf(t, e, inspect.KindWrite, name)
	wantOwners(t, "holders", holders, []string{"writer"})
	wantOwners(t, "waiters", waiters, []string{"reader"})
	w := writer.WriteLock().Token()
	if w <= held {
		t.Errorf("the heavier writer's token %d; want above the first writer's %d", w, held)
	}
	noErr(t, writer.WriteLock().Unlock())
	lockertest.WantGranted(t, readDone, "the reader last")
	if r := reader.ReadLock().Token(); r <= w {
		t.Errorf("the reader's token %d, granted after the writer; want above the writer's %d", r, w)
	}

	// The reader holds and a weight-1 writer waits: a weight-3 reader
	// passes it and shares the hold, where a weight-1 reader would wait.
	light, heavy := rwLock(t, e, name, "light writer", 1), rwLock(t, e, name, "heavy reader", 3)
	lightDone := queued(t, e, inspect.KindWrite, name, light.WriteLock(), 1)
	noErr(t, heavy.ReadLock().LockCtx(t.Context()))
	noErr(t, reader.ReadLock().Unlock())
	lockertest.WantPending(t, lightDone, "the weight-1 writer while the heavier reader reads")
	noErr(t, heavy.ReadLock().Unlock())
	lockertest.WantGranted(t, lightDone, "the weight-1 writer last")
	noErr(t, light.WriteLock().Unlock())
}

// TestWeightedSemaphoreRefused: the engine weighs (Core lets a weight
// through), yet a weight on a semaphore's acquisition is refused at once,
// naming WithWeight.
func TestWeightedSemaphoreRefused(t *testing.T) {
	e := newEngine(t, newClient(t, endpoint))
	if err := e.Weighs(); err != nil {
		t.Fatalf("Weighs() = %v; want nil", err)
	}
	s, err := e.NewSemaphore(t.Name(), 2, locker.WithWeight(4))
	noErr(t, err)
	_, err = s.Acquire(context.Background(), 1)
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "WithWeight(4)") {
		t.Fatalf("Acquire with WithWeight(4) = %v; want ErrUnsupported naming WithWeight(4)", err)
	}
}

// lightBehindHolder opens a fresh engine and, on a mutex named after the
// test, locks "holder" and queues "light" behind it, both of weight 1,
// and makes "heavy", of weight 5.
func lightBehindHolder(t *testing.T) (e *etcd.Engine, name string, holder, light, heavy locker.Handle, lightDone <-chan error) {
	e = newEngine(t, newClient(t, endpoint))
	name = t.Name()
	holder, light, heavy = mutex(t, e, name, "holder", 1), mutex(t, e, name, "light", 1), mutex(t, e, name, "heavy", 5)
	noErr(t, holder.Lock())
	return e, name, holder, light, heavy, queued(t, e, inspect.KindMutex, name, light, 1)
}

// TestInspectWeighted: Inspect shows the waiters heaviest first, and the
// heavy waiter holding once granted, though an older key waits;
// ForceUnlock ends that hold, not the older waiter's.
func TestInspectWeighted(t *testing.T) {
	e, name, holder, light, heavy, lightDone := lightBehindHolder(t)
	heavyDone := queued(t, e, inspect.KindMutex, name, heavy, 2)
	holders, waiters := waitersOf(t, e, inspect.KindMutex, name)
	wantOwners(t, "holder", holders, []string{"holder"})
	wantOwners(t, "waiters", waiters, []string{"heavy", "light"})
	noErr(t, holder.Unlock())
	lockertest.WantGranted(t, heavyDone, "the weight-5 waiter")
	holders, waiters = waitersOf(t, e, inspect.KindMutex, name)
	wantOwners(t, "holder", holders, []string{"heavy"})
	wantOwners(t, "waiters", waiters, []string{"light"})
	got, err := e.ForceUnlock(context.Background(), name)
	if err != nil || got.Owner != "heavy" {
		t.Fatalf("ForceUnlock() = %+v, %v; want the heavy waiter's hold", got, err)
	}
	lockertest.WantLost(t, heavy, "the forced heavy hold")
	lockertest.WantGranted(t, lightDone, "the light waiter after the force")
	if l, h := light.Token(), heavy.Token(); l <= h {
		t.Errorf("the light waiter's token %d, granted after the heavy one; want above its %d", l, h)
	}
	noErr(t, light.Unlock())
}

// TestHeavyArrivalRace: a key deleted between a heavy arrival's read of
// the queue and its create (the holder leaves, its waiter is granted)
// fails the create, and the arrival reads again: it then records the new
// grant and waits for it. Without the compare it would rank itself ahead
// of the waiter just granted and hold with it.
func TestHeavyArrivalRace(t *testing.T) {
	e, _, holder, light, heavy, lightDone := lightBehindHolder(t)
	raced := false
	e.AfterLook(func() {
		if raced {
			return
		}
		raced = true
		// On the arrival's goroutine: errors, not Fatal.
		if err := holder.Unlock(); err != nil {
			t.Error(err)
		}
		select {
		case err := <-lightDone:
			if err != nil {
				t.Errorf("the light waiter, between the heavy one's look and create: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("the light waiter not granted within 20s of the holder's Unlock")
		}
	})
	heavyDone := make(chan error, 1)
	go func() { heavyDone <- heavy.LockCtx(t.Context()) }()
	lockertest.WantPending(t, heavyDone, "the heavy arrival while the light waiter it raced holds")
	if tries, arrivals := e.HeavyTries(); tries != 2 || arrivals != 1 {
		t.Errorf("heavy creates sent %d, succeeded %d; want 2, 1 (the first failed by the race)", tries, arrivals)
	}
	noErr(t, light.Unlock())
	lockertest.WantGranted(t, heavyDone, "the heavy waiter once the light one left")
	noErr(t, heavy.Unlock())
}

// TestWeightedCluster: lockertest.WeightOrder on a 3-member cluster, the
// waiters in four processes, each with a client of its own member: the
// weights and tokens hold whichever member a process reads from.
func TestWeightedCluster(t *testing.T) {
	cl := testserver.EtcdCluster(t, 3)
	es := make([]locker.Engine, 4)
	for i := range es {
		es[i] = newEngine(t, newClient(t, cl.Addrs()[i%len(cl.Addrs())]))
	}
	lockertest.WeightOrder(t, es)
}
