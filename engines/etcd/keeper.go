package etcd

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keeper is the engine's one loop that keeps its leases alive and checks
// its holds' keys (doc.go, "Leases and TTLs"). Each refresh and each check
// runs on a goroutine of its own, so that one that hangs holds up no other
// lease. A lease not refreshed by its end, as the engine counts it (the
// latest refresh sent plus its TTL), is killed then: its holds are lost no
// later than the server may end it, and its waiters queue again. The engine
// is no driver.Renewer: the Core schedules no renewal per hold.
type keeper struct {
	wake   chan struct{}
	done   chan struct{} // closed when the loop has ended
	ctx    context.Context
	cancel context.CancelFunc // ends the refreshes and checks in flight, at Close
	wg     sync.WaitGroup     // the refreshes and checks in flight
	// checks bounds the key checks in flight at once: after a long outage
	// every lease falls due together.
	checks chan struct{}
}

// maxChecks bounds the key checks in flight at once.
const maxChecks = 4

func newKeeper() *keeper {
	k := &keeper{wake: make(chan struct{}, 1), done: make(chan struct{}), checks: make(chan struct{}, maxChecks)}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	return k
}

func (k *keeper) poke() { poke(k.wake) }

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

// stopKeeper ends the loop and the refreshes in flight, and waits for them.
// Close calls it once e.done is closed.
func (e *Engine) stopKeeper() {
	<-e.keeper.done
	e.keeper.cancel()
	e.keeper.wg.Wait()
}

// dueLeases returns the leases to refresh now and those whose holds' keys
// to check now, marking them busy, and those whose life has run out, and
// says when to look again.
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
			// Busy from now on: a refresh that hangs must not hold up the
			// loss of its holds at the lease's end.
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

// keepAlive refreshes l once for the keeper; after a failure the keeper
// tries again with a growing delay while the lease may live.
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
	e.keeper.poke()
}

// register makes h, whose key st.key was created at st.rev, one of the
// holds the deletion watch reports (gone.go) and, on a shared lease, one
// of the holds the keeper checks. It returns errKeyGone when the watch
// already saw the key deleted, and errLeaseGone when a renewed hold's lease
// was retired meanwhile.
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

// unregister ends the keeper's checks and the watch's reports of h, and
// tells whether h was still registered: not lost with its lease or its key.
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

// checkLease checks, for the keeper, that the keys of l's holds are still
// attached to l: one LeaseTimeToLive lists them all. A hold whose key is
// missing is checked by its key's create revision and lost if the key is
// gone. A failure is tried again with a growing delay: the holds live as
// long as the lease, which the keep-alives, never held up by a check, keep.
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
	e.keeper.poke()
}

// confirmGone asks the leader, with a keep-alive (refresh), whether l is
// gone after a LeaseTimeToLive said so. A member can answer that from a
// stale view: an old leader that has not applied its step-down yet (a
// CPU-starved member of a 3.4 cluster during a rolling restart), whose
// lessor let the lease run out while the new leader took the renewals.
// refresh kills l only when the leader agrees; when it renews l instead,
// the check is tried again soon.
func (e *Engine) confirmGone(ctx context.Context, l *lease) error {
	if err := e.refresh(ctx, l); err != nil {
		return err
	}
	return errStaleTimeToLive
}

// checkKeys is one check of l's holds (see checkLease).
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
	// Every key attached to l is a taken slot's: a slot is freed only once
	// its key is known gone. So when no slot was taken or freed while the
	// list was read and it has as many keys as l has slots, every slot's
	// key is there, and nothing more is needed: the common case, which
	// costs no set of the keys.
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
	// A hold granted since the list was read may be missing from it: the
	// compare below keeps it.
	var missing []*driver.Hold
	e.mu.Lock()
	for _, taken := range l.slots {
		for _, s := range taken {
			if s.hold == nil {
				continue
			}
			if _, ok := attached[s.key]; !ok {
				missing = append(missing, s.hold)
			}
		}
	}
	e.mu.Unlock()
	var lost []*driver.Hold
	for chunk := range slices.Chunk(missing, maxTxnOps) {
		gone, err := e.goneKeys(ctx, chunk)
		if err != nil {
			e.lose(lost)
			return err
		}
		lost = append(lost, gone...)
	}
	e.lose(lost)
	return nil
}

// goneKeys returns the holds of holds whose key is gone, or has another
// create revision: one transaction compares every key's create revision
// and returns nothing when all match; only when one does not are the keys
// read.
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

// lose ends holds whose keys are gone, unless released meanwhile: their
// slots are free again, and Lost closes.
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
	// A fixed lease with a lock delay was lost at its end already: its key
	// outlived it by the delay, on purpose.
	if live := slices.DeleteFunc(slices.Clone(lost), isLost); len(live) > 0 {
		e.log.Warn("etcd: held keys deleted", "holds", len(live), "first", live[0].Name, "token", live[0].Token)
	}
	for _, h := range lost {
		st := h.State.(*holdState)
		if st.fixed != clientv3.NoLease {
			// No Release comes for a lost hold: its lease goes now.
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

// holds lists the holds on l. Called with Engine.mu held.
func (l *lease) holds() []*driver.Hold {
	var holds []*driver.Hold
	for _, taken := range l.slots {
		for _, s := range taken {
			if s.hold != nil {
				holds = append(holds, s.hold)
			}
		}
	}
	return holds
}
