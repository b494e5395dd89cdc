package etcd

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/orthrus-go/orthrus/locker/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// goneWatch is the deletion watch (doc.go, "Leases and TTLs"): one watch
// per engine on its namespace, deletions only, from its first hold on. It
// loses a hold whose key was deleted under it at once, where the keeper
// finds it only within a TTL, for one lookup in Engine.byKey per deletion
// and no request per hold; a release unregisters its hold before deleting
// the key, so it is never reported. It resumes after the revision it last
// delivered; after a compaction, and for a hold whose key's creation no
// watch covered, the keys are checked by their create revisions.
type goneWatch struct {
	ctx    context.Context
	cancel context.CancelFunc // ends the watch, at Close
	done   chan struct{}      // closed when the watch's goroutine has ended
	wake   chan struct{}      // holds to check are queued
	start  chan struct{}      // closed at the first hold: the watch starts

	// Guarded by Engine.mu.
	//
	// started tells that start is closed.
	started bool

	// since is the revision after which the watch delivers every deletion:
	// notCovered before the first hold, and while a new watch after a
	// compaction is not confirmed.
	since int64
	// check are holds registered while their key's creation was not
	// covered, for the goroutine to check by reading.
	check []*driver.Hold

	// Tests only (export_test.go): interrupt ends the current watch as if
	// etcd had; while gate (guarded by Engine.mu) is set, no watch starts
	// before it is closed.
	interrupt chan struct{}
	gate      chan struct{}
}

// notCovered is goneWatch.since while no watch covers any revision.
const notCovered = math.MaxInt64

func newGoneWatch() *goneWatch {
	g := &goneWatch{done: make(chan struct{}), wake: make(chan struct{}, 1), start: make(chan struct{}),
		since: notCovered, interrupt: make(chan struct{})}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g
}

func (g *goneWatch) poke() { poke(g.wake) }

// unkey forgets the slot s, whose key the deletion watch looks up no more.
// Called with e.mu held.
func (e *Engine) unkey(s *slot) {
	if e.byKey[s.key] == s {
		delete(e.byKey, s.key)
	}
}

// watchGone has h, just registered, checked by reading when no watch
// covers its key's creation, and starts the watch at the first hold.
// Called with e.mu held.
func (e *Engine) watchGone(h *driver.Hold, st *holdState) {
	if !e.gone.started {
		// The watch starts from this key's creation: it covers this hold,
		// and every later one, with no check.
		e.gone.started, e.gone.since = true, st.rev
		close(e.gone.start)
		return
	}
	if st.rev < e.gone.since {
		e.gone.check = append(e.gone.check, h)
		e.gone.poke()
	}
}

// stopGone ends the deletion watch and waits for it. Close calls it.
func (e *Engine) stopGone() {
	e.gone.cancel()
	<-e.gone.done
}

// followGone runs the deletion watch until Close, from the first hold's
// key on, starting again after a growing delay each time it ends, from
// the revision to resume from (next; 0: a new watch).
func (e *Engine) followGone() {
	g := e.gone
	defer close(g.done)
	var (
		retry time.Duration
		timer = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	select {
	case <-g.start:
	case <-g.ctx.Done():
		return
	}
	e.mu.Lock()
	next := g.since + 1
	e.mu.Unlock()
	for {
		var delivered bool
		next, delivered = e.watchDeletes(next)
		if delivered {
			retry = 0
		}
		retry = backoff(retry)
		timer.Reset(retry)
		select {
		case <-g.ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// watchDeletes is one watch of the namespace's deletions from revision
// next (0: from now), until it ends. It returns the revision to resume
// from, and whether it delivered anything.
func (e *Engine) watchDeletes(next int64) (int64, bool) {
	g := e.gone
	e.mu.Lock()
	gate := g.gate
	e.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-g.ctx.Done():
			return next, false
		}
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(g.ctx))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify(), clientv3.WithProgressNotify()}
	if next > 0 {
		opts = append(opts, clientv3.WithRev(next))
	}
	events := e.watcher.Watch(ctx, e.prefix+"/", opts...)
	g.poke() // checks a previous watch left queued
	var (
		delivered bool
		again     <-chan time.Time // a failed check is tried again
		retry     time.Duration
	)
	for {
		select {
		case <-g.wake:
			if err := e.checkGone(ctx); err != nil {
				retry = backoff(retry)
				again = time.After(retry)
				continue
			}
			retry, again = 0, nil
			continue
		case <-again:
			g.poke()
			continue
		case <-g.interrupt:
			return next, delivered
		case resp, ok := <-events:
			if !ok {
				return next, delivered
			}
			delivered = true
			switch {
			case resp.CompactRevision != 0:
				// Deletions since next may be lost: check every hold
				// once a new watch covers what comes next.
				e.log.Debug("etcd: deletion watch compacted, checking every held key", "from", next, "compacted", resp.CompactRevision)
				e.uncover()
				return 0, true
			case resp.Canceled || resp.Err() != nil:
				if g.ctx.Err() == nil {
					e.log.Debug("etcd: deletion watch ended, resuming", "from", next, "err", resp.Err())
				}
				return next, delivered
			case resp.Created && next == 0:
				// A new watch: it delivers what comes after its
				// creation's revision.
				e.cover(resp.Header.Revision)
			case resp.Created:
				continue // resumed: the header tells nothing delivered
			}
			e.keysDeleted(resp.Events)
			next = resp.Header.Revision + 1 // delivered up to it
		}
	}
}

// cover records that the watch delivers every deletion after rev, and
// has the holds registered meanwhile checked.
func (e *Engine) cover(rev int64) {
	e.mu.Lock()
	e.gone.since = rev
	e.mu.Unlock()
	e.gone.poke()
}

// uncover records that no watch covers anything now, and queues every
// registered hold for a check once one does.
func (e *Engine) uncover() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gone.since = notCovered
	for _, s := range e.byKey {
		if h := s.holder(); h != nil {
			e.gone.check = append(e.gone.check, h)
		}
	}
}

// keysDeleted reports the holds whose keys evs deleted: a deletion after the
// key's creation (st.rev), not one of an earlier key of the same slot.
func (e *Engine) keysDeleted(evs []*clientv3.Event) {
	var gone []*driver.Hold
	e.mu.Lock()
	for _, ev := range evs {
		if ev.Type != mvccpb.DELETE {
			continue
		}
		s := e.byKey[string(ev.Kv.Key)]
		if s == nil {
			continue // another process's key, or a freed slot's
		}
		rev := ev.Kv.ModRevision
		s.deleted = max(s.deleted, rev)
		if h := s.holder(); h != nil && rev > h.State.(*holdState).rev {
			gone = append(gone, h)
		}
	}
	e.mu.Unlock()
	e.lose(gone)
}

// checkGone checks, by their keys' create revisions, the holds queued
// while no watch covered their keys, once one does; they stay queued
// after a failure.
func (e *Engine) checkGone(ctx context.Context) error {
	e.mu.Lock()
	if e.gone.since == notCovered {
		e.mu.Unlock()
		return nil // cover pokes again
	}
	holds := e.gone.check
	e.gone.check = nil
	e.mu.Unlock()
	for len(holds) > 0 {
		chunk := holds[:min(len(holds), maxTxnOps)]
		gone, err := e.goneKeys(ctx, chunk)
		if err != nil {
			e.mu.Lock()
			e.gone.check = append(e.gone.check, holds...)
			e.mu.Unlock()
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				e.log.Debug("etcd: checking held keys failed, will retry", "holds", len(holds), "err", err)
			}
			return err
		}
		e.lose(gone)
		holds = holds[len(chunk):]
	}
	return nil
}
