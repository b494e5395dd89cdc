package etcd

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
)

// lease is one etcd lease shared by the holds and waiters of the engine
// with the same TTL in whole seconds and lock delay, up to
// WithKeysPerLease keys, so that a lease that ends takes only its own share
// of the holds (doc.go, "Leases and TTLs"). The keeper keeps it alive
// while it has keys; a lease without keys expires on the server.
type lease struct {
	secs  int64         // the requested TTL
	grace time.Duration // the lock delay: how much longer than its holds the lease lives
	ready chan struct{} // closed when the grant is done: id and ttl, or err, are set
	err   error         // the grant failed
	// gaveUp tells that err came from the granting caller's context, so
	// that another caller tries again rather than fail with it.
	gaveUp bool
	id     clientv3.LeaseID
	ttl    time.Duration // as granted: at least the server's minimum
	dead   chan struct{} // closed by kill

	// Guarded by Engine.mu.
	granted bool                     // id and ttl are set
	expiry  time.Time                // at the earliest the server expires the lease: last refresh sent + ttl
	next    time.Time                // when the keeper refreshes it next
	retry   time.Duration            // the keeper's delay after a failed refresh; 0 after a success
	warned  bool                     // the keeper warned that the lease is at risk, since its last refresh
	keys    int                      // taken slots: holds, waiters and keys still to delete
	changes uint64                   // slots taken and freed so far: checkKeys compares counts only when it did not move
	busy    bool                     // the keeper's refresh is in flight
	held    int                      // slots with a renewed hold (slot.hold)
	checkAt time.Time                // when the keeper checks the holds' keys next
	checks  time.Duration            // the delay after a failed check; 0 after a success
	probing bool                     // the keeper's check of the keys is in flight
	orphans []*slot                  // keys to delete before the lease is refreshed again
	slots   map[string]map[int]*slot // taken slots by lock prefix and number
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
	// Guarded by Engine.mu.
	//
	// hold is the renewed hold whose key this is, once granted (register),
	// until it is released or lost. fixed is the same for a hold of a
	// fixed lease, whose key lives on a lease of its own: the keeper
	// neither keeps nor checks it, the deletion watch reports it.
	hold, fixed *driver.Hold
	// deleted is the latest revision at which the deletion watch saw key
	// deleted (gone.go): a hold registered after a deletion of its key
	// that the watch delivered first is refused.
	deleted int64
	// burnt tells that a write or delete of key failed unanswered and may
	// still be applied: once freed, its name is not taken again (see
	// orphan).
	burnt bool
}

// reserved stands in a lease's taken slots for the name of a burnt slot
// that was freed, so that no acquisition takes that name again.
var reserved = &slot{}

// shelf is what a shared lease stands for: its TTL in whole seconds and
// the lock delay of its holds. With a delay the lease's TTL is the holds'
// life (driver.Hold.Life): their keys outlive a dead owner's holds by the
// delay, while the keeper loses the holds grace before the lease ends, at
// their TTL.
type shelf struct {
	secs  int64
	grace time.Duration
}

func (l *lease) shelf() shelf { return shelf{l.secs, l.grace} }

// end is when the holds on l are lost unless it is refreshed: grace before
// the server ends it.
func (l *lease) end() time.Time { return l.expiry.Add(-l.grace) }

// life is the holds' TTL on l: the lease's, less the grace.
func (l *lease) life() time.Duration { return l.ttl - l.grace }

// holder is the hold whose key s is, renewed or fixed; nil when none.
// Called with Engine.mu held.
func (s *slot) holder() *driver.Hold {
	if s.hold != nil {
		return s.hold
	}
	return s.fixed
}

func (l *lease) hexID() string { return strconv.FormatInt(int64(l.id), 16) }

// fresh tells whether an acquisition may use a lease the keeper does not
// keep (it has no keys) without refreshing it: at most a sixth of its life
// gone, so that a hold granted now lives on the server for at least five
// sixths of the lease's TTL even if the keeper's first refresh fails.
// Refreshing on every acquisition would double its cost.
func (l *lease) fresh(now time.Time) bool { return l.end().Sub(now) >= l.life()*5/6 }

// refreshed records a keep-alive sent at sent that etcd answered with ttl
// seconds left. Called with Engine.mu held.
func (l *lease) refreshed(sent time.Time, ttl int64) {
	if exp := sent.Add(time.Duration(ttl) * time.Second); exp.After(l.expiry) {
		l.expiry = exp
	}
	// As etcd's own keep-alive: when a third of its holds' life has gone.
	l.next, l.retry = l.end().Add(-l.life()*2/3), 0
}

