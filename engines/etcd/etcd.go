package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// DefaultRequestTimeout bounds every round trip to a single etcd server
// unless WithRequestTimeout says otherwise: a try on a frozen server fails
// within it, as on every engine.
const DefaultRequestTimeout = driver.DefaultRequestTimeout

// DefaultClusterRequestTimeout bounds a round trip when the client lists
// several endpoints: a request must outlast a leader election (up to about
// 2.3s, see DefaultRideThrough) and go on to a member that answers.
const DefaultClusterRequestTimeout = 5 * time.Second

// DefaultRideThrough is the ride-through window of an engine whose client
// lists several endpoints, unless WithRideThrough says otherwise: how
// long the switcher lets the engine fail before it counts the cluster as
// down. A cluster that loses its leader (killed or frozen) elects another
// once a follower has heard nothing for its election timeout, which raft
// randomises between 1 and 2 times --election-timeout (etcd's default:
// 1000ms), so within 2s, plus a round of (pre-)votes; when the two
// survivors split their votes, a second round follows (seen on a loaded
// host: a new leader 3.55s after the kill). 5s covers two rounds with a
// second of margin; a dead follower costs only the requests that were on
// it.
const DefaultRideThrough = 5 * time.Second

// DefaultAttemptTimeout bounds one attempt of a request to a cluster
// (a client with several endpoints) that may be sent again, unless
// WithAttemptTimeout says otherwise. A request that reaches a member that
// died or froze, or a write forwarded by a follower to a leader that died,
// is never answered: only the client giving up on it and sending it again
// gets it to a member that serves. So an attempt must end well within the
// election (1-2s) for the callers' wait to stay near it.
const DefaultAttemptTimeout = 300 * time.Millisecond

// maxTxnOps is etcd's default --max-txn-ops: batches of deletes and renewal
// checks are cut into transactions of at most this many operations.
const maxTxnOps = 128

// Engine is the etcd lock engine. It implements locker.Engine.
type Engine struct {
	name    string
	prefix  string // the namespace, without its trailing '/'
	client  *clientv3.Client
	watcher clientv3.Watcher // owned: closed by Close
	timeout time.Duration
	attempt time.Duration // one attempt of a round trip: timeout for a single endpoint
	window  time.Duration // RideThrough: 0 for a single endpoint
	log     *slog.Logger
	core    *driver.Core

	done chan struct{} // closed by Close

	// Trouble: the latest attempt to the cluster that went unanswered (see
	// noteTrouble), and a channel closed when an episode of it begins.
	troubleMu sync.Mutex
	troubleAt time.Time
	troubled  chan struct{}
	closeOnce sync.Once

	keeper   *keeper
	gone     *goneWatch // the deletion watch (gone.go)
	perLease int        // WithKeysPerLease

	mu      sync.Mutex
	closed  bool
	current map[shelf]*lease    // the lease new keys go on, by TTL in whole seconds and lock delay
	leases  map[*lease]struct{} // every lease not killed: current ones, and full ones with keys
	byKey   map[string]*slot    // every taken slot, by key, for the deletion watch
}

var (
	_ locker.Engine  = (*Engine)(nil)
	_ driver.Backend = (*Engine)(nil)
)

type settings struct {
	name     string
	prefix   string
	timeout  time.Duration
	logger   *slog.Logger
	perLease int
	window   time.Duration // < 0: the default for the client's endpoints
	attempt  time.Duration // < 0: the default for the client's endpoints

	observer observe.Observer // nil: nothing observes
}

// Option configures an Engine.
type Option func(*settings) error

// check is an Option that applies set when ok, and otherwise fails,
// naming the option (opt) and why.
func check(ok bool, opt, why string, set func(*settings)) Option {
	return func(s *settings) error {
		if !ok {
			return fmt.Errorf("etcd: %s: %w: %s", opt, locker.ErrInvalidArgument, why)
		}
		set(s)
		return nil
	}
}

