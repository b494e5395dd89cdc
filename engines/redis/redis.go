package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/internal/deadline"
	"github.com/orthrus-go/orthrus/locker"
)

// Engine is the Redis lock engine. It implements locker.Engine.
type Engine struct {
	name   string
	prefix string
	client goredis.UniversalClient
	hub    *hub
	batch  *batcher
	core   *locker.Core
	log    *slog.Logger
	calls  sync.Pool // of *call

	bound  deadline.Shared // WithRequestTimeout
	window time.Duration   // RideThrough: 0 unless a failover client
	// deadlines: the client ends a request at its context's deadline
	// (ContextTimeoutEnabled), so a request that only a deadline can end
	// runs on its caller's goroutine.
	deadlines bool

	cluster  *goredis.ClusterClient // nil unless Cluster
	reloaded atomic.Int64           // when the slot map was last reloaded, unix ns
	// oneNode: every key is on one server (a Client, single or Sentinel),
	// so one script may renew holds of different names.
	oneNode bool

	// Script arguments shared by every call, pointed to from the argument
	// lists so that building one allocates nothing.
	idle                             int64  // fence idle time, ms
	numsub, publish                  string // PUBSUB NUMSUB and PUBLISH, or their sharded forms on Cluster
	shaAcquire, shaRelease, shaRenew string
	fsha                             familySHAs
	fq                               *fairQueue // nil unless WithFair
}

var (
	_ locker.Engine  = (*Engine)(nil)
	_ locker.Backend = (*Engine)(nil)
	_ locker.Renewer = (*Engine)(nil)
)

type settings struct {
	name      string
	prefix    string
	logger    *slog.Logger
	fenceIdle time.Duration
	timeout   time.Duration
	window    time.Duration // -1: the client's default
	fair      bool

	observer locker.Observer // nil: nothing observes
}

// Option configures an Engine.
type Option func(*settings) error

// WithName names the engine in Lease.Engine, logs and the switcher.
// Default: "redis".
func WithName(name string) Option {
	return func(s *settings) error {
		if name == "" {
			return fmt.Errorf("redis: WithName: %w: name is empty", locker.ErrInvalidArgument)
		}
		s.name = name
		return nil
	}
}

// WithPrefix sets the namespace of every key, so that applications sharing a
// Redis do not collide. It may not contain '{' or '}', which would break the
// Cluster hash tag. Default: "orthrus".
func WithPrefix(prefix string) Option {
	return func(s *settings) error {
		if prefix == "" || strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("redis: WithPrefix(%q): %w: want a non-empty prefix without '{' or '}'", prefix, locker.ErrInvalidArgument)
		}
		s.prefix = prefix
		return nil
	}
}

// WithLogger sets the logger for lost holds and connection trouble.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("redis: WithLogger: %w: logger is nil", locker.ErrInvalidArgument)
		}
		s.logger = l
		return nil
	}
}

// DefaultFenceIdle is how long a name's fencing counter outlives the clock
// passing its last token: see WithFenceIdle.
const DefaultFenceIdle = 10 * time.Second

// WithFenceIdle sets how long a name's fencing counter is kept once the
// server clock has passed the last token it gave. The counter of a name that
// is not locked again within that time expires, so names locked once (one
// per order, say) leave nothing behind; the next grant starts the counter
// again from the clock in milliseconds, which is past every earlier token.
// It also bounds the backward step of the server clock that tokens survive.
// At least 1s. Default: DefaultFenceIdle (10s).
func WithFenceIdle(d time.Duration) Option {
	return func(s *settings) error {
		// The counter's expiry moves every refreshEvery tokens: a shorter
		// idle time could let it expire before the clock passes them.
		if d < time.Second || d < refreshEvery*time.Millisecond {
			return fmt.Errorf("redis: WithFenceIdle(%v): %w: want at least 1s", d, locker.ErrInvalidArgument)
		}
		s.fenceIdle = d
		return nil
	}
}

// DefaultRequestTimeout bounds one request to Redis whose context has no
// deadline, unless WithRequestTimeout says otherwise: see WithRequestTimeout.
const DefaultRequestTimeout = locker.DefaultRequestTimeout

