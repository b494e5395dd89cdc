package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/internal/async"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// state is the engine's part of a hold (driver.Hold.State), one type per
// kind: mutexHold, fairHold (a mutex of a fair engine) and famHold (a side
// of a read-write lock, or permits). Each keeps its keys and the argument
// lists of its scripts, built once per acquisition and shared by its
// attempts, renewals and release; go-redis writes the pointers in them as
// the values they point to, so no argument is boxed on its own. Each keeps
// its lists in an array sized for its kind, so that a mutex hold stays
// small.
type state interface {
	base() *hold
	// attempt runs the acquire script once: the token (> 0), or minus the
	// time to wait at most. It records the ticket a waiter is given.
	attempt(ctx context.Context, e *Engine) (int64, error)
	// granted records the token of a grant and readies the release.
	granted(e *Engine, token int64)
	// release runs the release script once: 1, or 0 when the hold is gone.
	release(ctx context.Context, e *Engine) (int64, error)
	// renewal is the key of the hold's entry in renewScript, and its kind
	// ('s' or 'z', see renew.lua), boxed already: a constant boxes without
	// allocating.
	renewal() (key *string, kind any)
	// withdraw takes the entry of a waiter that gave up (ticket != 0) out
	// of its queue.
	withdraw(bg context.Context, e *Engine)
}

// hold is what every kind of hold keeps.
type hold struct {
	name         string
	lock         string // the key whose channel wakes the waiters
	owner        string
	value        string // the hold's entry (see member), which renewals compare
	ttl          int64  // ms, for PX and renewals
	token        uint64
	releaseAfter time.Duration // bound of a release that no caller waits for
	// ticket orders a waiter and names its entry in a queue (a family's or
	// a fair engine's): its rank, weight then arrival (lua/rank.lua); set
	// by the attempt that first finds the name taken when the caller will
	// wait (0 before, and always for a mutex).
	ticket int64
	// abandoned: the caller left while a request was in flight; the
	// worker that runs it cleans up after it (see call.exec).
	abandoned bool
	// inTurn: the waiters of this process queue for the name in turn, not
	// in Redis (a mutex of an engine that is not fair).
	inTurn bool
}

func (b *hold) base() *hold { return b }

func newHold(h *driver.Hold, lock string, ttl time.Duration) hold {
	return hold{name: h.Name, lock: lock, owner: h.Owner, ttl: ttlMillis(ttl), releaseAfter: h.ReleaseTimeout}
}

func ttlMillis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// weight is the acquire scripts' weight argument: the hold's when the
// caller will wait, 1 for a TryLock, which passes no waiter. A small
// integer boxes without allocating.
func weight(h *driver.Hold, wait bool) any {
	if !wait {
		return int64(1)
	}
	return int64(max(h.Weight, 1))
}

// member is a hold's entry: "<token>:<owner>", or "<token>:<permits>:<owner>"
// for permits; and a waiter's, with its ticket.
func member(token uint64, permits int, owner string) string {
	s := strconv.FormatUint(token, 10) + ":"
	if permits > 0 {
		s += strconv.Itoa(permits) + ":"
	}
	return s + owner
}

