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

	"github.com/orthrus-go/orthrus/internal/zkpath"
	"github.com/orthrus-go/orthrus/locker"
)

// Defaults of the engine options.
const (
	DefaultSessionTimeout = 10 * time.Second
	DefaultConnectTimeout = 5 * time.Second
	DefaultPrefix         = "/orthrus"
)

// minHandshake is the least time a server gets to answer a handshake.
const minHandshake = time.Second

// closeTimeout bounds how long Close waits for go-zookeeper's own goroutines
// after the connection is closed.
const closeTimeout = 10 * time.Second

// Engine is the ZooKeeper lock engine. It implements locker.Engine. It owns
// one ZooKeeper connection and its session; Close ends them.
type Engine struct {
	name           string
	root           string
	acl            []gozk.ACL
	sessionTimeout time.Duration
	connectTimeout time.Duration
	nservers       int // len(servers), for refused
	log            *slog.Logger

	conn    *gozk.Conn
	connPtr atomic.Pointer[gozk.Conn] // conn, for the event callback, once New has it
	events  <-chan gozk.Event         // closed when go-zookeeper's loop has ended
	wire    *wire
	core    *locker.Core

	// ctx is cancelled by Close: it ends the engine's own waits.
	ctx    context.Context
	cancel context.CancelFunc

	// Session state, set by the event callback; see session.go.
	mu      sync.Mutex
	nodes   map[string]*node // our nodes the server has, by path
	ep      *epoch           // the current session
	up      chan struct{}    // closed while a session is connected
	isUp    bool
	changed chan struct{} // poked on every session event

	// Goroutines: the monitor, the reaper and the workers that run
	// requests.
	gmu     sync.Mutex
	gclosed bool
	wg      sync.WaitGroup
	work    chan func() // to an idle worker

	reapMu   sync.Mutex
	reapQ    []reapTask
	reapWake chan struct{}

	// Lock parents, see parents.go; guarded by mu.
	linger   time.Duration
	parents  map[string]*parentState
	idle     []idleParent // oldest first
	idleWake chan struct{}

	closeOnce sync.Once

	// afterCreate, set only by tests, replaces the result of a successful
	// create, to simulate a reply lost with the connection.
	afterCreate func(path string) error
}

var (
	_ locker.Engine  = (*Engine)(nil)
	_ locker.Backend = (*Engine)(nil)
)

type credential struct {
	scheme string
	cred   []byte
}

type settings struct {
	name           string
	prefix         string
	sessionTimeout time.Duration
	connectTimeout time.Duration
	logger         *slog.Logger
	auth           []credential
	tls            *tls.Config

	observer locker.Observer // nil: nothing observes
	linger   time.Duration
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
		if err := zkpath.Check(p); err != nil {
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
		s.sessionTimeout = d
		return nil
	}
}

// WithConnectTimeout bounds how long the engine waits for the ensemble: New
// for the first session, and each request for its answer, across
// reconnections. Past it the call fails with an error wrapping
// locker.ErrUnavailable. A server that accepts a connection but does not
// answer the handshake within the connect timeout (or two thirds of the
// session timeout, if shorter, but at least a second) is left for the next
// try. Default: 5s.
func WithConnectTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("zk: WithConnectTimeout(%v): %w: timeout must be positive", d, locker.ErrInvalidArgument)
		}
		s.connectTimeout = d
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
		switch {
		case scheme == "":
			return fmt.Errorf("zk: WithAuth: %w: scheme is empty", locker.ErrInvalidArgument)
		case cred == "":
			return fmt.Errorf("zk: WithAuth(%q): %w: credentials are empty", scheme, locker.ErrInvalidArgument)
		case scheme == "digest" && !strings.Contains(cred, ":"):
			return fmt.Errorf("zk: WithAuth(%q): %w: want \"user:password\"", scheme, locker.ErrInvalidArgument)
		}
		s.auth = append(s.auth, credential{scheme: scheme, cred: []byte(cred)})
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
		s.linger = d
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
		s.logger = l
		return nil
	}
}

