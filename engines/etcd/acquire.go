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
	shared *lease           // the lease the key was created on: slot.l
	fixed  clientv3.LeaseID // the own lease of a WithLease hold, once granted
}

func (st *holdState) set(s *slot, rev int64) {
	st.slot, st.key, st.shared, st.rev = s, s.key, s.l, rev
}

// errRequeue tells a waiter that its key vanished with its lease (or by
// hand): it queues again, at the back.
var errRequeue = errors.New("requeue")

// attempts bounds how often one acquisition starts over on a new lease
// because the one it used ended under it.
const attempts = 3

// waiter is what differs between the kinds of hold (the mutex, the sides of
// a read-write lock, semaphore permits): how a key gets in without waiting,
// how it queues and what it waits for. The leases, slots, the wait loop
// (queue) and the holds' renewal and release are the same for all.
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
	prefix bool // key is a range
	puts   bool // PUT events are delivered too
	prev   bool // deletions carry the deleted key as it was
}

// Acquire implements driver.Backend. Each acquisition puts a key of its own
// under the lock's prefix; the key with the lowest create revision holds the
// lock, and its create revision is the fencing token. The lock family
// (family.go) orders its keys the same way, with its own rules of who holds.
func (e *Engine) Acquire(ctx context.Context, h *driver.Hold, wait bool) (bool, error) {
	st := &holdState{prefix: e.lockPrefix(h.Name), value: h.Owner}
	h.State = st
	if e.refused() {
		// Not a request that clientv3 would retry until ctx ends.
		return false, e.fail("acquire", h.Name, errNoConnection)
	}
	var w waiter = &lockWaiter{e: e, st: st, rng: st.prefix, mutex: true}
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
	// Past here a request went unanswered, the caller's context may have
	// ended meanwhile.
	return false, e.fail("acquire", h.Name, err)
}

// errQueued ends a wait that etcd left queued behind another holder until
// the caller gave up; Acquire returns the caller's ctx.Err() for it.
var errQueued = errors.New("etcd: still queued")

// create puts the key of an acquisition with st.value, in a slot of
// st.prefix on the shared lease of h's TTL, within the transaction build
// makes of the put; it starts over on a new lease when etcd no longer has
// the lease. The caller frees the slot when the key was not created.
//
// On a cluster, the create is sent again, in another slot, whenever it
// has gone unanswered for the attempt timeout (see createHedged). A caller
// whose context can end leaves at once when it does, and its create is
// settled in the background.
func (e *Engine) create(ctx context.Context, h *driver.Hold, st *holdState, build func(t clientv3.Txn, put clientv3.Op) clientv3.Txn) (*slot, *clientv3.TxnResponse, error) {
	if e.attempt < e.timeout || ctx.Done() != nil {
		return e.createHedged(ctx, func(actx context.Context) (*slot, *clientv3.TxnResponse, error) {
			return e.createOnce(actx, h, st, build)
		})
	}
	return e.createOnce(ctx, h, st, build)
}

// createOnce is one create, of the request timeout.
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
				// The key was there: a create of this slot given up on
				// (unanswered for the request timeout) was applied late,
				// after the slot was swept and freed. Our put kept that
				// key's create revision, so the key is not where the
				// transaction says: delete it and start again.
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

// overwritten returns the key the put of a create's transaction (its first
// operation, when it succeeded) replaced: nil unless the key existed.
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

// hedges bounds the attempts of one create: enough to go on sending one
// every attempt timeout through the ride-through window (an election),
// and at least 3.
func (e *Engine) hedges() int {
	return max(int(e.window/e.attempt)+1, 3)
}

// created is what an attempt of createHedged made.
type created struct {
	s    *slot
	resp *clientv3.TxnResponse
}

// createHedged sends the create (once makes one attempt, in a new slot)
// again each time its attempts have gone unanswered for the attempt
// timeout, while the request timeout lasts, and takes the first answer. A
// create must not be given up on and sent again: one given up on may still
// be applied later (a member that froze reads it when it resumes; a leader
// elected may commit it), and its key would stand in the queue with no one
// to delete it. So every attempt runs its full request timeout, as a
// single create does, and what it leaves is settled in the background: a
// key of an attempt answered after the one taken is deleted, comparing its
// create revision; an attempt never answered is left behind as a single
// create's would be. A create forwarded to a leader that died, which
// nothing answers, costs its caller an attempt timeout, not the request
// timeout. The caller's context ending does not end the attempts either: a
// create on the wire may still be applied, and a delete sent before its
// answer may be applied before it, leaving a key on a live lease. The
// caller returns at once and the attempts are settled like the unneeded
// ones.
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

