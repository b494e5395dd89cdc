package etcd

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keeper is the engine's one loop that keeps its leases alive and checks
// its holds' keys, each refresh and check on a goroutine of its own so that
// one that hangs holds up no other lease. A lease not refreshed by its end
// (latest refresh sent plus its TTL) is killed then, before the server can
// end it. The engine is no driver.Renewer: one refresh keeps a lease's
// holds and waiters alike.
type keeper struct {
	wake   chan struct{}
	done   chan struct{} // closed when the loop has ended
	ctx    context.Context
	cancel context.CancelFunc // ends the refreshes and checks in flight, at Close
	wg     sync.WaitGroup     // the refreshes and checks in flight
	checks chan struct{}      // bounds the checks in flight: after an outage all fall due
}

const maxChecks = 4

func newKeeper() *keeper {
	k := &keeper{wake: make(chan struct{}, 1), done: make(chan struct{}), checks: make(chan struct{}, maxChecks)}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	return k
}

// poke wakes the loop that waits on wake, without blocking.
func poke(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// keep runs the keeper until Close closes e.done.
func (e *Engine) keep() {
	defer close(e.keeper.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, check, expired, next := e.dueLeases(time.Now())
		for _, l := range expired {
			e.kill(l, errNotRenewed)
		}
		for _, l := range due {
			e.keeper.wg.Go(func() { e.keepAlive(e.keeper.ctx, l) })
		}
		for _, l := range check {
			e.keeper.wg.Go(func() { e.checkLease(e.keeper.ctx, l) })
		}
		timer.Reset(time.Until(next))
		select {
		case <-e.done:
			return
		case <-e.keeper.wake:
		case <-timer.C:
		}
	}
}

// stopKeeper ends the loop and the work in flight, once e.done is closed.
func (e *Engine) stopKeeper() {
	<-e.keeper.done
	e.keeper.cancel()
	e.keeper.wg.Wait()
}

// dueLeases returns, marked busy, the leases to refresh and to check now,
// those whose life ran out, and when to look again.
func (e *Engine) dueLeases(now time.Time) (due, check, expired []*lease, next time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	next = now.Add(time.Hour)
	for l := range e.leases {
		if !l.granted || l.killed || l.keys == 0 {
			continue // not granted yet, or not kept
		}
		switch {
		case !now.Before(l.end()):
			expired = append(expired, l)
			continue
		case l.busy:
			next = earliest(next, l.end())
		case !now.Before(l.next):
			// A refresh that hangs must not delay the loss at its end.
			l.busy = true
			due = append(due, l)
			next = earliest(next, l.end())
		default:
			next = earliest(next, l.next)
		}
		switch {
		case l.held == 0 || l.probing:
		case !now.Before(l.checkAt):
			l.probing = true
			check = append(check, l)
		default:
			next = earliest(next, l.checkAt)
		}
	}
	return due, check, expired, next
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// keepAlive refreshes l once; after a failure the keeper tries again with
// a growing delay, and the holds are at risk.
func (e *Engine) keepAlive(ctx context.Context, l *lease) {
	err := e.refresh(ctx, l)
	e.mu.Lock()
	l.busy = false
	var warn bool
	var atRisk []*driver.Hold
	left := time.Until(l.end())
	if err != nil {
		// The first failure since a refresh puts the lease's holds at risk.
		if l.retry == 0 && !errors.Is(err, errLeaseGone) && ctx.Err() == nil {
			atRisk = l.holds()
		}
		l.retry = backoff(l.retry)
		l.next = time.Now().Add(l.retry)
		// Renewal falling behind: say so while the holds still live.
		warn = !l.warned && l.held > 0 && left < l.life()/3 && !errors.Is(err, errLeaseGone) && ctx.Err() == nil
		l.warned = l.warned || warn
	}
	held := l.held
	e.mu.Unlock()
	for _, h := range atRisk {
		h.MarkAtRisk(left, err)
	}
	switch {
	case warn:
		e.log.Warn("etcd: lease not refreshed, its holds are lost unless a retry succeeds in time",
			"lease", l.hexID(), "left", left, "holds", held, "err", err)
	case err != nil && !errors.Is(err, errLeaseGone) && ctx.Err() == nil:
		e.log.Debug("etcd: renewing a lease failed, will retry", "lease", l.hexID(), "err", err)
	}
	poke(e.keeper.wake)
}

// register makes h one of the holds the deletion watch reports and, if
// renewed, the keeper checks: errKeyGone when the watch saw its key
// deleted, errLeaseGone when its lease was retired.
func (e *Engine) register(h *driver.Hold, st *holdState) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, l := st.slot, st.slot.l
	switch {
	case s.deleted > st.rev:
		return errKeyGone
	case !h.Renew:
		s.fixed = h
	case l.killed:
		return errLeaseGone
	default:
		s.hold = h
		if l.held++; l.held == 1 && !l.checkAt.After(time.Now()) {
			l.checkAt = time.Now().Add(l.ttl) // a TTL after its first hold
		}
	}
	e.watchGone(h, st)
	return nil
}

// unregister undoes register, telling whether h was still registered.
func (e *Engine) unregister(h *driver.Hold, st *holdState) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.unhold(h, st.slot)
}