// WithRequestTimeout bounds each request of an acquisition, and Ping, whose
// context has no deadline (Lock, TryLock, a LockCtx context that can only be
// cancelled), so that TryLock on a server that does not answer returns an
// error wrapping locker.ErrUnavailable within d rather than after the
// client's read timeouts and retries (5s and three retries with go-redis's
// defaults). A caller's deadline bounds the requests made under it instead,
// with the client's ReadTimeout. On a client with ContextTimeoutEnabled a
// request runs on its caller's goroutine and go-redis gives up within d
// (requests that start within d/64 of each other share a deadline); on one
// without it, go-redis would not, so the request runs on a worker of the
// engine and the caller leaves it within d. Default: DefaultRequestTimeout
// (2s).
func WithRequestTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("redis: WithRequestTimeout(%v): %w: timeout must be positive", d, locker.ErrInvalidArgument)
		}
		s.timeout = d
		return nil
	}
}

// DefaultSentinelRideThrough is the ride-through window of an engine over
// a failover client (Sentinel), unless WithRideThrough says otherwise. A
// Sentinel fails a master over once it has not answered for the
// Sentinels' down-after-milliseconds (Redis's default: 30s) and they have
// agreed, elected one of them and promoted a replica, which the failover
// client then finds: 1.2-2.2s past down-after in the tests, on a loaded
// host. The window is the default down-after and 5s for the rest.
const DefaultSentinelRideThrough = 35 * time.Second

// WithRideThrough sets how long the engine may fail, while Sentinel fails
// its master over, before a switcher counts it as down and moves new
// acquisitions to the next engine (see switcher.Cluster); Unlock waits for
// an unanswered release that long too, within the release timeout. Set it
// to the Sentinels' down-after-milliseconds + 5s. 0 makes the engine's
// failures count at once, as for one server. Default:
// DefaultSentinelRideThrough (35s) over a failover client, 0 over any other.
func WithRideThrough(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return fmt.Errorf("redis: WithRideThrough(%v): %w: window must not be negative", d, locker.ErrInvalidArgument)
		}
		s.window = d
		return nil
	}
}

// New returns an engine over client: a single node, Sentinel (failover) or
// Cluster client. The engine never closes client.
func New(client goredis.UniversalClient, opts ...Option) (*Engine, error) {
	if client == nil {
		return nil, fmt.Errorf("redis: New: %w: client is nil", locker.ErrInvalidArgument)
	}
	s := settings{name: "redis", prefix: "orthrus", logger: slog.Default(), fenceIdle: DefaultFenceIdle, timeout: DefaultRequestTimeout, window: -1}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("redis: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	logger := s.logger.With("engine", s.name)
	if s.window < 0 {
		s.window = 0
		if failover(client) {
			s.window = DefaultSentinelRideThrough
		}
	}
	e := &Engine{
		name: s.name, prefix: s.prefix, client: client, hub: newHub(client, logger), batch: &batcher{client: client}, log: logger,
		bound: deadline.Shared{Timeout: s.timeout}, window: s.window, deadlines: honoursDeadlines(client),
		idle: s.fenceIdle.Milliseconds(), numsub: "numsub", publish: "publish",
		shaAcquire: acquireScript.Hash(), shaRelease: releaseScript.Hash(), shaRenew: renewScript.Hash(),
		fsha: newFamilySHAs(),
	}
	if cc, ok := client.(*goredis.ClusterClient); ok {
		e.cluster = cc
		e.numsub, e.publish = "shardnumsub", "spublish"
	}
	if s.fair {
		e.fq = newFairQueue(e)
	}
	_, e.oneNode = client.(*goredis.Client)
	e.calls.New = func() any {
		c := &call{e: e, done: make(chan result, 1)}
		c.run = c.exec
		return c
	}
	e.core = locker.NewCore(s.name, e, logger, locker.ObservedBy(s.observer), locker.ReleaseWait(s.window))
	return e, nil
}

// failover tells a failover client (goredis.NewFailoverClient, or
// NewUniversalClient with a MasterName), which go-redis gives this address
// in place of a server's.
func failover(client goredis.UniversalClient) bool {
	c, ok := client.(*goredis.Client)
	return ok && c.Options().Addr == "FailoverClient"
}

// Name returns the engine's name.
func (e *Engine) Name() string { return e.name }

// Client returns the client the engine was built over, for what talks to
// the same server beside the locks (the stores of package idem). The
// engine does not own it; neither does the caller of Client.
func (e *Engine) Client() goredis.UniversalClient { return e.client }

// RideThrough returns the engine's ride-through window (WithRideThrough):
// a switcher lets the engine fail that long before its breaker opens.
func (e *Engine) RideThrough() time.Duration { return e.window }

// MinTTL is the shortest TTL, or fixed lease, the engine accepts. Redis
// expires a key to the millisecond, but a renewed hold lives only if each
// renewal, every TTL/3, makes its round trip (and its retries, an eighth
// of that apart) within the TTL: below 100ms a slow reply or a GC pause
// loses the hold.
const MinTTL = 100 * time.Millisecond

// MinTTL implements locker.MinTTLer: NewLocker refuses a WithTTL or
// WithLease below MinTTL.
func (e *Engine) MinTTL() time.Duration { return MinTTL }

// NewLocker returns a new owner's Locker for name.
func (e *Engine) NewLocker(name string, opts ...locker.Option) (locker.Handle, error) {
	return e.core.NewLocker(name, opts...)
}

// NewRWLock returns a new owner's read-write lock on name.
func (e *Engine) NewRWLock(name string, opts ...locker.Option) (locker.RWLock, error) {
	return e.core.NewRWLock(name, opts...)
}

// NewSemaphore returns a semaphore of permits permits on name.
func (e *Engine) NewSemaphore(name string, permits int, opts ...locker.Option) (locker.Semaphore, error) {
	return e.core.NewSemaphore(name, permits, opts...)
}

// Ping checks that Redis answers.
func (e *Engine) Ping(ctx context.Context) error {
	if e.core.Closed() {
		return fmt.Errorf("redis: ping: %w", locker.ErrClosed)
	}
	if _, err := e.do(ctx, nil); err != nil {
		return e.fail(ctx, "ping", "", err)
	}
	return nil
}

// Close releases the holds still held, stops the renewal loop and the
// subscriptions. It does not close the client.
func (e *Engine) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), locker.DefaultReleaseTimeout)
	defer cancel()
	err := errors.Join(e.core.Close(ctx), e.hub.close())
	e.bound.Stop()
	if e.fq != nil {
		e.fq.close()
	}
	return err
}

