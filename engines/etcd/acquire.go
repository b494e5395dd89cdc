package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// holdState is the engine's part of a driver.Hold.
type holdState struct {
	prefix string           // the key range the hold's key goes in, ending with '/'
	value  string           // the key's value: the owner ID (semaphores: permits too)
	slot   *slot            // the hold's key
	key    string           // slot.key
	rev    int64            // the key's create revision: the token, but for a downgraded read
	fixed  clientv3.LeaseID // the own lease of a WithLease hold, once granted
	epoch  int64            // goneWatch.epoch at the grant, when no watch ran
}

func (st *holdState) set(s *slot, rev int64) {
	st.slot, st.key, st.rev = s, s.key, rev
}

// errRequeue tells a waiter that its key vanished with its lease (or by
// hand): it queues again, at the back.
var errRequeue = errors.New("requeue")

// attempts bounds how often one acquisition starts over on a new lease
// because the one it used ended under it.
const attempts = 3

// waiter is what differs between the kinds of hold: how a key gets in
// without waiting, how it queues and what it waits for. Leases, slots, the
// wait loop (queue), renewal and release are shared.
type waiter interface {
	// try makes one attempt that leaves nothing behind on contention.
	try(ctx context.Context, h *driver.Hold) (bool, error)
	// enqueue creates the waiter's key (st.set) and returns what blocks
	// it, seen at the returned revision: nothing when it holds at once;
	// revision 0 when check must tell.
	enqueue(ctx context.Context, h *driver.Hold) (watchSpec, int64, error)
	// check looks again, in one round trip if it can; errKeyGone when the
	// waiter's key vanished.
	check(ctx context.Context, h *driver.Hold) (watchSpec, int64, error)
	// wakes tells whether a response of the watch calls for a check.
	wakes(resp clientv3.WatchResponse) bool
}

// watchSpec is what a waiter watches: one key, or a range, and whether
// puts matter besides deletions. A zero watchSpec means nothing blocks it.
type watchSpec struct {
	key    string
	prefix bool   // key is a range
	end    string // the end of the range from key, if not a prefix
	puts   bool   // PUT events are delivered too
	prev   bool   // deletions carry the deleted key as it was
}

// Acquire implements driver.Backend: each acquisition puts a key of its
// own in the lock's range, ordered by create revision (the token).
func (e *Engine) Acquire(ctx context.Context, h *driver.Hold, wait bool) (bool, error) {
	st := &holdState{prefix: e.lockPrefix(h.Name), value: h.Owner}
	h.State = st
	if e.refused() {
		// Not a request that clientv3 would retry until ctx ends.
		return false, e.fail("acquire", h.Name, errNoConnection)
	}
	var w waiter = &lockWaiter{e: e, st: st, rng: st.prefix, mutex: true, queue: st.prefix, heavy: st.prefix + heavySub, floor: e.floorKey(st.prefix), weight: h.Weight}
	ok, err := false, error(nil)
	if h.Kind != inspect.KindMutex {
		w, ok, err = e.familyWaiter(ctx, h, st)
	}
	switch {
	case ok || err != nil:
	case wait:
		ok, err = e.acquireWait(ctx, h, st, w)
	default:
		ok, err = w.try(ctx, h)
	}
	switch {
	case err == nil:
		return ok, nil
	case errors.Is(err, errQueued):
		return false, ctx.Err() // etcd had answered: the name was held
	case errors.Is(err, locker.ErrClosed) || e.isClosed():
		return false, fmt.Errorf("etcd: acquire %q: %w", h.Name, locker.ErrClosed)
	}
	return false, e.fail("acquire", h.Name, err)
}

// errQueued ends a wait that etcd left queued behind another holder until
// the caller gave up; Acquire returns the caller's ctx.Err() for it.
var errQueued = errors.New("etcd: still queued")

