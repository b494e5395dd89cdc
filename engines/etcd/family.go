package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// familyRange is the key range of a read-write lock or a semaphore; an
// escaped name never starts with "%r" or "%s", so it is no mutex's.
func (e *Engine) familyRange(k inspect.Kind, name string) string {
	seg := "/%rw/"
	if k == inspect.KindPermit {
		seg = "/%sem/"
	}
	return e.prefix + seg + nameEscaper.Replace(name) + "/"
}

// The sub-ranges and keys of the family (see the package doc).
const (
	rwReaders    = "r/"
	rwWriters    = "w/"
	rwDowngrades = "d/" // "d/<the writer's key's create revision>/"
	semCount     = "permits"
	semQueue     = "q/"
)

// rwSubs are the sub-ranges of a read-write lock, with the entry of
// lockrule their keys are.
var rwSubs = []struct {
	sub   string
	entry lockrule.Entry
}{
	{rwReaders, lockrule.Entry{Kind: inspect.KindRead}},
	{rwWriters, lockrule.Entry{Kind: inspect.KindWrite}},
	{rwDowngrades, lockrule.Entry{Kind: inspect.KindRead, Downgrade: true}},
}

// rwWait is what holds out a read-write lock key of each kind, derived
// from lockrule: any older key of [0] (a sub-range, "" for all) and any
// key of [1] ("": none). A kind whose rule maps onto no such ranges is
// missing, and refused.
var rwWait = func() map[inspect.Kind][2]string {
	m := make(map[inspect.Kind][2]string)
	for _, k := range []inspect.Kind{inspect.KindRead, inspect.KindWrite} {
		var before, anywhere []string
		for _, s := range rwSubs {
			if lockrule.WaitsFor(k, s.entry, true) {
				before = append(before, s.sub)
			}
			if lockrule.WaitsFor(k, s.entry, false) {
				anywhere = append(anywhere, s.sub)
			}
		}
		var also string
		if len(anywhere) == 1 {
			also = anywhere[0]
		}
		switch {
		case len(anywhere) > 1:
		case len(before) == len(rwSubs):
			m[k] = [2]string{"", also}
		case len(before) == 1:
			m[k] = [2]string{before[0], also}
		}
	}
	return m
}()

// familyWaiter returns the waiter of a read-write lock side or semaphore
// hold, after setting where its key goes. A downgrade is granted here (ok)
// or not at all.
func (e *Engine) familyWaiter(ctx context.Context, h *driver.Hold, st *holdState) (waiter, bool, error) {
	rng := e.familyRange(h.Kind, h.Name)
	wait, rw := rwWait[h.Kind]
	switch {
	case h.Kind == inspect.KindPermit && h.Weight > 1:
		return nil, false, fmt.Errorf("WithWeight(%d): %w: %w", h.Weight, errSemaphoreWeights, errors.ErrUnsupported)
	case h.Kind == inspect.KindPermit:
		st.prefix = rng + semQueue
		st.value = semValue(h.Permits, false, h.Owner)
		return &semWaiter{e: e, st: st, rng: rng, queue: rng + semQueue, count: rng + semCount,
			limit: strconv.Itoa(h.Limit), want: h.Permits, reads: 2 * h.Limit}, false, nil
	case !rw:
		return nil, false, fmt.Errorf("%s locks: %w", h.Kind, errors.ErrUnsupported)
	case h.Writer != nil:
		if ok, err := e.downgrade(ctx, h, st, rng); ok || err != nil {
			return nil, ok, err
		}
	}
	st.prefix = rng + rwWriters
	if h.Kind == inspect.KindRead {
		st.prefix = rng + rwReaders
	}
	w := &lockWaiter{e: e, st: st, rng: rng + wait[0], queue: rng, heavy: st.prefix + heavySub, floor: e.floorKey(rng), weight: h.Weight}
	if wait[1] != "" {
		w.also = rng + wait[1]
	}
	w.counted = w.also == ""
	return w, false, nil
}

