package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
)

// Engine is the Redis lock engine. It implements locker.Engine.
type Engine struct {
	name    string
	prefix  string
	client  goredis.UniversalClient
	publish string // PUBLISH, or SPUBLISH on Cluster
	hub     *hub
	core    *locker.Core
	log     *slog.Logger
}

var (
	_ locker.Engine  = (*Engine)(nil)
	_ locker.Backend = (*Engine)(nil)
	_ locker.Renewer = (*Engine)(nil)
)

type settings struct {
	name   string
	prefix string
	logger *slog.Logger

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

// New returns an engine over client: a single node, Sentinel (failover) or
// Cluster client. The engine never closes client.
func New(client goredis.UniversalClient, opts ...Option) (*Engine, error) {
	if client == nil {
		return nil, fmt.Errorf("redis: New: %w: client is nil", locker.ErrInvalidArgument)
	}
	s := settings{name: "redis", prefix: "orthrus", logger: slog.Default()}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("redis: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	logger := s.logger.With("engine", s.name)
	e := &Engine{name: s.name, prefix: s.prefix, client: client, publish: "publish", hub: newHub(client, logger), log: logger}
	if _, ok := client.(*goredis.ClusterClient); ok {
		e.publish = "spublish"
	}
	e.core = locker.NewCore(s.name, e, logger, locker.ObservedBy(s.observer))
	return e, nil
}

// Name returns the engine's name.
func (e *Engine) Name() string { return e.name }

// NewLocker returns a new owner's Locker for name.
func (e *Engine) NewLocker(name string, opts ...locker.Option) (locker.Handle, error) {
	return e.core.NewLocker(name, opts...)
}

// Ping checks that Redis answers.
func (e *Engine) Ping(ctx context.Context) error {
	if e.core.Closed() {
		return fmt.Errorf("redis: ping: %w", locker.ErrClosed)
	}
	err, cerr := answer(e, ctx, func() error { return e.client.Ping(ctx).Err() }, nil)
	if cerr != nil {
		err = cerr
	}
	if err != nil {
		return e.fail("ping", "", err)
	}
	return nil
}

// Close releases the holds still held, stops the renewal loop and the
// subscriptions. It does not close the client.
func (e *Engine) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), locker.DefaultReleaseTimeout)
	defer cancel()
	return errors.Join(e.core.Close(ctx), e.hub.close())
}

// LockKey returns the Redis key that holds the named lock: a hash with
// fields owner and token, and a TTL. For inspection and operator tools.
func (e *Engine) LockKey(name string) string { return e.keysFor(name).lock }

// keys are the Redis keys of one lock name, computed once per hold.
type keys struct {
	lock, fence, channel string
}

// keysFor maps a name into the prefix. The name becomes the hash tag, with
// '{', '}' and '%' escaped so that the tag is the whole name and escaping
// never makes two names collide.
func (e *Engine) keysFor(name string) keys {
	tag := e.prefix + ":{" + nameEscaper.Replace(name) + "}"
	return keys{lock: tag, fence: tag + ":fence", channel: tag + ":wake"}
}

var nameEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func ttlMillis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// Acquire implements locker.Backend.
func (e *Engine) Acquire(ctx context.Context, h *locker.Hold, wait bool) (bool, error) {
	k := e.keysFor(h.Name)
	h.State = k
	ok, _, err := e.try(ctx, h, k)
	if ok || err != nil || !wait {
		return ok, err
	}
	// Subscribe, then try again: a release between the first attempt and
	// the subscription is caught by the second attempt.
	w, err := e.hub.join(ctx, k.channel)
	if err != nil {
		if callerDone(ctx, err) {
			// Redis had answered that the name is held: a subscription
			// still in flight when the caller gives up is no outage.
			return false, ctx.Err()
		}
		return false, fmt.Errorf("redis: acquire %q: %w", h.Name, err)
	}
	defer e.hub.leave(w)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		ok, remaining, err := e.try(ctx, h, k)
		if ok || err != nil {
			return ok, err
		}
		// The release message wakes us; the timer covers an expiry, which
		// publishes nothing.
		timer.Reset(remaining)
		select {
		case <-w.wake:
		case <-timer.C:
		case <-ctx.Done():
			return false, ctx.Err() // Redis had answered: the name was held
		}
	}
}

// callerDone reports whether err is the caller's context ending: its own
// error, or a socket timeout that go-redis set from its deadline
// (ContextTimeoutEnabled), which can fire a moment before ctx is done.
func callerDone(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	var ne net.Error
	if d, ok := ctx.Deadline(); ok && errors.As(err, &ne) && ne.Timeout() && time.Until(d) < time.Millisecond {
		<-ctx.Done()
		return true
	}
	return false
}

// attempt is the outcome of one acquire script.
type attempt struct {
	ok        bool
	token     uint64
	remaining time.Duration // on contention, how long the current hold has left
	err       error
}

// try makes one attempt, which gives up when ctx ends even though Redis
// has not answered (see answer): with an error wrapping ErrUnavailable. A
// grant that comes after that is released.
func (e *Engine) try(ctx context.Context, h *locker.Hold, k keys) (bool, time.Duration, error) {
	var a attempt
	if ctx.Done() == nil {
		a = e.run(ctx, h, k) // Lock, TryLock: nothing to give up on
	} else {
		var err error
		a, err = answer(e, ctx, func() attempt { return e.run(ctx, h, k) }, func(bg context.Context, a attempt) {
			if a.ok {
				e.releaseLate(bg, h.Name, h.Owner, a.token, h.ReleaseTimeout, k)
			}
		})
		if err != nil {
			return false, 0, e.fail("acquire", h.Name, err)
		}
	}
	if a.err != nil {
		return false, 0, a.err
	}
	h.Token = a.token
	return a.ok, a.remaining, nil
}