// WithName names the engine in Lease.Engine, logs and the switcher.
// Default: "etcd".
func WithName(name string) Option {
	return check(name != "", "WithName", "name is empty", func(s *settings) { s.name = name })
}

// WithPrefix sets the namespace of every key, so that applications sharing
// an etcd cluster do not collide: the keys of lock name live under
// "<prefix>/<escaped name>/". The engine adds the '/' after the prefix, so
// the prefix must not end with one. Default: "orthrus".
func WithPrefix(prefix string) Option {
	return check(prefix != "" && !strings.HasSuffix(prefix, "/"), fmt.Sprintf("WithPrefix(%q)", prefix),
		"want a non-empty prefix without a trailing '/' (keys are <prefix>/<name>/<id>)", func(s *settings) { s.prefix = prefix })
}

// WithRequestTimeout bounds every round trip to etcd, whatever the caller's
// context: the etcd client retries an unreachable cluster until its context
// ends, so without a bound a call on a background context would hang.
// Default: DefaultRequestTimeout (2s) with one endpoint,
// DefaultClusterRequestTimeout (5s) with several.
func WithRequestTimeout(d time.Duration) Option {
	return check(d > 0, fmt.Sprintf("WithRequestTimeout(%v)", d), "timeout must be positive", func(s *settings) { s.timeout = d })
}

// WithRideThrough sets how long the engine may fail, while its cluster
// elects a leader or loses and regains a member, before a switcher counts
// it as down and moves new acquisitions to the next engine (see
// switcher.Cluster). Set it to about 2 × the cluster's --election-timeout
// + 1s. 0 makes the engine's failures count at once, as for one server.
// Default: DefaultRideThrough (5s) when the client lists several
// endpoints, 0 with one.
func WithRideThrough(d time.Duration) Option {
	return check(d >= 0, fmt.Sprintf("WithRideThrough(%v)", d), "window must not be negative", func(s *settings) { s.window = d })
}

// WithAttemptTimeout sets how long a request to a cluster may go
// unanswered before it is sent again, to the next member as the client's
// balancer picks it, until the request timeout has passed. Key creations,
// releases (a delete that compares the key's create revision) and lease
// grants are hedged: the attempt in flight goes on, since it may still be
// applied, and the first answer is taken (what the others did is undone
// in the background). Lease refreshes and a waiter's checks of its place
// have one attempt of this length, and are tried again soon after.
// Default: DefaultAttemptTimeout (300ms) when the client lists several
// endpoints; with one, a request has one attempt of the request timeout.
func WithAttemptTimeout(d time.Duration) Option {
	return check(d > 0, fmt.Sprintf("WithAttemptTimeout(%v)", d), "timeout must be positive", func(s *settings) { s.attempt = d })
}

// DefaultKeysPerLease is how many keys (holds and waiters) share one lease
// unless WithKeysPerLease says otherwise.
const DefaultKeysPerLease = 5000

// WithKeysPerLease bounds the keys, holds and waiters, that share one
// lease: past n, new acquisitions with the same TTL go on another lease. A
// lease that ends takes all its holds with it, so a smaller n loses fewer
// holds at once; each lease costs one keep-alive every third of its TTL.
// Default: DefaultKeysPerLease (5000): 100k holds ride on 20 leases.
func WithKeysPerLease(n int) Option {
	return check(n >= 1, fmt.Sprintf("WithKeysPerLease(%d)", n), "want at least 1", func(s *settings) { s.perLease = n })
}

// WithLogger sets the logger for lost holds and leases and connection
// trouble. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return check(l != nil, "WithLogger", "logger is nil", func(s *settings) { s.logger = l })
}

// WithObserver reports the engine's acquisitions, releases, renewals and
// holds to o, for metrics and traces (package telemetry implements it with
// OpenTelemetry). Default: none, and no observation cost.
func WithObserver(o observe.Observer) Option {
	return check(o != nil, "WithObserver", "observer is nil", func(s *settings) { s.observer = o })
}