// LockKey returns the Redis key that holds the named lock: a string
// "<token>:<owner>" with a TTL. For inspection and operator tools.
func (e *Engine) LockKey(name string) string { return e.keysFor(name).lock }

// keys are the Redis keys of one lock name.
type keys struct {
	lock, fence, channel string
}

// keysFor maps a name into the prefix. The name becomes the hash tag, with
// '{', '}' and '%' escaped so that the tag is the whole name and escaping
// never makes two names collide.
func (e *Engine) keysFor(name string) keys {
	fence := e.fenceKey(name)
	lock := fence[:len(fence)-len(fenceSuffix)]
	return keys{lock: lock, fence: fence, channel: lock + channelSuffix}
}

// fenceKey is the fencing counter's key; the lock key is its prefix, so one
// allocation makes both.
func (e *Engine) fenceKey(name string) string {
	return e.prefix + ":{" + nameEscaper.Replace(name) + "}" + fenceSuffix
}

// Suffixes of the counter key and the channel; the scripts know the
// channel's too.
const (
	fenceSuffix   = ":fence"
	channelSuffix = ":wake"
)

var nameEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func ttlMillis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// hold is the engine's part of a hold (locker.Hold.State): its keys and the
// argument lists of its scripts, built once per acquisition and shared by
// its attempts, renewals and release. go-redis writes the pointers in them
// as the values they point to, so no argument is boxed on its own.
type hold struct {
	name         string
	lock, fence  string
	owner        string
	ttl          int64 // ms: the hold's life (TTL and lock delay), for PX
	token        uint64
	releaseAfter time.Duration // bound of a release that no caller waits for
	// The acquire script's arguments until granted, then the release
	// script's, read only from then on.
	args [8]any
	fam  *fam      // nil for a mutex hold
	fair *fairHold // nil unless a mutex hold of a fair engine
	// value is a mutex hold's "<token>:<owner>", which its renewals
	// compare: made by the first, so that a short hold never makes it.
	value string
}

