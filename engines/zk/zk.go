package zk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// Defaults of the engine options.
const (
	DefaultSessionTimeout = 10 * time.Second
	DefaultConnectTimeout = driver.DefaultRequestTimeout
	// DefaultClusterConnectTimeout is the connect timeout with several
	// servers: a request rides out the ensemble's election, which takes
	// seconds, on the session's next server.
	DefaultClusterConnectTimeout = 5 * time.Second
	DefaultPrefix                = "/orthrus"
	// DefaultParentLinger is how long a lock's parent node stays after the
	// engine's last node under it went, unless WithParentLinger says
	// otherwise.
	DefaultParentLinger = 5 * time.Second
)

// Engine is the ZooKeeper lock engine. It implements locker.Engine. It owns
// one ZooKeeper connection and its session; Close ends them.
type Engine struct {
	name           string
	root           string
	acl            []gozk.ACL
	connectTimeout time.Duration
	window         time.Duration // RideThrough: 0 for one server
	log            *slog.Logger

	zc   *zkconn.Conn // the connection, its workers and its reaper
	conn *gozk.Conn   // zc's client, for requests run through do
	core *driver.Core

	mu    sync.Mutex
	nodes map[string]*node // the engine's nodes, by path; see session.go

	recs       records      // heavy nodes' records (weight.go)
	heavyTries atomic.Int64 // heavy nodes created, valid or not

	closeOnce sync.Once

	// afterCreate, set only by tests (export_test.go), replaces the result
	// of a successful create, to simulate a reply lost with the connection.
	afterCreate func(path string) error
	// beforeHeavyCreate, set only by tests (export_weight_test.go), runs
	// between a heavy arrival's look and its create, to change the queue
	// in between.
	beforeHeavyCreate func()
}

var (
	_ locker.Engine  = (*Engine)(nil)
	_ driver.Backend = (*Engine)(nil)
	_ driver.Weigher = (*Engine)(nil)
)

type settings struct {
	name     string
	prefix   string
	window   time.Duration    // < 0: the default for the servers given
	observer observe.Observer // nil: nothing observes
	conn     zkconn.Config    // the connection's options
}

// Option configures an Engine.
type Option func(*settings) error

// WithName names the engine in Lease.Engine, logs and the switcher.
// Default: "zk".
func WithName(name string) Option {
	return func(s *settings) error {
		if name == "" {
			return fmt.Errorf("zk: WithName: %w: name is empty", locker.ErrInvalidArgument)
		}
		s.name = name
		return nil
	}
}

// WithPrefix sets the namespace: the path under which every lock has its
// node, so that applications sharing an ensemble do not collide. It is an
// absolute ZooKeeper path ("/myapp/locks"; the leading '/' may be left out),
// not the root and not under /zookeeper. Missing nodes of the path are
// created as persistent nodes on first use. Default: "/orthrus".
func WithPrefix(prefix string) Option {
	return func(s *settings) error {
		p := prefix
		if !strings.HasPrefix(p, "/") {
			p = "/" + p
		}
		if err := zkconn.CheckPath(p); err != nil {
			return fmt.Errorf("zk: WithPrefix(%q): %w: %v", prefix, locker.ErrInvalidArgument, err)
		}
		s.prefix = p
		return nil
	}
}

// WithSessionTimeout sets the ZooKeeper session timeout the engine asks
// for. It is the liveness of every hold: when this process dies or loses the
// ensemble, the server ends its session, and with it its holds, after the
// session timeout; locker.WithTTL does not change it. The server clamps the
// value into its [minSessionTimeout, maxSessionTimeout] (by default 2 and 20
// ticks); the engine uses the value the server granted. Default: 10s.
func WithSessionTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d < time.Millisecond {
			return fmt.Errorf("zk: WithSessionTimeout(%v): %w: want at least 1ms", d, locker.ErrInvalidArgument)
		}
		s.conn.SessionTimeout = d
		return nil
	}
}

