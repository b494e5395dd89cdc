package zk_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestSequenceCountsCreates: the fact heavy nodes rest on, on the server:
// a sequential node's sequence is the number of children created under its
// parent before it, which a look tells as (cversion + children) / 2, since
// every create and every delete of a child bumps the cversion (an
// ephemeral node's going with its session included) and a data write to
// the parent does not. The sequence is not the cversion, once a child was
// deleted.
func TestSequenceCountsCreates(t *testing.T) {
	c := admin(t)
	parent := "/seqcv"
	if _, err := c.Create(parent, nil, 0, gozk.WorldACL(gozk.PermAll)); err != nil && !errors.Is(err, gozk.ErrNodeExists) {
		t.Fatal(err)
	}
	other := admin(t)
	if _, err := other.Create(parent+"/other", nil, gozk.FlagEphemeral, gozk.WorldACL(gozk.PermAll)); err != nil {
		t.Fatal(err)
	}
	changes := []struct {
		desc string
		do   func() error
	}{
		{"a create", func() error { return nil }},
		{"a child deleted", func() error {
			children, _, err := c.Children(parent)
			if err != nil {
				return err
			}
			return c.Delete(parent+"/"+children[0], -1)
		}},
		{"a write to the parent", func() error { _, err := c.Set(parent, []byte("x"), -1); return err }},
		{"a session's ephemeral node gone with it", func() error {
			other.Close()
			waitFor(t, 10*time.Second, "the closed session's node gone", func() bool {
				ok, _, err := c.Exists(parent + "/other")
				return err == nil && !ok
			})
			return nil
		}},
	}
	for _, ch := range changes {
		if err := ch.do(); err != nil {
			t.Fatalf("%s: %v", ch.desc, err)
		}
		_, st, err := c.Children(parent)
		if err != nil {
			t.Fatal(err)
		}
		path, err := c.Create(parent+"/n-", nil, gozk.FlagEphemeral|gozk.FlagSequence, gozk.WorldACL(gozk.PermAll))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := int64(seq(path)), zk.NextSequence(st); got != want {
			t.Errorf("after %s: sequence %d; want %d, from cversion %d and %d children", ch.desc, got, want, st.Cversion, st.NumChildren)
		}
	}
}

// TestWeightedRW: where the read-write lock queues, weights rank its
// waiters: a heavier writer passes an older reader.
func TestWeightedRW(t *testing.T) {
	c, es := admin(t), familyEngines(t, 3)
	name := "weighted-rw"
	parent := es[0].FamilyPath(inspect.KindWrite, name)
	holder, reader, writer := rwLock(t, es[0], name), rwLock(t, es[1], name), rwLock(t, es[2], name, locker.WithWeight(5))
	lock(t, holder.WriteLock())
	queued := queueInOrder(t, c, parent, 1, reader.ReadLock(), writer.WriteLock())
	readDone, writeDone := queued[0], queued[1]
	// Each turn: one leaves, the next is granted, the rest still wait.
	for _, turn := range []struct {
		leaves  locker.Locker
		granted <-chan error
		waiting []<-chan error
		what    string
	}{
		{holder.WriteLock(), writeDone, []<-chan error{readDone}, "the weight-5 writer, before the older reader"},
		{writer.WriteLock(), readDone, nil, "the weight-1 reader, last"},
		{reader.ReadLock(), nil, nil, ""},
	} {
		unlock(t, turn.leaves)
		if turn.granted != nil {
			lockertest.WantGranted(t, turn.granted, turn.what)
		}
		for _, w := range turn.waiting {
			lockertest.WantPending(t, w, "a waiter after "+turn.what)
		}
	}
}

