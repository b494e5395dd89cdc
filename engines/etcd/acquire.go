package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/locker"
)

// holdState is the engine's part of a locker.Hold.
type holdState struct {
	prefix string           // the key range of the lock name, ending with '/'
	slot   *slot            // the hold's key; its create revision is the token
	key    string           // slot.key
	shared *lease           // the lease the key was created on: slot.l
	fixed  clientv3.LeaseID // the own lease of a WithLease hold, once granted
	// checked is when the key was last seen with its create revision (the
	// grant, at first); guarded by Engine.mu.
	checked time.Time
}

func (st *holdState) set(s *slot) {
	st.slot, st.key, st.shared = s, s.key, s.l
}

// errRequeue tells a waiter that its key vanished with its lease (or by
// hand): it queues again, at the back.
var errRequeue = errors.New("requeue")

// attempts bounds how often one acquisition starts over on a new lease
// because the one it used ended under it.
const attempts = 3

// Acquire implements locker.Backend. Each acquisition puts a key of its own
// under the lock's prefix; the key with the lowest create revision holds the
// lock, and its create revision is the fencing token.
func (e *Engine) Acquire(ctx context.Context, h *locker.Hold, wait bool) (bool, error) {
	st := &holdState{prefix: e.lockPrefix(h.Name)}
	h.State = st
	if e.refused() {
		// Not a request that clientv3 would retry until ctx ends.
		return false, e.fail("acquire", h.Name, errNoConnection)
	}
	var ok bool
	var err error
	if wait {
		ok, err = e.acquireWait(ctx, h, st)
	} else {
		ok, err = e.acquireTry(ctx, h, st)
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

// acquireTry makes one attempt: the key is created only if the lock's range
// is empty, so that contention costs one round trip and leaves nothing.
func (e *Engine) acquireTry(ctx context.Context, h *locker.Hold, st *holdState) (bool, error) {
	for attempt := 1; ; attempt++ {
		l, err := e.sharedLease(ctx, h.TTL)
		if err != nil {
			return false, err
		}
		s := e.take(l, st.prefix)
		if s == nil {
			continue // retired meanwhile
		}
		rctx, cancel := e.bound(ctx)
		resp, err := e.client.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(st.prefix).WithPrefix(), "=", 0)).
			Then(clientv3.OpPut(s.key, h.Owner, clientv3.WithLease(l.id))).
			Commit()
		cancel()
		if err != nil {
			if isLeaseNotFound(err) && attempt < attempts {
				e.free(s)
				e.kill(l, err)
				continue
			}
			e.leftBehind(ctx, s)
			return false, err
		}
		if !resp.Succeeded {
			e.free(s)
			return false, nil
		}
		st.set(s)
		h.Token = uint64(resp.Header.Revision)
		err = e.hold(ctx, h, st)
		if err == nil {
			return true, nil
		}
		if (errors.Is(err, errLeaseGone) || errors.Is(err, errKeyGone)) && attempt < attempts {
			continue
		}
		return false, err
	}
}

// acquireWait queues a key and waits for every key created before it to go,
// watching only the one just before it.
func (e *Engine) acquireWait(ctx context.Context, h *locker.Hold, st *holdState) (bool, error) {
	for attempt := 1; ; attempt++ {
		if e.isClosed() {
			return false, locker.ErrClosed
		}
		l, err := e.sharedLease(ctx, h.TTL)
		if err != nil {
			return false, err
		}
		s := e.take(l, st.prefix)
		if s == nil {
			continue // retired meanwhile
		}
		// The newest key of the range is ours: the next newest, if any, is
		// our predecessor.
		rctx, cancel := e.bound(ctx)
		resp, err := e.client.Txn(rctx).Then(
			clientv3.OpPut(s.key, h.Owner, clientv3.WithLease(l.id)),
			clientv3.OpGet(st.prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
				clientv3.WithLimit(2), clientv3.WithKeysOnly()),
		).Commit()
		cancel()
		if err != nil {
			if isLeaseNotFound(err) && attempt < attempts {
				e.free(s)
				e.kill(l, err)
				continue
			}
			e.leftBehind(ctx, s)
			return false, err
		}
		rev := resp.Header.Revision
		st.set(s)
		h.Token = uint64(rev)
		pred := ""
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			if kv.CreateRevision < rev {
				pred = string(kv.Key)
				break
			}
		}
		err = e.queue(ctx, h, st, pred, rev)
		if errors.Is(err, errRequeue) {
			*st = holdState{prefix: st.prefix}
			h.Token = 0
			continue
		}
		return err == nil, err
	}
}