// WithRideThrough sets how long the engine may fail, while its ensemble
// elects a leader or loses and regains a server, before a switcher counts
// it as down and moves new acquisitions to the next engine (see
// switcher.Cluster). Every server of an ensemble refuses clients while it
// elects: the window must cover the election and the session's move to a
// server that serves. Default: two thirds of the session timeout (6.67s
// with the default 10s) when New is given several servers, 0 with one.
func WithRideThrough(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return fmt.Errorf("zk: WithRideThrough(%v): %w: window must not be negative", d, locker.ErrInvalidArgument)
		}
		s.window = d
		return nil
	}
}

// WithConnectTimeout bounds how long the engine waits for the ensemble: New
// for the first session, and each request for its answer, across
// reconnections. Past it the call fails with an error wrapping
// locker.ErrUnavailable. A server that accepts a connection but does not
// answer the handshake within the connect timeout (or two thirds of the
// session timeout, if shorter, but at least a second) is left for the next
// try; one whose first reply is not ZooKeeper's (a wrong port) is refused
// at once, and the error says so. Default: DefaultConnectTimeout,
// driver.DefaultRequestTimeout (2s), with one server;
// DefaultClusterConnectTimeout (5s) with several.
func WithConnectTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("zk: WithConnectTimeout(%v): %w: timeout must be positive", d, locker.ErrInvalidArgument)
		}
		s.conn.ConnectTimeout = d
		return nil
	}
}

// WithAuth authenticates the session, for instance WithAuth("digest",
// "user:password"), before anything is created, and again after each
// reconnection. With credentials every node the engine creates, the
// namespace included, gets the ACL "auth" with all permissions (ZooKeeper's
// CREATOR_ALL_ACL): only sessions with the same credentials can read, create
// or delete lock nodes. WithAuth may be given more than once. Default: no
// credentials, and nodes open to all (OPEN_ACL_UNSAFE).
func WithAuth(scheme, cred string) Option {
	return func(s *settings) error {
		c, err := zkconn.NewCredential(scheme, cred)
		if err != nil {
			return fmt.Errorf("zk: WithAuth(%q): %w: %v", scheme, locker.ErrInvalidArgument, err)
		}
		s.conn.Auth = append(s.conn.Auth, c)
		return nil
	}
}

// WithTLS connects to the servers' secure client port (secureClientPort,
// served by ZooKeeper's Netty connection factory) over TLS with conf: its
// RootCAs to verify the servers, its Certificates for mutual TLS. When
// conf.ServerName is empty, each server's host is verified. A server whose
// handshake fails is skipped like an unreachable one, and New's error says
// why. Default: no TLS.
func WithTLS(conf *tls.Config) Option {
	return func(s *settings) error {
		if conf == nil {
			return fmt.Errorf("zk: WithTLS: %w: config is nil", locker.ErrInvalidArgument)
		}
		s.conn.TLS = conf.Clone()
		return nil
	}
}

// WithParentLinger sets how long a lock's parent node stays once the
// engine's last node under it is gone: then the engine deletes it, if no
// process has used it since and it is empty (see the package
// documentation). A name locked again within d pays nothing; after d, its
// next acquisition creates the parent again, one more request. 0 leaves
// parents to the server's container reaper, which deletes about 10k a
// minute. Default: DefaultParentLinger (5s).
func WithParentLinger(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return fmt.Errorf("zk: WithParentLinger(%v): %w: must not be negative", d, locker.ErrInvalidArgument)
		}
		s.conn.ParentLinger = d
		return nil
	}
}

// WithLazyConnect makes New return without waiting for a session, so that
// an engine can be built while its ensemble is down (config.Open does, to
// start with the engine's breaker open). The session, and the credentials
// of WithAuth, come whenever the ensemble answers, until Close; until then
// every call fails with an error wrapping locker.ErrUnavailable, and Ping
// tells so. A failed authentication is logged and tried again.
// Default: New waits for the session, at most the connect timeout.
func WithLazyConnect() Option {
	return func(s *settings) error {
		s.conn.Lazy = true
		return nil
	}
}