func (e *Engine) newHold(h *locker.Hold) *hold {
	fence := e.fenceKey(h.Name)
	st := &hold{
		name: h.Name, lock: fence[:len(fence)-len(fenceSuffix)], fence: fence,
		owner: h.Owner, ttl: ttlMillis(h.Life()), releaseAfter: h.ReleaseTimeout,
	}
	// numkeys is a string: go-redis's Cluster routing reads it as one.
	st.args = [8]any{"evalsha", &e.shaAcquire, "2", &st.lock, &st.fence, &st.owner, &st.ttl, &e.idle}
	return st
}

// granted records the token of a grant and readies the release.
func (e *Engine) granted(st *hold, token int64) {
	if st.fam != nil {
		e.famGranted(st, token)
		return
	}
	if st.fair != nil {
		e.fairGranted(st, token)
		return
	}
	st.token = uint64(token)
	st.args = [8]any{"evalsha", &e.shaRelease, "1", &st.lock, &st.token, &st.owner, &e.numsub, &e.publish}
}

// Acquire implements locker.Backend.
func (e *Engine) Acquire(ctx context.Context, h *locker.Hold, wait bool) (bool, error) {
	if h.Kind == locker.KindMutex {
		if e.fq != nil {
			return e.acquireFair(ctx, h, wait)
		}
		st := e.newHold(h)
		h.State = st
		return e.acquire(ctx, h, st, wait)
	}
	st := e.newFamilyHold(h, wait)
	h.State = st
	ok, err := e.acquire(ctx, h, st, wait)
	if !ok {
		e.withdraw(st)
	}
	return ok, err
}

