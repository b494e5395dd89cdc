package idem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// pending is a write waiting for its store to answer again: an outcome
// (Done, Succeed), the claim of a running attempt on the engine switched
// to, or the clean-up of a record whose creation timed out.
type pending struct {
	store   Store
	key     string
	op      string    // what it is, for the logs: Done, Succeed, claim, clean-up
	storeOp string    // the store operation, for the observer
	until   time.Time // past this the store has freed the record anyway: drop it
	write   func(context.Context) (bool, error)
	// done, when set, hears the result of a write that was made (err
	// nil, or an error other than unavailability).
	done func(ok bool, err error)
}

// recorder writes pending outcomes in the background: one goroutine per
// gate, started by the first outcome queued and stopped by Gate.Close.
type recorder struct {
	mu      sync.Mutex
	items   []*pending
	closed  bool
	started bool
	wake    chan struct{} // buffered 1: an outcome was queued
	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine has returned
}

// Backoff between rounds while a store does not answer.
const (
	retryMin = 50 * time.Millisecond
	retryMax = 2 * time.Second
)

// queue hands p to the recorder; false when the queue is full or the gate
// closed.
func (g *Gate) queue(p *pending) bool {
	r := &g.rec
	r.mu.Lock()
	if r.closed || len(r.items) >= g.set.pending {
		r.mu.Unlock()
		return false
	}
	r.items = append(r.items, p)
	if !r.started {
		r.started = true
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel, r.done, r.wake = cancel, make(chan struct{}), make(chan struct{}, 1)
		go g.record(ctx)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	g.set.obs.Pending(p.store.Name(), 1)
	return true
}

// Pending returns how many outcomes wait for their store to answer again.
func (g *Gate) Pending() int {
	g.rec.mu.Lock()
	defer g.rec.mu.Unlock()
	return len(g.rec.items)
}

// Close stops the background recording of pending outcomes (WithPending)
// and waits for it, at most the request timeout; outcomes still pending
// are logged and dropped (their records expire on the store). A gate that
// never queued an outcome has nothing to stop. Close does not close the
// stores. It is idempotent; Begin still works after it, and a Done whose
// store does not answer then returns the store's error.
func (g *Gate) Close() (err error) {
	r := &g.rec
	r.mu.Lock()
	first := !r.closed
	r.closed = true
	started, left := r.started, len(r.items)
	r.mu.Unlock()
	if first {
		defer func() { err = g.closeStores() }()
	}
	if !started {
		return err
	}
	r.cancel()
	<-r.done // the goroutine's round trips are bounded by the request timeout and end on cancel
	if left > 0 {
		g.set.log.Warn("idem: closed with outcomes not recorded; their records expire", "pending", left)
	}
	return err
}

// record is the recorder's goroutine.
func (g *Gate) record(ctx context.Context) {
	r := &g.rec
	defer close(r.done)
	wait := retryMin
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		left, progressed := g.recordRound(ctx)
		if ctx.Err() != nil {
			return
		}
		var tick <-chan time.Time
		if left > 0 {
			if progressed {
				wait = retryMin
			} else {
				wait = min(2*wait, retryMax)
			}
			timer.Reset(wait)
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-tick:
		}
	}
}

// recordRound tries each pending outcome once, skipping the stores that
// failed earlier in the round, and returns how many are left and whether
// any was written.
func (g *Gate) recordRound(ctx context.Context) (left int, progressed bool) {
	g.rec.mu.Lock()
	items := append([]*pending(nil), g.rec.items...)
	g.rec.mu.Unlock()
	// Stores that answer first: a claim on the new engine must not wait
	// for a round trip to the frozen one to time out.
	slices.SortStableFunc(items, func(a, b *pending) int {
		return cmp.Compare(boolInt(g.health[a.store].down.Load()), boolInt(g.health[b.store].down.Load()))
	})
	failed := map[Store]bool{}
	var finished []*pending
	for _, p := range items {
		st := p.store
		if !time.Now().Before(p.until) {
			g.set.log.Warn("idem: pending write dropped: the record expired while its store did not answer; the operation may run again",
				"id", p.key, "store", st.Name(), "call", p.op)
			finished = append(finished, p)
			continue
		}
		if failed[st] {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, g.set.timeout)
		start := time.Now()
		ok, err := p.write(cctx)
		cancel()
		g.set.obs.StoreCall(ctx, st.Name(), p.storeOp, time.Since(start), err)
		if ctx.Err() != nil {
			break
		}
		if err != nil && (errors.Is(err, locker.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)) {
			failed[st] = true
			continue
		}
		g.recovered(st)
		finished, progressed = append(finished, p), true
		switch {
		case err != nil:
			g.set.log.Warn("idem: pending write failed", "id", p.key, "store", st.Name(), "call", p.op, "err", err)
		case !ok:
			g.set.log.Info("idem: pending write not made: the record is no longer this attempt's", "id", p.key, "store", st.Name(), "call", p.op)
		default:
			g.set.log.Info("idem: pending write made", "id", p.key, "store", st.Name(), "call", p.op)
		}
		if p.done != nil {
			p.done(ok, err)
		}
	}
	g.rec.mu.Lock()
	defer g.rec.mu.Unlock()
	for _, p := range finished {
		for i, q := range g.rec.items {
			if q == p {
				g.rec.items = append(g.rec.items[:i], g.rec.items[i+1:]...)
				break
			}
		}
		g.set.obs.Pending(p.store.Name(), -1)
	}
	return len(g.rec.items), progressed
}

// outcomeJob is the pending write of t's outcome to its store.
func (t *Ticket) outcomeJob(op string, succeeded bool, result []byte) *pending {
	write := func(ctx context.Context) (bool, error) {
		return t.writeOutcome(ctx, t.store, t.entry, succeeded, result)
	}
	return &pending{store: t.store, key: t.key, op: op, storeOp: opName(succeeded), until: t.until, write: write,
		done: func(ok bool, err error) { t.g.local.settled(t, err == nil && ok && succeeded, result) }}
}

func opName(succeeded bool) string {
	if succeeded {
		return "replace"
	}
	return "remove"
}

// pendingErr is Done's error for an outcome it queued.
func pendingErr(op, key, store string, cause error) error {
	return fmt.Errorf("idem: %s %s on %q: %w (%v)", op, key, store, ErrPending, cause)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
