package zk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// familyEngines opens n engines, each with its own session: n processes.
func familyEngines(t *testing.T, n int, opts ...zk.Option) []*zk.Engine {
	t.Helper()
	es := make([]*zk.Engine, n)
	for i := range es {
		es[i] = newEngine(t, []string{zkAddr}, append([]zk.Option{zk.WithPrefix("/family")}, opts...)...)
		t.Cleanup(func() {
			if err := es[i].Close(); err != nil {
				t.Errorf("Close() = %v", err)
			}
		})
	}
	return es
}

func rwLock(t *testing.T, e *zk.Engine, name string, opts ...locker.Option) locker.RWLock {
	t.Helper()
	l, err := e.NewRWLock(name, opts...)
	if err != nil {
		t.Fatalf("NewRWLock(%q) = %v", name, err)
	}
	return l
}

func semaphore(t *testing.T, e *zk.Engine, name string, permits int, opts ...locker.Option) locker.Semaphore {
	t.Helper()
	s, err := e.NewSemaphore(name, permits, opts...)
	if err != nil {
		t.Fatalf("NewSemaphore(%q, %d) = %v", name, permits, err)
	}
	return s
}

func lock(t *testing.T, l locker.Locker) {
	t.Helper()
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
}

func unlock(t *testing.T, l locker.Locker) {
	t.Helper()
	if err := l.Unlock(); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
}

// lockAsync starts l.LockCtx and returns where its result goes.
func lockAsync(ctx context.Context, l locker.Locker) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.LockCtx(ctx) }()
	return done
}

// familyNodes lists the nodes of a read-write lock or semaphore, in queue
// order; the count node is left out.
func familyNodes(c *gozk.Conn, parent string) ([]string, error) {
	nodes, err := lockNodes(c, parent)
	out := nodes[:0]
	for _, n := range nodes {
		if n != zk.PermitsNode {
			out = append(out, n)
		}
	}
	return out, err
}

// waitQueued waits until parent has n nodes.
func waitQueued(t *testing.T, c *gozk.Conn, parent string, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%d nodes under %s", n, parent), func() bool {
		nodes, err := familyNodes(c, parent)
		return err == nil && len(nodes) == n
	})
}

// notDone fails when done has a result.
func notDone(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned %v; want it still waiting", what, err)
	default:
	}
}

// Downgrade: the writer takes the read side at once and keeps it after
// releasing the write side; a writer that queued before the downgrade
// waits for that read hold; the read hold's token is the write hold's,
// and the next writer's exceeds it.
func TestRWDowngrade(t *testing.T) {
	c := admin(t)
	es := familyEngines(t, 2)
	name := t.Name()
	parent := es[0].FamilyPath(inspect.KindWrite, name)
	a, b := rwLock(t, es[0], name), rwLock(t, es[1], name)
	lock(t, a.WriteLock())
	wtoken := a.WriteLock().Token()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bw := lockAsync(ctx, b.WriteLock())
	waitQueued(t, c, parent, 2)

	if ok, err := a.ReadLock().TryLock(); !ok || err != nil {
		t.Fatalf("downgrade TryLock() = %v, %v; want true, nil", ok, err)
	}
	if got := a.ReadLock().Token(); got != wtoken {
		t.Errorf("downgraded read token = %d; want the write token %d", got, wtoken)
	}
	unlock(t, a.WriteLock())
	// The read hold stays; the waiting writer must not slip in.
	waitQueued(t, c, parent, 2)
	notDone(t, bw, "the writer queued before the downgrade")
	if _, err := es[0].InspectFamily(context.Background(), inspect.KindRead, name); err != nil {
		t.Fatal(err)
	}
	// A reader of another owner queues behind the waiting writer.
	other := rwLock(t, es[0], name)
	if ok, err := other.ReadLock().TryLock(); ok || err != nil {
		t.Errorf("reader behind a waiting writer: TryLock() = %v, %v; want false, nil", ok, err)
	}
	select {
	case <-a.ReadLock().Lost():
		t.Fatal("the downgraded read hold was lost")
	default:
	}
	unlock(t, a.ReadLock())
	if err := <-bw; err != nil {
		t.Fatalf("waiting writer: LockCtx() = %v", err)
	}
	if got := b.WriteLock().Token(); got <= wtoken {
		t.Errorf("next writer's token %d; want more than %d", got, wtoken)
	}
	unlock(t, b.WriteLock())
}