// create puts st.value in a slot of st.prefix on the shared lease of h's
// TTL, within the transaction build makes of the put. The caller frees the
// slot when the key was not created. On a cluster, or for a caller whose
// context can end, it is hedged (createHedged).
func (e *Engine) create(ctx context.Context, h *driver.Hold, st *holdState, build func(t clientv3.Txn, put clientv3.Op) clientv3.Txn) (*slot, *clientv3.TxnResponse, error) {
	if e.attempt < e.timeout || ctx.Done() != nil {
		return e.createHedged(ctx, func(actx context.Context) (*slot, *clientv3.TxnResponse, error) {
			return e.createOnce(actx, h, st, build)
		})
	}
	return e.createOnce(ctx, h, st, build)
}

// createOnce is one create, of the request timeout; it starts over on a
// new lease when etcd no longer has the lease.
func (e *Engine) createOnce(ctx context.Context, h *driver.Hold, st *holdState, build func(t clientv3.Txn, put clientv3.Op) clientv3.Txn) (*slot, *clientv3.TxnResponse, error) {
	for attempt := 1; ; attempt++ {
		l, err := e.sharedLease(ctx, h)
		if err != nil {
			return nil, nil, err
		}
		s := e.take(l, st.prefix)
		if s == nil {
			continue // retired meanwhile
		}
		rctx, cancel := e.bound(ctx)
		resp, err := build(e.client.Txn(rctx), clientv3.OpPut(s.key, st.value, clientv3.WithLease(l.id), clientv3.WithPrevKV())).Commit()
		cancel()
		if err == nil {
			if prev := overwritten(resp); prev != nil {
				// A create of this slot given up on was applied late:
				// the put kept that key's create revision, so it is not
				// where the transaction says. Delete it, start again.
				rctx, cancel := e.bound(ctx)
				_, err = e.ifCreated(rctx, s.key, prev.CreateRevision, clientv3.OpDelete(s.key))
				cancel()
				if err != nil && !errors.Is(err, errKeyGone) {
					e.leftBehind(ctx, s)
					return nil, nil, err
				}
				e.free(s)
				continue
			}
			return s, resp, nil
		}
		if isLeaseNotFound(err) && attempt < attempts {
			e.free(s)
			e.kill(l, err)
			continue
		}
		e.leftBehind(ctx, s)
		return nil, nil, err
	}
}

// overwritten returns the key a create's put (its first operation)
// replaced: nil unless the key existed.
func overwritten(resp *clientv3.TxnResponse) *mvccpb.KeyValue {
	if !resp.Succeeded || len(resp.Responses) == 0 {
		return nil
	}
	if p := resp.Responses[0].GetResponsePut(); p != nil {
		return p.PrevKv
	}
	return nil
}

// ifCreated runs ops in one transaction if key still has create revision
// rev: so never on a released key nor another hold's (errKeyGone then).
func (e *Engine) ifCreated(ctx context.Context, key string, rev int64, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	resp, err := e.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(ops...).Commit()
	if err == nil && !resp.Succeeded {
		err = errKeyGone
	}
	return resp, err
}

// hedges bounds the attempts of one create: one per attempt timeout
// through the ride-through window, at least 3.
func (e *Engine) hedges() int {
	return max(int(e.window/e.attempt)+1, 3)
}

// created is what an attempt of createHedged made.
type created struct {
	s    *slot
	resp *clientv3.TxnResponse
}