// queue waits until the hold's key is the oldest of its lock, watching the
// key created just before it (pred, seen at revision rev) for its deletion,
// and takes the hold then. The keeper keeps its lease alive meanwhile, one
// keep-alive for all the waiters and holds on it. It checks its place again
// when the watch ends, every TTL of its lease (a fallback should a deletion
// go unseen), and after a failure, with a growing delay: etcd in trouble is
// ridden out while the lease lives. It returns errRequeue when its key
// vanished or its lease ended.
func (e *Engine) queue(ctx context.Context, h *locker.Hold, st *holdState, pred string, rev int64) error {
	l := st.shared
	var (
		w     *watch        // on pred, nil when none
		check bool          // pred and rev are stale: ask etcd
		retry time.Duration // > 0 after a failure: the delay before trying again
		// recheck is when the place is checked again should the watch miss
		// the deletion.
		recheck = time.Now().Add(l.ttl)
		// failed is the error of the latest request, nil once etcd answered.
		failed error
	)
	stopWatch := func() {
		e.stopWatch(w)
		w = nil
	}
	defer stopWatch()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if check {
			p, r, err := e.predecessor(ctx, st, h.Token)
			if ctx.Err() == nil {
				// A check the caller's deadline cut short says nothing of
				// etcd: it had answered that the name was held.
				failed = err
			}
			switch {
			case err == nil:
				pred, rev, check, retry = p, r, false, 0
				recheck = time.Now().Add(l.ttl)
			case errors.Is(err, errKeyGone):
				e.free(st.slot)
				return errRequeue
			case ctx.Err() == nil:
				e.log.Debug("etcd: checking a waiter's place failed, will retry", "name", h.Name, "err", err)
				if e.expired(l) {
					e.kill(l, err)
				}
				retry = backoff(retry)
			}
		}
		if !check && pred == "" {
			stopWatch()
			err := e.hold(ctx, h, st)
			if errors.Is(err, errLeaseGone) || errors.Is(err, errKeyGone) {
				return errRequeue
			}
			return err
		}
		if !check && (w == nil || w.key != pred) {
			stopWatch()
			w = e.watch(pred, rev+1)
		}
		var (
			events  clientv3.WatchChan
			pending <-chan struct{} // the watch is being set
		)
		if w != nil {
			select {
			case <-w.ready:
				events = w.events
			default:
				pending = w.ready
			}
		}
		wait := time.Until(recheck)
		if check {
			wait = retry
		}
		timer.Reset(max(wait, time.Millisecond))

		select {
		case <-ctx.Done():
			stopWatch()
			e.abandon(st.slot)
			if failed != nil {
				return fmt.Errorf("%w: %w", failed, ctx.Err())
			}
			return errQueued
		case <-e.done:
			stopWatch()
			e.abandon(st.slot)
			return locker.ErrClosed
		case <-l.dead:
			stopWatch()
			e.abandon(st.slot) // most likely gone with the lease
			return errRequeue
		case <-pending:
			// Set: wait on its events from the next round.
		case resp, ok := <-events:
			switch {
			case ok && resp.Created:
				w.created = true
			case !ok || resp.Canceled || resp.Err() != nil || hasDelete(resp):
				w.created = true // nothing more to wait for
				stopWatch()
				check = true
			}
		case <-timer.C:
			check = true
		}
	}
}

// watch is a waiter's watch on its predecessor's key.
type watch struct {
	key     string
	ready   chan struct{}      // closed once events is set
	events  clientv3.WatchChan // set by the goroutine that calls Watch
	cancel  context.CancelFunc
	created bool // etcd confirmed it
}