// New returns an engine over client. Endpoints, credentials and TLS are the
// client's; the engine never closes it. New makes no request: Ping checks
// that the cluster answers.
func New(client *clientv3.Client, opts ...Option) (*Engine, error) {
	if client == nil {
		return nil, fmt.Errorf("etcd: New: %w: client is nil", locker.ErrInvalidArgument)
	}
	s := settings{name: "etcd", prefix: "orthrus", logger: slog.Default(), perLease: DefaultKeysPerLease,
		window: -1, attempt: -1}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("etcd: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	logger := s.logger.With("engine", s.name)
	// One server has no election to ride out: its failures are real at
	// once, and a request has nowhere else to go.
	cluster := len(client.Endpoints()) > 1
	if s.timeout == 0 {
		s.timeout = DefaultRequestTimeout
		if cluster {
			s.timeout = DefaultClusterRequestTimeout
		}
	}
	if s.window < 0 {
		s.window = 0
		if cluster {
			s.window = DefaultRideThrough
		}
	}
	if s.attempt < 0 {
		s.attempt = s.timeout
		if cluster {
			s.attempt = DefaultAttemptTimeout
		}
	}
	e := &Engine{
		name:     s.name,
		prefix:   s.prefix,
		client:   client,
		watcher:  clientv3.NewWatcher(client),
		timeout:  s.timeout,
		attempt:  min(s.attempt, s.timeout),
		window:   s.window,
		log:      logger,
		done:     make(chan struct{}),
		troubled: make(chan struct{}),
		keeper:   newKeeper(),
		gone:     newGoneWatch(),
		byKey:    make(map[string]*slot),
		perLease: s.perLease,
		current:  make(map[shelf]*lease),
		leases:   make(map[*lease]struct{}),
	}
	e.core = driver.NewCore(s.name, e, logger, driver.ObservedBy(s.observer), driver.ReleaseWait(s.window))
	go e.keep()
	go e.followGone()
	return e, nil
}

// Name returns the engine's name.
func (e *Engine) Name() string { return e.name }

// Client returns the client the engine was built over, for what talks to
// the same cluster beside the locks (the stores of package idem). The
// engine does not own it; neither does the caller of Client.
func (e *Engine) Client() *clientv3.Client { return e.client }

// MinTTL is the shortest TTL, or fixed lease, the engine accepts: etcd
// grants leases in whole seconds, so a shorter TTL would outlive a dead
// owner by the difference. Longer TTLs are rounded up to whole seconds,
// and the server raises a lease below its own minimum (one and a half
// election timeouts, rounded up: 2s with etcd's default settings), which
// only a dead owner's holds see: the engine still ends a fixed lease, and
// reports a hold it could not renew as lost, after the TTL asked.
const MinTTL = time.Second

// MinTTL implements driver.MinTTLer: NewLocker refuses a WithTTL or
// WithLease below MinTTL.
func (e *Engine) MinTTL() time.Duration { return MinTTL }

// RideThrough returns the engine's ride-through window (WithRideThrough):
// a switcher lets the engine fail that long before its breaker opens.
func (e *Engine) RideThrough() time.Duration { return e.window }

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

// Ping checks that the cluster answers a linearizable read, within ctx and
// the request timeout.
func (e *Engine) Ping(ctx context.Context) error {
	if e.isClosed() {
		return fmt.Errorf("etcd: ping: %w", locker.ErrClosed)
	}
	if e.refused() {
		return e.fail("ping", e.prefix, errNoConnection)
	}
	rctx, cancel := e.bound(ctx)
	// clientv3 retries a request until its context ends, whatever the
	// connection: a connection that fails while the request waits ends it.
	stop := e.cancelOnRefused(rctx, cancel)
	// A key in the engine's range, which a role limited to it may read.
	_, err := e.client.Get(rctx, e.prefix+"/", clientv3.WithCountOnly())
	cancel()
	stop()
	if err != nil {
		if ctx.Err() == nil && e.refused() {
			err = errNoConnection // rather than the cancellation that says so
		}
		return e.fail("ping", e.prefix, err)
	}
	return nil
}

// errNoConnection: the client has no connection to any endpoint.
var errNoConnection = errors.New("no connection to any endpoint")

// refused tells that the client knows it has no connection: gRPC's last
// attempt to connect to every endpoint failed (TRANSIENT_FAILURE).
func (e *Engine) refused() bool {
	cc := e.client.ActiveConnection()
	return cc != nil && cc.GetState() == connectivity.TransientFailure
}

// cancelOnRefused calls cancel as soon as the client's connection fails,
// while rctx lasts. The returned function, called once rctx is done, waits
// for the goroutine that watches.
func (e *Engine) cancelOnRefused(rctx context.Context, cancel context.CancelFunc) (stop func()) {
	cc := e.client.ActiveConnection()
	if cc == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := cc.GetState(); ; s = cc.GetState() {
			if s == connectivity.TransientFailure {
				cancel()
				return
			}
			if !cc.WaitForStateChange(rctx, s) {
				return
			}
		}
	}()
	return func() { <-done }
}

