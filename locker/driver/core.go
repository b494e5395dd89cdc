package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orthrus-go/orthrus/internal/async"
	"github.com/orthrus-go/orthrus/internal/deadline"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// Backend is the handful of primitives an engine supplies. Core builds the
// Lockers over them: owners, re-entry, the renewal loop and lost-hold
// signalling live in Core, once, for every engine.
type Backend interface {
	// Acquire takes h.Name for h.Owner with a hold of h.TTL and sets h.Token
	// (and, if it needs one, h.State). With wait false it makes one attempt
	// and returns (false, nil) on contention. With wait true it blocks until
	// granted, or until ctx is done. Engine failures wrap locker.ErrUnavailable,
	// and also locker.ErrRefused when the engine is certainly down.
	//
	// Once ctx is done it returns at once, leaving nothing behind (what
	// needs the server to go is deleted in the background, see Core.Go): it
	// returns ctx.Err() itself when the engine had answered its latest
	// request (the name was held), and an error wrapping locker.ErrUnavailable when
	// a request was still unanswered. The Core turns the latter into
	// ctx.Err() when that request had been sent less than OutageAfter
	// before ctx ended, and learns when from h.Asking.
	Acquire(ctx context.Context, h *Hold, wait bool) (bool, error)
	// Release ends h. It returns an error wrapping locker.ErrLockLost when the
	// engine no longer has h, and must not touch another owner's hold.
	Release(ctx context.Context, h *Hold) error
}

// Expirer is implemented by backends whose holds do not end on the server
// by themselves (ZooKeeper's, which live with a session). When a fixed
// lease with a lock delay runs out, the Core calls Expire instead of
// Release: it ends h so that the name stays barred for h.Delay. Other
// backends keep such a hold on the server for h.Life, and the Core only
// forgets it.
type Expirer interface {
	Expire(ctx context.Context, h *Hold) error
}

// DeadlineHonourer is implemented by backends whose Release returns by its
// context's deadline (but may not at a cancellation): Unlock then releases
// on its caller's goroutine, bounded by a deadline, and hands the release
// to a worker only when the deadline passes without an answer. Backends
// that do not implement it get every release handed to a worker.
type DeadlineHonourer interface {
	HonoursDeadlines() bool
}

// Renewer is implemented by backends whose holds expire unless renewed. Core
// calls it with the holds that fall due together, in chunks of at most 128
// (RenewChunk sets another bound), several calls at once (see renew.go):
// Renew must be safe for concurrent use.
type Renewer interface {
	// Renew extends each hold by its TTL, in as few round trips as it can,
	// and returns one result per hold: nil, an error wrapping locker.ErrLockLost
	// when the hold is gone, or another error when it should be retried.
	Renew(ctx context.Context, holds []*Hold) []error
}

// Hold is one granted hold as an engine sees it. Core creates it; the
// engine fills Token and State in Acquire and calls MarkLost when it learns
// that the hold ended under its owner.
type Hold struct {
	Name  string        // the lock name, already validated
	Owner string        // the owner ID of the Locker
	TTL   time.Duration // lifetime without renewal
	Renew bool          // false for a fixed lease
	// ReleaseTimeout bounds a release that no caller waits for (the end of
	// a fixed lease).
	ReleaseTimeout time.Duration
	// Delay is the lock delay (WithLockDelay): after the hold ends
	// without a release, the name stays barred for Delay. Engines whose
	// holds expire on the server keep them there for Life, not TTL; the
	// others see Delay through Expirer.
	Delay time.Duration
	// Weight ranks the hold's wait among the name's waiters, heavier first
	// (1 to 10; locker.WithWeight). Only a Weigher's Acquire
	// sees one above 1.
	Weight int
	Token  uint64 // fencing token, set by Acquire

	// inspect.Kind says what is held: the mutex, a side of a read-write lock or
	// permits of a semaphore. Names of different kinds are independent.
	Kind inspect.Kind
	// Permits is how many permits a inspect.KindPermit hold takes (1 otherwise).
	Permits int
	// Limit is the permit count a inspect.KindPermit hold's semaphore was opened
	// with; CheckLimit asks Acquire to fail with locker.ErrPermitsMismatch when
	// the stored count differs (the semaphore's first acquisition).
	Limit      int
	CheckLimit bool
	// Writer is, for a inspect.KindRead hold taken while its owner holds the write
	// side (a downgrade), that write hold: the read is granted at once while
	// Writer is still held, with Writer's token, and later writers must wait
	// for it whatever their place in line.
	Writer *Hold
	State  any // engine-private, set by Acquire

	lost     chan struct{}
	lostOnce sync.Once
	asked    int64 // monoNow when Acquire's latest request was sent

	// Scheduling, guarded by the scheduler's mutex. With obs and isGone
	// next to them, a renewal reads one or two cache lines of a hold: with
	// 100k holds those misses were most of a renewal's client CPU.
	due      time.Time // next renewal, or the end of a fixed lease
	deadline time.Time // the hold is lost if not renewed by then
	failures int       // renewals failed in a row
	risky    bool      // reported at risk since the latest renewal that got through
	queued   bool      // in the scheduler's queue
	stopped  bool      // released: the scheduler must drop it

	isGone atomic.Bool // Lost is closed: read without a channel receive
	obs    *holdObs    // nil unless the Core has an observe.Observer
}