// createHedged sends the create again (once makes an attempt, in a new
// slot) each time its attempts have gone unanswered for the attempt
// timeout, and takes the first answer. No attempt is cut short, not even
// when the caller gives up (who returns at once): one given up on may
// still be applied later, leaving a key no one deletes. So every attempt
// runs its request timeout and the unneeded ones are settled in the
// background.
func (e *Engine) createHedged(ctx context.Context, once func(actx context.Context) (*slot, *clientv3.TxnResponse, error)) (*slot, *clientv3.TxnResponse, error) {
	actx, abort := context.WithCancel(context.WithoutCancel(ctx))
	began := time.Now()
	h := &hedging[created]{
		once: func() (created, error) {
			s, resp, err := once(actx)
			return created{s, resp}, err
		},
		retry: func(err error) bool { return e.again(ctx, err, began) },
		more: func(_, inflight int) bool {
			return inflight < e.hedges() && ctx.Err() == nil && time.Since(began)+e.attempt <= e.timeout
		},
		answers: make(chan answer[created], e.hedges()),
	}
	a, ended := h.run(ctx, e)
	if a.err != nil && !ended {
		abort() // failed: what is still in flight need not be applied
	}
	e.settle(h.answers, h.inflight, abort)
	switch {
	case ended:
		return nil, nil, ctx.Err()
	case a.err != nil:
		return nil, nil, a.err
	}
	return a.v.s, a.v.resp, nil
}

// settle deletes, in the background, the keys the n attempts still in
// flight create; abort ends them when the engine closes.
func (e *Engine) settle(results <-chan answer[created], n int, abort context.CancelFunc) {
	if n == 0 {
		abort()
		return
	}
	drain := func(ctx context.Context) {
		stop := context.AfterFunc(ctx, abort)
		defer stop()
		defer abort()
		for range n {
			a := <-results
			if a.err == nil {
				e.discard(ctx, a.v.s, a.v.resp)
			}
		}
	}
	if !e.core.Go(drain) {
		abort() // closing: the attempts end now, their keys with the leases
		drain(context.Background())
	}
}

// discard deletes the key an unneeded attempt made, comparing its create
// revision with the transaction's.
func (e *Engine) discard(ctx context.Context, s *slot, resp *clientv3.TxnResponse) {
	rctx, cancel := e.cleanupContext(ctx)
	defer cancel()
	if _, err := e.ifCreated(rctx, s.key, resp.Header.Revision, clientv3.OpDelete(s.key)); err != nil && !errors.Is(err, errKeyGone) {
		e.orphan(s) // deleted before its lease is renewed again
		return
	}
	e.free(s)
}

// tryCreate creates the key only when nothing holds it out, leaving
// nothing on contention; then retry (nil: none) may ask for another
// transaction from etcd's answer.
func (e *Engine) tryCreate(ctx context.Context, h *driver.Hold, st *holdState, build func(t clientv3.Txn, put clientv3.Op) clientv3.Txn, retry func(*clientv3.TxnResponse) (bool, error)) (bool, error) {
	for attempt, tries := 1, 0; ; {
		s, resp, err := e.create(ctx, h, st, build)
		if err != nil {
			return false, err
		}
		if !resp.Succeeded {
			e.free(s)
			if tries++; retry == nil || tries > maxTries {
				return false, nil
			}
			if again, err := retry(resp); !again || err != nil {
				return false, err
			}
			continue
		}
		st.set(s, resp.Header.Revision)
		h.Token = uint64(resp.Header.Revision)
		err = e.hold(ctx, h, st)
		if err == nil {
			return true, nil
		}
		if (errors.Is(err, errLeaseGone) || errors.Is(err, errKeyGone)) && attempt < attempts {
			attempt++
			continue
		}
		return false, err
	}
}

// maxTries bounds the transactions of one try (or read of a busy queue).
const maxTries = 5