// downgrade grants a read to the owner of the write hold h.Writer in one
// transaction, if the writer's key still exists, under "d/<token>/" where
// every writer sees it. The read has the writer's token.
func (e *Engine) downgrade(ctx context.Context, h *driver.Hold, st *holdState, rng string) (bool, error) {
	wst, _ := h.Writer.State.(*holdState)
	if wst == nil || wst.slot == nil {
		return false, nil
	}
	// The writer's create revision, which a writer granted out of arrival
	// order does not have as its token (weight.go): the rule finds the
	// writer by it.
	st.prefix = rng + rwDowngrades + strconv.FormatInt(wst.rev, 10) + "/"
	ok, err := e.tryCreate(ctx, h, st, func(t clientv3.Txn, put clientv3.Op) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(wst.key), "=", wst.rev)).Then(put)
	}, nil)
	if ok {
		h.Token = h.Writer.Token
	}
	return ok, err
}

// semValue is a permit key's value: "<permits> <queued|granted> <owner>".
// A key granted after waiting is marked granted, which wakes the waiter
// watching it; one granted on arrival needs no mark (keys before it only
// go), until SetPermits lowers the count.
func semValue(permits int, granted bool, owner string) string {
	state := " queued "
	if granted {
		state = " granted "
	}
	return strconv.Itoa(permits) + state + owner
}

// parseSemValue reads a permit key's value; a value it cannot read counts
// as one permit, queued.
func parseSemValue(v []byte) (permits int, granted bool, owner string) {
	n, rest, _ := strings.Cut(string(v), " ")
	state, owner, _ := strings.Cut(rest, " ")
	permits, err := strconv.Atoi(n)
	if err != nil || permits < 1 {
		permits = 1
	}
	return permits, state == "granted", owner
}

// semWaiter is the waiter of a semaphore hold: its key holds when its
// permits and those of every key before it fit the stored count. A "near"
// waiter (the first, or one whose permits and those of the waiters before
// it fit) watches the whole range, counting releases and the count from
// the events, and holds when they fit, with no request. Any other watches
// the key just before its own for its deletion or grant mark.
type semWaiter struct {
	e     *Engine
	st    *holdState
	rng   string // the semaphore's range: the count and the queue
	queue string // rng + semQueue
	count string // rng + semCount: the stored count, on no lease
	limit string // the opener's count, as stored
	want  int    // the hold's permits
	reads int    // the keys a read of the queue returns at most, less one

	// A near waiter's view: the keys before it, read at rev, and events.
	near     bool
	rev      int64
	blockers map[string]int // key → permits
	held     int            // the blockers' permits
	permits  int            // the stored count
	fits     bool           // the view lets it hold: check grants it
	// behind: a key was seen queued after this one, which a grant must
	// wake by a mark (a later one sees the grant by the rule).
	behind bool
}

// readOps reads what a permit key's place depends on: the count, the
// first keys of the queue and the newest one (before rev if rev > 0), and
// with rev > 0 whether a key came after rev (etcd's count ignores revision
// filters).
func (w *semWaiter) readOps(rev int64) []clientv3.Op {
	first := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(int64(w.reads) + 1)}
	last := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2), clientv3.WithKeysOnly()}
	if rev > 0 {
		first = append(first, clientv3.WithMaxCreateRev(rev-1))
		last = append(last, clientv3.WithMaxCreateRev(rev-1))
	}
	ops := []clientv3.Op{clientv3.OpGet(w.count), clientv3.OpGet(w.queue, first...), clientv3.OpGet(w.queue, last...)}
	if rev > 0 {
		ops = append(ops, clientv3.OpGet(w.queue, clientv3.WithPrefix(), clientv3.WithMinCreateRev(rev+1), clientv3.WithLimit(1), clientv3.WithKeysOnly()))
	}
	return ops
}