// watch watches key for its deletion from revision rev on. Every watch of
// the engine has the same context metadata, so they all share one gRPC
// stream; a watch ends with stop, not with the caller's context, and
// requires a leader: a member cut off from its cluster cancels it instead of
// going silent.
func (e *Engine) watch(key string, rev int64) *watch {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	w := &watch{key: key, ready: make(chan struct{}), cancel: cancel}
	// clientv3's Watch blocks until etcd confirms the watch, which a hung
	// server never does: the request timeout bounds that call. It must not
	// end sooner, not even when the waiter gives up: a watch cancelled
	// before etcd confirms it leaves the stream's goroutines running
	// (clientv3 3.7 only ends a stream when its last confirmed watch goes).
	// So the call runs in the background, and the waiter never waits for it.
	set := func(context.Context) {
		bound := time.AfterFunc(e.timeout, cancel)
		w.events = e.watcher.Watch(wctx, key, clientv3.WithRev(rev), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
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

// predecessor checks in one transaction that the key of st still exists
// with its create revision and returns the key created just before it, ""
// if there is none: then st holds the lock.
func (e *Engine) predecessor(ctx context.Context, st *holdState, token uint64) (string, int64, error) {
	rctx, cancel := e.bound(ctx)
	defer cancel()
	get := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(int64(token)-1), clientv3.WithKeysOnly())
	resp, err := e.client.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(st.key), "=", int64(token))).
		Then(clientv3.OpGet(st.prefix, get...)).
		Commit()
	if err != nil {
		return "", 0, err
	}
	if !resp.Succeeded {
		return "", 0, errKeyGone
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return "", resp.Header.Revision, nil
	}
	return string(kvs[0].Key), resp.Header.Revision, nil
}

// hold completes a grant. A renewed hold joins its lease. A fixed lease must
// start with the hold, not when the wait began: the key moves onto a lease of
// its own, granted now, keeping its create revision (the token). That lease
// gets a second more than the hold's TTL rounded up, so that it cannot end
// on the server before the Core ends the hold.
func (e *Engine) hold(ctx context.Context, h *locker.Hold, st *holdState) error {
	l := st.shared
	if h.Renew {
		e.mu.Lock()
		killed := l.killed
		if !killed {
			l.holds[h] = struct{}{}
			st.checked = time.Now()
		}
		e.mu.Unlock()
		if killed {
			// Retired, perhaps only by our estimate: the key may outlive it.
			e.abandon(st.slot)
			return errLeaseGone
		}
		return nil
	}
	rctx, cancel := e.bound(ctx)
	g, err := e.client.Grant(rctx, wholeSeconds(h.TTL)+1)
	cancel()
	if err == nil {
		var resp *clientv3.TxnResponse
		rctx, cancel := e.bound(ctx)
		resp, err = e.client.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(st.key), "=", int64(h.Token))).
			Then(clientv3.OpPut(st.key, h.Owner, clientv3.WithLease(g.ID))).
			Commit()
		cancel()
		if err == nil && !resp.Succeeded {
			err = errKeyGone
		}
		if err != nil {
			e.revokeLater(g.ID)
		}
	}
	switch {
	case err == nil:
		st.fixed = g.ID
	case errors.Is(err, errKeyGone):
		e.free(st.slot)
	default:
		e.leftBehind(ctx, st.slot)
	}
	return err
}

// Release implements locker.Backend: it deletes the hold's key and reports
// ErrLockLost unless the key it deleted had the hold's create revision. A
// plain delete is enough, and cheaper on etcd than a transaction comparing
// the revision first: the key's slot is the hold's until the deletion is
// confirmed, so no other hold can have that key.
func (e *Engine) Release(ctx context.Context, h *locker.Hold) error {
	st, _ := h.State.(*holdState)
	if st == nil || st.slot == nil {
		return e.fail("release", h.Name, errKeyGone)
	}
	e.mu.Lock()
	_, registered := st.shared.holds[h]
	delete(st.shared.holds, h)
	e.mu.Unlock()
	if h.Renew && !registered {
		// Its lease ended, or its key was deleted after it was lost: the
		// slot may be another hold's by now.
		return e.fail("release", h.Name, errKeyGone)
	}
	rctx, cancel := e.bound(ctx)
	resp, err := e.client.Delete(rctx, st.key, clientv3.WithPrevKV())
	cancel()
	if st.fixed != clientv3.NoLease {
		e.revokeQuiet(ctx, st.fixed)
	}
	if err != nil {
		e.orphan(st.slot) // deleted before its lease is renewed again
		return e.fail("release", h.Name, err)
	}
	e.free(st.slot)
	if len(resp.PrevKvs) == 0 || resp.PrevKvs[0].CreateRevision != int64(h.Token) {
		return e.fail("release", h.Name, errKeyGone)
	}
	return nil
}