// Life is how long the engine keeps h on the server without renewal: its
// TTL, and the lock delay after it. The Core still loses h at its TTL, and
// renews it every TTL/3 (each renewal extends it by Life), so only a hold
// whose owner stopped renewing it lives past its TTL, and only as a bar on
// the name; a release deletes it at once.
func (h *Hold) Life() time.Duration { return h.TTL + h.Delay }

// OutageAfter is how long a request must have gone unanswered when its
// caller's context ends for the acquisition to fail as an outage, with an
// error wrapping locker.ErrUnavailable. A request sent later than that before the
// end only ran out of the caller's time, as a wait on a held name does:
// the caller gets ctx.Err(). A healthy engine on a loaded machine answers
// within it, and it is as long as a switcher's default health check gives
// an engine to answer.
const OutageAfter = 300 * time.Millisecond

// WatchHeldAfter is how long a hold goes before its engine watches for its
// key being deleted by someone else (an operator, a TTL lost on the
// server): a hold released sooner, as most short holds are, never pays for
// the watch, and a deletion within it is reported once the watch starts.
const WatchHeldAfter = 10 * time.Millisecond

// Asking tells the Core that the engine sends a request for h now. The
// Core notes the first before Acquire; an engine calls Asking before each
// request it sends after an answer (the next step of a wait, a try again
// after a wake-up), from Acquire's goroutine. An engine that does not is
// judged by the time since Acquire began.
func (h *Hold) Asking() { h.asked = monoNow() }

// MarkLost closes Lost, for a hold the engine ended: a lease or session
// lost (cause observe.LostEngine). It is safe to call more than once and from any
// goroutine.
func (h *Hold) MarkLost() { h.markLost(observe.LostEngine) }

// MarkGone is MarkLost for a hold whose key or node the engine found
// deleted, or taken over, under it (cause observe.LostGone).
func (h *Hold) MarkGone() { h.markLost(observe.LostGone) }

// Lost is closed when the hold has ended without Unlock.
func (h *Hold) Lost() <-chan struct{} { return h.lost }

func (h *Hold) isLost() bool { return h.isGone.Load() }

// Core is the machinery one engine shares between all its Lockers: the
// renewal loop, the set of live holds and the closed state.
type Core struct {
	engine  string
	backend Backend
	log     *slog.Logger
	sched   *scheduler

	mu     sync.Mutex
	closed bool
	holds  map[*Hold]struct{}

	work *async.Pool // background work started by Go

	obs observe.Observer // nil: nothing observes

	releases  sync.Pool // of *pendingRelease
	deadlines bool      // the backend's Release returns by its context's deadline
	// Timeout: how long Unlock waits for an answer. Never stopped: an Unlock
	// racing Close must still be answered, and its timer ends by itself.
	releaseWait deadline.Shared
	minTTL      time.Duration // the backend's MinTTL, 0 without one
	noWeights   error         // why the backend does not rank waiters by weight (Weigher); nil: it does
	renewChunk  int           // the most holds of one Renew call
}

// NewCore starts the renewal loop for an engine named engine. Call Close to
// stop it. A nil logger means slog.Default(); engines pass one that already
// names them.
func NewCore(engine string, b Backend, logger *slog.Logger, opts ...CoreOption) *Core {
	if logger == nil {
		logger = slog.Default()
	}
	c := &Core{engine: engine, backend: b, log: logger, holds: make(map[*Hold]struct{}), releaseWait: deadline.Shared{Timeout: DefaultReleaseWait}, renewChunk: renewChunk, noWeights: errNoWeights}
	for _, opt := range opts {
		opt(c)
	}
	c.work = async.NewPool()
	if d, ok := b.(DeadlineHonourer); ok {
		c.deadlines = d.HonoursDeadlines()
	}
	c.minTTL = MinTTL(b)
	if w, ok := b.(Weigher); ok {
		c.noWeights = w.Weighs()
	}
	renewer, _ := b.(Renewer)
	c.sched = startScheduler(renewer, c.expire, logger, c.renewChunk, renewWorkers)
	return c
}