// sharedLease returns the live lease for new keys of h's life, granting
// one if needed, or if the current one is full, and refreshing it first if
// it has aged and nothing keeps it alive.
func (e *Engine) sharedLease(ctx context.Context, h *driver.Hold) (*lease, error) {
	sh := shelf{wholeSeconds(h.Life()), h.Delay}
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return nil, locker.ErrClosed
		}
		l := e.current[sh]
		if l != nil && l.keys >= e.perLease && l.granted {
			// Full: it lives on with its keys, new ones go elsewhere.
			delete(e.current, sh)
			l = nil
		}
		if l == nil {
			l = &lease{secs: sh.secs, grace: sh.grace, ready: make(chan struct{}), dead: make(chan struct{}),
				slots: make(map[string]map[int]*slot)}
			e.current[sh] = l
			e.leases[l] = struct{}{}
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
		killed, expired, kept, fresh := l.killed, !now.Before(l.end()), l.keys > 0, l.fresh(now)
		e.mu.Unlock()
		switch {
		case killed:
			continue
		case expired:
			e.kill(l, errNotRenewed)
			continue
		case kept || fresh:
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
// On a cluster the grant is hedged: every acquisition that needs the lease
// waits for it, and a grant forwarded to a leader that died is never
// answered. A grant answered after another was taken leaves a lease with
// no key, which etcd ends after its TTL.
func (e *Engine) grant(ctx context.Context, l *lease) error {
	sent := time.Now()
	resp, _, err := hedge(ctx, e, func(rctx context.Context) (*clientv3.LeaseGrantResponse, error) {
		return e.client.Grant(rctx, l.secs)
	})

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
		if e.current[l.shelf()] == l {
			delete(e.current, l.shelf())
		}
		delete(e.leases, l)
	} else {
		l.id, l.ttl = resp.ID, time.Duration(resp.TTL)*time.Second
		l.granted = true
		l.refreshed(sent, resp.TTL)
		l.checkAt = sent.Add(l.ttl)
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
	// A hold is lost only when its key or its lease is gone, so no lost
	// hold's key is left to sweep here: only keys of failed writes and
	// releases.
	sweep := l.orphans
	l.orphans = nil
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
		if e.isKilled(l) { // retired with its last key
			return errLeaseGone
		}
	}
	// One attempt: the keeper tries again soon after a failure, on the
	// next member when this one went away (the new leader, after an
	// election), well before the lease may end.
	rctx, cancel := e.attemptBound(ctx)
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
	l.refreshed(sent, resp.TTL)
	l.warned = false
	e.mu.Unlock()
	return nil
}

func (e *Engine) isKilled(l *lease) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return l.killed
}

// expired tells whether the lease may have ended on the server, or its
// holds' life has.
func (e *Engine) expired(l *lease) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !time.Now().Before(l.end())
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
	if e.current[l.shelf()] == l {
		delete(e.current, l.shelf())
	}
	delete(e.leases, l)
	var holds []*driver.Hold
	for _, taken := range l.slots {
		for _, s := range taken {
			if s.hold != nil {
				holds = append(holds, s.hold)
				s.hold = nil
			}
			if s.fixed == nil {
				// Never freed: the lease takes its keys along.
				e.unkey(s)
			}
		}
	}
	l.held = 0
	e.mu.Unlock()
	if cause != nil {
		// A lease with no hold on it (an idle engine's) loses nothing:
		// new acquisitions simply get another one.
		level := slog.LevelWarn
		if len(holds) == 0 {
			level = slog.LevelDebug
		}
		e.log.Log(context.Background(), level, "etcd: lease lost", "lease", l.hexID(), "ttl", l.ttl, "holds", len(holds), "err", cause)
	}
	for _, h := range holds {
		h.MarkLost()
	}
}

// take reserves the lowest free slot of l under a lock's prefix. It
// returns nil when l was retired meanwhile: the caller gets another lease.
func (e *Engine) take(l *lease, prefix string) *slot {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.killed {
		return nil
	}
	taken := l.slots[prefix]
	if taken == nil {
		taken = make(map[int]*slot)
		l.slots[prefix] = taken
	}
	n := 0
	for taken[n] != nil {
		n++
	}
	s := &slot{l: l, prefix: prefix, n: n, key: prefix + l.hexID() + "-" + strconv.Itoa(n)}
	taken[n] = s
	e.byKey[s.key] = s
	l.keys++
	l.changes++
	if l.keys == 1 {
		e.keeper.poke() // from now on the keeper keeps it alive
	}
	return s
}

// free returns a slot whose key is known to be gone. A lease that new
// acquisitions no longer use is revoked with its last key.
func (e *Engine) free(s *slot) {
	e.mu.Lock()
	l := s.l
	if taken := l.slots[s.prefix]; taken != nil && taken[s.n] == s {
		if s.burnt {
			taken[s.n] = reserved
		} else if delete(taken, s.n); len(taken) == 0 {
			delete(l.slots, s.prefix)
		}
		e.unkey(s)
		l.keys--
		l.changes++
	}
	retire := l.keys == 0 && !l.killed && e.current[l.shelf()] != l && !e.closed
	e.mu.Unlock()
	if retire {
		e.kill(l, nil)
		e.revokeLater(l.id)
	}
}

// orphan records a key that may have been left behind and could not be
// deleted: it is deleted before the lease is refreshed again, and expires
// with the lease if nothing refreshes it. Its slot stays taken until then,
// and its name for the life of the lease: the write that failed, or a
// delete given up on (the keeper's are one short attempt each, sent again
// through an election), may still be applied, and must not find another
// hold's key there.
func (e *Engine) orphan(s *slot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s.burnt = true
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