// stored reads the count; when none is stored it stores the opener's and
// asks for another look (again). With check, another count than the
// opener's fails with ErrPermitsMismatch.
func (w *semWaiter) stored(ctx context.Context, h *driver.Hold, r *etcdserverpb.ResponseOp, check bool) (n int, rev int64, again bool, err error) {
	kvs := r.GetResponseRange().Kvs
	if len(kvs) == 0 {
		rctx, cancel := w.e.bound(ctx)
		defer cancel()
		_, err := w.e.client.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(w.count), "=", 0)).
			Then(clientv3.OpPut(w.count, w.limit)).
			Commit()
		return 0, 0, true, err
	}
	v := string(kvs[0].Value)
	n, err = strconv.Atoi(v)
	if (check && v != w.limit) || err != nil || n < 1 {
		return 0, 0, false, fmt.Errorf("%w: opened with %d permits, %q stored",
			locker.ErrPermitsMismatch, h.Limit, v)
	}
	return n, kvs[0].ModRevision, false, nil
}

// try creates the key when the queue is empty and the count the
// opener's; otherwise, from the count and queue read, if the permits fit,
// no key came and the count did not change since.
func (w *semWaiter) try(ctx context.Context, h *driver.Hold) (bool, error) {
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(w.count), "=", w.limit),
		clientv3.Compare(clientv3.CreateRevision(w.queue).WithPrefix(), "=", 0),
	}
	build := func(t clientv3.Txn, put clientv3.Op) clientv3.Txn {
		return t.If(cmps...).Then(put).Else(w.readOps(0)[:2]...)
	}
	return w.e.tryCreate(ctx, h, w.st, build, func(resp *clientv3.TxnResponse) (bool, error) {
		n, countRev, again, err := w.stored(ctx, h, resp.Responses[0], h.CheckLimit)
		if again || err != nil {
			return again, err
		}
		kvs := resp.Responses[1].GetResponseRange().Kvs
		if len(kvs) > w.reads && n > w.reads {
			w.reads = n // more keys than read could fit
			return true, nil
		}
		sum := 0
		for _, kv := range kvs {
			p, _, _ := parseSemValue(kv.Value)
			sum += p
		}
		if !lockrule.Fits(sum, h.Permits, n) {
			return false, nil
		}
		cmps = []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(w.queue).WithPrefix(), "<", resp.Header.Revision+1),
			clientv3.Compare(clientv3.ModRevision(w.count), "=", countRev),
		}
		return true, nil
	})
}

// enqueue creates the key if the count is stored (and the opener's, when
// checked), reading its place in the same transaction.
func (w *semWaiter) enqueue(ctx context.Context, h *driver.Hold) (watchSpec, int64, error) {
	w.near, w.fits, w.behind = false, false, false
	for range attempts {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.count), ">", 0)}
		if h.CheckLimit {
			cmps = append(cmps, clientv3.Compare(clientv3.Value(w.count), "=", w.limit))
		}
		s, resp, err := w.e.create(ctx, h, w.st, func(t clientv3.Txn, put clientv3.Op) clientv3.Txn {
			return t.If(cmps...).Then(append([]clientv3.Op{put}, w.readOps(0)...)...).Else(clientv3.OpGet(w.count))
		})
		if err != nil {
			return watchSpec{}, 0, err
		}
		if !resp.Succeeded {
			w.e.free(s)
			if _, _, _, err := w.stored(ctx, h, resp.Responses[0], h.CheckLimit); err != nil {
				return watchSpec{}, 0, err
			}
			continue // stored now
		}
		rev := resp.Header.Revision
		w.st.set(s, rev)
		spec, granted, more := w.place(h, resp.Responses[1:], rev)
		switch {
		case more:
			return w.check(ctx, h)
		case granted:
			w.st.value = semValue(h.Permits, true, h.Owner) // for a fixed lease's move
		}
		return spec, rev, nil
	}
	return watchSpec{}, 0, fmt.Errorf("semaphore %q: the permit count vanished %d times", h.Name, attempts)
}