// settle receives the outcomes of the n attempts of createHedged still in
// flight, in the background, and deletes the keys of those that created
// one; abort ends them when the engine closes.
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

// discard deletes the key an unneeded attempt of createHedged made, if it
// made one: only a key created by that transaction has its revision as
// create revision.
func (e *Engine) discard(ctx context.Context, s *slot, resp *clientv3.TxnResponse) {
	rctx, cancel := e.cleanupContext(ctx)
	defer cancel()
	if _, err := e.ifCreated(rctx, s.key, resp.Header.Revision, clientv3.OpDelete(s.key)); err != nil && !errors.Is(err, errKeyGone) {
		e.orphan(s) // deleted before its lease is renewed again
		return
	}
	e.free(s)
}

// tryCreate makes one attempt with a transaction that creates the key only
// when nothing holds it out (it succeeds), so that contention leaves
// nothing behind. On contention, retry (nil: none) reads etcd's answer and
// may ask for another transaction, which build then makes.
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

// maxTries bounds the transactions of one try that etcd's answers ask for:
// a semaphore busy with other acquisitions reports contention then.
const maxTries = 5

// lockWaiter is the waiter of the mutex and of both sides of a read-write
// lock: its key holds when no key of rng was created before it and no key
// of also ("": none) exists; it waits on the newest such key of rng, else
// on one of also, for its deletion.
type lockWaiter struct {
	e         *Engine
	st        *holdState
	rng, also string
	// counted: when the key read as blocking it was the only key of rng
	// before it (keys created later come after it), its deletion lets
	// it hold without another look (sole, then gone). Readers count;
	// writers must look for downgraded readers.
	counted, sole, gone bool
	// marks (the mutex, in a long queue: see markDepth): a key found first
	// after queueing is marked held, and the deletion of the key blocking
	// it, if marked, lets it hold without reading the range before it:
	// that key was first once, and no key can come between the two. It
	// checks that its own key is still there, and marks it, in one
	// transaction: so each hand-off costs one request, whatever the length
	// of the queue. A key found first by reading the range is marked in
	// the background.
	mutex, marks bool
}

// markDepth is the length of a queue, in keys before a new waiter's, from
// which its waiters mark their keys held: etcd reads every key of the
// range to find the one before a waiter's (about a microsecond each), and
// a mark is a write, which costs more than reading a short range.
const markDepth = 64

// try creates the key only if rng (and also) is empty, so that contention
// costs one round trip and leaves nothing.
func (w *lockWaiter) try(ctx context.Context, h *driver.Hold) (bool, error) {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.rng).WithPrefix(), "=", 0)}
	if w.also != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(w.also).WithPrefix(), "=", 0))
	}
	return w.e.tryCreate(ctx, h, w.st, func(t clientv3.Txn, put clientv3.Op) clientv3.Txn {
		return t.If(cmps...).Then(put)
	}, nil)
}