// unhold clears s.hold or s.fixed if it is h. Called with e.mu held.
func (e *Engine) unhold(h *driver.Hold, s *slot) bool {
	switch {
	case h == nil:
		return false
	case s.hold == h:
		s.hold = nil
		s.l.held--
	case s.fixed == h:
		s.fixed = nil
	default:
		return false
	}
	return true
}

// checkLease checks that the keys of l's holds are still attached to it
// (checkKeys), with one check at a time per lease and maxChecks in all; a
// failure is tried again with a growing delay.
func (e *Engine) checkLease(ctx context.Context, l *lease) {
	select {
	case e.keeper.checks <- struct{}{}:
		defer func() { <-e.keeper.checks }()
	case <-ctx.Done():
		e.checked(l, ctx.Err())
		return
	}
	err := e.checkKeys(ctx, l)
	e.checked(l, err)
	switch {
	case errors.Is(err, errStaleTimeToLive):
		e.log.Warn("etcd: a member answered from a stale view of the leases; the leader still renews this one", "lease", l.hexID(), "err", err)
	case err != nil && !errors.Is(err, errLeaseGone) && ctx.Err() == nil:
		e.log.Debug("etcd: checking held keys failed, will retry", "lease", l.hexID(), "err", err)
	}
}

// checked schedules l's next key check after one that ended with err.
func (e *Engine) checked(l *lease, err error) {
	e.mu.Lock()
	l.probing = false
	if err != nil {
		l.checks = backoff(l.checks)
		l.checkAt = time.Now().Add(l.checks)
	} else {
		l.checks = 0
		l.checkAt = time.Now().Add(l.ttl)
	}
	e.mu.Unlock()
	poke(e.keeper.wake)
}

// confirmGone asks the leader, by a keep-alive, whether l is gone after a
// LeaseTimeToLive said so: an old leader not yet stepped down can say so
// of a lease the new one renews (seen on a CPU-starved 3.4 member).
func (e *Engine) confirmGone(ctx context.Context, l *lease) error {
	if err := e.refresh(ctx, l); err != nil {
		return err
	}
	return errStaleTimeToLive
}

