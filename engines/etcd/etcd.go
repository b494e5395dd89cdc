package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/orthrus-go/orthrus/internal/deadline"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// DefaultRequestTimeout bounds a round trip to a single server.
const DefaultRequestTimeout = driver.DefaultRequestTimeout

// DefaultClusterRequestTimeout bounds a round trip to a cluster: it must
// outlast a leader election and reach a member that answers.
const DefaultClusterRequestTimeout = 5 * time.Second

// DefaultRideThrough is the ride-through window with several endpoints:
// raft elects a new leader within 1-2 election timeouts (etcd's default:
// 1000ms), twice that after a split vote (seen on a loaded host: 3.55s);
// 5s covers two rounds with a second of margin.
const DefaultRideThrough = 5 * time.Second

// DefaultAttemptTimeout bounds one attempt of a request to a cluster: a
// request to a member that died or froze is never answered, so it must be
// sent again well within an election (1-2s).
const DefaultAttemptTimeout = 300 * time.Millisecond

// maxTxnOps is etcd's default --max-txn-ops.
const maxTxnOps = 128

// Engine is the etcd lock engine. It implements locker.Engine.
type Engine struct {
	settings
	client  *clientv3.Client
	watcher clientv3.Watcher // owned: closed by Close
	core    *driver.Core

	// The bounds of requests: a Lock's share one timer per 64th of them.
	requests, attempts deadline.Shared

	done chan struct{} // closed by Close

	// Trouble: the latest attempt to the cluster that went unanswered (see
	// noteTrouble), and a channel closed when an episode of it begins.
	troubleMu sync.Mutex
	troubleAt time.Time
	troubled  chan struct{}
	closeOnce sync.Once

	keeper *keeper
	gone   *goneWatch // the deletion watch (gone.go)

	mu      sync.Mutex
	closed  bool
	current map[shelf]*lease    // the lease new keys go on, by TTL in whole seconds and lock delay
	leases  map[*lease]struct{} // every lease not killed: current ones, and full ones with keys
	byKey   map[string]*slot    // every taken slot, by key, for the deletion watch

	// Heavy arrivals (weight.go): the transactions they sent and those
	// that created their key, and a hook for the tests between a look and
	// the create.
	heavyTries, heavyArrivals atomic.Int64
	afterLook                 func()
}

var (
	_ locker.Engine  = (*Engine)(nil)
	_ driver.Backend = (*Engine)(nil)
)

type settings struct {
	name     string
	prefix   string // the namespace, without its trailing '/'
	timeout  time.Duration
	attempt  time.Duration // one attempt of a round trip; < 0: the default
	window   time.Duration // RideThrough; < 0: the default
	perLease int
	log      *slog.Logger
	observer observe.Observer // nil: nothing observes
}

// Option configures an Engine.
type Option func(*settings) error

// check is an Option that applies set, or fails naming opt and why.
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

// WithPrefix sets the namespace of every key (see the package doc), so
// that applications sharing a cluster do not collide. It must not end
// with '/'. Default: "orthrus".
func WithPrefix(prefix string) Option {
	return check(prefix != "" && !strings.HasSuffix(prefix, "/"), fmt.Sprintf("WithPrefix(%q)", prefix),
		"want a non-empty prefix without a trailing '/' (keys are <prefix>/<name>/<id>)", func(s *settings) { s.prefix = prefix })
}

// WithRequestTimeout bounds every round trip to etcd, whatever the caller's
// context: clientv3 retries an unreachable cluster until its context ends.
// Default: DefaultRequestTimeout with one endpoint,
// DefaultClusterRequestTimeout with several.
func WithRequestTimeout(d time.Duration) Option {
	return check(d > 0, fmt.Sprintf("WithRequestTimeout(%v)", d), "timeout must be positive", func(s *settings) { s.timeout = d })
}

// WithRideThrough sets how long the engine may fail, while its cluster
// elects a leader, before a switcher counts it as down (see
// switcher.Cluster): about 4 × --election-timeout + 1s. 0 counts failures
// at once. Default: DefaultRideThrough with several endpoints, 0 with one.
func WithRideThrough(d time.Duration) Option {
	return check(d >= 0, fmt.Sprintf("WithRideThrough(%v)", d), "window must not be negative", func(s *settings) { s.window = d })
}

// WithAttemptTimeout sets how long a request to a cluster may go
// unanswered before it is sent again, to the next member, within the
// request timeout. Creates, releases and lease grants are hedged (the
// attempt in flight goes on and the first answer is taken); lease
// refreshes and a waiter's checks have one attempt and are tried again.
// Default: DefaultAttemptTimeout with several endpoints; with one, a
// request has one attempt of the request timeout.
func WithAttemptTimeout(d time.Duration) Option {
	return check(d > 0, fmt.Sprintf("WithAttemptTimeout(%v)", d), "timeout must be positive", func(s *settings) { s.attempt = d })
}

// DefaultKeysPerLease is how many keys (holds and waiters) share a lease.
const DefaultKeysPerLease = 5000

// WithKeysPerLease bounds the keys that share one lease: a lease that ends
// takes all its holds with it, and each costs one keep-alive every third
// of its TTL. Default: DefaultKeysPerLease.
func WithKeysPerLease(n int) Option {
	return check(n >= 1, fmt.Sprintf("WithKeysPerLease(%d)", n), "want at least 1", func(s *settings) { s.perLease = n })
}

// WithLogger sets the logger for lost holds and leases and connection
// trouble. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return check(l != nil, "WithLogger", "logger is nil", func(s *settings) { s.log = l })
}