// lockWaiter is the waiter of the mutex and of both sides of a read-write
// lock: its key holds when no key of rng is older and no key of also ("":
// none) exists; it watches the newest older key of rng, else one of also.
type lockWaiter struct {
	e         *Engine
	st        *holdState
	rng, also string
	// counted (readers): when the key blocking it was the only older one
	// (sole), its deletion (gone) lets it hold with no other read. A sole
	// reader watches the writers' range for that deletion (blocked) and
	// for a heavy writer's arrival, which may rank ahead of it. A mutex's
	// waiter that decides from the whole queue (full) may be sole too.
	counted, sole, gone bool
	blocked             string
	// marks (a mutex in a queue longer than markDepth): a granted key is
	// marked, and the deletion of a marked key blocking it lets a waiter
	// hold without reading the range: one request per hand-off.
	mutex, marks bool
	// Weights (weight.go): queue is the whole queue's range, heavy the
	// prefix of the key of a weight > 1; full: a heavy key was seen, the
	// waiter decides from the whole queue.
	// floor is the key a heavy arrival that may pass an older key
	// writes; floored: it existed at a read (see granted). goneRev is
	// the revision of the deletion a sole reader saw.
	queue, heavy, floor string
	weight              int
	full, floored       bool
	goneRev             int64
}

// markDepth is the queue length from which waiters mark their keys: a
// mark is a write, dearer than reading a short range (about 1µs a key).
const markDepth = 64

// try creates the key only if rng (and also) is empty.
func (w *lockWaiter) try(ctx context.Context, h *driver.Hold) (bool, error) {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.rng).WithPrefix(), "=", 0)}
	if w.also != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(w.also).WithPrefix(), "=", 0))
	}
	return w.e.tryCreate(ctx, h, w.st, func(t clientv3.Txn, put clientv3.Op) clientv3.Txn {
		return t.If(cmps...).Then(put)
	}, nil)
}

// enqueue creates the key and counts the keys of rng in the same
// transaction: a count reads no key, where the sorted read would run in
// etcd's apply loop, ahead of the releases. Behind others, the waiter
// reads its place by check, outside the write (rev 0).
func (w *lockWaiter) enqueue(ctx context.Context, h *driver.Hold) (watchSpec, int64, error) {
	if w.weight > 1 {
		return w.enqueueHeavy(ctx, h)
	}
	w.full = false
	ops := w.alsoOps([]clientv3.Op{clientv3.OpGet(w.rng, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())})
	reads := len(ops)
	if w.counted {
		// A sole reader may be granted by the deletion it watches, with
		// no read: its token depends on the floor (see granted).
		ops = append(ops, w.floorOp())
	}
	s, resp, err := w.e.create(ctx, h, w.st, func(t clientv3.Txn, put clientv3.Op) clientv3.Txn {
		return t.Then(append([]clientv3.Op{put}, ops...)...)
	})
	if err != nil {
		return watchSpec{}, 0, err
	}
	w.st.set(s, resp.Header.Revision)
	w.gone = false
	if w.counted {
		w.sawFloor(resp.Responses[1+reads])
	}
	n := resp.Responses[1].GetResponseRange().Count
	w.marks = w.mutex && n > markDepth
	if n > 1 {
		return watchSpec{}, 0, nil
	}
	return w.blocker(resp.Responses[1 : 1+reads]), resp.Header.Revision, nil
}

func (w *lockWaiter) alsoOps(ops []clientv3.Op) []clientv3.Op {
	if w.also == "" {
		return ops
	}
	return append(ops, clientv3.OpGet(w.also, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly()))
}

// blocker picks what the key waits for from the reads of enqueue or check.
func (w *lockWaiter) blocker(rs []*etcdserverpb.ResponseOp) watchSpec {
	kvs := rs[0].GetResponseRange().Kvs
	for i, kv := range kvs {
		if kv.CreateRevision < w.st.rev {
			w.sole = w.counted && i == len(kvs)-1 && len(kvs) < 2
			if w.sole {
				w.blocked = string(kv.Key)
				return w.soleSpec()
			}
			return watchSpec{key: string(kv.Key), prev: w.marks}
		}
	}
	if len(rs) > 1 {
		if kvs := rs[1].GetResponseRange().Kvs; len(kvs) > 0 {
			return watchSpec{key: string(kvs[0].Key)}
		}
	}
	return watchSpec{}
}