// checkKeys lists the keys attached to l with one LeaseTimeToLive, and
// checks the holds whose keys are missing by their create revisions.
func (e *Engine) checkKeys(ctx context.Context, l *lease) error {
	e.mu.Lock()
	changes := l.changes
	e.mu.Unlock()
	rctx, cancel := e.bound(ctx)
	resp, err := e.client.TimeToLive(rctx, l.id, clientv3.WithAttachedKeys())
	cancel()
	switch {
	case err != nil && isLeaseNotFound(err), err == nil && resp.TTL < 0:
		return e.confirmGone(ctx, l)
	case err != nil:
		return err
	}
	// A slot is freed only once its key is gone: with no slot taken or
	// freed meanwhile, as many keys as slots means all are there.
	e.mu.Lock()
	same := l.changes == changes && len(resp.Keys) == l.keys
	e.mu.Unlock()
	if same {
		return nil
	}
	attached := make(map[string]struct{}, len(resp.Keys))
	for _, k := range resp.Keys {
		attached[string(k)] = struct{}{}
	}
	// A hold granted since the list was read is kept by the compare.
	var missing []*driver.Hold
	e.mu.Lock()
	for _, h := range l.holds() {
		if _, ok := attached[h.State.(*holdState).key]; !ok {
			missing = append(missing, h)
		}
	}
	e.mu.Unlock()
	_, err = e.loseGone(ctx, missing)
	return err
}

// loseGone loses the holds whose keys are gone, checking them by create
// revision in transactions of at most maxTxnOps; on a failure it returns
// the holds it could not check yet.
func (e *Engine) loseGone(ctx context.Context, holds []*driver.Hold) ([]*driver.Hold, error) {
	for chunk := range slices.Chunk(holds, maxTxnOps) {
		gone, err := e.goneKeys(ctx, chunk)
		if err != nil {
			return holds, err
		}
		e.lose(gone)
		holds = holds[len(chunk):]
	}
	return nil, nil
}

// goneKeys returns the holds whose key is gone or has another create
// revision, in one transaction that reads the keys only on a mismatch.
func (e *Engine) goneKeys(ctx context.Context, holds []*driver.Hold) ([]*driver.Hold, error) {
	cmps := make([]clientv3.Cmp, len(holds))
	gets := make([]clientv3.Op, len(holds))
	for i, h := range holds {
		st := h.State.(*holdState)
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(st.key), "=", st.rev)
		gets[i] = clientv3.OpGet(st.key, clientv3.WithKeysOnly())
	}
	rctx, cancel := e.bound(ctx)
	defer cancel()
	resp, err := e.client.Txn(rctx).If(cmps...).Else(gets...).Commit()
	if err != nil || resp.Succeeded {
		return nil, err
	}
	var gone []*driver.Hold
	for i, h := range holds {
		kvs := resp.Responses[i].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != h.State.(*holdState).rev {
			gone = append(gone, h)
		}
	}
	return gone, nil
}

// lose ends holds whose keys are gone, unless released meanwhile.
func (e *Engine) lose(holds []*driver.Hold) {
	var lost []*driver.Hold
	e.mu.Lock()
	for _, h := range holds {
		if e.unhold(h, h.State.(*holdState).slot) {
			lost = append(lost, h)
		}
	}
	e.mu.Unlock()
	if len(lost) == 0 {
		return
	}
	// A fixed lease with a lock delay was lost already; its key outlived it.
	if live := slices.DeleteFunc(slices.Clone(lost), isLost); len(live) > 0 {
		e.log.Warn("etcd: held keys deleted", "holds", len(live), "first", live[0].Name, "token", live[0].Token)
	}
	for _, h := range lost {
		st := h.State.(*holdState)
		if st.fixed != clientv3.NoLease {
			// No Release comes for a lost hold.
			e.revokeLater(st.fixed)
		}
		e.free(st.slot)
		h.MarkGone()
	}
}

func isLost(h *driver.Hold) bool {
	select {
	case <-h.Lost():
		return true
	default:
		return false
	}
}

// holds lists the renewed holds on l. Called with Engine.mu held.
func (l *lease) holds() []*driver.Hold {
	var holds []*driver.Hold
	for s := range l.taken() {
		if s.hold != nil {
			holds = append(holds, s.hold)
		}
	}
	return holds
}

// taken yields the taken slots of l. Called with Engine.mu held.
func (l *lease) taken() iter.Seq[*slot] {
	return func(yield func(*slot) bool) {
		for _, taken := range l.slots {
			for _, s := range taken {
				if !yield(s) {
					return
				}
			}
		}
	}
}
