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

// goneWatch is the deletion watch: one watch per engine on its namespace,
// deletions only, which loses a hold whose key was deleted under it at
// once (a release unregisters first). It runs only while a hold has lived
// driver.WatchHeldAfter, as ZooKeeper's watch on a held node does: every deletion in
// the namespace, the engine's own releases and other processes' included,
// is an event to send and decode, which a hold released sooner does not
// need, since its Unlock finds its key gone. It starts right after the
// oldest held key's creation, so that it delivers every deletion a hold
// missed (etcd serves such a watch at its catch-up of lagging watches,
// every 100 ms, which costs no request where a check of the held keys
// would), and resumes after the revision it delivered; after a
// compaction, and for a hold whose key's creation no watch covered, keys
// are checked by create revision. It stops when no hold has lived
// WatchHeldAfter for two periods.
type goneWatch struct {
	ctx    context.Context
	cancel context.CancelFunc // ends the watch, at Close
	done   chan struct{}      // closed when the watch's goroutine has ended
	wake   chan struct{}      // holds to check are queued
	held   chan struct{}      // a hold was registered while no watch runs

	// Guarded by Engine.mu.
	watching bool           // a watch runs or is starting
	epoch    int64          // WatchHeldAfter periods counted while a hold is held
	since    int64          // the watch delivers every deletion after it
	check    []*driver.Hold // registered while their creation was not covered

	// Tests only (export_test.go): interrupt ends the current watch; while
	// gate is set (under Engine.mu), no watch starts before it closes;
	// opened counts the watches started (under Engine.mu); after is
	// WatchHeldAfter, which they may set before the first hold.
	interrupt chan struct{}
	gate      chan struct{}
	opened    int
	after     time.Duration
}

// notCovered is goneWatch.since while no watch covers any revision.
const notCovered = math.MaxInt64

func newGoneWatch() *goneWatch {
	g := &goneWatch{done: make(chan struct{}), wake: make(chan struct{}, 1), held: make(chan struct{}, 1),
		since: notCovered, interrupt: make(chan struct{}), after: driver.WatchHeldAfter}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g
}

// unkey forgets s for the deletion watch. Called with e.mu held.
func (e *Engine) unkey(s *slot) {
	if e.byKey[s.key] == s {
		delete(e.byKey, s.key)
	}
}

// watchGone stamps h with the period it came in, and queues it for a
// check when a watch runs that does not cover its key's creation. Called
// with e.mu held.
func (e *Engine) watchGone(h *driver.Hold, st *holdState) {
	st.epoch = e.gone.epoch
	if !e.gone.watching {
		poke(e.gone.held)
		return
	}
	if st.rev < e.gone.since {
		e.gone.check = append(e.gone.check, h)
		poke(e.gone.wake)
	}
}

// stopGone ends the deletion watch and waits for it.
func (e *Engine) stopGone() {
	e.gone.cancel()
	<-e.gone.done
}