// A downgrade whose write hold is gone on the server queues as a plain
// reader.
func TestRWDowngradeAfterWriterLost(t *testing.T) {
	c := admin(t)
	e := familyEngines(t, 1)[0]
	name := t.Name()
	parent := e.FamilyPath(inspect.KindWrite, name)
	l := rwLock(t, e, name)
	lock(t, l.WriteLock())
	nodes, err := familyNodes(c, parent)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes = %v, %v; want one", nodes, err)
	}
	if err := c.Delete(parent+"/"+nodes[0], -1); err != nil {
		t.Fatal(err)
	}
	// The engine may not know yet (no watch on a young hold): the read
	// side's create checks the write node and falls back to queueing.
	ok, err := l.ReadLock().TryLock()
	if !ok || err != nil {
		t.Fatalf("ReadLock().TryLock() = %v, %v; want true, nil", ok, err)
	}
	if l.ReadLock().Token() == l.WriteLock().Token() {
		t.Errorf("read token = write token %d; want a token of its own", l.ReadLock().Token())
	}
	nodes, _ = familyNodes(c, parent)
	if len(nodes) != 1 || !strings.Contains(nodes[0], "-r-") {
		t.Errorf("nodes = %v; want one plain reader", nodes)
	}
	unlock(t, l.ReadLock())
	if err := l.WriteLock().Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("WriteLock().Unlock() = %v; want ErrLockLost", err)
	}
}

// Fair order: a reader behind a waiting writer waits; a writer's release
// wakes the readers up to the next writer, together.
func TestRWFairOrder(t *testing.T) {
	c := admin(t)
	es := familyEngines(t, 3)
	name := t.Name()
	parent := es[0].FamilyPath(inspect.KindRead, name)
	w1, w2 := rwLock(t, es[0], name), rwLock(t, es[1], name)
	r3, r4 := rwLock(t, es[2], name), rwLock(t, es[0], name)
	w5 := rwLock(t, es[1], name)
	lock(t, w1.WriteLock())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dw2 := lockAsync(ctx, w2.WriteLock())
	waitQueued(t, c, parent, 2)
	dr3 := lockAsync(ctx, r3.ReadLock())
	waitQueued(t, c, parent, 3)
	dr4 := lockAsync(ctx, r4.ReadLock())
	waitQueued(t, c, parent, 4)
	dw5 := lockAsync(ctx, w5.WriteLock())
	waitQueued(t, c, parent, 5)

	unlock(t, w1.WriteLock())
	if err := <-dw2; err != nil {
		t.Fatalf("w2: %v", err)
	}
	notDone(t, dr3, "r3 behind w2")
	w2t := w2.WriteLock().Token()
	unlock(t, w2.WriteLock())
	for _, d := range []<-chan error{dr3, dr4} {
		if err := <-d; err != nil {
			t.Fatalf("reader: %v", err)
		}
	}
	notDone(t, dw5, "w5 behind the readers")
	if r3t, r4t := r3.ReadLock().Token(), r4.ReadLock().Token(); r3t <= w2t || r4t <= w2t {
		t.Errorf("reader tokens %d, %d; want more than the writer's before them, %d", r3t, r4t, w2t)
	}
	unlock(t, r3.ReadLock())
	notDone(t, dw5, "w5 behind r4")
	unlock(t, r4.ReadLock())
	if err := <-dw5; err != nil {
		t.Fatalf("w5: %v", err)
	}
	unlock(t, w5.WriteLock())
}

