package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// DefaultRequestTimeout bounds a round trip whose context has no sooner
// deadline.
const DefaultRequestTimeout = driver.DefaultRequestTimeout

// DefaultSchema is the schema that holds the engine's tables.
const DefaultSchema = "orthrus"

// MinTTL is the shortest TTL, or fixed lease, the engine accepts. Rows keep
// any TTL to the microsecond; the bound is the round trip: a hold must
// outlive the renewal that keeps it, sent every TTL/3 over a network.
const MinTTL = 100 * time.Millisecond

// Engine is the PostgreSQL lock engine. It implements locker.Engine.
type Engine struct {
	settings
	pool *pgxpool.Pool
	core *driver.Core
	sql  statements
	hub  *hub

	heldMu sync.Mutex
	held   map[int64]*driver.Hold // by seq: holds a notification may say are gone

	schemaTurn chan struct{} // a token: whose turn it is to look for the tables
	schemaOK   atomic.Bool   // the tables exist (found or created)

	life     context.Context // ended by Close
	stop     context.CancelFunc
	wg       sync.WaitGroup
	startMu  sync.Mutex
	started  bool // the listener and the reaper run
	closed   bool
	closeErr error
}

var (
	_ locker.Engine           = (*Engine)(nil)
	_ driver.Backend          = (*Engine)(nil)
	_ driver.Renewer          = (*Engine)(nil)
	_ driver.DeadlineHonourer = (*Engine)(nil)
	_ driver.MinTTLer         = (*Engine)(nil)
	_ driver.Weigher          = (*Engine)(nil)
)

type settings struct {
	name     string
	schema   string
	timeout  time.Duration
	create   bool
	log      *slog.Logger
	observer observe.Observer // nil: nothing observes
	reapEach time.Duration    // how often the reaper runs
	reapPast time.Duration    // how long past its expiry a row is reaped
	// beforeSettle, if not nil, runs before each try of a heavy
	// arrival's transaction (tests).
	beforeSettle func()
}

// Option configures an Engine.
type Option func(*settings) error

// check is an Option that applies set, or fails naming opt and why.
func check(ok bool, opt, why string, set func(*settings)) Option {
	return func(s *settings) error {
		if !ok {
			return fmt.Errorf("postgres: %s: %w: %s", opt, locker.ErrInvalidArgument, why)
		}
		set(s)
		return nil
	}
}

// WithName names the engine in Lease.Engine, logs and the switcher.
// Default: "postgres".
func WithName(name string) Option {
	return check(name != "", "WithName", "name is empty", func(s *settings) { s.name = name })
}