// TestWeightedAfterDowngrade: a heavy writer that comes while the write
// holder has downgraded records the write hold as granted, though the
// rule alone has a writer wait for its own downgraded reader: it waits for
// the write side, not only for the read side.
func TestWeightedAfterDowngrade(t *testing.T) {
	c, es := admin(t), familyEngines(t, 2)
	name := "weighted-downgrade"
	parent := es[0].FamilyPath(inspect.KindWrite, name)
	holder, writer := rwLock(t, es[0], name), rwLock(t, es[1], name, locker.WithWeight(5))
	lock(t, holder.WriteLock())
	downgradeBeforeHeavy(t, c, parent, holder, writer)
}

// downgradeBeforeHeavy has owner, which holds the write side of the lock
// under parent, downgrade; then heavy's writer must wait for the write
// side, not only for the read side.
func downgradeBeforeHeavy(t *testing.T, c *gozk.Conn, parent string, owner, heavy locker.RWLock) {
	t.Helper()
	lock(t, owner.ReadLock())
	done := lockAsync(t.Context(), heavy.WriteLock())
	waitQueued(t, c, parent, 3)
	unlock(t, owner.ReadLock())
	lockertest.WantPending(t, done, "the weight-5 writer while the downgraded owner still writes")
	unlock(t, owner.WriteLock())
	lockertest.WantGranted(t, done, "the weight-5 writer once the write side is free")
	unlock(t, heavy.WriteLock())
}

// TestDowngradeAfterNewToken: a writer granted under a marked parent holds
// with a token other than its czxid; its downgrade still names the
// writer's czxid, so a heavy writer that comes next still records the
// write hold as granted and waits for it.
func TestDowngradeAfterNewToken(t *testing.T) {
	c, es := admin(t), familyEngines(t, 3)
	name := "downgrade-new-token"
	parent := es[0].FamilyPath(inspect.KindWrite, name)
	holder, light, heavy := rwLock(t, es[0], name), rwLock(t, es[1], name), rwLock(t, es[2], name, locker.WithWeight(5))
	lock(t, holder.WriteLock())
	queued := queueInOrder(t, c, parent, 1, light.WriteLock(), heavy.WriteLock())
	lightDone, heavyDone := queued[0], queued[1]
	unlock(t, holder.WriteLock())
	lockertest.WantGranted(t, heavyDone, "the weight-5 writer, before the older one")
	heavyToken := heavy.WriteLock().Token()
	unlock(t, heavy.WriteLock())
	lockertest.WantGranted(t, lightDone, "the older weight-1 writer")
	if tok := light.WriteLock().Token(); tok <= heavyToken {
		t.Fatalf("the weight-1 writer holds with token %d, not above the weight-5 writer's %d", tok, heavyToken)
	}
	downgradeBeforeHeavy(t, c, parent, light, heavy)
}

// TestWeightedSemaphoreRefused: a semaphore refuses a weight, naming it.
func TestWeightedSemaphoreRefused(t *testing.T) {
	es := familyEngines(t, 1)
	p, err := semaphore(t, es[0], "weighted-sem", 2, locker.WithWeight(3)).NewPermit(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Lock(); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "WithWeight(3)") {
		t.Fatalf("Lock() of a semaphore with WithWeight(3) = %v; want ErrUnsupported naming WithWeight(3)", err)
	}
}