// releaseLate releases a grant whose caller had given up.
func (e *Engine) releaseLate(bg context.Context, name, owner string, token uint64, timeout time.Duration, k keys) {
	ctx, cancel := context.WithTimeout(bg, timeout)
	defer cancel()
	if err := e.release(ctx, name, owner, token, k); err != nil {
		e.log.Warn("redis: releasing a grant whose caller gave up failed; it ends with its TTL", "name", name, "err", err)
	}
}

// answer runs f and returns its result, or ctx.Err() as soon as ctx ends.
// go-redis honours a context's deadline at most (with
// ContextTimeoutEnabled), never its cancellation, so with a context that
// can end f runs on a goroutine of the Core; late, if not nil, gets a
// result that comes after the caller left, to undo it.
func answer[T any](e *Engine, ctx context.Context, f func() T, late func(context.Context, T)) (T, error) {
	if ctx.Done() == nil {
		return f(), nil
	}
	var state atomic.Int32 // running, delivered or abandoned
	ch := make(chan T, 1)
	started := e.core.Go(func(bg context.Context) {
		v := f()
		if state.CompareAndSwap(running, delivered) {
			ch <- v
			return
		}
		if late != nil {
			late(bg, v)
		}
	})
	var zero T
	if !started {
		return zero, locker.ErrClosed
	}
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		if state.CompareAndSwap(running, abandoned) {
			return zero, ctx.Err()
		}
		return <-ch, nil // delivered just now
	}
}

// States of a call whose caller may leave.
const (
	running int32 = iota
	delivered
	abandoned
)

// run runs the acquire script for h.
func (e *Engine) run(ctx context.Context, h *locker.Hold, k keys) attempt {
	res, err := acquireScript.Run(ctx, e.client, []string{k.lock, k.fence}, h.Owner, ttlMillis(h.TTL)).Slice()
	if err != nil {
		return attempt{err: e.fail("acquire", h.Name, err)}
	}
	if len(res) != 2 {
		return attempt{err: e.fail("acquire", h.Name, fmt.Errorf("unexpected reply %v", res))}
	}
	if granted, _ := res[0].(int64); granted == 1 {
		tok, err := parseToken(res[1])
		if err != nil {
			return attempt{err: e.fail("acquire", h.Name, err)}
		}
		return attempt{ok: true, token: tok}
	}
	remaining, _ := res[1].(int64)
	if remaining <= 0 { // expiring right now
		remaining = 1
	}
	return attempt{remaining: time.Duration(remaining) * time.Millisecond}
}

func parseToken(v any) (uint64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("token reply %T, want string", v)
	}
	return strconv.ParseUint(s, 10, 64)
}

// Release implements locker.Backend.
func (e *Engine) Release(ctx context.Context, h *locker.Hold) error {
	return e.release(ctx, h.Name, h.Owner, h.Token, h.State.(keys))
}

func (e *Engine) release(ctx context.Context, name, owner string, token uint64, k keys) error {
	n, err := releaseScript.Run(ctx, e.client, []string{k.lock, k.channel}, owner, strconv.FormatUint(token, 10), e.publish).Int()
	if err != nil {
		return e.fail("release", name, err)
	}
	if n == 0 {
		return fmt.Errorf("redis: release %q: %w", name, locker.ErrLockLost)
	}
	return nil
}

// Renew implements locker.Renewer: one pipeline for the whole batch.
func (e *Engine) Renew(ctx context.Context, holds []*locker.Hold) []error {
	results := make([]error, len(holds))
	cmds, err := e.renewPipeline(ctx, holds)
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		// The server restarted or flushed its scripts: load and go again.
		if err = renewScript.Load(ctx, e.client).Err(); err == nil {
			cmds, err = e.renewPipeline(ctx, holds)
		}
	}
	for i, h := range holds {
		switch {
		case cmds == nil:
			results[i] = e.fail("renew", h.Name, err)
		case cmds[i].Err() != nil:
			results[i] = e.fail("renew", h.Name, cmds[i].Err())
		case cmds[i].Val() == int64(0):
			results[i] = fmt.Errorf("redis: renew %q: %w", h.Name, locker.ErrLockLost)
		}
	}
	return results
}

func (e *Engine) renewPipeline(ctx context.Context, holds []*locker.Hold) ([]*goredis.Cmd, error) {
	cmds := make([]*goredis.Cmd, len(holds))
	_, err := e.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, h := range holds {
			k := h.State.(keys)
			cmds[i] = renewScript.EvalSha(ctx, p, []string{k.lock}, h.Owner, strconv.FormatUint(h.Token, 10), ttlMillis(h.TTL))
		}
		return nil
	})
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		return nil, err
	}
	return cmds, nil
}

// fail wraps an engine error as ErrUnavailable, keeping the cause.
func (e *Engine) fail(op, name string, err error) error {
	switch {
	case isPermission(err):
		return &locker.EngineError{Engine: "redis", Op: op, Name: name, Classes: []error{locker.ErrPermission}, Err: err}
	case errors.Is(err, locker.ErrClosed):
		return &locker.EngineError{Engine: "redis", Op: op, Name: name, Err: err}
	}
	return &locker.EngineError{Engine: "redis", Op: op, Name: name, Classes: unavailable(err), Err: err}
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