// schemaName is what WithSchema accepts: names the engine quotes (so
// upper case and '-' are kept, as lockctl's drill prefixes have them),
// short enough that the notification channel derived from one (schema +
// "_locks") stays within PostgreSQL's 63 bytes.
var schemaName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,57}$`)

// CheckSchema reports why schema cannot be an engine's schema, nil if it
// can: 1 to 57 letters, digits, '_' and '-', not starting with "pg_"
// (PostgreSQL keeps those for itself). config validates with it.
func CheckSchema(schema string) error {
	switch {
	case !schemaName.MatchString(schema):
		return fmt.Errorf("%q: want 1 to 57 letters, digits, '_' or '-'", schema)
	case strings.HasPrefix(schema, "pg_"):
		return fmt.Errorf("%q: names starting with \"pg_\" are PostgreSQL's", schema)
	}
	return nil
}

// WithSchema sets the schema of the engine's tables and sequence, so that
// applications sharing a database do not collide; see CheckSchema for
// what it may be. The engine quotes it: "App" and "app" are two schemas.
// Default: DefaultSchema.
func WithSchema(schema string) Option {
	err := CheckSchema(schema)
	why := ""
	if err != nil {
		why = err.Error()
	}
	return check(err == nil, "WithSchema", why, func(s *settings) { s.schema = schema })
}

// WithRequestTimeout bounds every round trip to the database, whatever the
// caller's context. Default: DefaultRequestTimeout.
func WithRequestTimeout(d time.Duration) Option {
	return check(d > 0, fmt.Sprintf("WithRequestTimeout(%v)", d), "timeout must be positive", func(s *settings) { s.timeout = d })
}

// WithoutSchemaCreation makes the engine expect its tables to exist (made
// by an administrator with SchemaSQL) and never create them, for a role
// that may not. Default: the engine creates what is missing on first use.
func WithoutSchemaCreation() Option {
	return func(s *settings) error {
		s.create = false
		return nil
	}
}

// WithLogger sets the logger for lost holds and connection trouble.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return check(l != nil, "WithLogger", "logger is nil", func(s *settings) { s.log = l })
}

// WithObserver reports acquisitions, releases and holds to o (package
// telemetry implements it). Default: none.
func WithObserver(o observe.Observer) Option {
	return check(o != nil, "WithObserver", "observer is nil", func(s *settings) { s.observer = o })
}

// renewChunk is the most holds one renewal UPDATE extends: 1024 rows take
// a few milliseconds of the server and lock only themselves.
const renewChunk = 1024

// Defaults of the reaper of expired rows.
const (
	reapEvery = time.Minute
	reapAfter = time.Minute
)

// New returns an engine over pool, which the engine never closes. New makes
// no request: the tables are looked for (and made) on first use, and Ping
// checks that the database answers.
func New(pool *pgxpool.Pool, opts ...Option) (*Engine, error) {
	if pool == nil {
		return nil, fmt.Errorf("postgres: New: %w: pool is nil", locker.ErrInvalidArgument)
	}
	s := settings{name: "postgres", schema: DefaultSchema, timeout: DefaultRequestTimeout, create: true,
		log: slog.Default(), reapEach: reapEvery, reapPast: reapAfter}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("postgres: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	s.log = s.log.With("engine", s.name)
	e := &Engine{settings: s, pool: pool, sql: newStatements(s.schema), hub: newHub(),
		held: make(map[int64]*driver.Hold), schemaTurn: make(chan struct{}, 1)}
	e.life, e.stop = context.WithCancel(context.Background())
	// One UPDATE renews its rows without holding up other names' requests,
	// so renewal goes in chunks of renewChunk rather than the Redis-sized
	// default: fewer round trips and wake-ups per hold.
	e.core = driver.NewCore(s.name, e, s.log, driver.ObservedBy(s.observer), driver.RenewChunk(renewChunk))
	return e, nil
}

// Name returns the engine's name.
func (e *Engine) Name() string { return e.name }

// Pool returns the pool the engine was built over. Nobody who calls Pool
// owns it.
func (e *Engine) Pool() *pgxpool.Pool { return e.pool }

// Schema returns the schema of the engine's tables.
func (e *Engine) Schema() string { return e.schema }

// MinTTL implements driver.MinTTLer.
func (e *Engine) MinTTL() time.Duration { return MinTTL }

// Weighs implements driver.Weigher: waiters are granted heaviest first
// (locker.WithWeight), in their order of arrival within a weight; see the
// package doc for what a weight costs.
func (e *Engine) Weighs() error { return nil }

// HonoursDeadlines implements driver.DeadlineHonourer: pgx ends a request
// at its context's deadline (it sets the deadline on the socket).
func (e *Engine) HonoursDeadlines() bool { return true }

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

// Ping checks that the database answers and that the engine's tables are
// there (or made), within ctx and the request timeout.
func (e *Engine) Ping(ctx context.Context) error {
	if e.isClosed() {
		return fmt.Errorf("postgres: ping: %w", locker.ErrClosed)
	}
	rctx, cancel := e.bound(ctx)
	defer cancel()
	if err := e.ready(rctx); err != nil {
		return e.fail("ping", "", err)
	}
	if _, err := e.pool.Exec(rctx, "SELECT 1"); err != nil {
		return e.fail("ping", "", err)
	}
	return nil
}

// Close releases the holds still held (their Lost channels close), makes
// waiting acquisitions return ErrClosed and stops the listener and the
// reaper. It does not close the pool. It is idempotent, and bounded by
// driver.DefaultReleaseTimeout.
func (e *Engine) Close() error {
	e.startMu.Lock()
	if e.closed {
		e.startMu.Unlock()
		return e.closeErr
	}
	e.closed = true
	e.stop()
	e.startMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), driver.DefaultReleaseTimeout)
	defer cancel()
	err := e.core.Close(ctx)
	e.wg.Wait()
	e.startMu.Lock()
	e.closeErr = err
	e.startMu.Unlock()
	return err
}

func (e *Engine) isClosed() bool {
	e.startMu.Lock()
	defer e.startMu.Unlock()
	return e.closed
}

// start runs the listener and the reaper, once, on the first acquisition
// (New makes no request), and reports false once the engine is closed:
// one look at the engine's state per acquisition.
func (e *Engine) start() bool {
	e.startMu.Lock()
	defer e.startMu.Unlock()
	if e.started || e.closed {
		return !e.closed
	}
	e.started = true
	e.wg.Add(2)
	go func() { defer e.wg.Done(); e.listen() }()
	go func() { defer e.wg.Done(); e.reap() }()
	return true
}

// bound limits one round trip to the request timeout.
func (e *Engine) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.timeout)
}

// cleanupContext bounds a cleanup that outlives the caller's context.
func (e *Engine) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), e.timeout)
}

// ready makes sure the tables exist: looked for once, and created when
// missing unless WithoutSchemaCreation; a failure is tried again by the
// next request.
func (e *Engine) ready(ctx context.Context) error {
	if e.schemaOK.Load() {
		return nil
	}
	// A turn taken within ctx: a database that does not answer the one
	// looking must not hold the others past their contexts.
	select {
	case e.schemaTurn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-e.schemaTurn }()
	if e.schemaOK.Load() {
		return nil
	}
	var schema, tables bool
	if err := e.pool.QueryRow(ctx, e.sql.exists).Scan(&schema, &tables); err != nil {
		return err
	}
	if !tables {
		if !e.create {
			return fmt.Errorf("%w: schema %q has no lock tables and WithoutSchemaCreation forbids making them (see SchemaSQL)", errNoSchema, e.schema)
		}
		stmts := SchemaSQL(e.schema)
		if schema {
			// CREATE SCHEMA checks the right to create schemas before it
			// looks for this one: a role given only its own schema fails.
			_, stmts, _ = strings.Cut(stmts, "\n")
		}
		// One simple-protocol call: one implicit transaction, serialised
		// by an advisory lock, since concurrent CREATE ... IF NOT EXISTS
		// can still collide in the catalogue.
		if _, err := e.pool.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('orthrus schema', 0));\n"+stmts); err != nil {
			return err
		}
	}
	e.schemaOK.Store(true)
	return nil
}

// errNoSchema: the tables are missing and may not be made.
var errNoSchema = errors.New("lock tables missing")

// Internal causes, mapped to the locker sentinels by fail.
var (
	errGone     = errors.New("row deleted or expired")
	errMismatch = fmt.Errorf("%w: the stored count differs", locker.ErrPermitsMismatch)
)

// fail wraps an error once, at the edge of the engine, with its class.
func (e *Engine) fail(op, name string, err error) error {
	fail := &locker.EngineError{Engine: "postgres", Op: op, Name: name, Err: err}
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, locker.ErrClosed):
		fail.Classes, fail.Err = []error{locker.ErrClosed}, nil
	case errors.Is(err, locker.ErrInvalidName):
		fail.Classes = []error{locker.ErrInvalidName}
	case errors.Is(err, locker.ErrNotHeld):
		fail.Classes, fail.Err = []error{locker.ErrNotHeld}, nil
	case errors.Is(err, errGone):
		fail.Classes = []error{locker.ErrLockLost}
	case errors.Is(err, locker.ErrPermitsMismatch):
		// The caller's mistake, not the engine failing: no breaker counts it.
		fail.Classes = []error{locker.ErrPermitsMismatch}
	case errors.As(err, &pgErr) && isPermission(pgErr):
		fail.Classes = []error{locker.ErrPermission}
	case errors.Is(err, errNoSchema):
		fail.Classes = []error{locker.ErrPermission}
	case refused(err):
		fail.Classes = []error{locker.ErrUnavailable, locker.ErrRefused}
	default:
		fail.Classes = []error{locker.ErrUnavailable}
	}
	return fail
}

// isPermission tells a refused role (insufficient_privilege, a failed
// login) from an engine failing.
func isPermission(err *pgconn.PgError) bool {
	switch err.Code {
	case "42501", "28000", "28P01":
		return true
	}
	return false
}

// refused tells a server that is certainly down: it refused or reset the
// connection, closed it under a request or while the pool kept it (a
// killed server's sockets; a connection our own deadline closed is never
// handed out again), or said it is going down or not up (SQLSTATE
// 57P01-57P03: a killed postmaster's backends say so as they exit).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57P")
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}