// FIFO: a waiter that wants more permits than are free holds up the ones
// behind it, even those that would fit.
func TestSemaphoreFIFO(t *testing.T) {
	c := admin(t)
	es := familyEngines(t, 2)
	name := t.Name()
	parent := es[0].FamilyPath(inspect.KindPermit, name)
	s0, s1 := semaphore(t, es[0], name, 3), semaphore(t, es[1], name, 3)
	held, err := s0.Acquire(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	big, _ := s1.NewPermit(2)
	dbig := lockAsync(ctx, big)
	waitQueued(t, c, parent, 2)
	if _, ok, err := s0.TryAcquire(1); ok || err != nil {
		t.Errorf("TryAcquire(1) behind a waiter = %v, %v; want false, nil", ok, err)
	}
	small, _ := s0.NewPermit(1)
	dsmall := lockAsync(ctx, small)
	waitQueued(t, c, parent, 3)
	unlock(t, held)
	for _, d := range []<-chan error{dbig, dsmall} {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	if big.Token() >= small.Token() {
		t.Errorf("tokens %d, %d; want them in queue order", big.Token(), small.Token())
	}
	unlock(t, big)
	unlock(t, small)
}

// The count is stored with the semaphore: a process that opens it with
// another count is told, and SetPermits changes it for every process.
func TestSemaphoreCount(t *testing.T) {
	c := admin(t)
	es := familyEngines(t, 2)
	name := t.Name()
	ctx := context.Background()
	parent := es[0].FamilyPath(inspect.KindPermit, name)
	s2 := semaphore(t, es[0], name, 2)
	p, err := s2.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, p)
	data, _, err := c.Get(parent + "/" + zk.PermitsNode)
	if err != nil || string(data) != "2" {
		t.Fatalf("stored count = %q, %v; want \"2\"", data, err)
	}
	s5 := semaphore(t, es[1], name, 5)
	_, ok, err := s5.TryAcquire(1)
	if ok || !errors.Is(err, locker.ErrPermitsMismatch) || errors.Is(err, locker.ErrUnavailable) {
		t.Fatalf("TryAcquire() with another count = %v, %v; want false, ErrPermitsMismatch, not ErrUnavailable", ok, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "2") || !strings.Contains(msg, "5") {
		t.Errorf("error %q; want both counts named", msg)
	}
	if nodes, _ := familyNodes(c, parent); len(nodes) != 0 {
		t.Errorf("nodes after a mismatch: %v; want none", nodes)
	}
	if err := es[1].SetPermits(ctx, name, 0); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("SetPermits(0) = %v; want ErrInvalidArgument", err)
	}
	if err := es[1].SetPermits(ctx, name, 5); err != nil {
		t.Fatal(err)
	}
	// The opener of 2 honours the stored 5 from now on.
	var held []locker.Handle
	for range 5 {
		p, ok, err := s2.TryAcquire(1)
		if !ok || err != nil {
			t.Fatalf("TryAcquire(1) with 5 stored, %d held = %v, %v", len(held), ok, err)
		}
		held = append(held, p)
	}
	if _, ok, err := s2.TryAcquire(1); ok || err != nil {
		t.Errorf("sixth TryAcquire(1) = %v, %v; want false, nil", ok, err)
	}
	in, err := es[0].InspectFamily(ctx, inspect.KindPermit, name)
	if err != nil || in.Permits != 5 || len(in.Holders) != 5 || len(in.Waiters) != 0 {
		t.Errorf("InspectFamily() = %+v, %v; want 5 permits, 5 holders", in, err)
	}
	for _, p := range held {
		unlock(t, p)
	}
	// A fresh opener of the stored count is fine; the count outlives the
	// holds.
	if p, ok, err := semaphore(t, es[1], name, 5).TryAcquire(5); !ok || err != nil {
		t.Errorf("TryAcquire(5) = %v, %v", ok, err)
	} else {
		unlock(t, p)
	}
}

// A waiter first in line sees the count rise at once.
func TestSemaphoreSetPermitsWakes(t *testing.T) {
	es := familyEngines(t, 2)
	name := t.Name()
	ctx := context.Background()
	s := semaphore(t, es[0], name, 1)
	p, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, _ := s.NewPermit(1)
	done := lockAsync(wctx, w)
	waitQueued(t, admin(t), es[0].FamilyPath(inspect.KindPermit, name), 2)
	if err := es[1].SetPermits(ctx, name, 2); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	unlock(t, w)
	unlock(t, p)
}

// Holds end as the mutex's do: deleted node, session end, fixed lease.
func TestFamilyLost(t *testing.T) {
	c := admin(t)
	es := familyEngines(t, 1)
	e := es[0]
	name := t.Name()
	for _, k := range []inspect.Kind{inspect.KindRead, inspect.KindWrite, inspect.KindPermit} {
		t.Run(k.String(), func(t *testing.T) {
			var h locker.Handle
			switch k {
			case inspect.KindPermit:
				h, _ = semaphore(t, e, name, 2, locker.WithTTL(300*time.Millisecond)).NewPermit(1)
			case inspect.KindRead:
				h = rwLock(t, e, name, locker.WithTTL(300*time.Millisecond)).ReadLock()
			default:
				h = rwLock(t, e, name, locker.WithTTL(300*time.Millisecond)).WriteLock()
			}
			lock(t, h)
			parent := e.FamilyPath(k, name)
			// The watch on the node is set a third of the TTL after the
			// grant; a deletion before is seen then.
			nodes, err := familyNodes(c, parent)
			if err != nil || len(nodes) != 1 {
				t.Fatalf("nodes = %v, %v; want one", nodes, err)
			}
			if err := c.Delete(parent+"/"+nodes[0], -1); err != nil {
				t.Fatal(err)
			}
			select {
			case <-h.Lost():
			case <-time.After(10 * time.Second):
				t.Fatal("Lost() not closed after the node was deleted")
			}
			if err := h.Unlock(); !errors.Is(err, locker.ErrLockLost) {
				t.Errorf("Unlock() = %v; want ErrLockLost", err)
			}
		})
	}
	t.Run("lease", func(t *testing.T) {
		l := rwLock(t, e, name+"-lease", locker.WithLease(200*time.Millisecond))
		lock(t, l.WriteLock())
		<-l.WriteLock().Lost()
		if err := l.WriteLock().Unlock(); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("Unlock() after the lease = %v; want ErrLockLost", err)
		}
		waitQueued(t, c, e.FamilyPath(inspect.KindWrite, name+"-lease"), 0)
	})
}