// WithObserver reports the engine's acquisitions, releases, renewals and
// holds to o, for metrics and traces (package telemetry implements it with
// OpenTelemetry). Default: none, and no observation cost.
func WithObserver(o observe.Observer) Option {
	return func(s *settings) error {
		if o == nil {
			return fmt.Errorf("zk: WithObserver: %w: observer is nil", locker.ErrInvalidArgument)
		}
		s.observer = o
		return nil
	}
}

// WithLogger sets the logger for lost holds and session trouble.
// go-zookeeper's own messages go to it at Debug level.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("zk: WithLogger: %w: logger is nil", locker.ErrInvalidArgument)
		}
		s.conn.Logger = l
		return nil
	}
}

// New connects to the ensemble given by servers ("host:port"; the port
// defaults to 2181) and waits for a session, at most the connect timeout
// (not with WithLazyConnect): an ensemble that cannot be reached fails New
// with an error wrapping locker.ErrUnavailable. The engine owns the connection; Close ends it.
func New(servers []string, opts ...Option) (*Engine, error) {
	s, err := newSettings(servers, opts)
	if err != nil {
		return nil, err
	}
	logger := s.conn.Logger.With("engine", s.name)
	e := &Engine{
		name:           s.name,
		root:           s.prefix,
		acl:            s.conn.ACL(),
		connectTimeout: s.conn.ConnectTimeout,
		window:         s.window,
		log:            logger,
		nodes:          make(map[string]*node),
	}
	s.conn.Servers, s.conn.Logger = servers, logger
	s.conn.OnEpochLost, s.conn.OnDeleted, s.conn.OnChanged = e.epochLost, e.nodeDeleted, e.nodeChanged
	s.conn.OnDisconnected = func(ep *zkconn.Epoch) { e.epochAtRisk(ep, s.conn.SessionTimeout) }
	e.zc, err = zkconn.Dial(context.Background(), s.conn)
	var auth *zkconn.AuthError
	switch {
	case errors.As(err, &auth):
		return nil, fmt.Errorf("zk: New: WithAuth(%q): %w: %w", auth.Scheme, locker.ErrUnavailable, auth.Err)
	case err != nil:
		return nil, fmt.Errorf("zk: New(%q): %w: %w", servers, locker.ErrUnavailable, err)
	}
	e.conn = e.zc.Client()
	e.core = driver.NewCore(s.name, e, logger, driver.ObservedBy(s.observer), driver.ReleaseWait(s.window))
	return e, nil
}