// WithObserver reports acquisitions, releases and holds to o (package
// telemetry implements it). Default: none.
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
	s := settings{name: "etcd", prefix: "orthrus", log: slog.Default(), perLease: DefaultKeysPerLease,
		window: -1, attempt: -1}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("etcd: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	s.log = s.log.With("engine", s.name)
	// One server has no election to ride out and nowhere else to send to.
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
	s.attempt = min(s.attempt, s.timeout)
	e := &Engine{
		settings: s,
		requests: deadline.Shared{Timeout: s.timeout},
		attempts: deadline.Shared{Timeout: s.attempt},
		client:   client,
		watcher:  clientv3.NewWatcher(client),
		done:     make(chan struct{}),
		troubled: make(chan struct{}),
		keeper:   newKeeper(),
		gone:     newGoneWatch(),
		byKey:    make(map[string]*slot),
		current:  make(map[shelf]*lease),
		leases:   make(map[*lease]struct{}),
	}
	e.core = driver.NewCore(s.name, e, s.log, driver.ObservedBy(s.observer), driver.ReleaseWait(s.window))
	go e.keep()
	go e.followGone()
	return e, nil
}

// Name returns the engine's name.
func (e *Engine) Name() string { return e.name }

// Client returns the client the engine was built over (package idem uses
// it). Nobody who calls Client owns it.
func (e *Engine) Client() *clientv3.Client { return e.client }

// MinTTL is the shortest TTL, or fixed lease, the engine accepts: etcd
// grants leases in whole seconds. Longer TTLs are rounded up; the server's
// own minimum (1.5 election timeouts) only lengthens a dead owner's hold.
const MinTTL = time.Second

// MinTTL implements driver.MinTTLer.
func (e *Engine) MinTTL() time.Duration { return MinTTL }

// RideThrough returns the engine's ride-through window (WithRideThrough).
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
	// A context of its own, not the shared bound: clientv3 would retry until
	// rctx ends, whatever the connection, so a refusal cancels it.
	rctx, cancel := context.WithTimeout(ctx, e.timeout)
	stop := e.cancelOnRefused(rctx, cancel)
	// A key a role limited to the prefix may read.
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

// cancelOnRefused calls cancel when the client's connection fails while
// rctx lasts; stop, called once rctx is done, waits for its goroutine.
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
// waiting acquisitions return ErrClosed, revokes the engine's leases and
// stops its goroutines and watches. It does not close the client. It is
// idempotent, and bounded by driver.DefaultReleaseTimeout.
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
		e.requests.Stop()
		e.attempts.Stop()
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
	return e.requests.Bound(ctx)
}

// attemptBound limits one attempt of a round trip that does no harm if
// applied late (reads, refreshes, writes comparing a create revision).
func (e *Engine) attemptBound(ctx context.Context) (context.Context, context.CancelFunc) {
	return e.attempts.Bound(ctx)
}

// again tells whether a create begun at began may be sent again after
// err: its member could not serve, and the caller and the request timeout
// leave room. An answer from etcd is never sent again.
func (e *Engine) again(ctx context.Context, err error, began time.Time) bool {
	if err == nil || ctx.Err() != nil || e.attempt >= e.timeout || e.isClosed() {
		return false
	}
	return time.Since(began)+e.attempt <= e.timeout && isUnavailable(err)
}

// noteTrouble records an unanswered attempt. Queued waiters then also
// read their place for the ride-through window (queued.await): the
// watches share one gRPC stream, which may sit on the member that froze.
// The first attempt of an episode wakes them all.
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

// hedge runs op, safe to run more than once at a time, within the
// request timeout: each time no attempt has answered for the attempt
// timeout it sends another, keeping those in flight, and takes the first
// answer. Those left are cancelled and waited for. It returns how many
// attempts it sent.
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
// for the attempt timeout, or soon after the last one failed, as h.more
// allows. It returns the first success, a failure h.retry refuses, or the
// last failure when no other may come; ended tells that ctx ended first.
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
				// Nothing may answer: waiting would end only with ctx.
				return a, ctx.Err() != nil
			}
			timer.Reset(e.attempt)
		case <-ctx.Done():
			return a, true
		}
	}
}

// cleanupContext bounds a cleanup that outlives the caller's context.
func (e *Engine) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), e.timeout)
}

// nameEscaper maps names injectively to key segments without '/'.
var nameEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// lockPrefix is the key range of a mutex; the '/' keeps "ab" out of "a".
func (e *Engine) lockPrefix(name string) string {
	return e.prefix + "/" + nameEscaper.Replace(name) + "/"
}

// wholeSeconds rounds a TTL up to whole seconds, the unit of etcd leases.
func wholeSeconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}

// Internal causes, mapped to the locker sentinels by fail.
var (
	errLeaseGone       = errors.New("lease expired or revoked")
	errNotRenewed      = fmt.Errorf("%w: not renewed within its TTL", errLeaseGone)
	errStaleTimeToLive = errors.New("LeaseTimeToLive said gone, a keep-alive renewed it")
	errKeyGone         = errors.New("key deleted")
)

// fail wraps an error once, at the edge of the engine, with its class.
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

// isPermission tells a refused user from an engine failing.
func isPermission(err error) bool {
	for _, p := range []error{rpctypes.ErrPermissionDenied, rpctypes.ErrAuthFailed, rpctypes.ErrUserEmpty, rpctypes.ErrUserNotFound} {
		if errors.Is(err, p) || errors.Is(rpctypes.Error(err), p) {
			return true
		}
	}
	return false
}

// isUnavailable tells a member that could not serve.
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

// deleteKeys deletes keys of taken slots (no other hold can have them),
// one attempt per transaction: the keeper sweeps with it before a refresh,
// which must not wait out an election.
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