// check reads in one transaction that the key still exists, and what
// blocks it now; one attempt: queue tries again soon.
func (w *lockWaiter) check(ctx context.Context, h *driver.Hold) (watchSpec, int64, error) {
	rctx, cancel := w.e.attemptBound(ctx)
	defer cancel()
	switch {
	case w.sole && w.gone && w.marks:
		return w.confirm(rctx, h, clientv3.OpPut(w.st.key, w.st.value, clientv3.WithIgnoreLease()))
	case w.sole && w.gone:
		return w.granted(h, w.goneRev) // nothing that may rank ahead came: see soleWakes
	case w.full:
		return w.checkFull(rctx, h)
	}
	w.gone = false
	limit := int64(1)
	if w.counted {
		limit = 2 // is it the only one?
	}
	get := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithLimit(limit), clientv3.WithMaxCreateRev(w.st.rev - 1), clientv3.WithKeysOnly()}
	ops := w.alsoOps([]clientv3.Op{clientv3.OpGet(w.rng, get...)})
	resp, err := w.e.ifCreated(rctx, w.st.key, w.st.rev, append(append(ops, w.floorOp()), w.heavyCounts()...)...)
	if err != nil {
		return watchSpec{}, 0, err
	}
	w.sawFloor(resp.Responses[len(ops)])
	if anyHeavy(resp.Responses[len(ops)+1:]) {
		return w.checkFull(rctx, h)
	}
	spec := w.blocker(resp.Responses[:len(ops)])
	if spec.key != "" {
		return spec, resp.Header.Revision, nil
	}
	if w.marks && h.Renew { // a fixed lease's key is moved, so marked, when held
		w.e.markLater(w.st)
	}
	return w.granted(h, resp.Header.Revision)
}

func (w *lockWaiter) wakes(resp clientv3.WatchResponse) bool {
	if w.sole && (w.counted || w.full) {
		return w.soleWakes(resp)
	}
	w.gone = hasDelete(resp)
	if w.gone && w.marks {
		w.sole = heldWhenDeleted(resp, w.st.rev)
	}
	return w.gone
}

// heldWhenDeleted tells whether resp deletes a key created before rev that
// was marked held.
func heldWhenDeleted(resp clientv3.WatchResponse, rev int64) bool {
	for _, ev := range resp.Events {
		if p := ev.PrevKv; ev.Type == mvccpb.DELETE && p != nil && p.CreateRevision < rev && p.ModRevision > p.CreateRevision {
			return true
		}
	}
	return false
}

// mark puts the value of st's key again, moving its mod revision past its
// create revision: the waiter behind learns it was held (the mutex) or
// wakes (a semaphore). errKeyGone when the key is no longer st's.
func (e *Engine) mark(ctx context.Context, st *holdState) error {
	_, err := e.ifCreated(ctx, st.key, st.rev, clientv3.OpPut(st.key, st.value, clientv3.WithIgnoreLease()))
	return err
}

// markLater marks st's key in the background; if it fails, the waiter
// behind reads the range instead.
func (e *Engine) markLater(st *holdState) {
	marked := *st // the fields mark reads, as they are now
	e.core.Go(func(ctx context.Context) {
		rctx, cancel := e.bound(ctx)
		defer cancel()
		if err := e.mark(rctx, &marked); err != nil {
			e.log.Debug("etcd: marking a granted key failed", "key", marked.key, "err", err)
		}
	})
}

// acquireWait queues a key and waits until what blocks it has gone,
// watching only that; it queues again when its key vanished with its lease.
func (e *Engine) acquireWait(ctx context.Context, h *driver.Hold, st *holdState, w waiter) (bool, error) {
	for {
		if e.isClosed() {
			return false, locker.ErrClosed
		}
		spec, rev, err := w.enqueue(ctx, h)
		if err != nil {
			return false, err
		}
		h.Token = uint64(st.rev)
		err = e.queue(ctx, h, st, w, spec, rev)
		if errors.Is(err, errRequeue) {
			*st = holdState{prefix: st.prefix, value: st.value}
			h.Token = 0
			h.Asking()
			continue
		}
		return err == nil, err
	}
}