// followGone runs the deletion watch until Close, while a hold has lived
// WatchHeldAfter, resuming after a growing delay each time it ends.
func (e *Engine) followGone() {
	g := e.gone
	defer close(g.done)
	var (
		retry time.Duration
		next  int64
		timer = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	for {
		if next == 0 {
			from, ok := e.awaitOldHold(timer)
			if !ok {
				return
			}
			next = from
		}
		var delivered, idle bool
		next, delivered, idle = e.watchDeletes(next)
		if idle {
			retry = 0
			continue
		}
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

// awaitOldHold returns, once a hold has lived WatchHeldAfter, the revision the
// watch is to start from: right after the oldest held key's creation, so
// that it delivers every deletion of a held key (0, from now, when a
// watch is wanted already: it restarts after a compaction with every
// hold queued for a check); false at Close.
func (e *Engine) awaitOldHold(timer *time.Timer) (int64, bool) {
	g := e.gone
	for {
		e.mu.Lock()
		if g.watching {
			e.mu.Unlock()
			return 0, true
		}
		old, live := e.tick()
		if old {
			g.watching, g.since = true, e.oldestHeld()
			e.mu.Unlock()
			return g.since + 1, true
		}
		e.mu.Unlock()
		if !live {
			select {
			case <-g.held:
			case <-g.ctx.Done():
				return 0, false
			}
		}
		timer.Reset(g.after)
		select {
		case <-timer.C:
		case <-g.ctx.Done():
			return 0, false
		}
	}
}

// tick starts a period and tells whether a hold stamped before the one
// that just ended is held (it has lived WatchHeldAfter), and whether any is.
// Called with e.mu held.
func (e *Engine) tick() (old, live bool) {
	e.gone.epoch++
	for _, s := range e.byKey {
		if h := s.holder(); h != nil {
			if h.State.(*holdState).epoch < e.gone.epoch-1 {
				return true, true
			}
			live = true
		}
	}
	return false, live
}

// oldestHeld is the smallest create revision of a held key. Called with
// e.mu held, while one is.
func (e *Engine) oldestHeld() int64 {
	oldest := int64(math.MaxInt64)
	for _, s := range e.byKey {
		if h := s.holder(); h != nil {
			oldest = min(oldest, h.State.(*holdState).rev)
		}
	}
	return oldest
}

// watchDeletes is one watch of the namespace's deletions from revision
// next (0: from now), until it ends. It returns the revision to resume
// from, whether it delivered anything, and whether it ended because no
// hold was left (idle): then it is not to resume.
func (e *Engine) watchDeletes(next int64) (_ int64, delivered, idle bool) {
	g := e.gone
	ctx, cancel, events := e.openDeletes(next)
	if events == nil {
		return next, false, false
	}
	defer cancel()
	var (
		again <-chan time.Time // a failed check is tried again
		retry time.Duration
		young int // periods in a row in which no hold had lived WatchHeldAfter
	)
	ticks := time.NewTicker(g.after)
	defer ticks.Stop()
	for {
		select {
		case <-ticks.C:
			if young = e.countYoung(young); young == 2 {
				return 0, delivered, true
			}
			continue
		case <-g.wake:
			if err := e.checkGone(ctx); err != nil {
				retry = backoff(retry)
				again = time.After(retry)
				continue
			}
			retry, again = 0, nil
			continue
		case <-again:
			poke(g.wake)
			continue
		case <-g.interrupt:
			return next, delivered, false
		case resp, ok := <-events:
			if !ok {
				return next, delivered, false
			}
			delivered = true
			switch {
			case resp.CompactRevision != 0:
				// Deletions since next may be lost: check every hold.
				e.log.Debug("etcd: deletion watch compacted, checking every held key", "from", next, "compacted", resp.CompactRevision)
				e.mu.Lock()
				e.uncover()
				e.mu.Unlock()
				return 0, true, false
			case resp.Canceled || resp.Err() != nil:
				if g.ctx.Err() == nil {
					e.log.Debug("etcd: deletion watch ended, resuming", "from", next, "err", resp.Err())
				}
				return next, delivered, false
			case resp.Created && next == 0:
				// A new watch delivers what follows its creation.
				e.cover(resp.Header.Revision)
			case resp.Created:
				continue // resumed: the header tells nothing delivered
			}
			e.keysDeleted(resp.Events)
			next = resp.Header.Revision + 1 // delivered up to it
		}
	}
}

// openDeletes starts a watch of the namespace's deletions from revision
// next (0: from now), with the context that ends it; nil events at Close.
func (e *Engine) openDeletes(next int64) (context.Context, context.CancelFunc, clientv3.WatchChan) {
	g := e.gone
	e.mu.Lock()
	gate := g.gate
	g.opened++
	e.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-g.ctx.Done():
			return nil, nil, nil
		}
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(g.ctx))
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify(), clientv3.WithProgressNotify()}
	if next > 0 {
		opts = append(opts, clientv3.WithRev(next))
	}
	events := e.watcher.Watch(ctx, e.prefix+"/", opts...)
	poke(g.wake) // checks a previous watch left queued
	return ctx, cancel, events
}

// countYoung returns young+1 when no hold has lived WatchHeldAfter, 0 else; at
// 2 the watch is no longer wanted: the next one starts from the oldest
// held key's creation. Called at each WatchHeldAfter while the watch runs.
func (e *Engine) countYoung(young int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if old, _ := e.tick(); old {
		return 0
	}
	if young++; young == 2 {
		e.gone.watching, e.gone.since, e.gone.check = false, notCovered, nil
	}
	return young
}

// cover records that the watch delivers every deletion after rev.
func (e *Engine) cover(rev int64) {
	e.mu.Lock()
	e.gone.since = rev
	e.mu.Unlock()
	poke(e.gone.wake)
}

// uncover records that no watch covers anything, queueing every hold for
// a check once one does. Called with e.mu held.
func (e *Engine) uncover() {
	e.gone.since = notCovered
	for _, s := range e.byKey {
		if h := s.holder(); h != nil {
			e.gone.check = append(e.gone.check, h)
		}
	}
}

// keysDeleted loses the holds whose keys evs deleted after their creation.
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

// checkGone checks the queued holds once a watch covers; they stay
// queued after a failure.
func (e *Engine) checkGone(ctx context.Context) error {
	e.mu.Lock()
	if e.gone.since == notCovered {
		e.mu.Unlock()
		return nil // cover pokes again
	}
	holds := e.gone.check
	e.gone.check = nil
	e.mu.Unlock()
	rest, err := e.loseGone(ctx, holds)
	if err != nil {
		e.mu.Lock()
		e.gone.check = append(e.gone.check, rest...)
		e.mu.Unlock()
		if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			e.log.Debug("etcd: checking held keys failed, will retry", "holds", len(rest), "err", err)
		}
	}
	return err
}
