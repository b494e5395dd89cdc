package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestRWConformance(t *testing.T) { lockertest.RunRW(t, harness) }

func TestSemaphoreConformance(t *testing.T) { lockertest.RunSemaphore(t, harness) }

// TestRWWaitFromRule: the ranges each side watches come from lockrule: a
// writer waits on every older key and any downgraded reader, a reader on
// older writers only.
func TestRWWaitFromRule(t *testing.T) {
	want := map[inspect.Kind][2]string{inspect.KindWrite: {"", "d/"}, inspect.KindRead: {"w/", ""}}
	if len(etcd.RWWait) != len(want) {
		t.Fatalf("RWWait = %v; want %v", etcd.RWWait, want)
	}
	for k, w := range want {
		if got := etcd.RWWait[k]; got != w {
			t.Errorf("RWWait[%v] = %q; want %q", k, got, w)
		}
	}
}

// countingKV counts the transactions of one client: every check of a
// waiter's place and every grant mark is one.
type countingKV struct {
	clientv3.KV
	txns atomic.Int64
}

func (k *countingKV) Txn(ctx context.Context) clientv3.Txn {
	k.txns.Add(1)
	return k.KV.Txn(ctx)
}

// process is one engine on a client of its own whose transactions are
// counted, as one process of a fleet; watching gets a value each time
// etcd confirms one of its watches.
type process struct {
	*etcd.Engine
	kv       *countingKV
	watching <-chan struct{}
}

func newProcess(t *testing.T) process {
	c, watching := watchedClient(t, nil)
	kv := &countingKV{KV: c.KV}
	c.KV = kv
	return process{Engine: newEngine(t, c), kv: kv, watching: watching}
}

// awaitWatch waits until etcd confirmed a watch of p's: a waiter's, once
// it has made the requests of its arrival.
func awaitWatch(t *testing.T, p process, what string) {
	t.Helper()
	select {
	case <-p.watching:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no watch confirmed within 20s", what)
	}
}

func familyName(t *testing.T) string { return fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano()) }

// awaitFamily polls until the inspection of name satisfies cond.
func awaitFamily(t *testing.T, e *etcd.Engine, k inspect.Kind, name, what string, cond func(inspect.FamilyInspection) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in, err := e.InspectFamily(context.Background(), k, name)
		if err != nil {
			t.Fatalf("InspectFamily(%q) = %v", name, err)
		}
		if cond(in) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s; inspection %+v", what, in)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waiters(n int) func(inspect.FamilyInspection) bool {
	return func(in inspect.FamilyInspection) bool { return len(in.Waiters) == n }
}

// txns reads the transaction counts of ps.
func txns(ps []process) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = p.kv.txns.Load()
	}
	return out
}

func wantTxns(t *testing.T, what string, ps []process, before []int64, want ...int64) {
	t.Helper()
	for i, p := range ps {
		if got := p.kv.txns.Load() - before[i]; got != want[i] {
			t.Errorf("%s: process %d made %d transactions; want %d", what, i, got, want[i])
		}
	}
}