// queue waits until nothing blocks the hold's key, watching what blocks
// it (spec, seen at revision rev), and takes the hold then. It checks its
// place again when the watch ends, every TTL (should a deletion go
// unseen), and after a failure, with a growing delay, while the lease
// lives. It returns errRequeue when its key or its lease went.
func (e *Engine) queue(ctx context.Context, h *driver.Hold, st *holdState, wt waiter, spec watchSpec, rev int64) error {
	q := &queued{e: e, h: h, st: st, wt: wt, spec: spec, rev: rev, check: rev == 0, recheck: time.Now().Add(st.slot.l.ttl)}
	defer q.stop() // also when await ends the wait
	for {
		if q.check {
			if err := q.checkPlace(ctx); err != nil {
				return err
			}
		}
		if !q.check && q.spec.key == "" {
			q.stopWatch()
			err := e.hold(ctx, h, st)
			if errors.Is(err, errLeaseGone) || errors.Is(err, errKeyGone) {
				return errRequeue
			}
			return err
		}
		if !q.check && (q.w == nil || q.w.spec != q.spec) {
			q.stopWatch()
			q.w = e.watch(q.spec)
		}
		if err := q.await(ctx); err != nil {
			return err
		}
	}
}

// queued is the state of one waiter in queue.
type queued struct {
	e  *Engine
	h  *driver.Hold
	st *holdState
	wt waiter

	spec    watchSpec
	rev     int64
	w       *watch        // on spec, nil when none
	check   bool          // spec and rev are stale: ask etcd
	retry   time.Duration // > 0 after a failure: the delay before trying again
	recheck time.Time     // when to check should the watch miss a deletion
	failed  error         // of the latest request, nil once etcd answered
	timer   *time.Timer   // await's, made by the first: most keys never wait
}

func (q *queued) stopWatch() {
	q.e.stopWatch(q.w)
	q.w = nil
}

// stop ends the watch and the timer.
func (q *queued) stop() {
	q.stopWatch()
	if q.timer != nil {
		q.timer.Stop()
	}
}

// checkPlace asks etcd what the waiter waits for now; errRequeue when its
// key is gone.
func (q *queued) checkPlace(ctx context.Context) error {
	l := q.st.slot.l
	q.h.Asking()
	p, r, err := q.wt.check(ctx, q.h)
	q.failed = err
	switch {
	case err == nil:
		q.spec, q.rev, q.check, q.retry = p, r, false, 0
		q.recheck = time.Now().Add(l.ttl)
	case errors.Is(err, errKeyGone):
		q.e.free(q.st.slot)
		return errRequeue
	case ctx.Err() == nil:
		q.e.noteTrouble()
		q.e.log.Debug("etcd: checking a waiter's place failed, will retry", "name", q.h.Name, "err", err)
		if q.e.expired(l) {
			q.e.kill(l, err)
		}
		q.retry = backoff(q.retry)
	}
	return nil
}

