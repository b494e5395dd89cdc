package postgres

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orthrus-go/orthrus/locker/driver"
)

// waiter is one waiting acquisition, as the hub sees it.
type waiter struct {
	key  string
	wake chan struct{} // buffered: a wake-up is never lost, nor blocks
	// Guarded by the hub's mutex: what the waiter's verdict waits for;
	// known false while its queue is being read, when any news of the
	// name wakes it.
	blockers []int64
	count    bool
	known    bool
}

// hub routes the engine's notifications to its waiters: the one
// listening connection serves them all.
type hub struct {
	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{}
}

func newHub() *hub { return &hub{waiters: make(map[string]map[*waiter]struct{})} }

func hubKey(fam int16, name string) string { return strconv.Itoa(int(fam)) + ":" + name }

func (h *hub) join(fam int16, name string) *waiter {
	w := &waiter{key: hubKey(fam, name), wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.waiters[w.key]
	if set == nil {
		set = make(map[*waiter]struct{})
		h.waiters[w.key] = set
	}
	set[w] = struct{}{}
	return w
}

func (h *hub) leave(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.waiters[w.key]
	delete(set, w)
	if len(set) == 0 {
		delete(h.waiters, w.key)
	}
}

// expect records what w's verdict waits for, for the next wait. It reports
// true, consuming the wake-up, when news of the name came while the queue
// was read: the verdict may be stale, and the waiter reads it again.
func (h *hub) expect(w *waiter, blockers []int64, count bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-w.wake:
		w.known = false
		return true
	default:
	}
	w.blockers, w.count, w.known = blockers, count, true
	return false
}

// deliver wakes the waiters of a name whose verdict the going of seq (or,
// seq 0, a count change) may change; from then on, until they record a new
// verdict, any news wakes them.
func (h *hub) deliver(fam int16, name string, seq int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[hubKey(fam, name)] {
		if !w.known || (seq == 0 && w.count) || slices.Contains(w.blockers, seq) {
			w.known = false
			poke(w)
		}
	}
}

// wakeAll wakes every waiter: notifications may have been missed.
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.waiters {
		for w := range set {
			w.known = false
			poke(w)
		}
	}
}

func poke(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// parsePayload reads "fam:seq:name": the row seq went; or
// "famg:seq:name": the row seq was granted (a permit, see grant).
func parsePayload(p string) (fam int16, seq int64, name string, granted, ok bool) {
	f, rest, ok1 := strings.Cut(p, ":")
	f, granted = strings.CutSuffix(f, "g")
	s, name, ok2 := strings.Cut(rest, ":")
	fv, err1 := strconv.Atoi(f)
	sv, err2 := strconv.ParseInt(s, 10, 64)
	return int16(fv), sv, name, granted, ok1 && ok2 && err1 == nil && err2 == nil
}

// Bounds of the listener's reconnection backoff.
const (
	listenRetry    = 50 * time.Millisecond
	listenRetryMax = 2 * time.Second
)

// listen keeps one connection LISTENing on the engine's channel until
// Close, and delivers what it hears. Each time it (re)connects it wakes
// every waiter, since notifications may have been missed meanwhile. The
// backoff grows while it cannot listen, and starts again after a
// connection that listened (a restarted server is listened to again
// within listenRetry, not the backoff an earlier outage reached).
func (e *Engine) listen() {
	ctx := e.life
	for delay := listenRetry; ctx.Err() == nil; {
		listened, err := e.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			delay = listenRetry
		}
		e.log.Debug("postgres: the listening connection failed; reconnecting", "err", err, "in", delay)
		e.hub.wakeAll()
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		delay = min(2*delay, listenRetryMax)
	}
}

// listenOnce connects, listens, wakes every waiter and delivers
// notifications until the connection fails or ctx ends; listened tells
// whether it got as far as listening.
func (e *Engine) listenOnce(ctx context.Context) (listened bool, err error) {
	rctx, rcancel := e.bound(ctx)
	pc, err := e.pool.Acquire(rctx)
	if err != nil {
		rcancel()
		return false, err
	}
	// Hijacked: the pool neither hands it out nor counts it.
	conn := pc.Hijack()
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(cctx)
		ccancel()
	}()
	_, err = conn.Exec(rctx, "LISTEN "+pgx.Identifier{e.sql.channel}.Sanitize())
	rcancel()
	if err != nil {
		return false, err
	}
	e.hub.wakeAll()
	if err := e.checkHeld(ctx); err != nil {
		return true, err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if fam, seq, name, granted, ok := parsePayload(n.Payload); ok {
			if !granted {
				e.gone(seq)
			}
			e.hub.deliver(fam, name, seq)
		}
	}
}

// checkHeld marks gone the engine's holds whose rows were deleted while it
// did not listen (before its first LISTEN, or while it reconnected): the
// notifications of those deletions were lost. It asks on a pooled
// connection: the listening one stays idle in its LISTEN.
func (e *Engine) checkHeld(ctx context.Context) error {
	e.heldMu.Lock()
	holds := make([]*driver.Hold, 0, len(e.held))
	for _, h := range e.held {
		holds = append(holds, h)
	}
	e.heldMu.Unlock()
	for chunk := range slices.Chunk(holds, renewChunk) {
		seqs := make([]int64, len(chunk))
		for i, h := range chunk {
			seqs[i] = holdSeq(h)
		}
		rctx, cancel := e.bound(ctx)
		rows, _ := e.pool.Query(rctx, e.sql.missing, seqs)
		missing, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		cancel()
		if err != nil {
			return err
		}
		for _, seq := range missing {
			e.gone(seq) // unless released meanwhile: Release forgets first
		}
	}
	return nil
}

// reap deletes rows long expired, now and then, until Close: they count as
// absent already, and only take room.
func (e *Engine) reap() {
	t := time.NewTicker(e.reapEach)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-e.life.Done():
			return
		}
		ctx, cancel := e.bound(e.life)
		_, err := e.pool.Exec(ctx, e.sql.reap, e.reapPast.Seconds())
		cancel()
		if err != nil {
			e.log.Debug("postgres: reaping expired rows failed", "err", err)
		}
	}
}
