package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/internal/deadline"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// Engine is the Redis lock engine. It implements locker.Engine.
type Engine struct {
	name   string
	prefix string
	client goredis.UniversalClient
	hub    *hub
	batch  *batcher
	core   *driver.Core
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
	idle            int64  // fence idle time, ms
	numsub, publish string // PUBSUB NUMSUB and PUBLISH, or their sharded forms on Cluster

	fq *fairQueue // nil unless WithFair
}

var (
	_ locker.Engine  = (*Engine)(nil)
	_ driver.Backend = (*Engine)(nil)
	_ driver.Renewer = (*Engine)(nil)
)

type settings struct {
	name      string
	prefix    string
	logger    *slog.Logger
	fenceIdle time.Duration
	timeout   time.Duration
	window    time.Duration // -1: the client's default
	fair      bool

	observer observe.Observer // nil: nothing observes
}

// Option configures an Engine.
type Option func(*settings) error

// option is an Option that applies set when valid, and otherwise refuses
// with an error naming the option (what) and what it wants.
func option(valid bool, what, want string, set func(*settings)) Option {
	return func(s *settings) error {
		if !valid {
			return fmt.Errorf("redis: %s: %w: %s", what, locker.ErrInvalidArgument, want)
		}
		set(s)
		return nil
	}
}

// WithName names the engine in Lease.Engine, logs and the switcher.
// Default: "redis".
func WithName(name string) Option {
	return option(name != "", "WithName", "name is empty", func(s *settings) { s.name = name })
}

// WithPrefix sets the namespace of every key, so that applications sharing a
// Redis do not collide. It may not contain '{' or '}', which would break the
// Cluster hash tag. Default: "orthrus".
func WithPrefix(prefix string) Option {
	return option(prefix != "" && !strings.ContainsAny(prefix, "{}"), fmt.Sprintf("WithPrefix(%q)", prefix),
		"want a non-empty prefix without '{' or '}'", func(s *settings) { s.prefix = prefix })
}

// WithLogger sets the logger for lost holds and connection trouble.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return option(l != nil, "WithLogger", "logger is nil", func(s *settings) { s.logger = l })
}

// WithObserver reports the engine's acquisitions, releases, renewals and
// holds to o, for metrics and traces (package telemetry implements it with
// OpenTelemetry). Default: none, and no observation cost.
func WithObserver(o observe.Observer) Option {
	return option(o != nil, "WithObserver", "observer is nil", func(s *settings) { s.observer = o })
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
	// The counter's expiry moves every refreshEvery tokens: a shorter idle
	// time could let it expire before the clock passes them.
	return option(d >= time.Second && d >= refreshEvery*time.Millisecond, fmt.Sprintf("WithFenceIdle(%v)", d),
		"want at least 1s", func(s *settings) { s.fenceIdle = d })
}

// DefaultRequestTimeout bounds one request to Redis whose context has no
// deadline, unless WithRequestTimeout says otherwise.
const DefaultRequestTimeout = driver.DefaultRequestTimeout

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
	return option(d > 0, fmt.Sprintf("WithRequestTimeout(%v)", d), "timeout must be positive", func(s *settings) { s.timeout = d })
}

// DefaultSentinelRideThrough is the ride-through window of an engine over
// a failover client (Sentinel), unless WithRideThrough says otherwise:
// Sentinel's default down-after-milliseconds (30s), and 5s for the
// Sentinels to agree, elect one of them and promote a replica, which the
// failover client then finds (1.2-2.2s in the tests, on a loaded host).
const DefaultSentinelRideThrough = 35 * time.Second

// WithRideThrough sets how long the engine may fail, while Sentinel fails
// its master over, before a switcher counts it as down and moves new
// acquisitions to the next engine (see switcher.Cluster); Unlock waits for
// an unanswered release that long too, within the release timeout. Set it
// to the Sentinels' down-after-milliseconds + 5s. 0 makes the engine's
// failures count at once, as for one server. Default:
// DefaultSentinelRideThrough (35s) over a failover client, 0 over any other.
func WithRideThrough(d time.Duration) Option {
	return option(d >= 0, fmt.Sprintf("WithRideThrough(%v)", d), "window must not be negative", func(s *settings) { s.window = d })
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
		name: s.name, prefix: s.prefix, client: client, hub: newHub(client, logger), batch: &batcher{client: client, alone: honoursDeadlines(client)}, log: logger,
		bound: deadline.Shared{Timeout: s.timeout}, window: s.window, deadlines: honoursDeadlines(client),
		idle: s.fenceIdle.Milliseconds(), numsub: "numsub", publish: "publish",
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
		c := &call{e: e}
		c.run = c.exec
		return c
	}
	e.core = driver.NewCore(s.name, e, logger, driver.ObservedBy(s.observer), driver.ReleaseWait(s.window))
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

// MinTTL implements driver.MinTTLer: NewLocker refuses a WithTTL or
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
	ctx, cancel := context.WithTimeout(context.Background(), driver.DefaultReleaseTimeout)
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
func (e *Engine) LockKey(name string) string {
	lock, _ := e.mutexKeys(name)
	return lock
}

// mutexKeys maps a name into the prefix: the lock's key, and the fencing
// counter's, of which it is a prefix, so one allocation makes both. The
// name becomes the hash tag, with '{', '}' and '%' escaped so that the tag
// is the whole name and escaping never makes two names collide.
func (e *Engine) mutexKeys(name string) (lock, fence string) {
	fence = e.prefix + ":{" + nameEscaper.Replace(name) + "}" + fenceSuffix
	return fence[:len(fence)-len(fenceSuffix)], fence
}

// Suffixes of the counter key and the channel; the scripts know the
// channel's too.
const (
	fenceSuffix   = ":fence"
	channelSuffix = ":wake"
)

var nameEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// fail wraps an engine error as ErrUnavailable, keeping the cause.
func (e *Engine) fail(ctx context.Context, op, name string, err error) error {
	settle(ctx)
	e.reload(err)
	switch {
	case IsPermission(err):
		return &locker.EngineError{Engine: "redis", Op: op, Name: name, Classes: []error{locker.ErrPermission}, Err: err}
	case errors.Is(err, locker.ErrClosed):
		return &locker.EngineError{Engine: "redis", Op: op, Name: name, Err: err}
	}
	return &locker.EngineError{Engine: "redis", Op: op, Name: name, Classes: unavailable(err), Err: err}
}

// reloadEvery rate-limits the slot map reloads that errors ask for.
const reloadEvery = 250 * time.Millisecond

// reload has a Cluster client reload its slot map, at most every
// reloadEvery, after an error that says a master may have changed (see
// Redis Cluster in doc.go): else go-redis would keep sending the master's
// slots, the renewals of its holds among them, to the dead node until the
// holds are lost. The reload runs in the background; the next attempt (a
// failed renewal is retried after TTL/24, then less often) goes to the new
// master once the cluster has promoted one.
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

// IsPermission tells a refused user (NOAUTH, WRONGPASS, NOPERM, or a
// command a script may not run) from an engine failing: the engines over
// Redis report it as locker.ErrPermission, which retrying does not cure.
func IsPermission(err error) bool {
	return goredis.IsAuthError(err) || goredis.IsPermissionError(err) ||
		strings.Contains(err.Error(), "user executing the script can't")
}