// Renew implements locker.Renewer. The keeper keeps the leases, and so the
// holds, alive: Renew reports a hold lost when its lease was given up, and
// otherwise checks that its key still exists with its create revision,
// which catches a key deleted by hand (an operator's ForceUnlock). Each
// hold's key is checked about once per TTL, not at every renewal: the
// checks are the bulk of the renewal's cost, and a deletion by hand is
// rare. The Core hands Renew chunks of at most 128 holds, several at once;
// the keys of a chunk are checked in one transaction that compares every
// key's create revision and returns nothing when all match, and reads the
// keys only when one does not. A check that fails (etcd busy or away) is
// tried again at the next renewal and loses nothing: the hold lives as long
// as its lease, whose keep-alive never waits for these checks.
func (e *Engine) Renew(ctx context.Context, holds []*locker.Hold) []error {
	results := make([]error, len(holds))
	var check []int
	now := time.Now()
	e.mu.Lock()
	for i, h := range holds {
		st, _ := h.State.(*holdState)
		switch {
		case st == nil || st.shared == nil:
			results[i] = errKeyGone
		case st.shared.killed:
			results[i] = leaseErr(st.shared, errLeaseGone)
		case !now.Before(st.checked.Add(h.TTL - h.TTL/6)):
			check = append(check, i)
		}
	}
	e.mu.Unlock()
	var wg sync.WaitGroup
	for len(check) > 0 {
		chunk := check[:min(len(check), maxTxnOps)]
		check = check[len(chunk):]
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.checkKeys(ctx, holds, chunk, results, now)
		}()
	}
	wg.Wait()
	for i, err := range results {
		if err != nil {
			results[i] = e.fail("renew", holds[i].Name, err)
		}
	}
	return results
}

// checkKeys checks the keys of holds[i] for i in idx, sets results[i] for
// those that are gone, and records the check, made at now, for the others.
// The rule, every key in place, costs one transaction of compares that
// returns nothing; only when one fails are the keys read. A failed check
// is only logged.
func (e *Engine) checkKeys(ctx context.Context, holds []*locker.Hold, idx []int, results []error, now time.Time) {
	cmps := make([]clientv3.Cmp, len(idx))
	for j, i := range idx {
		cmps[j] = clientv3.Compare(clientv3.CreateRevision(holds[i].State.(*holdState).key), "=", int64(holds[i].Token))
	}
	rctx, cancel := e.bound(ctx)
	defer cancel()
	resp, err := e.client.Txn(rctx).If(cmps...).Commit()
	var gone []bool
	if err == nil && !resp.Succeeded {
		gone, err = e.goneKeys(rctx, holds, idx)
	}
	if err != nil {
		e.log.Debug("etcd: checking held keys failed, will retry", "keys", len(idx), "err", err)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for j, i := range idx {
		if gone != nil && gone[j] {
			results[i] = errKeyGone
			continue
		}
		holds[i].State.(*holdState).checked = now
	}
}

// goneKeys reads the keys of holds[i] for i in idx and tells which are
// gone, or hold another create revision.
func (e *Engine) goneKeys(ctx context.Context, holds []*locker.Hold, idx []int) ([]bool, error) {
	gets := make([]clientv3.Op, len(idx))
	for j, i := range idx {
		gets[j] = clientv3.OpGet(holds[i].State.(*holdState).key, clientv3.WithKeysOnly())
	}
	resp, err := e.client.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return nil, err
	}
	gone := make([]bool, len(idx))
	for j, i := range idx {
		kvs := resp.Responses[j].GetResponseRange().Kvs
		gone[j] = len(kvs) == 0 || kvs[0].CreateRevision != int64(holds[i].Token)
	}
	return gone, nil
}