// place decides from the reads of readOps, made at rev, whether the key
// holds, and otherwise what it waits for; more asks for a longer read.
func (w *semWaiter) place(h *driver.Hold, rs []*etcdserverpb.ResponseOp, rev int64) (spec watchSpec, granted, more bool) {
	n := h.Limit // a count deleted by hand: the opener's
	if kvs := rs[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if c, err := strconv.Atoi(string(kvs[0].Value)); err == nil && c > 0 {
			n = c
		}
	}
	kvs := rs[1].GetResponseRange().Kvs
	complete := len(kvs) <= w.reads
	blockers := make(map[string]int)
	sum, waiting := 0, 0 // the permits of the keys before, and of the waiters among them
	for _, kv := range kvs {
		if kv.CreateRevision >= w.st.rev {
			complete = true
			break
		}
		p, marked, _ := parseSemValue(kv.Value)
		sum += p
		if waiting > 0 || (!marked && !lockrule.Fits(sum, 0, n)) {
			waiting += p // a waiter: so is every key after it
		}
		if waiting > 0 && !lockrule.Fits(waiting, w.want, n) {
			// Far: watch the key just before ours. The first waiter is
			// near even when it asks for more than the count.
			w.near = false
			for _, pred := range rs[2].GetResponseRange().Kvs {
				if pred.CreateRevision < w.st.rev {
					return watchSpec{key: string(pred.Key), puts: true}, false, false
				}
			}
			return watchSpec{key: string(kv.Key), puts: true}, false, false
		}
		blockers[string(kv.Key)] = p
	}
	if !complete {
		w.reads = max(2*w.reads, n)
		return watchSpec{}, false, true
	}
	if lockrule.Fits(sum, w.want, n) {
		w.near = false
		return watchSpec{}, true, false
	}
	w.near, w.rev, w.blockers, w.held, w.permits = true, rev, blockers, sum, n
	return watchSpec{key: w.rng, prefix: true, puts: true}, false, false
}

// check grants a near waiter when its view says its permits fit;
// otherwise it reads its place again, and grants it if they fit.
func (w *semWaiter) check(ctx context.Context, h *driver.Hold) (watchSpec, int64, error) {
	if w.fits {
		w.fits = false
		return w.grant(h)
	}
	for range maxTries {
		rctx, cancel := w.e.bound(ctx)
		resp, err := w.e.ifCreated(rctx, w.st.key, w.st.rev, w.readOps(w.st.rev)...)
		cancel()
		if err != nil {
			return watchSpec{}, 0, err
		}
		w.behind = len(resp.Responses[3].GetResponseRange().Kvs) > 0
		spec, granted, more := w.place(h, resp.Responses, resp.Header.Revision)
		switch {
		case more:
			continue
		case !granted:
			return spec, resp.Header.Revision, nil
		}
		return w.grant(h)
	}
	return watchSpec{}, 0, fmt.Errorf("semaphore %q: the queue grew %d times while being read", h.Name, maxTries)
}

// grant ends a wait; a waiter behind is woken by a mark in the background
// (if that fails, it finds out at its next look).
func (w *semWaiter) grant(h *driver.Hold) (watchSpec, int64, error) {
	w.st.value = semValue(h.Permits, true, h.Owner) // also for a fixed lease's move
	if !w.behind {
		return watchSpec{}, 0, nil
	}
	w.e.markLater(w.st)
	return watchSpec{}, 0, nil
}

// wakes: a far waiter on any change of the key before it; a near one when
// its permits fit, or the count or its own key went.
func (w *semWaiter) wakes(resp clientv3.WatchResponse) bool {
	if !w.near {
		return len(resp.Events) > 0
	}
	for _, ev := range resp.Events {
		kv := ev.Kv
		if kv.ModRevision <= w.rev {
			continue // in the view already
		}
		k, del := string(kv.Key), ev.Type == mvccpb.DELETE
		switch {
		case k == w.count && !del:
			n, err := strconv.Atoi(string(kv.Value))
			if err != nil || n < 1 {
				return true
			}
			w.permits = n
		case k == w.count, k == w.st.key && del:
			return true
		case !del && kv.CreateRevision > w.st.rev:
			w.behind = true
		case del:
			if p, ok := w.blockers[k]; ok {
				delete(w.blockers, k)
				w.held -= p
			}
		}
	}
	w.fits = lockrule.Fits(w.held, w.want, w.permits)
	return w.fits
}