// TestHeavyArrivalRetried: a heavy arrival whose queue changes between its
// look and its create would record stale grants and pass a new holder:
// when a node of its look went (the holder left, the next waiter was
// granted), its create's transaction fails; when a node came (an owner
// took the free name), its sequence is not the one its look predicted,
// and it deletes its node. Either way it queues again, behind the new
// holder.
func TestHeavyArrivalRetried(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		queued bool // a holder and a waiter before the heavy arrival
	}{{"a node went", true}, {"a node came", false}} {
		t.Run(tc.desc, func(t *testing.T) {
			es := familyEngines(t, 3)
			name := "heavy-race-" + strings.ReplaceAll(tc.desc, " ", "-")
			first, second := mutex(t, es[0], name), mutex(t, es[1], name)
			var change func() error
			if tc.queued {
				lock(t, first)
				done := lockAsync(t.Context(), second)
				waitFor(t, 10*time.Second, "the waiter queued", func() bool { return waitersOf(es[0], name) == 1 })
				change = func() error {
					if err := first.Unlock(); err != nil {
						return err
					}
					select {
					case err := <-done:
						return err
					case <-time.After(20 * time.Second):
						return errors.New("the waiter not granted within 20s")
					}
				}
			} else {
				change = second.Lock
			}
			changed := make(chan error, 1)
			var once sync.Once
			es[2].SetBeforeHeavyCreate(func() { once.Do(func() { changed <- change() }) })
			heavy := mutex(t, es[2], name, locker.WithWeight(10))
			heavyDone := lockAsync(t.Context(), heavy)
			if err := <-changed; err != nil {
				t.Fatalf("the change between the look and the create: %v", err)
			}
			lockertest.WantPending(t, heavyDone, "the weight-10 waiter whose look is stale")
			if got := es[2].HeavyTries(); got != 2 {
				t.Errorf("heavy creates tried: %d; want 2", got)
			}
			unlock(t, second)
			lockertest.WantGranted(t, heavyDone, "the weight-10 waiter once the holder left")
			unlock(t, heavy)
		})
	}
}

// TestHeavyArrivalBehindHolder: a node that comes between a heavy
// arrival's look and its create leaves the heavy node valid when the look
// found a holder that excludes every other (a mutex's), still there at the
// create: nothing could be granted in between, so one create does. Behind
// a reader, a reader that comes in between is granted beside it, and the
// heavy writer's record would miss it: it creates again and waits for
// both readers.
func TestHeavyArrivalBehindHolder(t *testing.T) {
	t.Run("a waiter came behind a mutex's holder", func(t *testing.T) {
		c, es := admin(t), familyEngines(t, 3)
		name := "heavy-behind-holder"
		parent := es[0].LockPath(name)
		holder, light := mutex(t, es[0], name), mutex(t, es[1], name)
		lock(t, holder)
		// Between the heavy arrival's look and its create, the weight-1
		// waiter queues: the hook holds the create until the test saw it.
		looked, lightQueued := make(chan struct{}), make(chan struct{})
		es[2].SetBeforeHeavyCreate(sync.OnceFunc(func() {
			close(looked)
			select {
			case <-lightQueued:
			case <-t.Context().Done():
			}
		}))
		heavy := mutex(t, es[2], name, locker.WithWeight(10))
		heavyDone := lockAsync(t.Context(), heavy)
		<-looked
		lightDone := queueInOrder(t, c, parent, 1, light)[0]
		close(lightQueued)
		waitQueued(t, c, parent, 3)
		if got := es[2].HeavyTries(); got != 1 {
			t.Errorf("heavy creates tried: %d; want 1", got)
		}
		unlock(t, holder)
		lockertest.WantGranted(t, heavyDone, "the weight-10 waiter, before the older one")
		lockertest.WantPending(t, lightDone, "the weight-1 waiter")
		unlock(t, heavy)
		lockertest.WantGranted(t, lightDone, "the weight-1 waiter")
		unlock(t, light)
	})
	t.Run("a reader came beside a reader", func(t *testing.T) {
		c, es := admin(t), familyEngines(t, 3)
		name := "heavy-beside-reader"
		parent := es[0].FamilyPath(inspect.KindWrite, name)
		first, second := rwLock(t, es[0], name), rwLock(t, es[1], name)
		lock(t, first.ReadLock())
		changed := make(chan error, 1)
		es[2].SetBeforeHeavyCreate(sync.OnceFunc(func() { changed <- second.ReadLock().Lock() }))
		writer := rwLock(t, es[2], name, locker.WithWeight(10))
		done := lockAsync(t.Context(), writer.WriteLock())
		if err := <-changed; err != nil {
			t.Fatalf("the second reader: %v", err)
		}
		waitQueued(t, c, parent, 3)
		unlock(t, first.ReadLock())
		lockertest.WantPending(t, done, "the weight-10 writer while the second reader reads")
		if got := es[2].HeavyTries(); got != 2 {
			t.Errorf("heavy creates tried: %d; want 2", got)
		}
		unlock(t, second.ReadLock())
		lockertest.WantGranted(t, done, "the weight-10 writer once both readers left")
		unlock(t, writer.WriteLock())
	})
}