// Cancelled waits leave nothing behind, for every kind.
func TestFamilyCancelLeavesNothing(t *testing.T) {
	c := admin(t)
	es := familyEngines(t, 2)
	name := t.Name()
	rw := rwLock(t, es[0], name)
	lock(t, rw.WriteLock())
	s := semaphore(t, es[0], name, 1)
	p, err := s.Acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	other := rwLock(t, es[1], name)
	op, _ := semaphore(t, es[1], name, 1).NewPermit(1)
	for _, w := range []struct {
		k inspect.Kind
		h locker.Handle
	}{{inspect.KindRead, other.ReadLock()}, {inspect.KindWrite, other.WriteLock()}, {inspect.KindPermit, op}} {
		parent := es[0].FamilyPath(w.k, name)
		for _, cause := range []error{context.DeadlineExceeded, context.Canceled} {
			ctx, cancel := context.WithCancel(context.Background())
			if cause == context.DeadlineExceeded {
				ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
			}
			done := lockAsync(ctx, w.h)
			waitQueued(t, c, parent, 2)
			if cause == context.Canceled {
				cancel()
			}
			err := <-done
			cancel()
			if err != cause {
				t.Fatalf("%v: LockCtx() = %v; want %v", w.k, err, cause)
			}
			waitQueued(t, c, parent, 1)
		}
	}
	unlock(t, rw.WriteLock())
	unlock(t, p)
}

