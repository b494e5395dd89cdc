package etcd

import (
	"context"
	"errors"
	"fmt"
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
	var ok bool
	var err error
	if wait {
		ok, err = e.acquireWait(ctx, h, st)
	} else {
		ok, err = e.acquireTry(ctx, h, st)
	}
	if err == nil {
		return ok, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return false, cerr
	}
	if errors.Is(err, locker.ErrClosed) || e.isClosed() {
		return false, fmt.Errorf("etcd: acquire %q: %w", h.Name, locker.ErrClosed)
	}
	return false, e.fail("acquire", h.Name, err)
}

// acquireTry makes one attempt: the key is created only if the lock's range
// is empty, so that contention costs one round trip and leaves nothing.
func (e *Engine) acquireTry(ctx context.Context, h *locker.Hold, st *holdState) (bool, error) {
	for attempt := 1; ; attempt++ {
		l, err := e.sharedLease(ctx, h.TTL)
		if err != nil {
			return false, err
		}
		s := e.take(l, st.prefix)
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
// and takes the hold then. Meanwhile it keeps its lease alive, and it checks
// its place again when the watch ends, when it renews the lease, and after a
// failure, with a growing delay: etcd in trouble is ridden out while the
// lease lives. It returns errRequeue when its key vanished.
func (e *Engine) queue(ctx context.Context, h *locker.Hold, st *holdState, pred string, rev int64) error {
	l := st.shared
	var (
		w     *watch        // on pred, nil when none
		check bool          // pred and rev are stale: ask etcd
		retry time.Duration // > 0 after a failure: the delay before trying again
	)
	stopWatch := func() {
		w.stop(e.timeout)
		w = nil
	}
	defer stopWatch()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if check {
			p, r, err := e.predecessor(ctx, st, h.Token)
			switch {
			case err == nil:
				pred, rev, check = p, r, false
				if time.Now().Before(e.refreshDue(l)) {
					retry = 0
				}
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
		var events clientv3.WatchChan
		if w != nil {
			events = w.events
		}
		wait := time.Until(e.refreshDue(l))
		if check {
			wait = min(wait, retry)
		}
		timer.Reset(max(wait, retry, time.Millisecond))

		select {
		case <-ctx.Done():
			stopWatch()
			e.abandon(ctx, st.slot)
			return ctx.Err()
		case <-e.done:
			stopWatch()
			e.abandon(ctx, st.slot)
			return locker.ErrClosed
		case <-l.dead:
			stopWatch()
			e.abandon(ctx, st.slot) // most likely gone with the lease
			return errRequeue
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
			if !time.Now().Before(e.refreshDue(l)) {
				if err := e.refresh(ctx, l); err != nil && !errors.Is(err, errLeaseGone) && ctx.Err() == nil {
					e.log.Debug("etcd: renewing a waiter's lease failed, will retry", "name", h.Name, "lease", l.hexID(), "err", err)
					if e.expired(l) {
						e.kill(l, err)
					}
					retry = backoff(retry)
				}
			}
			check = true // also the fallback should a deletion go unseen
		}
	}
}

// watch is a waiter's watch on its predecessor's key.
type watch struct {
	key     string
	events  clientv3.WatchChan
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
	// clientv3's Watch blocks until the stream takes the request, which a
	// hung server never does: the request timeout bounds that call too. It
	// must not end sooner: a watch cancelled before etcd confirms it leaves
	// the stream's goroutines running.
	bound := time.AfterFunc(e.timeout, cancel)
	events := e.watcher.Watch(wctx, key, clientv3.WithRev(rev), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	bound.Stop()
	return &watch{key: key, events: events, cancel: cancel}
}

// stop cancels the watch once etcd has confirmed it, waiting at most
// timeout for that. A watch cancelled before its confirmation leaves the
// client's watch stream running, idle, until the next watch or Close
// (clientv3 3.7 only ends a stream when its last confirmed watch goes).
func (w *watch) stop(timeout time.Duration) {
	if w == nil {
		return
	}
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
		}
		e.mu.Unlock()
		if killed {
			// Retired, perhaps only by our estimate: the key may outlive it.
			e.abandon(ctx, st.slot)
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
			e.revokeQuiet(ctx, g.ID)
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

// Renew implements locker.Renewer. For each lease of the batch it deletes
// the keys of holds given up on, then renews the lease (KeepAliveOnce); then
// one read-only transaction (per 128 holds) checks that every key still
// exists with its create revision, which catches a key deleted by hand. A
// hold is reported renewed only when both succeeded, after the Core took the
// time: the Core's deadline for it never falls after its lease's end on the
// server.
func (e *Engine) Renew(ctx context.Context, holds []*locker.Hold) []error {
	results := make([]error, len(holds))
	byLease := make(map[*lease][]int)
	for i, h := range holds {
		st, _ := h.State.(*holdState)
		if st == nil || st.shared == nil {
			results[i] = e.fail("renew", h.Name, errKeyGone)
			continue
		}
		byLease[st.shared] = append(byLease[st.shared], i)
	}
	var check []int
	for l, idx := range byLease {
		if err := e.refresh(ctx, l); err != nil {
			for _, i := range idx {
				results[i] = e.fail("renew", holds[i].Name, leaseErr(l, err))
			}
			continue
		}
		check = append(check, idx...)
	}
	for len(check) > 0 {
		chunk := check[:min(len(check), maxTxnOps)]
		check = check[len(chunk):]
		ops := make([]clientv3.Op, len(chunk))
		for j, i := range chunk {
			ops[j] = clientv3.OpGet(holds[i].State.(*holdState).key, clientv3.WithKeysOnly())
		}
		rctx, cancel := e.bound(ctx)
		resp, err := e.client.Txn(rctx).Then(ops...).Commit()
		cancel()
		for j, i := range chunk {
			h := holds[i]
			if err != nil {
				results[i] = e.fail("renew", h.Name, err)
				continue
			}
			kvs := resp.Responses[j].GetResponseRange().Kvs
			if len(kvs) == 0 || kvs[0].CreateRevision != int64(h.Token) {
				results[i] = e.fail("renew", h.Name, errKeyGone)
			}
		}
	}
	return results
}