// await waits for the watch, a timer or the end of the wait, which it
// returns as Acquire's error.
func (q *queued) await(ctx context.Context) error {
	var (
		events  clientv3.WatchChan
		pending <-chan struct{} // the watch is being set
	)
	if q.w != nil {
		select {
		case <-q.w.ready:
			events = q.w.events
		default:
			pending = q.w.ready
		}
	}
	wait := time.Until(q.recheck)
	troubled, inTrouble := q.e.trouble()
	if inTrouble {
		// The watch may sit on a member that froze.
		wait = min(wait, q.e.window/3)
	}
	if q.check {
		wait = q.retry
	}
	wait = max(wait, time.Millisecond)
	if q.timer == nil {
		q.timer = time.NewTimer(wait)
	} else {
		q.timer.Reset(wait)
	}

	select {
	case <-ctx.Done():
		q.e.abandon(q.st.slot)
		if q.failed != nil {
			return fmt.Errorf("%w: %w", q.failed, ctx.Err())
		}
		return errQueued
	case <-q.e.done:
		q.e.abandon(q.st.slot)
		return locker.ErrClosed
	case <-q.st.slot.l.dead:
		q.e.abandon(q.st.slot) // most likely gone with the lease
		return errRequeue
	case <-troubled:
		q.check = true // a member went away: is the way clear already?
	case <-pending:
		// Set: wait on its events from the next round.
	case resp, ok := <-events:
		switch {
		case ok && resp.Created:
			q.w.created = true
			// Writes since the read that set spec went unwatched.
			q.check = q.check || resp.Header.Revision > q.rev
		case !ok || resp.Canceled || resp.Err() != nil || q.wt.wakes(resp):
			q.w.created = true // nothing more to wait for
			q.stopWatch()
			q.check = true
		}
	case <-q.timer.C:
		q.check = true
	}
	return nil
}

// watch is a waiter's watch on what blocks it.
type watch struct {
	spec    watchSpec
	ready   chan struct{}      // closed once events is set
	events  clientv3.WatchChan // set by the goroutine that calls Watch
	cancel  context.CancelFunc
	created bool // etcd confirmed it
}

// watch watches spec from the revision etcd creates it at (the waiter
// looks again if that is past its read): a watch from an older revision
// waits for etcd's sync loop, every 100ms. All watches share one gRPC
// stream (same context metadata), end with stop, and require a leader, so
// that a member cut off from its cluster cancels them.
func (e *Engine) watch(spec watchSpec) *watch {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	w := &watch{spec: spec, ready: make(chan struct{}), cancel: cancel}
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
	if spec.prev {
		opts = append(opts, clientv3.WithPrevKV())
	}
	switch {
	case spec.prefix:
		opts = append(opts, clientv3.WithPrefix())
	case spec.end != "":
		opts = append(opts, clientv3.WithRange(spec.end))
	}
	if !spec.puts {
		opts = append(opts, clientv3.WithFilterPut())
	}
	// clientv3's Watch blocks until etcd confirms, which a hung server
	// never does: the request timeout bounds it, in the background. It is
	// not cut shorter: a watch cancelled unconfirmed leaks the stream
	// (clientv3 3.7 ends one only when its last confirmed watch goes).
	set := func(context.Context) {
		bound := time.AfterFunc(e.timeout, cancel)
		w.events = e.watcher.Watch(wctx, spec.key, opts...)
		bound.Stop()
		close(w.ready)
	}
	if !e.core.Go(set) {
		set(context.Background()) // closing: the watcher is closed next
	}
	return w
}

// stopWatch stops w; an unconfirmed one in the background (see stop).
func (e *Engine) stopWatch(w *watch) {
	switch {
	case w == nil:
	case w.created:
		w.cancel()
	case !e.core.Go(func(context.Context) { w.stop(e.timeout) }):
		w.cancel() // closing: the watcher closes with the engine
	}
}

// stop cancels the watch once etcd has confirmed it, waiting at most
// timeout for that.
func (w *watch) stop(timeout time.Duration) {
	if w == nil {
		return
	}
	<-w.ready // bounded by the request timeout
	if !w.created {
		t := time.NewTimer(timeout)
		defer t.Stop()
	wait:
		for {
			select {
			case resp, ok := <-w.events:
				if !ok || resp.Created || resp.Canceled {
					break wait
				}
			case <-t.C:
				break wait
			}
		}
	}
	w.cancel()
}

func hasDelete(resp clientv3.WatchResponse) bool {
	for _, ev := range resp.Events {
		if ev.Type == mvccpb.DELETE {
			return true
		}
	}
	return false
}

// backoff doubles a retry delay, from 50ms up to 1s.
func backoff(d time.Duration) time.Duration {
	return min(max(2*d, 50*time.Millisecond), time.Second)
}

