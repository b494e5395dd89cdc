package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/locker"
)

// lease is one etcd lease shared by every hold and waiter of the engine
// with the same TTL in whole seconds. The engine keeps it alive with
// KeepAliveOnce: from the Core's renewal loop while holds are on it, from the
// waiters' own loops while they wait, and before an acquisition when it has
// aged. Nothing keeps an idle lease alive: it expires on the server, and the
// next acquisition grants a new one.
type lease struct {
	secs  int64         // the requested TTL, the key in Engine.leases
	ready chan struct{} // closed when the grant is done: id and ttl, or err, are set
	err   error         // the grant failed
	// gaveUp tells that err came from the granting caller's context, so
	// that another caller tries again rather than fail with it.
	gaveUp bool
	id     clientv3.LeaseID
	ttl    time.Duration // as granted: at least the server's minimum
	dead   chan struct{} // closed by kill

	// Guarded by Engine.mu.
	expiry  time.Time                 // at the earliest the server expires the lease: last refresh sent + ttl
	holds   map[*locker.Hold]struct{} // renewed holds whose key is on the lease
	orphans []*slot                   // keys to delete before the lease is refreshed again
	slots   map[string]map[int]bool   // taken slot numbers by lock prefix
	killed  bool
}

// slot is one key name of a lease under one lock's prefix:
// "<prefix><lease ID in hex>-<n>". A slot is taken by one acquisition at a
// time and stays taken until its key is known to be gone, so a key name is
// never shared by two holds and a key can be deleted without comparing its
// revision. Names are reused (slot 0, mostly): etcd's key index keeps every
// key name ever created until a compaction, and a range read walks all of
// them, so a name per acquisition would slow every acquisition down.
type slot struct {
	l      *lease
	prefix string
	n      int
	key    string
}

func (l *lease) hexID() string { return strconv.FormatInt(int64(l.id), 16) }

// fresh tells whether an acquisition may use the lease without refreshing
// it: at most a sixth of its life gone, so that a hold granted now lives on
// the server for at least five sixths of the lease's TTL even if its first
// renewal fails. Refreshing on every acquisition would double its cost.
func (l *lease) fresh(now time.Time) bool { return l.expiry.Sub(now) >= l.ttl*5/6 }

// refreshDue is when a waiter refreshes the lease it waits on: when a third
// of its life has gone, as etcd's own keep-alive does.
func (l *lease) refreshDue() time.Time { return l.expiry.Add(-l.ttl * 2 / 3) }

// sharedLease returns the live lease for holds of ttl, granting one if
// needed and refreshing it if it has aged or has keys to sweep.
func (e *Engine) sharedLease(ctx context.Context, ttl time.Duration) (*lease, error) {
	secs := wholeSeconds(ttl)
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return nil, locker.ErrClosed
		}
		l := e.leases[secs]
		if l == nil {
			l = &lease{secs: secs, ready: make(chan struct{}), dead: make(chan struct{}),
				holds: make(map[*locker.Hold]struct{}), slots: make(map[string]map[int]bool)}
			e.leases[secs] = l
			e.mu.Unlock()
			if err := e.grant(ctx, l); err != nil {
				return nil, err
			}
			return l, nil
		}
		e.mu.Unlock()

		select {
		case <-l.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if l.err != nil {
			if l.gaveUp && ctx.Err() == nil {
				continue // the granting caller gave up: grant for ourselves
			}
			return nil, l.err
		}
		now := time.Now()
		e.mu.Lock()
		killed, expired, fresh, dirty := l.killed, !now.Before(l.expiry), l.fresh(now), len(l.orphans) > 0
		e.mu.Unlock()
		switch {
		case killed:
			continue
		case expired:
			e.kill(l, errLeaseGone)
			continue
		case fresh && !dirty:
			return l, nil
		}
		if err := e.refresh(ctx, l); err != nil {
			if errors.Is(err, errLeaseGone) {
				continue
			}
			return nil, err
		}
		return l, nil
	}
}

// grant asks etcd for the lease l stands for and publishes the outcome.
func (e *Engine) grant(ctx context.Context, l *lease) error {
	rctx, cancel := e.bound(ctx)
	sent := time.Now()
	resp, err := e.client.Grant(rctx, l.secs)
	cancel()

	e.mu.Lock()
	if err == nil && e.closed {
		// Close has revoked what it saw; this one came too late.
		err = locker.ErrClosed
		e.mu.Unlock()
		rctx, cancel := e.cleanupContext(ctx)
		_, _ = e.client.Revoke(rctx, resp.ID)
		cancel()
		e.mu.Lock()
	}
	if err != nil {
		l.err, l.gaveUp = err, ctx.Err() != nil
		if e.leases[l.secs] == l {
			delete(e.leases, l.secs)
		}
	} else {
		l.id, l.ttl = resp.ID, time.Duration(resp.TTL)*time.Second
		l.expiry = sent.Add(l.ttl)
	}
	close(l.ready)
	e.mu.Unlock()
	return err
}

