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

// familyRange is the key range of a read-write lock ("<prefix>/%rw/<escaped
// name>/") or a semaphore ("<prefix>/%sem/<escaped name>/"). An escaped
// name never has a '%' but in "%25" and "%2F", so these ranges are no
// mutex's, nor each other's.
func (e *Engine) familyRange(k inspect.Kind, name string) string {
	seg := "/%rw/"
	if k == inspect.KindPermit {
		seg = "/%sem/"
	}
	return e.prefix + seg + nameEscaper.Replace(name) + "/"
}

// The sub-ranges of a read-write lock: readers, writers, and the readers
// that downgraded from the write side, which hold out every writer (under
// "d/<the writer's token>/").
const (
	rwReaders    = "r/"
	rwWriters    = "w/"
	rwDowngrades = "d/"
)

// The keys of a semaphore: the stored count, and the queue of holds and
// waiters.
const (
	semCount = "permits"
	semQueue = "q/"
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
// from lockrule once: any older key of older (a sub-range, "" for the
// whole range) and any key of also ("": none). A kind whose rule maps
// onto no such ranges is missing, and refused.
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
// hold, after setting where its key goes. A downgrade is granted here, at
// once (ok), or not at all.
func (e *Engine) familyWaiter(ctx context.Context, h *driver.Hold, st *holdState) (waiter, bool, error) {
	rng := e.familyRange(h.Kind, h.Name)
	wait, rw := rwWait[h.Kind]
	switch {
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
	w := &lockWaiter{e: e, st: st, rng: rng + wait[0]}
	if wait[1] != "" {
		w.also = rng + wait[1]
	}
	// With nothing to look for anywhere (readers), the deletion of the
	// only older key that held it out lets the key hold.
	w.counted = w.also == ""
	return w, false, nil
}

// downgrade grants a read to the owner of the write hold h.Writer in one
// transaction, if the writer's key still exists (then it holds: keys older
// than a holder's only go). The read key goes in the downgrades' range,
// where every writer sees it whatever its place in line. The read has the
// writer's token, which its key's name carries ("d/<token>/<slot>") for
// operators (InspectFamily, ForceUnlockFamily); its key's create revision
// (st.rev) identifies it.
func (e *Engine) downgrade(ctx context.Context, h *driver.Hold, st *holdState, rng string) (bool, error) {
	wst, _ := h.Writer.State.(*holdState)
	if wst == nil || wst.slot == nil {
		return false, nil
	}
	st.prefix = rng + rwDowngrades + strconv.FormatUint(h.Writer.Token, 10) + "/"
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
// behind it (it watches that key); a key granted on arrival is not marked:
// the permits of the keys before it and its own fit the count, and so they
// do for every later reader of the queue (keys before it only go).
// SetPermits marks the holds before lowering the count, so that the rule
// still tells them from waiters.
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

// mismatchError is a semaphore opened with a count other than the stored
// one.
type mismatchError struct {
	limit  int
	stored string
}

func (m mismatchError) Error() string {
	return fmt.Sprintf("opened with %d permits, %s stored", m.limit, m.stored)
}

func (m mismatchError) Is(target error) bool { return target == locker.ErrPermitsMismatch }

// semWaiter is the waiter of a semaphore hold. The queue holds the keys of
// holds and waiters, in create revision order; a key holds when its permits
// and those of every key before it fit the stored count (FIFO: when a key
// fits, every key before it does). The first waiter, whatever its permits
// (lockrule's head: it waits for every hold before it and for the count),
// and every waiter whose permits and those of the waiters before it fit
// the count ("near") watches the semaphore's range, keeps count of the
// permits of the keys before it and of the stored count from the events,
// and holds as soon as they fit, with no request: releases of the holds
// before it and a raised count are all it waits for. Every other waiter
// waits for a waiter before it to be granted or to go: it watches the key
// just before its own for its deletion or its grant mark.
type semWaiter struct {
	e     *Engine
	st    *holdState
	rng   string // the semaphore's range: the count and the queue
	queue string // rng + semQueue
	count string // rng + semCount: the stored count, on no lease
	limit string // the opener's count, as stored
	want  int    // the hold's permits
	reads int    // the keys a read of the queue returns at most, less one

	// A near waiter's view: the keys before it, read at rev, and the
	// events after rev.
	near     bool
	rev      int64
	blockers map[string]int // key → permits
	held     int            // the blockers' permits
	permits  int            // the stored count
	fits     bool           // the view lets it hold: check grants it
	// behind tells that a key was seen queued after this one: a grant
	// must then be marked, to wake it. A key that comes after the grant
	// sees it by the rule, and one that came before is counted: the near
	// waiter's watch delivers its creation before the event that grants.
	behind bool
}

// readOps reads what a permit key's place depends on: the count, the
// first keys of the queue (before rev if rev > 0) and the newest one
// before rev (rev 0: the two newest, the caller's among them); with rev >
// 0, also whether a key came after rev (a read of one key: etcd's count
// ignores revision filters).
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

// stored reads the count from a read of the count key. When none is
// stored it stores the opener's (only if still none), and asks for another
// look (again). With check set, a count other than the opener's fails
// with ErrPermitsMismatch.
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
		return 0, 0, false, mismatchError{limit: h.Limit, stored: strconv.Quote(v)}
	}
	return n, kvs[0].ModRevision, false, nil
}

// try takes the permits if they fit now, leaving nothing otherwise: one
// transaction creates the key when the queue is empty and the count is the
// opener's; otherwise it reads the count and the queue, and a second one
// creates the key if no key came and the count did not change since.
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

// enqueue creates the key, if the count is stored (and is the opener's,
// on the semaphore's first acquisition), reading its place in the same
// transaction.
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
			// Far, behind a waiter: wait for the key just before ours to
			// go or be granted. The first waiter is near even when it asks
			// for more than the count, so that a raised count wakes it.
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

// grant ends a wait: the key holds. When a key waits behind it, the key
// is marked granted, which wakes that waiter, in the background: the
// grant does not wait for it. The mark is written only while the key has
// its create revision, so never over a released key nor another hold's;
// if it fails, the waiter behind finds out at its next look (the key's
// deletion, or a TTL later).
func (w *semWaiter) grant(h *driver.Hold) (watchSpec, int64, error) {
	w.st.value = semValue(h.Permits, true, h.Owner) // also for a fixed lease's move
	if !w.behind {
		return watchSpec{}, 0, nil
	}
	w.e.markLater(w.st)
	return watchSpec{}, 0, nil
}

// wakes: a far waiter wakes on any change of the key before it (gone, or
// marked granted). A near waiter follows the deletions of the keys before
// it and the stored count from the events after its read, and wakes when
// its permits fit, or when the count or its own key went.
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