func TestRWConformance(t *testing.T) {
	c := admin(t)
	lockertest.RunRW(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}

func TestSemaphoreConformance(t *testing.T) {
	c := admin(t)
	lockertest.RunSemaphore(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}

// watchedBy waits until each node of parent (in queue order; the count
// node as zk.PermitsNode) is watched by exactly the sessions want gives
// it, besides its owner's own.
func watchedBy(t *testing.T, c *gozk.Conn, parent string, owners []*zk.Engine, want map[string][]*zk.Engine) {
	t.Helper()
	session := func(e *zk.Engine) string { return fmt.Sprintf("0x%x", e.SessionID()) }
	var last string
	ok := func() bool {
		nodes, err := familyNodes(c, parent)
		if err != nil || len(nodes) != len(owners) {
			last = fmt.Sprintf("nodes %v, %v; want %d", nodes, err, len(owners))
			return false
		}
		w, err := watchers(zkAddr)
		if err != nil {
			last = err.Error()
			return false
		}
		paths := append(nodes, zk.PermitsNode)
		for k, n := range paths {
			key := zk.PermitsNode
			got := w[parent+"/"+n]
			if k < len(nodes) {
				key = fmt.Sprint(k)
				delete(got, session(owners[k]))
			}
			wantSet := map[string]bool{}
			for _, e := range want[key] {
				wantSet[session(e)] = true
			}
			same := len(got) == len(wantSet)
			for s := range wantSet {
				same = same && got[s]
			}
			if !same {
				last = fmt.Sprintf("%s (%s) watched by %v; want %v", key, n, got, wantSet)
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("watches: %s", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// No herd on the read-write lock: a reader watches the last writer before
// it, a writer the node just before it; a writer's release wakes the
// readers up to the next writer, and nothing else.
func TestRWNoHerd(t *testing.T) {
	c := admin(t)
	es := familyEngines(t, 5)
	name := t.Name()
	parent := es[0].FamilyPath(inspect.KindRead, name)
	ls := make([]locker.RWLock, len(es))
	for i, e := range es {
		ls[i] = rwLock(t, e, name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lock(t, ls[0].WriteLock())
	done := make([]<-chan error, len(es))
	for i, side := range []locker.Handle{ls[1].WriteLock(), ls[2].ReadLock(), ls[3].ReadLock(), ls[4].WriteLock()} {
		done[i+1] = lockAsync(ctx, side)
		waitQueued(t, c, parent, i+2)
	}
	w1, r2, r3, w4 := es[1], es[2], es[3], es[4]
	watchedBy(t, c, parent, es, map[string][]*zk.Engine{"0": {w1}, "1": {r2, r3}, "3": {w4}})
	unlock(t, ls[0].WriteLock())
	if err := <-done[1]; err != nil {
		t.Fatal(err)
	}
	watchedBy(t, c, parent, []*zk.Engine{w1, r2, r3, w4}, map[string][]*zk.Engine{"0": {r2, r3}, "2": {w4}})
	unlock(t, ls[1].WriteLock())
	for _, i := range []int{2, 3} {
		if err := <-done[i]; err != nil {
			t.Fatal(err)
		}
	}
	// The writer behind them was not woken: its watch on the last reader
	// is still set.
	watchedBy(t, c, parent, []*zk.Engine{r2, r3, w4}, map[string][]*zk.Engine{"1": {w4}})
	unlock(t, ls[2].ReadLock())
	unlock(t, ls[3].ReadLock())
	if err := <-done[4]; err != nil {
		t.Fatal(err)
	}
	unlock(t, ls[4].WriteLock())
}

// No herd on the semaphore: the first waiter watches the holders before it
// and the count, the others the node just before them; a grant tells the
// next waiter only.
func TestSemaphoreNoHerd(t *testing.T) {
	c := admin(t)
	es := familyEngines(t, 5)
	name := t.Name()
	parent := es[0].FamilyPath(inspect.KindPermit, name)
	ps := make([]locker.Handle, len(es))
	for i, e := range es {
		ps[i], _ = semaphore(t, e, name, 2).NewPermit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lock(t, ps[0])
	lock(t, ps[1])
	done := make([]<-chan error, len(es))
	for i := 2; i < len(es); i++ {
		done[i] = lockAsync(ctx, ps[i])
		waitQueued(t, c, parent, i+1)
	}
	h1, w2, w3, w4 := es[1], es[2], es[3], es[4]
	// Every waiter watches the count (SetPermits wakes them all); a
	// release wakes only the next.
	watchedBy(t, c, parent, es, map[string][]*zk.Engine{"0": {w2}, "1": {w2}, "2": {w3}, "3": {w4}, zk.PermitsNode: {w2, w3, w4}})
	unlock(t, ps[0])
	if err := <-done[2]; err != nil {
		t.Fatal(err)
	}
	// w2's grant moved w3 to the head: it watches the holders and the
	// count; w2's own watches stay until those nodes change.
	watchedBy(t, c, parent, []*zk.Engine{h1, w2, w3, w4}, map[string][]*zk.Engine{
		"0": {w2, w3}, "1": {w3}, "2": {w4}, zk.PermitsNode: {w2, w3, w4},
	})
	notDone(t, done[3], "w3")
	unlock(t, ps[1])
	if err := <-done[3]; err != nil {
		t.Fatal(err)
	}
	unlock(t, ps[2])
	unlock(t, ps[3])
	if err := <-done[4]; err != nil {
		t.Fatal(err)
	}
	unlock(t, ps[4])
}