// Close releases the holds still held (their Lost channels close), makes
// waiting acquisitions return ErrClosed, revokes the engine's leases and stops
// its watches. It does not close the client. It is idempotent, and bounded by
// driver.DefaultReleaseTimeout when etcd does not answer.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		close(e.done)
		leases := e.leases
		e.leases = make(map[*lease]struct{})
		e.current = make(map[shelf]*lease)
		e.mu.Unlock()

		e.stopKeeper()
		// Before the holds are released: their deletions are not news.
		e.stopGone()
		ctx, cancel := context.WithTimeout(context.Background(), driver.DefaultReleaseTimeout)
		defer cancel()
		err = e.core.Close(ctx)
		// Revoking removes what cancelled waiters could not delete.
		for l := range leases {
			select {
			case <-l.ready:
			default:
				continue // the grant sees closed and revokes it itself
			}
			if l.err != nil {
				continue
			}
			if _, rerr := e.client.Revoke(ctx, l.id); rerr != nil && !isLeaseNotFound(rerr) {
				e.log.Debug("etcd: revoke on close failed", "lease", l.hexID(), "err", rerr)
			}
			e.kill(l, nil)
		}
		err = errors.Join(err, e.watcher.Close())
	})
	return err
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// bound limits one round trip to the request timeout.
func (e *Engine) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.timeout)
}

// attemptBound limits one attempt of a round trip that may be sent again:
// to the request timeout with one endpoint, to the attempt timeout with
// several (see hedge). Only for requests that do no harm if an attempt
// given up on is applied late: reads, lease refreshes, writes that compare
// the key's create revision.
func (e *Engine) attemptBound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.attempt)
}

// again tells whether a create begun at began whose attempt failed with
// err may be sent again: its member could not serve (gone, unreachable,
// without a leader), while the caller and the request timeout leave room
// for another. An answer from etcd (permission, a lease or key gone) is
// never sent again.
func (e *Engine) again(ctx context.Context, err error, began time.Time) bool {
	if err == nil || ctx.Err() != nil || e.attempt >= e.timeout || e.isClosed() {
		return false
	}
	return time.Since(began)+e.attempt <= e.timeout && isUnavailable(err)
}

// noteTrouble records that an attempt to the cluster went unanswered: a
// member died or froze, or the cluster is electing a leader. Queued waiters
// then stop trusting their watch alone for the ride-through window (see
// queued.await): the engine's watches share one gRPC stream, to one
// member, which may be the one that froze and delivers nothing until it
// resumes. The first attempt of an episode wakes them all.
func (e *Engine) noteTrouble() {
	if e.window <= 0 {
		return
	}
	e.troubleMu.Lock()
	defer e.troubleMu.Unlock()
	now := time.Now()
	if now.Sub(e.troubleAt) >= e.window {
		close(e.troubled)
		e.troubled = make(chan struct{})
	}
	e.troubleAt = now
}