// attemptReply reads the reply of an acquire script that hands out
// tickets: the token (> 0), or {ms to wait at most, ticket}, returned as
// minus the wait and the ticket.
func attemptReply(v any) (r, ticket int64, err error) {
	switch v := v.(type) {
	case int64:
		return v, 0, nil
	case []any:
		if len(v) == 2 {
			wait, ok1 := v[0].(int64)
			ticket, ok2 := v[1].(int64)
			if ok1 && ok2 {
				return -wait, ticket, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("unexpected reply %v", v)
}

// Acquire implements driver.Backend.
func (e *Engine) Acquire(ctx context.Context, h *driver.Hold, wait bool) (bool, error) {
	var st state
	switch {
	case h.Kind != inspect.KindMutex:
		st = e.newFamHold(h, wait)
	case e.fq != nil:
		st = e.newFairHold(h, wait)
	default:
		st = e.newMutexHold(h)
	}
	h.State = st
	ok, err := e.acquire(ctx, h, st, wait)
	if b := st.base(); !ok && !b.abandoned && b.ticket != 0 {
		// In the background, as a cancelled wait must return at once; here
		// once the engine is closed.
		if !e.core.Go(func(bg context.Context) { e.withdraw(bg, st) }) {
			e.withdraw(context.Background(), st)
		}
	}
	return ok, err
}

// withdraw takes a waiter that gave up out of its queue, within the
// release timeout.
func (e *Engine) withdraw(bg context.Context, st state) {
	ctx, cancel := context.WithTimeout(bg, st.base().releaseAfter)
	defer cancel()
	st.withdraw(ctx, e)
}

func (e *Engine) acquire(ctx context.Context, h *driver.Hold, st state, wait bool) (bool, error) {
	b := st.base()
	mark := e.hub.subscribed()
	var remaining time.Duration
	if wait && b.inTurn && e.hub.queued(b.lock) {
		// Others of this process wait for the name: queue behind them
		// rather than barge in (a releaser locking again would mostly win
		// over the waiter its release woke). The holder's time left is
		// unknown: the first wait is bounded by this hold's TTL.
		remaining = time.Duration(b.ttl) * time.Millisecond
	} else {
		ok, left, err := e.try(ctx, h, st)
		if ok || err != nil || !wait {
			return ok, err
		}
		remaining = left
	}
	// Subscribe, then try again: a release between the first attempt and
	// the subscription is caught by the second attempt, and a release after
	// it is published, since the channel has a subscriber. When this
	// process was subscribed already, the release was published and woke
	// the waiter whose turn it was: no second attempt.
	h.Asking()
	w, retry, err := e.hub.join(ctx, b.lock, mark, interest{kind: h.Kind, ticket: b.ticket})
	if err != nil {
		settle(ctx)
		return false, fmt.Errorf("redis: acquire %q: %w", h.Name, err)
	}
	for {
		if retry {
			h.Asking()
			ok, left, err := e.try(ctx, h, st)
			if ok || err != nil {
				// A waiter that leaves without the lock may have taken a
				// wake-up meant for the next one: leave passes it on.
				e.hub.leave(w, ok)
				return ok, err
			}
			remaining = left
		}
		retry = true
		// The release message wakes us; the timer covers an expiry, which
		// publishes nothing.
		w.timer.Reset(remaining)
		select {
		case <-w.wake:
		case <-w.timer.C:
		case <-ctx.Done():
			e.hub.leave(w, false)
			return false, ctx.Err() // Redis had answered: the name was held
		}
	}
}

// try makes one attempt, which gives up when ctx ends even though Redis
// has not answered (see do): with an error wrapping ErrUnavailable. A
// grant that comes after that is released.
func (e *Engine) try(ctx context.Context, h *driver.Hold, st state) (bool, time.Duration, error) {
	r, err := e.do(ctx, st)
	switch {
	case errors.Is(err, locker.ErrPermitsMismatch):
		return false, 0, err
	case err != nil:
		return false, 0, e.fail(ctx, "acquire", h.Name, err)
	case r > 0:
		st.granted(e, r)
		h.Token = st.base().token
		return true, 0, nil
	}
	return false, max(time.Duration(-r)*time.Millisecond, time.Millisecond), nil
}

// do runs the acquire script of st, or PING when st is nil, and returns its
// reply, or ctx.Err() as soon as ctx ends; a ctx without a deadline is given
// one of the request timeout. The request runs on a worker of the Core (see
// call) unless go-redis can end it in time itself (see Contexts and
// failures in doc.go).
func (e *Engine) do(ctx context.Context, st state) (int64, error) {
	if _, ok := ctx.Deadline(); !ok {
		// When only the bound can end ctx, go-redis ends the request at
		// its deadline, here: no worker.
		direct := ctx.Done() == nil && e.deadlines
		var cancel context.CancelFunc
		ctx, cancel = e.bound.Bound(ctx)
		defer cancel()
		if direct {
			return e.request(ctx, st)
		}
	}
	c := e.calls.Get().(*call)
	c.ctx, c.st = ctx, st
	c.Reset()
	if !e.core.Go(c.run) {
		c.recycle()
		return 0, locker.ErrClosed
	}
	select {
	case r := <-c.Answer():
		c.recycle()
		return r.Value, r.Err
	case <-ctx.Done():
		r, ok := c.Abandon()
		if !ok {
			if st != nil {
				st.base().abandoned = true
			}
			return 0, ctx.Err() // the worker recycles c
		}
		c.recycle() // delivered just now
		return r.Value, r.Err
	}
}

// honoursDeadlines tells whether go-redis ends client's requests at their
// context's deadline: ContextTimeoutEnabled, on the clients that can say.
func honoursDeadlines(client goredis.UniversalClient) bool {
	switch c := client.(type) {
	case *goredis.Client:
		return c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *goredis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

func (e *Engine) request(ctx context.Context, st state) (int64, error) {
	if st == nil {
		return 0, e.client.Ping(ctx).Err()
	}
	return st.attempt(ctx, e)
}

// call is one request made on a worker for a caller who may leave before
// the answer (an async.Pending whose worker undoes a late grant): pooled,
// with its function bound once, so that handing it over allocates nothing.
type call struct {
	async.Pending[int64]
	e   *Engine
	run func(context.Context) // exec

	// The request, set by do and cleared by recycle.
	ctx context.Context
	st  state
}

func (c *call) exec(bg context.Context) {
	v, err := c.e.request(c.ctx, c.st)
	if c.Deliver(v, err) {
		return // c is the caller's now
	}
	// The caller left: undo a grant that came after that, or withdraw the
	// entry a waiter recorded.
	if st := c.st; st != nil && err == nil && v > 0 {
		st.granted(c.e, v)
		c.e.releaseLate(bg, st)
	} else if st != nil && st.base().ticket != 0 {
		c.e.withdraw(bg, st)
	}
	c.recycle()
}

func (c *call) recycle() {
	c.ctx, c.st = nil, nil
	c.e.calls.Put(c)
}

// releaseLate releases a grant whose caller had given up.
func (e *Engine) releaseLate(bg context.Context, st state) {
	ctx, cancel := context.WithTimeout(bg, st.base().releaseAfter)
	defer cancel()
	if err := e.release(ctx, st); err != nil {
		e.log.Warn("redis: releasing a grant whose caller gave up failed; it ends with its TTL", "name", st.base().name, "err", err)
	}
}

// Release implements driver.Backend.
func (e *Engine) Release(ctx context.Context, h *driver.Hold) error {
	return e.release(ctx, h.State.(state))
}

// HonoursDeadlines implements driver.DeadlineHonourer: when the client
// ends a request at its context's deadline (ContextTimeoutEnabled), a
// release goes out alone, not batched behind others' pipelines (see
// batcher.release), and returns by its deadline, so Unlock makes it on its
// caller's goroutine. Otherwise Unlock hands every release to a worker of
// the Core and waits at most its bound.
func (e *Engine) HonoursDeadlines() bool { return e.deadlines }

func (e *Engine) release(ctx context.Context, st state) error {
	name := st.base().name
	n, err := st.release(ctx, e)
	for e.window > 0 && errors.Is(err, syscall.ECONNREFUSED) {
		// Sentinel is failing the master over, and the release was never
		// sent: ask again soon, until ctx ends, so that it lands as soon
		// as the new master is reached (the Core's retries of a release
		// that got no answer grow to a second apart).
		t := time.NewTimer(refusedRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return e.fail(ctx, "release", name, err)
		}
		n, err = st.release(ctx, e)
	}
	if err != nil {
		return e.fail(ctx, "release", name, err)
	}
	if n == 0 {
		return fmt.Errorf("redis: release %q: %w", name, locker.ErrLockLost)
	}
	return nil
}

// refusedRetry is how soon a release refused during a Sentinel failover is
// asked again.
const refusedRetry = 50 * time.Millisecond