func (e *Engine) acquire(ctx context.Context, h *locker.Hold, st *hold, wait bool) (bool, error) {
	mark := e.hub.subscribed()
	var remaining time.Duration
	if wait && st.fam == nil && st.fair == nil && e.hub.queued(st.lock) {
		// Others of this process wait for the name: queue behind them
		// rather than barge in (a releaser locking again would mostly win
		// over the waiter its release woke). The holder's time left is
		// unknown: the first wait is bounded by this hold's TTL.
		remaining = time.Duration(st.ttl) * time.Millisecond
	} else {
		ok, left, err := e.try(ctx, st)
		if ok {
			h.Token = st.token
		}
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
	w, retry, err := e.hub.join(ctx, st.lock, mark, st.interest())
	if err != nil {
		settle(ctx)
		return false, fmt.Errorf("redis: acquire %q: %w", h.Name, err)
	}
	for {
		if retry {
			h.Asking()
			ok, left, err := e.try(ctx, st)
			if ok || err != nil {
				// A waiter that leaves without the lock may have taken a
				// wake-up meant for the next one: leave passes it on.
				e.hub.leave(w, ok)
				if ok {
					h.Token = st.token
				}
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
func (e *Engine) try(ctx context.Context, st *hold) (bool, time.Duration, error) {
	r, err := e.do(ctx, st)
	if err != nil {
		if st.fam != nil {
			if err := st.fam.mismatch(st.name, err); err != nil {
				return false, 0, err
			}
		}
		return false, 0, e.fail(ctx, "acquire", st.name, err)
	}
	if r > 0 {
		e.granted(st, r)
		return true, 0, nil
	}
	return false, max(time.Duration(-r)*time.Millisecond, time.Millisecond), nil
}

// do runs the acquire script of st, or PING when st is nil, and returns its
// reply, or ctx.Err() as soon as ctx ends; a ctx without a deadline is given
// one of the request timeout. go-redis honours a context's deadline at most
// (with ContextTimeoutEnabled), never its cancellation, so with a context
// that can end otherwise, or a client that does not honour deadlines, the
// request runs on a worker of the Core (see call); else (Lock, TryLock on a
// client with ContextTimeoutEnabled), here.
func (e *Engine) do(ctx context.Context, st *hold) (int64, error) {
	if _, ok := ctx.Deadline(); !ok {
		if ctx.Done() == nil {
			ctx = e.bound.Context()
			if e.deadlines {
				return e.request(ctx, st)
			}
		} else {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, e.bound.Timeout)
			defer cancel()
		}
	}
	c := e.calls.Get().(*call)
	c.ctx, c.st = ctx, st
	c.state.Store(running)
	if !e.core.Go(c.run) {
		c.recycle()
		return 0, locker.ErrClosed
	}
	select {
	case r := <-c.done:
		c.recycle()
		return r.v, r.err
	case <-ctx.Done():
		if c.state.CompareAndSwap(running, abandoned) {
			if st != nil && st.fam != nil {
				st.fam.abandoned = true
			}
			if st != nil && st.fair != nil {
				st.fair.abandoned = true
			}
			return 0, ctx.Err() // the worker recycles c
		}
		r := <-c.done // delivered just now
		c.recycle()
		return r.v, r.err
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

func (e *Engine) request(ctx context.Context, st *hold) (int64, error) {
	if st == nil {
		return 0, e.client.Ping(ctx).Err()
	}
	if st.fam != nil {
		return e.famRequest(ctx, st)
	}
	if st.fair != nil {
		return e.fairRequest(ctx, st)
	}
	return e.script(ctx, acquireScript, st.args[:])
}

// call is one request made on a worker for a caller who may leave before
// the answer: pooled, with its function bound once, so that handing it over
// allocates nothing.
type call struct {
	e     *Engine
	run   func(context.Context) // exec
	done  chan result           // buffered: the worker never blocks
	state atomic.Int32          // running, delivered or abandoned

	// The request, set by do and cleared by recycle.
	ctx context.Context
	st  *hold
}

type result struct {
	v   int64
	err error
}

// States of a call.
const (
	running int32 = iota
	delivered
	abandoned
)

func (c *call) exec(bg context.Context) {
	v, err := c.e.request(c.ctx, c.st)
	if c.state.CompareAndSwap(running, delivered) {
		c.done <- result{v, err}
		return
	}
	// The caller left: undo a grant that came after that, or withdraw the
	// intent a waiting writer recorded.
	if st := c.st; st != nil && err == nil && v > 0 {
		c.e.granted(st, v)
		c.e.releaseLate(bg, st)
	} else if st != nil && st.fam != nil {
		c.e.unwait(bg, st)
	} else if st != nil && st.fair != nil {
		c.e.unqueue(bg, st)
	}
	c.recycle()
}

func (c *call) recycle() {
	c.ctx, c.st = nil, nil
	c.e.calls.Put(c)
}

// releaseLate releases a grant whose caller had given up.
func (e *Engine) releaseLate(bg context.Context, st *hold) {
	ctx, cancel := context.WithTimeout(bg, st.releaseAfter)
	defer cancel()
	if err := e.release(ctx, st); err != nil {
		e.log.Warn("redis: releasing a grant whose caller gave up failed; it ends with its TTL", "name", st.name, "err", err)
	}
}

// script runs a script by its SHA with args (EVALSHA, the SHA, numkeys,
// ...) and returns its integer reply (see evalsha).
func (e *Engine) script(ctx context.Context, s *luaScript, args []any) (int64, error) {
	return e.batch.run(ctx, s, args)
}

// evalsha runs s by its SHA with args as a command made by newCmd. A
// server that lacks the script (it restarted, was flushed, or never ran it)
// gets this one command again as EVAL.
func evalsha[C goredis.Cmder](ctx context.Context, c goredis.UniversalClient, s *luaScript, newCmd func(context.Context, ...any) C, args []any) C {
	cmd := newCmd(ctx, args...)
	_ = c.Process(ctx, cmd)
	if noScript(cmd.Err()) {
		cmd = newCmd(ctx, s.eval(args)...)
		_ = c.Process(ctx, cmd)
	}
	return cmd
}

// evalshaAll runs every command of cmds, each an EVALSHA of s made by
// newCmd, in one pipeline, and those whose server lacked s again as EVAL,
// in a second: each command on its own, whatever the others answered.
func evalshaAll[C goredis.Cmder](ctx context.Context, c goredis.UniversalClient, s *luaScript, newCmd func(context.Context, ...any) C, cmds []C) {
	evalshaEach(ctx, c, func(int) *luaScript { return s }, newCmd, cmds)
}

// evalshaEach is evalshaAll with the script of cmds[i] given by script(i).
func evalshaEach[C goredis.Cmder](ctx context.Context, c goredis.UniversalClient, script func(int) *luaScript, newCmd func(context.Context, ...any) C, cmds []C) {
	pipeline := func(cmds []C) {
		_, _ = c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, cmd := range cmds {
				_ = p.Process(ctx, cmd)
			}
			return nil
		})
	}
	pipeline(cmds)
	var again []C
	for i, cmd := range cmds {
		if noScript(cmd.Err()) {
			cmds[i] = newCmd(ctx, script(i).eval(cmd.Args())...)
			again = append(again, cmds[i])
		}
	}
	if len(again) > 0 {
		pipeline(again)
	}
}

func noScript(err error) bool { return err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") }

// eval turns the arguments of an EVALSHA of s into those of an EVAL.
func (s *luaScript) eval(args []any) []any {
	return append([]any{"eval", s.src}, args[2:]...)
}

// Release implements locker.Backend. The engine is no
// locker.DeadlineHonourer: a release batched behind other requests waits
// for their pipeline (see batcher), whatever its own deadline, so Unlock
// hands every release to a worker of the Core and waits at most its bound.
func (e *Engine) Release(ctx context.Context, h *locker.Hold) error {
	return e.release(ctx, h.State.(*hold))
}

func (e *Engine) release(ctx context.Context, st *hold) error {
	n, err := e.releaseOnce(ctx, st)
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
			return e.fail(ctx, "release", st.name, err)
		}
		n, err = e.releaseOnce(ctx, st)
	}
	if err != nil {
		return e.fail(ctx, "release", st.name, err)
	}
	if n == 0 {
		return fmt.Errorf("redis: release %q: %w", st.name, locker.ErrLockLost)
	}
	return nil
}

// refusedRetry is how soon a release refused during a Sentinel failover is
// asked again.
const refusedRetry = 50 * time.Millisecond

// releaseOnce runs the release script of st's kind once.
func (e *Engine) releaseOnce(ctx context.Context, st *hold) (int64, error) {
	if f := st.fam; f != nil {
		return e.script(ctx, f.releaseScript(), f.args[:f.n])
	}
	if f := st.fair; f != nil {
		return e.script(ctx, fairReleaseScript, f.args[:f.n])
	}
	return e.script(ctx, releaseScript, st.args[:])
}

// Renew implements locker.Renewer: one renewScript call renews a chunk
// of up to maxRenew holds (the scheduler's chunk). On Cluster, where a
// script's keys must share a slot (and with any client that spreads keys
// over servers), it is one call per name (a name's keys share its hash
// tag). Several calls go in one pipeline.
func (e *Engine) Renew(ctx context.Context, holds []*locker.Hold) []error {
	if len(holds) == 0 {
		return nil
	}
	var groups [][]int // the indexes in holds of each call's holds
	if e.oneNode {
		all := make([]int, len(holds))
		for i := range all {
			all[i] = i
		}
		groups = split([][]int{all})
	} else {
		groups = split(byName(holds))
	}
	cmds := make([]*goredis.IntSliceCmd, len(groups))
	if len(groups) == 1 {
		cmds[0] = evalsha(ctx, e.client, renewScript, goredis.NewIntSliceCmd, e.renewArgs(holds, groups[0]))
	} else {
		for i, g := range groups {
			cmds[i] = goredis.NewIntSliceCmd(ctx, e.renewArgs(holds, g)...)
		}
		evalshaAll(ctx, e.client, renewScript, goredis.NewIntSliceCmd, cmds)
	}
	results := make([]error, len(holds))
	for i, g := range groups {
		lost, err := cmds[i].Result()
		if err != nil {
			for _, j := range g {
				results[j] = e.fail(ctx, "renew", holds[j].Name, err)
			}
			continue
		}
		for _, n := range lost { // positions from 1
			if n >= 1 && int(n) <= len(g) {
				j := g[n-1]
				results[j] = fmt.Errorf("redis: renew %q: %w", holds[j].Name, locker.ErrLockLost)
			}
		}
	}
	return results
}

// maxRenew bounds the holds of one renewScript call. Redis runs a script
// to its end before any other command, at about 1.5µs a hold: a late chunk
// of a thousand holds goes as several calls in one pipeline, which Redis
// reads 16KB, about a call, at a time, serving other clients in between.
const maxRenew = 128

// split cuts the groups longer than maxRenew.
func split(groups [][]int) [][]int {
	out := groups[:0:0]
	for _, g := range groups {
		for len(g) > maxRenew {
			out = append(out, g[:maxRenew])
			g = g[maxRenew:]
		}
		out = append(out, g)
	}
	return out
}

// byName groups the indexes of holds by name, in order of first
// appearance.
func byName(holds []*locker.Hold) [][]int {
	at := make(map[string]int, len(holds))
	groups := make([][]int, 0, len(holds))
	for i, h := range holds {
		g, ok := at[h.Name]
		if !ok {
			g = len(groups)
			at[h.Name] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// renewArgs are the arguments of renewScript for the holds at the indexes
// g: pointers to each hold's fields, so that building them boxes nothing.
func (e *Engine) renewArgs(holds []*locker.Hold, g []int) []any {
	args := make([]any, 3, 3+4*len(g))
	args[0], args[1], args[2] = "evalsha", &e.shaRenew, strconv.Itoa(len(g))
	for _, j := range g {
		st := holds[j].State.(*hold)
		if f := st.fam; f != nil {
			key, _ := f.renewal()
			args = append(args, key)
		} else {
			args = append(args, &st.lock)
		}
	}
	for _, j := range g {
		st := holds[j].State.(*hold)
		if f := st.fam; f != nil {
			_, kind := f.renewal()
			args = append(args, kind, &f.member, &st.ttl)
			continue
		}
		if st.value == "" {
			// Only this hold's renewals read it, one at a time.
			st.value = member(st.token, 0, st.owner)
		}
		args = append(args, "s", &st.value, &st.ttl)
	}
	return args
}

// fail wraps an engine error as ErrUnavailable, keeping the cause.
func (e *Engine) fail(ctx context.Context, op, name string, err error) error {
	settle(ctx)
	e.reload(err)
	switch {
	case isPermission(err):
		return &locker.EngineError{Engine: "redis", Op: op, Name: name, Classes: []error{locker.ErrPermission}, Err: err}
	case errors.Is(err, locker.ErrClosed):
		return &locker.EngineError{Engine: "redis", Op: op, Name: name, Err: err}
	}
	return &locker.EngineError{Engine: "redis", Op: op, Name: name, Classes: unavailable(err), Err: err}
}

// reloadEvery rate-limits the slot map reloads that errors ask for.
const reloadEvery = 250 * time.Millisecond

// reload has a Cluster client reload its slot map, at most every
// reloadEvery, after an error that says a master may have changed: a node
// that does not answer, or CLUSTERDOWN. go-redis reloads it on a
// redirection or every ClusterStateReloadInterval (60s by default), not
// when a master stops answering, so after a failover it would keep sending
// the master's slots, the renewals of its holds among them, to the dead
// node until the holds are lost. The reload runs in the background; the
// next attempt (a failed renewal is retried after TTL/24, then less often) goes to the new master
// once the cluster has promoted one.
func (e *Engine) reload(err error) {
	if e.cluster == nil || !staleMap(err) {
		return
	}
	now, last := time.Now().UnixNano(), e.reloaded.Load()
	if now-last < int64(reloadEvery) || !e.reloaded.CompareAndSwap(last, now) {
		return
	}
	e.cluster.ReloadState(context.Background())
}

// staleMap tells an error after which a Cluster slot map may be out of
// date: no answer from the node (refused, reset, timed out), or CLUSTERDOWN.
// Other replies of a server, and the caller's cancellation, say nothing of
// the map.
func staleMap(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, locker.ErrClosed) || errors.Is(err, goredis.ErrClosed) {
		return false
	}
	var reply goredis.Error
	if errors.As(err, &reply) {
		return goredis.IsClusterDownError(err)
	}
	return true
}

// settle waits for ctx to be done when its deadline has passed. With
// ContextTimeoutEnabled the deadline is the socket's too, and the socket
// can time out a moment before ctx's own timer marks it done: a caller that
// checks ctx.Err() next must see the deadline, not a network error.
func settle(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		<-ctx.Done()
	}
}

// unavailable classes a failed request: ErrUnavailable, and ErrRefused too
// when the server is certainly down (it refused or reset the connection).
func unavailable(err error) []error {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return []error{locker.ErrUnavailable, locker.ErrRefused}
	}
	return []error{locker.ErrUnavailable}
}

// isPermission tells a refused user (NOAUTH, WRONGPASS, NOPERM, or a
// command a script may not run) from an engine failing.
func isPermission(err error) bool {
	return goredis.IsAuthError(err) || goredis.IsPermissionError(err) ||
		strings.Contains(err.Error(), "user executing the script can't")
}