// hold completes a grant. A renewed hold joins its lease; a fixed lease
// starts with the hold: the key moves onto a lease of its own, granted
// now, keeping its create revision (the token).
func (e *Engine) hold(ctx context.Context, h *driver.Hold, st *holdState) error {
	if h.Renew {
		err := e.register(h, st)
		if err != nil {
			// Retired, perhaps only by our estimate: the key may outlive it.
			e.abandon(st.slot)
		}
		return err
	}
	h.Asking()
	rctx, cancel := e.bound(ctx)
	g, err := e.client.Grant(rctx, fixedSeconds(h))
	cancel()
	if err == nil {
		rctx, cancel := e.bound(ctx)
		_, err = e.ifCreated(rctx, st.key, st.rev, clientv3.OpPut(st.key, st.value, clientv3.WithLease(g.ID)))
		cancel()
		if err != nil {
			e.revokeLater(g.ID)
		}
	}
	if err == nil {
		st.fixed = g.ID
		if err = e.register(h, st); err != nil { // deleted since the move
			e.revokeLater(g.ID)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, errKeyGone):
		e.free(st.slot)
	default:
		e.leftBehind(ctx, st.slot)
	}
	return err
}

// fixedSeconds is the TTL of a fixed lease's own lease: a second more than
// the hold's TTL, so that the server never ends it before the Core does;
// with a lock delay, the hold's life (the delay covers the Core's end).
func fixedSeconds(h *driver.Hold) int64 {
	if h.Delay > 0 {
		return wholeSeconds(h.Life())
	}
	return wholeSeconds(h.TTL) + 1
}

// HonoursDeadlines implements driver.DeadlineHonourer: a release returns
// when its context ends.
func (e *Engine) HonoursDeadlines() bool { return true }

// Release implements driver.Backend: it deletes the hold's key and reports
// ErrLockLost unless the key had the hold's create revision.
func (e *Engine) Release(ctx context.Context, h *driver.Hold) error {
	st, _ := h.State.(*holdState)
	if st == nil || st.slot == nil {
		return e.fail("release", h.Name, errKeyGone)
	}
	if !e.unregister(h, st) {
		// Lost: its slot may be another hold's by now.
		return e.fail("release", h.Name, errKeyGone)
	}
	deleted, tries, err := e.deleteHeld(ctx, st)
	if st.fixed != clientv3.NoLease {
		e.revokeQuiet(ctx, st.fixed)
	}
	if err != nil {
		e.orphan(st.slot) // deleted before its lease is renewed again
		return e.fail("release", h.Name, err)
	}
	e.free(st.slot)
	// After several attempts, an unanswered one most likely deleted it.
	if !deleted && tries == 1 {
		return e.fail("release", h.Name, errKeyGone)
	}
	return nil
}

// deleteHeld deletes a hold's key and tells whether it had the hold's
// create revision, and in how many attempts. With one endpoint a plain
// delete, cheaper than a transaction, does: the slot is the hold's until
// the delete is confirmed. Hedged attempts may be applied late, after the
// slot went to another hold, so each compares the create revision.
func (e *Engine) deleteHeld(ctx context.Context, st *holdState) (deleted bool, tries int, err error) {
	if e.attempt >= e.timeout {
		rctx, cancel := e.attemptBound(ctx)
		defer cancel()
		resp, err := e.client.Delete(rctx, st.key, clientv3.WithPrevKV())
		if err != nil {
			return false, 1, err
		}
		return len(resp.PrevKvs) > 0 && resp.PrevKvs[0].CreateRevision == st.rev, 1, nil
	}
	return hedge(ctx, e, func(rctx context.Context) (bool, error) {
		_, err := e.ifCreated(rctx, st.key, st.rev, clientv3.OpDelete(st.key))
		if errors.Is(err, errKeyGone) {
			return false, nil
		}
		return err == nil, err
	})
}