// TestInvalidHeavyIgnored: a heavy node whose sequence is not the
// cversion it records (the queue changed between its look and its create)
// is ignored by every other process; a valid one ranks ahead.
func TestInvalidHeavyIgnored(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		valid bool
	}{{"invalid", false}, {"valid", true}} {
		t.Run(tc.desc, func(t *testing.T) {
			c, es := admin(t), familyEngines(t, 2)
			name := "heavy-" + tc.desc
			parent := es[0].LockPath(name)
			holder, waiter := mutex(t, es[0], name), mutex(t, es[1], name)
			lock(t, holder)
			done := lockAsync(t.Context(), waiter)
			waitFor(t, 10*time.Second, "the waiter queued", func() bool { return waitersOf(es[0], name) == 1 })
			heavy := plantHeavy(t, c, parent, tc.valid)
			unlock(t, holder)
			if !tc.valid {
				lockertest.WantGranted(t, done, "the waiter, behind an invalid heavy node")
				if n := waitersOf(es[0], name); n != 0 {
					t.Errorf("Inspect: %d waiters; want 0 (the invalid node left out)", n)
				}
				unlock(t, waiter)
				return
			}
			lockertest.WantPending(t, done, "the weight-1 waiter behind a valid weight-10 node")
			if err := c.Delete(heavy, -1); err != nil {
				t.Fatal(err)
			}
			lockertest.WantGranted(t, done, "the waiter once the heavy node went")
			unlock(t, waiter)
		})
	}
}