// trouble returns the channel the next episode of trouble closes, and
// whether an attempt went unanswered within the ride-through window.
func (e *Engine) trouble() (<-chan struct{}, bool) {
	e.troubleMu.Lock()
	defer e.troubleMu.Unlock()
	return e.troubled, e.window > 0 && !e.troubleAt.IsZero() && time.Since(e.troubleAt) < e.window
}

// hedge runs one round trip, op, that is safe to run more than once at a
// time, within the request timeout: when no attempt has answered for the
// attempt timeout, it sends another, to the next member as clientv3's
// balancer picks it, without giving up on the ones in flight, and takes
// the first answer. So an attempt stuck on a member that froze, or
// forwarded to a leader that died, costs an attempt timeout, and one that
// lands on a member that serves is never cut short. The attempts still in
// flight are cancelled and waited for when it returns. It also returns
// how many attempts it sent.
func hedge[T any](ctx context.Context, e *Engine, op func(rctx context.Context) (T, error)) (T, int, error) {
	if e.attempt >= e.timeout { // one endpoint: nowhere else to send it
		rctx, cancel := e.bound(ctx)
		defer cancel()
		v, err := op(rctx)
		return v, 1, err
	}
	hctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	most := int(e.timeout/e.attempt) + 1
	h := &hedging[T]{
		once: func() (T, error) { return op(hctx) },
		retry: func(err error) bool {
			return hctx.Err() == nil && (isUnavailable(err) || errors.Is(err, context.DeadlineExceeded))
		},
		more:    func(sent, _ int) bool { return sent < most },
		answers: make(chan answer[T], most),
	}
	a, ended := h.run(hctx, e)
	cancel()
	for range h.inflight {
		<-h.answers // each attempt ends with hctx
	}
	if ended && a.err == nil {
		a.err = hctx.Err()
	}
	return a.v, h.sent, a.err
}

// answer is the outcome of one attempt of a hedged round trip.
type answer[T any] struct {
	v   T
	err error
}

// hedging is the loop of a hedged round trip (hedge, createHedged): how
// one attempt is made and when another may follow, and the attempts sent.
type hedging[T any] struct {
	once  func() (T, error)
	retry func(err error) bool          // a failed attempt leaves room for others
	more  func(sent, inflight int) bool // another attempt may be sent now
	// answers has room for every attempt in flight; inflight of them are
	// still to come when run returns.
	answers        chan answer[T]
	sent, inflight int
}

func (h *hedging[T]) launch() {
	h.sent++
	h.inflight++
	go func() {
		v, err := h.once()
		h.answers <- answer[T]{v, err}
	}()
}

// run sends an attempt, and another each time they have gone unanswered
// for the attempt timeout or soon after the last one in flight failed, as
// h.more allows. It returns the first success, a failure h.retry refuses,
// or the last failure when none is in flight and h.more allows no other;
// ended tells that ctx ended first. The attempts in flight go on.
func (h *hedging[T]) run(ctx context.Context, e *Engine) (a answer[T], ended bool) {
	h.launch()
	timer := time.NewTimer(e.attempt)
	defer timer.Stop()
	for {
		select {
		case a = <-h.answers:
			h.inflight--
			if a.err == nil || !h.retry(a.err) {
				return a, false
			}
			if h.inflight == 0 {
				timer.Reset(backoff(0)) // a member that failed at once: the next one, soon
			}
		case <-timer.C:
			switch {
			case h.more(h.sent, h.inflight):
				e.noteTrouble()
				h.launch()
			case h.inflight == 0:
				// No attempt may answer and none may be sent: waiting
				// would only end with ctx (never, for Lock's create).
				return a, ctx.Err() != nil
			}
			timer.Reset(e.attempt)
		case <-ctx.Done():
			return a, true
		}
	}
}

