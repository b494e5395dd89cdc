package idem

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// With WithCheckPrevious, after a switch, the attempts of this process
// still running on the old engine's store are claimed on the new one:
// their running record is written there too (same attempt token, same
// expiry), so that a duplicate reaching another process, which now goes to
// the new store, sees them even when the old store does not answer and
// the previous check cannot look. Their outcome is then written to both
// stores. The successes of this process within the last expiry are copied
// to the new store likewise. Claims and copies are written by the
// background recorder (WithPending), at the first Begin that sees the
// switch.

// claimOn queues the claim on to of every attempt of this process that
// runs elsewhere.
func (g *Gate) claimOn(to Store) {
	if to == nil || g.set.pending == 0 || g.set.previous == 0 {
		return
	}
	var claims []*Ticket
	var copies []recentRec
	g.local.mu.Lock()
	now := time.Now()
	for _, t := range g.local.inflight {
		if t.store != to && t.mirror == nil && now.Before(t.until) && !(t.final && !t.finalOK) {
			claims = append(claims, t)
		}
	}
	for _, r := range g.local.recent {
		if r.from != to && now.Sub(r.at) < g.local.recentFor {
			copies = append(copies, r)
		}
	}
	g.local.mu.Unlock()
	for _, t := range claims {
		if !g.queue(t.claimJob(to)) {
			return
		}
	}
	for _, r := range copies {
		if !g.queue(g.copyJob(r, to)) {
			return
		}
	}
}

// copyJob writes a recent success of this process to the store switched
// to, unless that store has a record of the operation already.
func (g *Gate) copyJob(r recentRec, to Store) *pending {
	write := func(ctx context.Context) (bool, error) {
		val := r.rec.encode(nil)
		_, created, err := to.Create(ctx, r.key, val, g.set.retention, g.set.retention)
		return created, err
	}
	return &pending{store: to, key: r.key, op: "copy", storeOp: "create", until: r.at.Add(g.set.retention), write: write}
}

// claimJob writes t's record on to: running, or succeeded if its outcome
// is known by then.
func (t *Ticket) claimJob(to Store) *pending {
	g, l := t.g, t.g.local
	write := func(ctx context.Context) (bool, error) {
		l.mu.Lock()
		final, succeeded, result := t.final, t.finalOK, t.result
		l.mu.Unlock()
		if final && !succeeded {
			return false, nil // failed: nothing to claim
		}
		rec, ttl := t.rec, time.Until(t.until)
		if final {
			rec.State, rec.Result, ttl = Succeeded, result, g.set.retention
		}
		if ttl <= 0 {
			return false, nil
		}
		val := rec.encode(nil)
		e, created, err := to.Create(ctx, t.key, val, ttl, g.set.retention)
		if err != nil {
			return false, err
		}
		if !created && !bytes.Equal(e.Value, val) {
			g.set.log.Warn("idem: an attempt of this process ran on the old engine, another on the new one", "id", t.key, "store", to.Name())
			return false, nil
		}
		l.mu.Lock()
		if final || !t.final { // the record says what is known; Done writes the rest
			if !final {
				t.mirror, t.mirrorEntry = to, e
			}
			l.mu.Unlock()
			return true, nil
		}
		succeeded, result = t.finalOK, t.result // Done came meanwhile: write its outcome here
		l.mu.Unlock()
		return t.writeOutcome(ctx, to, e, succeeded, result)
	}
	return &pending{store: to, key: t.key, op: "claim", storeOp: "create", until: t.until, write: write}
}

// writeOutcome writes an outcome to a record of t's attempt on s.
func (t *Ticket) writeOutcome(ctx context.Context, s Store, e Entry, succeeded bool, result []byte) (bool, error) {
	if !succeeded {
		return s.Remove(ctx, t.key, e)
	}
	rec := t.rec
	rec.State, rec.Result = Succeeded, result
	val := rec.encode(make([]byte, 0, headerLen+len(rec.Fingerprint)+len(result)))
	return s.Replace(ctx, t.key, e, val, t.g.set.retention)
}

// finalize marks t's outcome as known, once Done has taken it, and writes
// it to the claim on another store if there is one. ctx bounds the write.
func (t *Ticket) finalize(ctx context.Context, succeeded bool, result []byte) {
	g := t.g
	g.local.mu.Lock()
	t.final, t.finalOK = true, succeeded
	if succeeded && t.result == nil {
		t.result = result
	}
	to, e := t.mirror, t.mirrorEntry
	g.local.mu.Unlock()
	if to == nil && succeeded && g.set.previous > 0 {
		// Not claimed yet (no Begin since the switch): if the engine moved
		// away from a store that does not answer, record the success on the
		// new one now, for the duplicates that go there.
		if cur := g.currentStore(); cur != nil && cur != t.store && g.health[t.store].down.Load() {
			cctx, cancel := context.WithTimeout(ctx, g.set.timeout)
			_, err := t.claimJob(cur).write(cctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				g.set.log.Warn("idem: outcome not written to the engine switched to", "id", t.key, "store", cur.Name(), "err", err)
			}
		}
		return
	}
	if to == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, g.set.timeout)
	start := time.Now()
	_, err := t.writeOutcome(cctx, to, e, succeeded, result)
	cancel()
	g.set.obs.StoreCall(ctx, to.Name(), opName(succeeded), time.Since(start), err)
	if err != nil && ctx.Err() == nil {
		g.set.log.Warn("idem: outcome not written to the claim on the new engine; it expires there", "id", t.key, "store", to.Name(), "err", err)
	}
}

// currentStore is the store of the current engine of a switched gate; nil
// for a gate over one store.
func (g *Gate) currentStore() Store {
	if g.byName == nil {
		return nil
	}
	return g.byName[g.current()]
}

// cleanup queues the deletion of the record a Begin tried to create with
// val and gave up on: the store may still apply the write (a paused
// server, a lost reply), and that record, which nobody owns, would refuse
// the operation until its expiry.
func (g *Gate) cleanup(s Store, key string, val []byte, ttl time.Duration) {
	if g.set.pending == 0 {
		return
	}
	write := func(ctx context.Context) (bool, error) {
		e, ok, err := s.Get(ctx, key)
		if err != nil || !ok || !bytes.Equal(e.Value, val) {
			return false, err
		}
		return s.Remove(ctx, key, e)
	}
	// The record's expiry starts when the server applies the write, which
	// can be long after ttl: the job lasts until the store answers.
	g.queue(&pending{store: s, key: key, op: "clean-up", storeOp: "remove", until: time.Now().Add(max(ttl, g.set.retention)), write: write})
}

// unavailable tells a store's failure from the caller's giving up.
func unavailable(ctx context.Context, err error) bool {
	return ctx.Err() == nil && (errors.Is(err, locker.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded))
}
