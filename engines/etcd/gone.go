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
// deletions only, from its first hold on, which loses a hold whose key was
// deleted under it at once (a release unregisters first). It resumes after
// the revision it delivered; after a compaction, and for a hold whose
// key's creation no watch covered, keys are checked by create revision.
type goneWatch struct {
	ctx    context.Context
	cancel context.CancelFunc // ends the watch, at Close
	done   chan struct{}      // closed when the watch's goroutine has ended
	wake   chan struct{}      // holds to check are queued
	start  chan struct{}      // closed at the first hold: the watch starts

	// Guarded by Engine.mu.
	started bool           // start is closed
	since   int64          // the watch delivers every deletion after it
	check   []*driver.Hold // registered while their creation was not covered

	// Tests only (export_test.go): interrupt ends the current watch; while
	// gate is set (under Engine.mu), no watch starts before it closes.
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

// unkey forgets s for the deletion watch. Called with e.mu held.
func (e *Engine) unkey(s *slot) {
	if e.byKey[s.key] == s {
		delete(e.byKey, s.key)
	}
}

// watchGone queues h for a check when no watch covers its key's
// creation, and starts the watch at the first hold. Called with e.mu held.
func (e *Engine) watchGone(h *driver.Hold, st *holdState) {
	if !e.gone.started {
		// From this key's creation: it covers this hold and later ones.
		e.gone.started, e.gone.since = true, st.rev
		close(e.gone.start)
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

// followGone runs the deletion watch until Close, from the first hold on,
// resuming after a growing delay each time it ends.
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
	poke(g.wake) // checks a previous watch left queued
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
			poke(g.wake)
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
				// Deletions since next may be lost: check every hold.
				e.log.Debug("etcd: deletion watch compacted, checking every held key", "from", next, "compacted", resp.CompactRevision)
				e.uncover()
				return 0, true
			case resp.Canceled || resp.Err() != nil:
				if g.ctx.Err() == nil {
					e.log.Debug("etcd: deletion watch ended, resuming", "from", next, "err", resp.Err())
				}
				return next, delivered
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

// cover records that the watch delivers every deletion after rev.
func (e *Engine) cover(rev int64) {
	e.mu.Lock()
	e.gone.since = rev
	e.mu.Unlock()
	poke(e.gone.wake)
}

// uncover records that no watch covers anything, queueing every hold for
// a check once one does.
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