// cleanupContext is for deleting what an acquisition leaves behind: never
// the caller's cancelled context, but bounded.
func (e *Engine) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), e.timeout)
}

// nameEscaper maps any lock name injectively to a key segment without '/':
// "a/b" becomes "a%2Fb" and "a%2Fb" becomes "a%252Fb".
var nameEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// lockPrefix is the key range of one lock name. It ends with '/', so that the
// range of "a" holds neither the keys of "a/b" nor those of "ab".
func (e *Engine) lockPrefix(name string) string {
	return e.prefix + "/" + nameEscaper.Replace(name) + "/"
}

// wholeSeconds rounds a TTL up to whole seconds, the unit of etcd leases.
func wholeSeconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}

// Internal causes, mapped to the locker sentinels by fail.
var (
	errLeaseGone = errors.New("lease expired or revoked")
	// errNotRenewed is a lease whose renewals all failed until its TTL
	// ran out, as far as this engine knows.
	errNotRenewed = fmt.Errorf("%w: not renewed within its TTL", errLeaseGone)
	// errStaleTimeToLive is a LeaseTimeToLive that called a lease gone
	// while a keep-alive renewed it.
	errStaleTimeToLive = errors.New("LeaseTimeToLive said gone, a keep-alive renewed it")
	errKeyGone         = errors.New("key deleted")
)

// fail wraps an error once, at the edge of the engine: ErrClosed and lost
// leases or keys keep their class, everything else is the engine failing.
func (e *Engine) fail(op, name string, err error) error {
	fail := &locker.EngineError{Engine: "etcd", Op: op, Name: name, Err: err}
	switch {
	case errors.Is(err, locker.ErrClosed):
		fail.Classes, fail.Err = []error{locker.ErrClosed}, nil
	case errors.Is(err, errLeaseGone), errors.Is(err, errKeyGone):
		fail.Classes = []error{locker.ErrLockLost}
	case errors.Is(err, locker.ErrPermitsMismatch):
		// The caller's mistake, not the engine failing: no breaker counts it.
		fail.Classes = []error{locker.ErrPermitsMismatch}
	case isPermission(err):
		fail.Classes = []error{locker.ErrPermission}
	case e.refused():
		fail.Classes = []error{locker.ErrUnavailable, locker.ErrRefused}
	default:
		fail.Classes = []error{locker.ErrUnavailable}
	}
	return fail
}

// isPermission tells a refused user (authentication failed, or no
// permission on the key range) from an engine failing.
func isPermission(err error) bool {
	for _, p := range []error{rpctypes.ErrPermissionDenied, rpctypes.ErrAuthFailed, rpctypes.ErrUserEmpty, rpctypes.ErrUserNotFound} {
		if errors.Is(err, p) || errors.Is(rpctypes.Error(err), p) {
			return true
		}
	}
	return false
}

// isUnavailable tells a member that could not serve: gone, not
// reachable, without a leader, or timed out on its own side.
func isUnavailable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	for _, u := range []error{rpctypes.ErrNoLeader, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
		rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrLeaderChanged} {
		if errors.Is(rpctypes.Error(err), u) {
			return true
		}
	}
	return false
}

func isLeaseNotFound(err error) bool {
	return err != nil && errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound)
}

// deleteKeys deletes keys unconditionally, in as few transactions as the
// server allows, each one attempt: the keeper sweeps with it before a
// refresh, which must not wait behind a transaction sent into an election
// for the request timeout, past the life of the lease's holds. Only for
// keys of this engine whose slots are still taken: no other hold can have
// them, so a transaction given up on and applied late does no harm.
func (e *Engine) deleteKeys(ctx context.Context, keys []string) error {
	for chunk := range slices.Chunk(keys, maxTxnOps) {
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpDelete(k)
		}
		rctx, cancel := e.attemptBound(ctx)
		_, err := e.client.Txn(rctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}
