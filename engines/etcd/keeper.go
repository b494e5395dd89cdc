package etcd

import (
	"context"
	"errors"
	"sync"
	"time"
)

// keeper is the engine's one loop that keeps its leases alive: every lease
// with keys on it (holds, waiters) is refreshed when a third of its life
// has gone, on a goroutine of its own, so that a lease whose refresh hangs
// holds up no other. A lease that could not be refreshed before the end of
// its life, as the engine counts it (the latest refresh sent plus its TTL),
// is killed then: its holds are lost (Lost closes) no later than the server
// may end it, and its waiters queue again on another lease.
type keeper struct {
	wake   chan struct{}
	done   chan struct{} // closed when the loop has ended
	ctx    context.Context
	cancel context.CancelFunc // ends the refreshes in flight, at Close
	wg     sync.WaitGroup     // the refreshes in flight
}

func newKeeper() *keeper {
	k := &keeper{wake: make(chan struct{}, 1), done: make(chan struct{})}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	return k
}

func (k *keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// keep runs the keeper until Close closes e.done.
func (e *Engine) keep() {
	defer close(e.keeper.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, expired, next := e.dueLeases(time.Now())
		for _, l := range expired {
			e.kill(l, errLeaseGone)
		}
		for _, l := range due {
			e.keeper.wg.Add(1)
			go func() {
				defer e.keeper.wg.Done()
				e.keepAlive(e.keeper.ctx, l)
			}()
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

// dueLeases returns the leases to refresh now, marking them busy, and those
// whose life has run out, and says when to look again.
func (e *Engine) dueLeases(now time.Time) (due, expired []*lease, next time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	next = now.Add(time.Hour)
	for l := range e.leases {
		if !l.granted || l.killed || l.keys == 0 {
			continue // not granted yet, or not kept
		}
		switch {
		case !now.Before(l.expiry):
			expired = append(expired, l)
		case l.busy:
			next = earliest(next, l.expiry)
		case !now.Before(l.next):
			l.busy = true
			due = append(due, l)
		default:
			next = earliest(next, l.next)
		}
	}
	return due, expired, next
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
	if err != nil {
		l.retry = backoff(l.retry)
		l.next = time.Now().Add(l.retry)
	}
	e.mu.Unlock()
	if err != nil && !errors.Is(err, errLeaseGone) && ctx.Err() == nil {
		e.log.Debug("etcd: renewing a lease failed, will retry", "lease", l.hexID(), "err", err)
	}
	e.keeper.poke()
}
