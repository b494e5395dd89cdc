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

// lease is one etcd lease shared by the holds and waiters with the same
// TTL in whole seconds and lock delay, up to WithKeysPerLease keys. The
// keeper keeps it alive while it has keys; without, it expires.
type lease struct {
	secs   int64         // the requested TTL
	grace  time.Duration // the lock delay: how much longer than its holds the lease lives
	ready  chan struct{} // closed when the grant is done: id and ttl, or err, are set
	err    error         // the grant failed
	gaveUp bool          // err is the granting caller's context's: others try again
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
// "<prefix><lease ID in hex>-<n>", taken by one acquisition until its key
// is known to be gone, so no two holds share a key. Names are reused:
// etcd's index keeps every name until a compaction, and reads walk them.
type slot struct {
	l      *lease
	prefix string
	n      int
	key    string
	// Guarded by Engine.mu.
	//
	// hold is the renewed hold whose key this is, from its grant until
	// released or lost; fixed the same for a fixed lease's hold, which the
	// keeper neither keeps nor checks.
	hold, fixed *driver.Hold
	// deleted is the latest revision the deletion watch saw key deleted
	// at: a hold registered after it is refused.
	deleted int64
	// burnt: a write of key may still be applied, so once freed its name
	// is not taken again (see orphan).
	burnt bool
}

// reserved stands for a burnt slot that was freed.
var reserved = &slot{}

// shelf is what a shared lease stands for: its TTL in whole seconds and
// its holds' lock delay (grace), by which the lease outlives them.
type shelf struct {
	secs  int64
	grace time.Duration
}

func (l *lease) shelf() shelf { return shelf{l.secs, l.grace} }

// end is when l's holds are lost unless it is refreshed.
func (l *lease) end() time.Time { return l.expiry.Add(-l.grace) }

// life is the holds' TTL on l: the lease's, less the grace.
func (l *lease) life() time.Duration { return l.ttl - l.grace }

// holder is the hold whose key s is, if any. Called with Engine.mu held.
func (s *slot) holder() *driver.Hold {
	if s.hold != nil {
		return s.hold
	}
	return s.fixed
}

func (l *lease) hexID() string { return strconv.FormatInt(int64(l.id), 16) }

// fresh tells whether an acquisition may use a lease the keeper does not
// keep (no keys) without refreshing it: at most a sixth of its life gone.
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
// one if there is none or it is full, refreshing it if it aged unkept.
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

// grant asks etcd for l, hedged (a late grant leaves a lease with no key,
// which etcd ends), and publishes the outcome.
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

// refresh deletes l's orphans, then renews it; errLeaseGone, having
// killed it, when etcd no longer has it.
func (e *Engine) refresh(ctx context.Context, l *lease) error {
	e.mu.Lock()
	if l.killed {
		e.mu.Unlock()
		return errLeaseGone
	}
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
	// One attempt: the keeper tries again soon, on the next member.
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

// expired tells whether l's holds' life may have ended.
func (e *Engine) expired(l *lease) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !time.Now().Before(l.end())
}

// revokeQuiet ends a lease that holds nothing; a failure leaves it to
// expire.
func (e *Engine) revokeQuiet(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := e.cleanupContext(ctx)
	defer cancel()
	if _, err := e.client.Revoke(rctx, id); err != nil && !isLeaseNotFound(err) {
		e.log.Debug("etcd: revoke failed, the lease will expire", "lease", strconv.FormatInt(int64(id), 16), "err", err)
	}
}

// revokeLater is revokeQuiet in the background.
func (e *Engine) revokeLater(id clientv3.LeaseID) {
	e.core.Go(func(ctx context.Context) { e.revokeQuiet(ctx, id) })
}

// leftBehind disposes of the key of a failed write that may have been
// applied: at once if the caller gave up, else at the next refresh.
func (e *Engine) leftBehind(ctx context.Context, s *slot) {
	if ctx.Err() != nil {
		e.abandon(s)
		return
	}
	e.orphan(s)
}

// kill retires a lease that may have ended: its holds are lost and its
// waiters queue again. cause nil: no loss to report (Close, retiring).
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
	holds := l.holds()
	for s := range l.taken() {
		s.hold = nil
		if s.fixed == nil {
			e.unkey(s) // never freed: the lease takes its keys along
		}
	}
	l.held = 0
	e.mu.Unlock()
	if cause != nil {
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

// take reserves the lowest free slot of l under prefix; nil when l was
// retired.
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
		poke(e.keeper.wake) // from now on the keeper keeps it alive
	}
	return s
}

// free returns a slot whose key is known to be gone; a lease no longer
// current is revoked with its last key.
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

// orphan records a key that may be left behind: it is deleted before the
// lease is refreshed again. Its name stays burnt for the lease's life: a
// write given up on may still be applied, and must find no other hold's
// key there.
func (e *Engine) orphan(s *slot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s.burnt = true
	if !s.l.killed {
		s.l.orphans = append(s.l.orphans, s)
	}
}

// abandon deletes the key of a waiter or failed acquisition in the
// background, so that its caller returns at once; failing that, it is an
// orphan.
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