// enqueue creates the key and counts, in the same transaction, the keys of
// rng: a count etcd takes from its index, without reading a key, where
// the sorted read that finds the key just before ours reads every key of
// rng, and would do so inside etcd's apply loop, in front of the releases
// that hand the lock over. Alone, the key holds at once (unless also
// blocks it); behind others, the waiter reads its place by check, outside
// the write (rev 0).
func (w *lockWaiter) enqueue(ctx context.Context, h *driver.Hold) (watchSpec, int64, error) {
	ops := []clientv3.Op{clientv3.OpGet(w.rng, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())}
	s, resp, err := w.e.create(ctx, h, w.st, func(t clientv3.Txn, put clientv3.Op) clientv3.Txn {
		return t.Then(append([]clientv3.Op{put}, w.alsoOps(ops)...)...)
	})
	if err != nil {
		return watchSpec{}, 0, err
	}
	w.st.set(s, resp.Header.Revision)
	w.gone = false
	n := resp.Responses[1].GetResponseRange().Count
	w.marks = w.mutex && n > markDepth
	if n > 1 {
		return watchSpec{}, 0, nil
	}
	return w.blocker(resp.Responses[1:]), resp.Header.Revision, nil
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

// check reads in one transaction that the key still exists with its
// create revision, and what blocks it now.
func (w *lockWaiter) check(ctx context.Context, h *driver.Hold) (watchSpec, int64, error) {
	// One attempt: a check that fails is tried again soon (queue), on the
	// next member when this one went away.
	rctx, cancel := w.e.attemptBound(ctx)
	defer cancel()
	switch {
	case w.sole && w.gone && w.marks:
		return watchSpec{}, 0, w.e.mark(rctx, w.st)
	case w.sole && w.gone:
		return watchSpec{}, 0, nil
	}
	w.gone = false
	limit := int64(1)
	if w.counted {
		limit = 2 // is it the only one?
	}
	get := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithLimit(limit), clientv3.WithMaxCreateRev(w.st.rev - 1), clientv3.WithKeysOnly()}
	resp, err := w.e.ifCreated(rctx, w.st.key, w.st.rev, w.alsoOps([]clientv3.Op{clientv3.OpGet(w.rng, get...)})...)
	if err != nil {
		return watchSpec{}, 0, err
	}
	spec := w.blocker(resp.Responses)
	if spec.key == "" && w.marks && h.Renew { // a fixed lease's key is moved, so marked, when held
		w.e.markLater(w.st)
	}
	return spec, resp.Header.Revision, nil
}