// NewLocker validates name and opts and returns a new owner's Locker.
func (c *Core) NewLocker(name string, opts ...locker.Option) (locker.Handle, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	s, err := c.resolve(opts)
	if err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	return newMutex(c, name, s), nil
}

// resolve resolves opts against the backend's minimum TTL (a backend that
// implements MinTTLer, as every engine of this module does).
func (c *Core) resolve(opts []locker.Option) (locker.Settings, error) {
	return ResolveFor(c.engine, c.minTTL, opts...)
}

// Closed reports whether Close has been called.
func (c *Core) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Core) checkOpen() error {
	if c.Closed() {
		return fmt.Errorf("%s: %w", c.engine, locker.ErrClosed)
	}
	return nil
}

// Go runs f on a goroutine the Core owns, for work that must not hold up
// the caller that starts it: deleting what a cancelled wait left on a
// server that does not answer, undoing a grant that came after its caller
// gave up. Close waits for it within its own context, then cancels the ctx
// f was given and waits for f to return, which it must do promptly. Go
// reports false, and does not run f, once Close has begun.
func (c *Core) Go(f func(ctx context.Context)) bool { return c.work.Go(f) }

// Close stops the renewal loop and releases every hold still held, within
// ctx. Their Lost channels close. It waits for the work started by Go,
// within ctx too. It is idempotent.
func (c *Core) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.work.Stop()
	holds := c.holds
	c.holds = nil
	c.mu.Unlock()

	c.sched.close()
	var errs []error
	for h := range holds {
		h.markLost(observe.LostClosed)
		if err := c.backend.Release(ctx, h); err != nil && !errors.Is(err, locker.ErrLockLost) {
			errs = append(errs, err)
		}
	}
	if err := c.work.Close(ctx); err != nil {
		c.log.Warn("locker: background cleanup still running at close, cancelled", "engine", c.engine)
	}
	return errors.Join(errs...)
}

// granted records a new hold and schedules its renewal or lease end. It
// reports false, having released the hold, when the engine closed meanwhile.
func (c *Core) granted(h *Hold) bool {
	if h.obs != nil {
		h.obs.granted.Store(monoNow())
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), h.ReleaseTimeout)
		defer cancel()
		_ = c.backend.Release(ctx, h)
		return false
	}
	c.holds[h] = struct{}{}
	c.mu.Unlock()
	c.sched.add(h, time.Now())
	return true
}

// release forgets h and ends it on the engine within h.ReleaseTimeout,
// never the caller's context: a release must happen even when its caller
// has given up. The caller waits for the first answer at most wait, or
// until done closes; past that it gets an error wrapping locker.ErrUnavailable,
// and the engine is asked again in the background until the release
// timeout; the hold ends by its TTL if it never answers.
//
// Without done, on a backend that honours deadlines, the first try is made
// on the caller's goroutine; otherwise every try is handed to a worker,
// which allocates nothing (see pendingRelease) but costs two goroutine
// switches per release.
func (c *Core) release(h *Hold, wait time.Duration, done <-chan struct{}) error {
	c.forget(h)
	if done == nil && c.deadlines {
		return c.releaseHere(context.Background(), h, wait)
	}
	r, _ := c.releases.Get().(*pendingRelease)
	if r == nil {
		r = &pendingRelease{c: c, answer: make(chan error, 1), timer: time.NewTimer(time.Hour)}
		r.run = r.exec
		r.timer.Stop()
	}
	r.h = h
	r.settled.Store(false)
	if !c.Go(r.run) { // closing
		r.recycle()
		return c.releaseHere(context.Background(), h, h.ReleaseTimeout)
	}
	r.timer.Reset(wait)
	var err error
	answered := false
	select {
	case err = <-r.answer:
		answered = true
	case <-r.timer.C:
	case <-done:
	}
	r.timer.Stop() // before r can be the worker's
	if !answered {
		if r.settled.CompareAndSwap(false, true) { // the worker recycles r
			return errReleaseGoesOn(h)
		}
		err = <-r.answer // answered just now
	}
	r.recycle()
	return err
}

// releaseCtx is release for a caller whose wait also ends with ctx: on a
// backend that honours deadlines, the first try is made on the caller's
// goroutine, under ctx (its values, such as a trace, reach the engine).
func (c *Core) releaseCtx(ctx context.Context, h *Hold, wait time.Duration) error {
	if !c.deadlines || ctx.Err() != nil {
		return c.release(h, wait, ctx.Done())
	}
	c.forget(h)
	return c.releaseHere(ctx, h, wait)
}