// newSettings checks servers and applies opts to the defaults.
func newSettings(servers []string, opts []Option) (settings, error) {
	s := settings{name: "zk", prefix: DefaultPrefix, window: -1, conn: zkconn.Config{
		SessionTimeout: DefaultSessionTimeout,
		Logger:         slog.Default(),
		ParentLinger:   DefaultParentLinger,
	}}
	if len(servers) == 0 {
		return s, fmt.Errorf("zk: New: %w: no servers", locker.ErrInvalidArgument)
	}
	for _, srv := range servers {
		if strings.TrimSpace(srv) == "" {
			return s, fmt.Errorf("zk: New(%q): %w: empty server address", servers, locker.ErrInvalidArgument)
		}
	}
	for _, opt := range opts {
		if opt == nil {
			return s, fmt.Errorf("zk: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return s, err
		}
	}
	if s.conn.ConnectTimeout == 0 {
		s.conn.ConnectTimeout = DefaultConnectTimeout
		if len(servers) > 1 {
			s.conn.ConnectTimeout = DefaultClusterConnectTimeout
		}
	}
	if s.window < 0 {
		// One server has no election to ride out. An ensemble's session
		// outlives an outage shorter than its timeout, holds included;
		// two thirds of it is go-zookeeper's own limit for a silent
		// server, and switches before the holds could be lost.
		s.window = 0
		if len(servers) > 1 {
			s.window = s.conn.SessionTimeout * 2 / 3
		}
	}
	s.conn.StallTimeout = stallTimeout // zkconn: with several servers only
	return s, nil
}

// stallTimeout is how long the server of an ensemble engine's session may
// leave a request unanswered before the session moves to another server:
// a healthy server answers in milliseconds, and a frozen one would
// otherwise hold the session for two thirds of the session timeout.
const stallTimeout = time.Second

// Name returns the engine's name.
func (e *Engine) Name() string { return e.name }

// Conn returns the engine's ZooKeeper connection and the ACL it gives its
// nodes, for what talks to the same ensemble beside the locks (the stores
// of package idem). The engine owns the connection: Close ends it, and
// the caller must not close it.
func (e *Engine) Conn() (*gozk.Conn, []gozk.ACL) { return e.conn, e.acl }

// Weighs implements driver.Weigher: the waiters of a mutex and of a
// read-write lock are ranked by weight (locker.WithWeight), so it returns
// nil; a semaphore's Acquire still refuses a weight above 1 with its
// reason, wrapping errors.ErrUnsupported (Core's check is per engine, not
// per kind).
func (e *Engine) Weighs() error { return nil }

// MinTTL is the shortest TTL, or fixed lease, the engine accepts.
// ZooKeeper keeps no per-hold TTL: a hold lives as long as the session
// (WithSessionTimeout), and a dead owner's holds end with it whatever the
// TTL. What the engine times itself is a fixed lease, ended by a delete it
// sends, and the owner's loss of a hold; 100ms leaves that delete's round
// trip room, as a renewal's on Redis.
const MinTTL = 100 * time.Millisecond

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

// Ping checks that the ensemble answers a read, within ctx and the connect
// timeout.
func (e *Engine) Ping(ctx context.Context) error {
	if e.core.Closed() {
		return fmt.Errorf("zk: ping: %w", locker.ErrClosed)
	}
	if e.zc.Refused() {
		return e.fail("ping", "/", e.zc.Explain(zkconn.ErrNoServer))
	}
	_, err := zkconn.Probe(ctx, e.zc, func() (bool, error) {
		ok, _, err := e.conn.Exists("/")
		return ok, err
	})
	if err != nil {
		return e.fail("ping", "/", err)
	}
	return nil
}

// Close releases the holds still held (their Lost channels close), stops
// the engine's goroutines and ends the session, which makes the server
// delete every node the engine still had, and waits for every goroutine,
// go-zookeeper's included. With an ensemble that does not answer it
// returns within about ten seconds. Later calls on the engine and its
// Lockers return ErrClosed; Close itself is idempotent.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), driver.DefaultReleaseTimeout)
		err = e.core.Close(ctx)
		cancel()
		_ = e.zc.Close() // logged there: go-zookeeper's loop did not end
	})
	return err
}

// fail classifies an engine error for the caller: ErrClosed once the engine
// is closing, ErrUnavailable otherwise, keeping the cause.
func (e *Engine) fail(op, name string, err error) error {
	fail := &locker.EngineError{Engine: "zk", Op: op, Name: name, Err: err}
	switch {
	case errors.Is(err, zkconn.ErrClosed):
		fail.Classes, fail.Err = []error{locker.ErrClosed}, nil
	case errors.Is(err, zkconn.ErrNoServer) || e.zc.Refused():
		fail.Classes = []error{locker.ErrUnavailable, locker.ErrRefused}
	case errors.Is(err, gozk.ErrNoAuth) || errors.Is(err, gozk.ErrAuthFailed):
		fail.Classes = []error{locker.ErrPermission}
	default:
		fail.Classes = []error{locker.ErrUnavailable}
	}
	return fail
}