// A released writer wakes the readers queued up to the next writer, and
// nothing else: not the next writer, which watches the last of those
// readers, nor the readers behind it. A reader that saw only one writer
// before it holds when that one goes, with no request; a writer checks
// its place once its predecessor went.
func TestRWNoHerd(t *testing.T) {
	name := familyName(t)
	ps := make([]process, 7) // writer, 3 readers, writer, 2 readers
	sides := make([]locker.Handle, len(ps))
	for i := range ps {
		ps[i] = newProcess(t)
		l, err := ps[i].NewRWLock(name)
		if err != nil {
			t.Fatal(err)
		}
		sides[i] = l.ReadLock()
		if i == 0 || i == 4 {
			sides[i] = l.WriteLock()
		}
	}
	if err := sides[0].Lock(); err != nil {
		t.Fatal(err)
	}
	done := make([]<-chan error, len(ps))
	for i := 1; i < len(ps); i++ {
		done[i] = lockAsync(sides[i], 30*time.Second)
		// Its watch comes after the requests of its arrival, which the
		// counts below must not see.
		awaitWatch(t, ps[i], fmt.Sprintf("process %d queued", i))
		awaitFamily(t, ps[0].Engine, inspect.KindRead, name, "queued", waiters(i))
	}
	before := txns(ps)
	if err := sides[0].Unlock(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		lockertest.WantGranted(t, done[i], fmt.Sprintf("reader %d after the writer", i))
	}
	lockertest.WantPending(t, done[4], "writer behind the readers")
	wantTxns(t, "writer released", ps, before, 0, 0, 0, 0, 0, 0, 0)

	before = txns(ps)
	for i := 1; i <= 3; i++ {
		if err := sides[i].Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	lockertest.WantGranted(t, done[4], "second writer")
	lockertest.WantPending(t, done[5], "reader behind the second writer")
	wantTxns(t, "readers released, oldest first", ps, before, 0, 0, 0, 0, 1, 0, 0)

	before = txns(ps)
	if err := sides[4].Unlock(); err != nil {
		t.Fatal(err)
	}
	lockertest.WantGranted(t, done[5], "reader after the second writer")
	lockertest.WantGranted(t, done[6], "last reader")
	// They saw both writers when they queued: one check each.
	wantTxns(t, "second writer released", ps, before, 0, 0, 0, 0, 0, 1, 1)
	for _, s := range sides[5:] {
		if err := s.Unlock(); err != nil {
			t.Error(err)
		}
	}
}

// A released permit grants the first waiter from its watch, with no
// request but the mark of its grant for the waiters behind it (in the
// background); the second, near too (its permits would fit), makes none,
// and the third, far (two permits behind two waiting ones), does nothing
// until the one before it is granted: then it checks its place once. A
// waiter granted with nobody behind it makes no request at all.
func TestSemaphoreNoHerd(t *testing.T) {
	name := familyName(t)
	ps := make([]process, 4) // the holders, then three waiters
	sems := make([]locker.Semaphore, len(ps))
	for i := range ps {
		ps[i] = newProcess(t)
		s, err := ps[i].NewSemaphore(name, 2)
		if err != nil {
			t.Fatal(err)
		}
		sems[i] = s
	}
	var held []locker.Handle
	for range 2 {
		p, ok, err := sems[0].TryAcquire(1)
		if !ok || err != nil {
			t.Fatalf("TryAcquire(1) = %v, %v; want a permit", ok, err)
		}
		held = append(held, p)
	}
	permits := make([]locker.Handle, len(ps))
	done := make([]<-chan error, len(ps))
	for i, n := range []int{0, 1, 1, 2} {
		if n == 0 {
			continue
		}
		p, err := sems[i].NewPermit(n)
		if err != nil {
			t.Fatal(err)
		}
		permits[i], done[i] = p, lockAsync(p, 30*time.Second)
		awaitWatch(t, ps[i], fmt.Sprintf("process %d queued", i))
		awaitFamily(t, ps[0].Engine, inspect.KindPermit, name, "queued", waiters(i))
	}

	before := txns(ps)
	if err := held[0].Unlock(); err != nil {
		t.Fatal(err)
	}
	lockertest.WantGranted(t, done[1], "first waiter")
	lockertest.WantPending(t, done[2], "second waiter, one permit out of two held by others")
	wantTxns(t, "permit released", ps, before, 0, 1, 0, 0)

	before = txns(ps)
	if err := held[1].Unlock(); err != nil {
		t.Fatal(err)
	}
	lockertest.WantGranted(t, done[2], "second waiter")
	lockertest.WantPending(t, done[3], "waiter for two permits")
	wantTxns(t, "second permit released", ps, before, 0, 0, 1, 1)

	before = txns(ps)
	for _, p := range permits[1:3] {
		if err := p.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	lockertest.WantGranted(t, done[3], "waiter for two permits")
	wantTxns(t, "both released, nobody behind", ps, before, 0, 0, 0, 0)
	if err := permits[3].Unlock(); err != nil {
		t.Error(err)
	}
}

// Permits go in queue order: a waiter for one permit behind a waiter for
// two does not take the one that is free.
func TestSemaphoreFIFO(t *testing.T) {
	e := newEngine(t, newClient(t, endpoint))
	name := familyName(t)
	s, err := e.NewSemaphore(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	first, ok, err := s.TryAcquire(1)
	if !ok || err != nil {
		t.Fatalf("TryAcquire(1) = %v, %v", ok, err)
	}
	two, _ := s.NewPermit(2)
	twoDone := lockAsync(two, 30*time.Second)
	awaitFamily(t, e, inspect.KindPermit, name, "waiter for two queued", waiters(1))
	if _, ok, err := s.TryAcquire(1); ok || err != nil {
		t.Errorf("TryAcquire(1) behind a waiter = %v, %v; want false, nil (FIFO)", ok, err)
	}
	one, _ := s.NewPermit(1)
	oneDone := lockAsync(one, 30*time.Second)
	lockertest.WantPending(t, oneDone, "one permit behind a waiter for two")
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	lockertest.WantGranted(t, twoDone, "waiter for two")
	lockertest.WantPending(t, oneDone, "one permit while two are out")
	if err := two.Unlock(); err != nil {
		t.Fatal(err)
	}
	lockertest.WantGranted(t, oneDone, "waiter for one")
	if err := one.Unlock(); err != nil {
		t.Error(err)
	}
}

// The count is stored without a lease: it outlives the engines that used
// it. A mismatch names both counts and is not an engine failure.
func TestSemaphoreCountStored(t *testing.T) {
	c := newClient(t, endpoint)
	name := familyName(t)
	e := newEngine(t, c)
	s, _ := e.NewSemaphore(name, 3)
	p, ok, err := s.TryAcquire(1)
	if !ok || err != nil {
		t.Fatalf("TryAcquire(1) = %v, %v", ok, err)
	}
	if err := p.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	key := e.FamilyRange(inspect.KindPermit, name) + "permits"
	resp, err := c.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "3" || resp.Kvs[0].Lease != 0 {
		t.Fatalf("count key %q after Close = %v; want \"3\" on no lease", key, resp.Kvs)
	}
	other := newEngine(t, newClient(t, endpoint))
	s5, _ := other.NewSemaphore(name, 5)
	_, err = s5.Acquire(context.Background(), 1)
	if !errors.Is(err, locker.ErrPermitsMismatch) || errors.Is(err, locker.ErrUnavailable) ||
		!strings.Contains(err.Error(), "opened with 5 permits") || !strings.Contains(err.Error(), `"3" stored`) {
		t.Errorf("Acquire with 5 permits, 3 stored = %v; want ErrPermitsMismatch naming both counts, not ErrUnavailable", err)
	}
	if in, _ := other.InspectFamily(context.Background(), inspect.KindPermit, name); len(in.Holders)+len(in.Waiters) != 0 {
		t.Errorf("after a mismatch: %+v; want no key left", in)
	}
}

// Lowering the count keeps the holds already granted, which the waiters
// still tell from waiters; the waiters honour the new count.
func TestSemaphoreSetPermitsLower(t *testing.T) {
	e := newEngine(t, newClient(t, endpoint))
	name := familyName(t)
	s, _ := e.NewSemaphore(name, 3)
	var held []locker.Handle
	for range 3 {
		p, ok, err := s.TryAcquire(1)
		if !ok || err != nil {
			t.Fatalf("TryAcquire(1) = %v, %v", ok, err)
		}
		held = append(held, p)
	}
	ctx := context.Background()
	if err := e.SetPermits(ctx, name, 1); err != nil {
		t.Fatalf("SetPermits(1) = %v", err)
	}
	in, err := e.InspectFamily(ctx, inspect.KindPermit, name)
	if err != nil || in.Permits != 1 || len(in.Holders) != 3 || len(in.Waiters) != 0 {
		t.Fatalf("InspectFamily() after lowering = %+v, %v; want Permits 1, 3 holders kept, no waiter", in, err)
	}
	w, _ := s.NewPermit(1)
	done := lockAsync(w, 30*time.Second)
	for _, p := range held[:2] {
		if err := p.Unlock(); err != nil {
			t.Fatal(err)
		}
		lockertest.WantPending(t, done, "waiter while a hold is out of one permit")
	}
	if err := held[2].Unlock(); err != nil {
		t.Fatal(err)
	}
	lockertest.WantGranted(t, done, "waiter after every hold left")
	if err := e.SetPermits(ctx, name, 2); err != nil {
		t.Fatalf("SetPermits(2) = %v", err)
	}
	p, ok, err := s.TryAcquire(1)
	if !ok || err != nil {
		t.Errorf("TryAcquire(1) with 1 of 2 out = %v, %v; want a permit", ok, err)
	} else if err := p.Unlock(); err != nil {
		t.Error(err)
	}
	if err := w.Unlock(); err != nil {
		t.Error(err)
	}
}

// Raising the count wakes the first waiter, which waits for the count as
// well as the holds before it, even when it asked for more permits than
// the count it queued under; granted, it wakes the one behind it, now
// first. The TTL is longer than the wait, so that no periodic check of a
// waiter's place stands in for the wake-up.
func TestSemaphoreSetPermitsRaiseWakesFirstWaiter(t *testing.T) {
	e := newEngine(t, newClient(t, endpoint))
	name := familyName(t)
	s, _ := e.NewSemaphore(name, 5, locker.WithTTL(time.Minute))
	held, ok, err := s.TryAcquire(1)
	if !ok || err != nil {
		t.Fatalf("TryAcquire(1) = %v, %v", ok, err)
	}
	ctx := context.Background()
	if err := e.SetPermits(ctx, name, 1); err != nil {
		t.Fatalf("SetPermits(1) = %v", err)
	}
	wait := func(n int) (locker.Handle, <-chan error) {
		t.Helper()
		p, err := s.NewPermit(n)
		if err != nil {
			t.Fatalf("NewPermit(%d) = %v", n, err)
		}
		return p, lockAsync(p, 50*time.Second)
	}
	three, threeDone := wait(3)
	awaitFamily(t, e, inspect.KindPermit, name, "waiter for three queued", waiters(1))
	five, fiveDone := wait(5)
	awaitFamily(t, e, inspect.KindPermit, name, "waiter for five queued", waiters(2))
	if err := e.SetPermits(ctx, name, 4); err != nil {
		t.Fatalf("SetPermits(4) = %v", err)
	}
	lockertest.WantGranted(t, threeDone, "waiter for three, count raised from 1 to 4")
	lockertest.WantPending(t, fiveDone, "waiter for five, 4 of 4 out")
	if err := e.SetPermits(ctx, name, 9); err != nil {
		t.Fatalf("SetPermits(9) = %v", err)
	}
	lockertest.WantGranted(t, fiveDone, "waiter for five, count raised from 4 to 9")
	for _, p := range []locker.Handle{held, three, five} {
		if err := p.Unlock(); err != nil {
			t.Error(err)
		}
	}
}

// A family hold whose key is deleted by hand is lost at the next check of
// its key, within about its TTL.
func TestFamilyLostOnDeletion(t *testing.T) {
	c := newClient(t, endpoint)
	e := newEngine(t, c)
	const ttl = 3 * time.Second
	rw, _ := e.NewRWLock(familyName(t), locker.WithTTL(ttl))
	sem, _ := e.NewSemaphore(familyName(t), 2, locker.WithTTL(ttl))
	permit, _ := sem.NewPermit(1)
	for _, tc := range []struct {
		kind inspect.Kind
		name string
		h    locker.Handle
	}{{inspect.KindRead, rw.ReadLock().Name(), rw.ReadLock()}, {inspect.KindWrite, rw.WriteLock().Name(), rw.WriteLock()}, {inspect.KindPermit, sem.Name(), permit}} {
		if err := tc.h.Lock(); err != nil {
			t.Fatal(err)
		}
		rng := e.FamilyRange(tc.kind, tc.name)
		resp, err := c.Get(context.Background(), rng, clientv3.WithPrefix(), clientv3.WithMinCreateRev(int64(tc.h.Token())))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%v hold's key under %q = %v, %v; want one", tc.kind, rng, resp, err)
		}
		if _, err := c.Delete(context.Background(), string(resp.Kvs[0].Key)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-tc.h.Lost():
		case <-time.After(3 * ttl):
			t.Fatalf("%v hold: Lost() not closed %v after its key was deleted", tc.kind, 3*ttl)
		}
		if err := tc.h.Unlock(); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("%v hold: Unlock() after its key was deleted = %v; want ErrLockLost", tc.kind, err)
		}
	}
}