// New connects to the ensemble given by servers ("host:port"; the port
// defaults to 2181) and waits for a session, at most the connect timeout:
// an ensemble that cannot be reached fails New with an error wrapping
// locker.ErrUnavailable. The engine owns the connection; Close ends it.
func New(servers []string, opts ...Option) (*Engine, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("zk: New: %w: no servers", locker.ErrInvalidArgument)
	}
	for _, srv := range servers {
		if strings.TrimSpace(srv) == "" {
			return nil, fmt.Errorf("zk: New(%q): %w: empty server address", servers, locker.ErrInvalidArgument)
		}
	}
	s := settings{
		name:           "zk",
		prefix:         DefaultPrefix,
		sessionTimeout: DefaultSessionTimeout,
		connectTimeout: DefaultConnectTimeout,
		logger:         slog.Default(),
		linger:         DefaultParentLinger,
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("zk: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	logger := s.logger.With("engine", s.name)
	e := &Engine{
		name:           s.name,
		root:           s.prefix,
		acl:            gozk.WorldACL(gozk.PermAll),
		sessionTimeout: s.sessionTimeout,
		connectTimeout: s.connectTimeout,
		nservers:       len(servers),
		log:            logger,
		wire:           newWire(max(min(s.connectTimeout, s.sessionTimeout*2/3), minHandshake)),
		nodes:          make(map[string]*node),
		up:             make(chan struct{}),
		changed:        make(chan struct{}, 1),
		reapWake:       make(chan struct{}, 1),
		work:           make(chan func()),
		linger:         s.linger,
		parents:        make(map[string]*parentState),
		idleWake:       make(chan struct{}, 1),
	}
	e.wire.tls = s.tls
	if len(s.auth) > 0 {
		e.acl = gozk.AuthACL(gozk.PermAll)
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())

	conn, events, err := gozk.Connect(servers, s.sessionTimeout,
		gozk.WithDialer(e.wire.dial),
		gozk.WithLogger(clientLogger{logger}),
		gozk.WithLogInfo(false),
		gozk.WithEventCallback(e.onEvent),
	)
	if err != nil {
		e.cancel()
		// An address that does not resolve: nothing to connect to.
		return nil, fmt.Errorf("zk: New(%q): %w: %w", servers, locker.ErrUnavailable, err)
	}
	e.conn, e.events = conn, events
	e.connPtr.Store(conn)
	e.sync(conn) // events before the Store were not acted on

	if err := e.waitSession(servers); err != nil {
		e.shutdown()
		return nil, err
	}
	for _, c := range s.auth {
		_, err := do(e, e.ctx, func() (struct{}, error) { return struct{}{}, e.conn.AddAuth(c.scheme, c.cred) })
		if err != nil {
			e.shutdown()
			return nil, fmt.Errorf("zk: New: WithAuth(%q): %w: %w", c.scheme, locker.ErrUnavailable, err)
		}
	}
	if got := e.liveness(); got != s.sessionTimeout {
		logger.Info("zk: the server changed the session timeout", "asked", s.sessionTimeout, "granted", got)
	}
	e.wg.Add(3)
	go e.monitor()
	go e.reaper()
	go e.sweeper()
	e.core = locker.NewCore(s.name, e, logger, locker.ObservedBy(s.observer))
	return e, nil
}

// waitSession waits for the first session, at most the connect timeout.
func (e *Engine) waitSession(servers []string) error {
	timer := time.NewTimer(e.connectTimeout)
	defer timer.Stop()
	e.mu.Lock()
	up := e.up
	e.mu.Unlock()
	select {
	case <-up:
		return nil
	case <-timer.C:
		if why := e.wire.failure.Load(); why != nil {
			return fmt.Errorf("zk: New(%q): %w: no session within %v: %w", servers, locker.ErrUnavailable, e.connectTimeout, *why)
		}
		return fmt.Errorf("zk: New(%q): %w: no session within %v", servers, locker.ErrUnavailable, e.connectTimeout)
	}
}

// Name returns the engine's name.
func (e *Engine) Name() string { return e.name }

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
	if e.refused() {
		return e.fail("ping", "/", errNoServer)
	}
	_, err := probe(e, ctx, func() (bool, error) {
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
		ctx, cancel := context.WithTimeout(context.Background(), locker.DefaultReleaseTimeout)
		err = e.core.Close(ctx)
		cancel()
		e.shutdown()
	})
	return err
}

// shutdown stops everything New started.
func (e *Engine) shutdown() {
	e.cancel()
	e.gmu.Lock()
	e.gclosed = true
	e.gmu.Unlock()
	// A graceful close first: the server ends the session and deletes its
	// nodes at once. Then the sockets, in case a handshake with a frozen
	// server holds go-zookeeper's loop.
	e.conn.Close()
	e.wire.close()
	e.wg.Wait()
	timer := time.NewTimer(closeTimeout)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-e.events:
			if !ok {
				return
			}
		case <-timer.C:
			e.log.Warn("zk: go-zookeeper's connection loop did not end", "waited", closeTimeout)
			return
		}
	}
}

// workerIdle is how long an idle worker waits for more work.
const workerIdle = 2 * time.Second

// spawn runs f on a worker goroutine that Close waits for: an idle one, or
// a new one. It reports false, and does not run f, once the engine is
// closing. Workers outlive their first request by workerIdle, so that the
// next ones do not pay for a goroutine and for growing its stack, which
// go-zookeeper's calls need.
func (e *Engine) spawn(f func()) bool {
	select {
	case e.work <- f:
		return true
	default:
	}
	e.gmu.Lock()
	defer e.gmu.Unlock()
	if e.gclosed {
		return false
	}
	e.wg.Add(1)
	go e.worker(f)
	return true
}

func (e *Engine) worker(f func()) {
	defer e.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(workerIdle)
		select {
		case f = <-e.work:
		case <-idle.C:
			return
		case <-e.ctx.Done():
			return
		}
	}
}

// fail classifies an engine error for the caller: ErrClosed once the engine
// is closing, ErrUnavailable otherwise, keeping the cause.
func (e *Engine) fail(op, name string, err error) error {
	fail := &locker.EngineError{Engine: "zk", Op: op, Name: name, Err: err}
	switch {
	case errors.Is(err, errClosed):
		fail.Classes, fail.Err = []error{locker.ErrClosed}, nil
	case errors.Is(err, errNoServer) || e.refused():
		fail.Classes = []error{locker.ErrUnavailable, locker.ErrRefused}
	case errors.Is(err, gozk.ErrNoAuth) || errors.Is(err, gozk.ErrAuthFailed):
		fail.Classes = []error{locker.ErrPermission}
	default:
		fail.Classes = []error{locker.ErrUnavailable}
	}
	return fail
}

// errNoServer: no server of the ensemble accepts a connection.
var errNoServer = errors.New("no ZooKeeper server accepts a connection")

// clientLogger sends go-zookeeper's messages to slog at Debug level.
type clientLogger struct{ log *slog.Logger }

func (l clientLogger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("zk: client: " + fmt.Sprintf(format, args...))
	}
}