func (w *lockWaiter) wakes(resp clientv3.WatchResponse) bool {
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

// mark marks the key of st, found first after a wait: its value put again,
// on the same lease, moves its mod revision past its create revision,
// which tells the waiter behind it, when the key goes, that it was held
// (the mutex), or wakes that waiter at once (a semaphore). It is written
// only while the key has its create revision, so never over a released
// key nor another hold's: errKeyGone then.
func (e *Engine) mark(ctx context.Context, st *holdState) error {
	_, err := e.ifCreated(ctx, st.key, st.rev, clientv3.OpPut(st.key, st.value, clientv3.WithIgnoreLease()))
	return err
}

// markLater marks the key of st in the background: the grant does not wait
// for it. If it fails, the waiter behind reads the range instead.
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

// queue waits until nothing blocks the hold's key, watching what blocks it
// (spec, seen at revision rev; for the mutex, the key created just before
// it) for its deletion, and takes the hold then. The keeper keeps its
// lease alive meanwhile, one keep-alive for all the waiters and holds on
// it. It checks its place again
// when the watch ends, every TTL of its lease (a fallback should a deletion
// go unseen), and after a failure, with a growing delay: etcd in trouble is
// ridden out while the lease lives. It returns errRequeue when its key
// vanished or its lease ended.
func (e *Engine) queue(ctx context.Context, h *driver.Hold, st *holdState, wt waiter, spec watchSpec, rev int64) error {
	q := &queued{e: e, h: h, st: st, wt: wt, spec: spec, rev: rev, check: rev == 0, recheck: time.Now().Add(st.shared.ttl)}
	defer q.stopWatch()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
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
		if err := q.await(ctx, timer); err != nil {
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

	spec  watchSpec
	rev   int64
	w     *watch        // on spec, nil when none
	check bool          // spec and rev are stale: ask etcd
	retry time.Duration // > 0 after a failure: the delay before trying again
	// recheck is when the place is checked again should the watch miss
	// the deletion.
	recheck time.Time
	// failed is the error of the latest request, nil once etcd answered.
	failed error
}

func (q *queued) stopWatch() {
	q.e.stopWatch(q.w)
	q.w = nil
}

// checkPlace asks etcd what the waiter waits for now; errRequeue when its
// key is gone.
func (q *queued) checkPlace(ctx context.Context) error {
	l := q.st.shared
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

// await waits for the watch, the recheck or retry time, or the end of the
// wait, which it returns as Acquire's error.
func (q *queued) await(ctx context.Context, timer *time.Timer) error {
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
		// The watch may sit on a member that froze: look again every
		// third of the window, a few reads per waiter per episode.
		wait = min(wait, q.e.window/3)
	}
	if q.check {
		wait = q.retry
	}
	timer.Reset(max(wait, time.Millisecond))

	select {
	case <-ctx.Done():
		q.stopWatch()
		q.e.abandon(q.st.slot)
		if q.failed != nil {
			return fmt.Errorf("%w: %w", q.failed, ctx.Err())
		}
		return errQueued
	case <-q.e.done:
		q.stopWatch()
		q.e.abandon(q.st.slot)
		return locker.ErrClosed
	case <-q.st.shared.dead:
		q.stopWatch()
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
			// Writes since the read that set spec went unwatched: look
			// again, keeping the watch.
			q.check = q.check || resp.Header.Revision > q.rev
		case !ok || resp.Canceled || resp.Err() != nil || q.wt.wakes(resp):
			q.w.created = true // nothing more to wait for
			q.stopWatch()
			q.check = true
		}
	case <-timer.C:
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

// watch watches spec for deletions (and puts, if asked) from the revision
// etcd creates it at, which its created response gives: the waiter looks
// again if that is past its read. A watch from an older revision would
// see the writes in between, but etcd keeps such a watch apart until its
// sync loop catches it up, every 100ms, and events wait for that: under
// contention, most hand-offs would. Every watch of
// the engine has the same context metadata, so they all share one gRPC
// stream; a watch ends with stop, not with the caller's context, and
// requires a leader: a member cut off from its cluster cancels it instead of
// going silent.
func (e *Engine) watch(spec watchSpec) *watch {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	w := &watch{spec: spec, ready: make(chan struct{}), cancel: cancel}
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
	if spec.prev {
		opts = append(opts, clientv3.WithPrevKV())
	}
	if spec.prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	if !spec.puts {
		opts = append(opts, clientv3.WithFilterPut())
	}
	// clientv3's Watch blocks until etcd confirms the watch, which a hung
	// server never does: the request timeout bounds that call. It must not
	// end sooner, not even when the waiter gives up: a watch cancelled
	// before etcd confirms it leaves the stream's goroutines running
	// (clientv3 3.7 only ends a stream when its last confirmed watch goes).
	// So the call runs in the background, and the waiter never waits for it.
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

// stopWatch stops w without holding up the caller: a watch etcd has not
// confirmed yet is stopped in the background (see stop).
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
// timeout for that. A watch cancelled before its confirmation leaves the
// client's watch stream running, idle, until the next watch or Close
// (clientv3 3.7 only ends a stream when its last confirmed watch goes).
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

// hold completes a grant. A renewed hold joins its lease. A fixed lease must
// start with the hold, not when the wait began: the key moves onto a lease of
// its own, granted now, keeping its create revision (the token). That lease
// gets a second more than the hold's TTL rounded up, so that it cannot end
// on the server before the Core ends the hold.
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
// the hold's TTL rounded up, so that it cannot end on the server before
// the Core ends the hold. With a lock delay the hold's life, which ends a
// delay after the Core ends it, rounded up: the deletion watch frees its
// slot then.
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
// ErrLockLost unless the key it deleted had the hold's create revision. A
// plain delete is enough, and cheaper on etcd than a transaction comparing
// the revision first: the key's slot is the hold's until the deletion is
// confirmed, so no other hold can have that key.
func (e *Engine) Release(ctx context.Context, h *driver.Hold) error {
	st, _ := h.State.(*holdState)
	if st == nil || st.slot == nil {
		return e.fail("release", h.Name, errKeyGone)
	}
	if !e.unregister(h, st) {
		// Its lease ended, or its key was deleted and its slot freed: the
		// slot may be another hold's by now.
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
	// After more than one attempt, one that went unanswered may have
	// deleted the key: the slot was the hold's, and its lease was kept, so
	// it most likely did. Only a deletion by hand in that same moment would
	// be missed, and the hold ends either way.
	if !deleted && tries == 1 {
		return e.fail("release", h.Name, errKeyGone)
	}
	return nil
}

// deleteHeld deletes the key of a hold and tells whether it had the hold's
// create revision, in as many attempts as it took. With one attempt (one
// endpoint) a plain delete does. With retries, an attempt that went
// unanswered may still be applied later — sent to a member that froze, it
// is read when the member resumes — after the slot was freed and its key
// name taken by another hold: so each attempt deletes the key only if it
// still has the hold's create revision, and attempts may run at once
// (hedge).
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