// refresh deletes the keys the lease must not keep alive any longer, then
// renews it. It returns errLeaseGone, having killed it, when etcd no longer
// has the lease.
func (e *Engine) refresh(ctx context.Context, l *lease) error {
	e.mu.Lock()
	if l.killed {
		e.mu.Unlock()
		return errLeaseGone
	}
	sweep := l.orphans
	l.orphans = nil
	// A hold the Core gave up on (renewal failing past its TTL) and that was
	// not released still has its key on the lease: never keep it alive.
	for h := range l.holds {
		select {
		case <-h.Lost():
			sweep = append(sweep, h.State.(*holdState).slot)
			delete(l.holds, h)
		default:
		}
	}
	e.mu.Unlock()

	if len(sweep) > 0 {
		keys := make([]string, len(sweep))
		for i, s := range sweep {
			keys[i] = s.key
		}
		if err := e.deleteKeys(ctx, keys); err != nil {
			e.mu.Lock()
			l.orphans = append(l.orphans, sweep...)
			e.mu.Unlock()
			return err
		}
		for _, s := range sweep {
			e.free(s)
		}
	}
	rctx, cancel := e.bound(ctx)
	sent := time.Now()
	resp, err := e.client.KeepAliveOnce(rctx, l.id)
	cancel()
	if err != nil {
		if isLeaseNotFound(err) {
			e.kill(l, err)
			return errLeaseGone
		}
		return err
	}
	e.mu.Lock()
	if exp := sent.Add(time.Duration(resp.TTL) * time.Second); exp.After(l.expiry) {
		l.expiry = exp
	}
	e.mu.Unlock()
	return nil
}

// expired tells whether the lease may have ended on the server.
func (e *Engine) expired(l *lease) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !time.Now().Before(l.expiry)
}

// refreshDue is when a waiter refreshes the lease it waits on.
func (e *Engine) refreshDue(l *lease) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return l.refreshDue()
}

// revokeQuiet ends a lease of this engine that holds nothing any longer.
// A failure only delays its end to its TTL.
func (e *Engine) revokeQuiet(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := e.cleanupContext(ctx)
	defer cancel()
	if _, err := e.client.Revoke(rctx, id); err != nil && !isLeaseNotFound(err) {
		e.log.Debug("etcd: revoke failed, the lease will expire", "lease", strconv.FormatInt(int64(id), 16), "err", err)
	}
}

// revokeLater is revokeQuiet in the background, for an acquisition that
// must not wait for it.
func (e *Engine) revokeLater(id clientv3.LeaseID) {
	e.core.Go(func(ctx context.Context) { e.revokeQuiet(ctx, id) })
}

// leftBehind handles the key of a write that failed and may have been
// applied: deleted at once, in the background, if the caller gave up, else
// (etcd is in trouble) at the lease's next refresh.
func (e *Engine) leftBehind(ctx context.Context, s *slot) {
	if ctx.Err() != nil {
		e.abandon(s)
		return
	}
	e.orphan(s)
}

// kill retires a lease that ended, or may have ended, on the server: new
// acquisitions get another one, the holds on it are lost and its waiters
// queue again. cause nil means Close.
func (e *Engine) kill(l *lease, cause error) {
	e.mu.Lock()
	if l.killed {
		e.mu.Unlock()
		return
	}
	l.killed = true
	close(l.dead)
	if e.leases[l.secs] == l {
		delete(e.leases, l.secs)
	}
	holds := l.holds
	l.holds = nil
	e.mu.Unlock()
	if cause != nil {
		e.log.Warn("etcd: lease lost", "lease", l.hexID(), "ttl", l.ttl, "holds", len(holds), "err", cause)
	}
	for h := range holds {
		h.MarkLost()
	}
}

// take reserves the lowest free slot of l under a lock's prefix.
func (e *Engine) take(l *lease, prefix string) *slot {
	e.mu.Lock()
	defer e.mu.Unlock()
	taken := l.slots[prefix]
	if taken == nil {
		taken = make(map[int]bool)
		l.slots[prefix] = taken
	}
	n := 0
	for taken[n] {
		n++
	}
	taken[n] = true
	return &slot{l: l, prefix: prefix, n: n, key: prefix + l.hexID() + "-" + strconv.Itoa(n)}
}

// free returns a slot whose key is known to be gone.
func (e *Engine) free(s *slot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if taken := s.l.slots[s.prefix]; taken != nil {
		delete(taken, s.n)
		if len(taken) == 0 {
			delete(s.l.slots, s.prefix)
		}
	}
}

// orphan records a key that may have been left behind and could not be
// deleted: it is deleted before the lease is refreshed again, and expires
// with the lease if nothing refreshes it. Its slot stays taken until then.
func (e *Engine) orphan(s *slot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !s.l.killed {
		s.l.orphans = append(s.l.orphans, s)
	}
}

// abandon deletes the key of a waiter or failed acquisition in the
// background, so that the caller who gave up returns at once even when etcd
// does not answer: as soon as etcd answers, within the request timeout, so
// that no successor stays queued behind it; past that, before the lease's
// next refresh (see orphan).
func (e *Engine) abandon(s *slot) {
	del := func(ctx context.Context) {
		rctx, cancel := e.bound(ctx)
		defer cancel()
		if _, err := e.client.Delete(rctx, s.key); err != nil {
			e.log.Debug("etcd: deleting an abandoned key failed, deferred", "key", s.key, "err", err)
			e.orphan(s)
			return
		}
		e.free(s)
	}
	if !e.core.Go(del) {
		e.orphan(s) // closing: the revocation of the lease deletes it
	}
}

// leaseErr describes a failed refresh for the renewal loop.
func leaseErr(l *lease, err error) error {
	return fmt.Errorf("lease %s: %w", l.hexID(), err)
}