// plantHeavy creates, as another process would, a heavy mutex node of
// weight 10 under parent that records the first node as granted, valid or
// not, and returns its path.
func plantHeavy(t *testing.T, c *gozk.Conn, parent string, valid bool) string {
	t.Helper()
	nodes, st, err := c.Children(parent)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(nodes, func(a, b string) int { return cmp.Compare(seq(a), seq(b)) })
	data := zk.HeavyData(st, !valid, []int64{int64(seq(nodes[0]))}, "planted")
	path, err := c.Create(parent+"/"+zk.ProtectedPrefix+strings.Repeat("0", 32)+"-lock-h10-", data, gozk.FlagEphemeral|gozk.FlagSequence, gozk.WorldACL(gozk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWeightedAcrossSessions: lockertest.WeightOrder with the waiters in
// four processes, each with a session of its own.
func TestWeightedAcrossSessions(t *testing.T) {
	lockertest.WeightOrder(t, asEngines(familyEngines(t, 4)))
}

// TestWeightedEnsemble is TestWeightedAcrossSessions on a 3-member
// ensemble, each process on its own member: followers answer the looks,
// and a heavy node's record is checked against their numbering.
func TestWeightedEnsemble(t *testing.T) {
	cl := testserver.ZooKeeperEnsemble(t, 3)
	es := make([]*zk.Engine, 4)
	for i := range es {
		es[i] = newEngine(t, []string{cl.Addrs()[i%len(cl.Addrs())]}, zk.WithConnectTimeout(20*time.Second))
		t.Cleanup(func() {
			if err := es[i].Close(); err != nil {
				t.Errorf("Close() = %v", err)
			}
		})
	}
	lockertest.WeightOrder(t, asEngines(es))
}

func asEngines(es []*zk.Engine) []locker.Engine {
	out := make([]locker.Engine, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

func mutex(t *testing.T, e *zk.Engine, name string, opts ...locker.Option) locker.Handle {
	t.Helper()
	l, err := e.NewLocker(name, opts...)
	if err != nil {
		t.Fatalf("NewLocker(%q) = %v", name, err)
	}
	return l
}

// waitersOf is how many waiters Inspect shows for the mutex name; -1 on an
// error.
// queueInOrder queues ls one after the other under parent, which has
// before children already, each once the one before has its node: their
// arrival order is the order given.
func queueInOrder(t *testing.T, c *gozk.Conn, parent string, before int, ls ...locker.Locker) []<-chan error {
	t.Helper()
	done := make([]<-chan error, len(ls))
	for i, l := range ls {
		done[i] = lockAsync(t.Context(), l)
		waitQueued(t, c, parent, before+i+1)
	}
	return done
}

func waitersOf(e *zk.Engine, name string) int {
	in, err := e.Inspect(context.Background(), name)
	if err != nil {
		return -1
	}
	return len(in.Waiters)
}

// TestWeightedTokensIncrease: a heavy waiter granted before an older light
// one does not leave that one a token below its own, which a fenced
// resource would refuse: tokens increase grant by grant, for the older
// light waiter and for a light one that came after the heavy one.
func TestWeightedTokensIncrease(t *testing.T) {
	c, es := admin(t), familyEngines(t, 4)
	name := "weighted-tokens"
	parent := es[0].LockPath(name)
	holder, light, heavy, later := mutex(t, es[0], name), mutex(t, es[1], name), mutex(t, es[2], name, locker.WithWeight(5)), mutex(t, es[3], name)
	lock(t, holder)
	queued := queueInOrder(t, c, parent, 1, light, heavy)
	lightDone, heavyDone := queued[0], queued[1]
	unlock(t, holder)
	lockertest.WantGranted(t, heavyDone, "the weight-5 waiter, before the older one")
	laterDone := lockAsync(t.Context(), later)
	waitQueued(t, c, parent, 3)
	last, lastWho := heavy.Token(), "the weight-5 waiter"
	for _, turn := range []struct {
		leaves  locker.Handle
		granted locker.Handle
		done    <-chan error
		who     string
	}{
		{heavy, light, lightDone, "the older weight-1 waiter"},
		{light, later, laterDone, "the weight-1 waiter that came after the weight-5 one"},
	} {
		lockertest.WantPending(t, turn.done, turn.who)
		unlock(t, turn.leaves)
		lockertest.WantGranted(t, turn.done, turn.who)
		if tok := turn.granted.Token(); tok <= last {
			t.Errorf("%s granted with token %d, not above the token %d of %s before it", turn.who, tok, last, lastWho)
		}
		last, lastWho = turn.granted.Token(), turn.who
	}
	unlock(t, later)
}

// TestUnweightedKeepsTokens: a queue where no heavy node came makes no
// write beyond its creates' (a lock delay's marker included), so that its
// grants keep their czxids and never pay a renewal.
func TestUnweightedKeepsTokens(t *testing.T) {
	c, es := admin(t), familyEngines(t, 3)
	name := "unweighted-tokens"
	parent := es[0].LockPath(name)
	opt := locker.WithLockDelay(time.Millisecond)
	holder, first, second := mutex(t, es[0], name, opt), mutex(t, es[1], name, opt), mutex(t, es[2], name, opt)
	lock(t, holder)
	// The holder's delay marker is a child too.
	queued := queueInOrder(t, c, parent, 2, first, second)
	firstDone, secondDone := queued[0], queued[1]
	for _, turn := range []struct {
		leaves locker.Handle
		done   <-chan error
	}{{holder, firstDone}, {first, secondDone}} {
		unlock(t, turn.leaves)
		lockertest.WantGranted(t, turn.done, "the next waiter")
	}
	_, st, err := c.Get(parent)
	if err != nil {
		t.Fatal(err)
	}
	if n := zk.ExtraWrites(st); n != 0 {
		t.Errorf("the parent has %d writes beyond its creates' (version %d, cversion %d, %d children); want 0", n, st.Version, st.Cversion, st.NumChildren)
	}
	if first.Token() >= second.Token() {
		t.Errorf("tokens %d then %d; want them increasing", first.Token(), second.Token())
	}
	unlock(t, second)
}