// releaseHere makes the first try of a release on the caller's goroutine,
// within wait and parent, and hands the rest to a worker when it got no
// answer (or parent ended first: the release must still happen).
func (c *Core) releaseHere(parent context.Context, h *Hold, wait time.Duration) error {
	start := time.Now()
	ctx, cancel := c.releaseBound(parent, wait)
	err := c.endOnEngine(ctx, h)
	cancel()
	if err == nil || (!errors.Is(err, locker.ErrUnavailable) && parent.Err() == nil) {
		return err
	}
	left := h.ReleaseTimeout - time.Since(start)
	if left <= 0 || !c.Go(func(bg context.Context) { c.retryRelease(bg, h, left, err) }) {
		return err
	}
	return fmt.Errorf("%w (%w)", errReleaseGoesOn(h), err)
}

// releaseBound bounds a release's first try by wait: an Unlock's (its wait
// is the release wait) shares the Core's context, with no timer of its own.
func (c *Core) releaseBound(parent context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	if wait == c.releaseWait.Timeout {
		return c.releaseWait.Bound(parent)
	}
	return deadline.Within(parent, wait)
}

func errReleaseGoesOn(h *Hold) error {
	return fmt.Errorf("%w: no answer yet; the release goes on in the background (within %v)", locker.ErrUnavailable, h.ReleaseTimeout)
}

// Retries of a release that got no answer start at releaseRetry and
// double up to releaseRetryMax.
const (
	releaseRetry    = 50 * time.Millisecond
	releaseRetryMax = time.Second
)

// pendingRelease is one release handed to a worker: pooled, with its
// function bound once. Its first answer goes to the caller, who recycles
// it, or the caller leaves without it and the worker recycles it: settled
// says which happened first. The caller owns the timer.
type pendingRelease struct {
	c       *Core
	run     func(context.Context) // exec
	answer  chan error            // buffered: the worker never blocks
	settled atomic.Bool
	timer   *time.Timer
	h       *Hold
}

func (r *pendingRelease) recycle() {
	r.h = nil
	r.c.releases.Put(r)
}

// exec ends r.h on the engine, and goes on asking while it does not answer;
// after the first answer it no longer touches r, which is recycled then.
func (r *pendingRelease) exec(bg context.Context) {
	c, h := r.c, r.h
	start := time.Now()
	ctx, cancel := context.WithTimeout(bg, h.ReleaseTimeout)
	err := c.endOnEngine(ctx, h)
	cancel()
	if r.settled.CompareAndSwap(false, true) {
		r.answer <- err
	} else {
		r.recycle()
	}
	if errors.Is(err, locker.ErrUnavailable) {
		c.retryRelease(bg, h, h.ReleaseTimeout-time.Since(start), err)
	}
}

// retryRelease asks the engine again to end h, with growing pauses, while
// it does not answer and left lasts; last is the latest try's failure.
func (c *Core) retryRelease(bg context.Context, h *Hold, left time.Duration, last error) {
	ctx, cancel := context.WithTimeout(bg, left)
	defer cancel()
	// locker.ErrLockLost after a try that got no answer: that try ended it.
	for delay := releaseRetry; errors.Is(last, locker.ErrUnavailable); delay = min(2*delay, releaseRetryMax) {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			c.log.Warn("locker: release got no answer; the hold ends at its TTL",
				"name", h.Name, "owner", h.Owner, "ttl", h.TTL, "err", last)
			return
		}
		last = c.endOnEngine(ctx, h)
	}
}

// endOnEngine ends h on the engine.
func (c *Core) endOnEngine(ctx context.Context, h *Hold) error {
	if c.obs != nil {
		return c.observeRelease(ctx, h)
	}
	return c.backend.Release(ctx, h)
}

func (c *Core) forget(h *Hold) {
	c.sched.remove(h)
	c.mu.Lock()
	delete(c.holds, h)
	c.mu.Unlock()
}

// expire ends a fixed lease: the hold is lost, and the engine is told to end
// it, since not every engine expires holds on its own (ZooKeeper does not).
// With a lock delay the lease ran out without Unlock, so the name must stay
// barred: an Expirer ends it so, and the other engines' servers end it at
// its Life by themselves.
func (c *Core) expire(h *Hold) {
	h.markLost(observe.LostLeaseEnd)
	c.mu.Lock()
	delete(c.holds, h)
	c.mu.Unlock()
	end := c.backend.Release
	if h.Delay > 0 {
		x, ok := c.backend.(Expirer)
		if !ok {
			return
		}
		end = x.Expire
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.ReleaseTimeout)
	defer cancel()
	if err := end(ctx, h); err != nil && !errors.Is(err, locker.ErrLockLost) {
		c.log.Warn("locker: release after lease end failed", "name", h.Name, "err", err)
	}
}
