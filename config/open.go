package config

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/observe"
	"github.com/orthrus-go/orthrus/switcher"
	"github.com/orthrus-go/orthrus/telemetry"
)

// Failover is what Open returns: the running *switcher.Switcher, failing
// over between the configured engines, with the configured lock defaults;
// it also owns the clients and the watch Open started. It implements
// locker.Engine.
type Failover struct {
	*switcher.Switcher

	source   switcher.Source
	lockOpts []locker.Option
	closers  []func() error // after the switcher, in order

	closeOnce sync.Once
	closeErr  error
}

var _ locker.Engine = (*Failover)(nil)

// NewLocker returns a Locker for name with the configuration's lock
// defaults (Config.LockOptions); opts come after them and take precedence.
func (s *Failover) NewLocker(name string, opts ...locker.Option) (locker.Handle, error) {
	return s.Switcher.NewLocker(name, s.withDefaults(opts)...)
}

// NewRWLock returns a read-write lock for name with the configuration's
// lock defaults, as NewLocker does.
func (s *Failover) NewRWLock(name string, opts ...locker.Option) (locker.RWLock, error) {
	return s.Switcher.NewRWLock(name, s.withDefaults(opts)...)
}

// NewSemaphore returns a semaphore of permits on name with the
// configuration's lock defaults, as NewLocker does.
func (s *Failover) NewSemaphore(name string, permits int, opts ...locker.Option) (locker.Semaphore, error) {
	return s.Switcher.NewSemaphore(name, permits, s.withDefaults(opts)...)
}

// withDefaults puts the configuration's lock defaults before opts.
func (s *Failover) withDefaults(opts []locker.Option) []locker.Option {
	all := make([]locker.Option, 0, len(s.lockOpts)+len(opts))
	return append(append(all, s.lockOpts...), opts...)
}

// Source returns the watched source, nil with source.type none. The file,
// etcd and zk sources implement switcher.Setter: Set flips every switcher
// watching the same file, key or node.
func (s *Failover) Source() switcher.Source { return s.source }

// Close stops everything Open started: the switcher with its health
// checks and watch, the engines (releasing the holds still held), then the
// clients and connections Open dialled. It is idempotent and returns the
// first call's result.
func (s *Failover) Close() error {
	s.closeOnce.Do(func() {
		errs := []error{s.Switcher.Close()}
		for _, c := range s.closers {
			errs = append(errs, c())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

type openSettings struct {
	logger       *slog.Logger
	switcherOpts []switcher.Option
	telemetry    []telemetry.Option // nil: no instrumentation (config/telemetry.go)
}

// Option configures Open.
type Option func(*openSettings) error

// WithLogger sets the logger of the engines, the switcher and the source.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *openSettings) error {
		if l == nil {
			return fmt.Errorf("config: WithLogger: %w: logger is nil", locker.ErrInvalidArgument)
		}
		s.logger = l
		return nil
	}
}

// WithSwitcherOptions adds switcher options after those the configuration
// sets, for what a file cannot say (switcher.OnSwitch) or to override it.
func WithSwitcherOptions(opts ...switcher.Option) Option {
	return func(s *openSettings) error {
		s.switcherOpts = append(s.switcherOpts, opts...)
		return nil
	}
}

// Open dials the engines of cfg in parallel and pings each, builds the
// switcher with its breakers and health checks, starts the configured
// watch and makes the active engine current, so that the first Locker
// goes where the configuration says. With an etcd or zk source, the
// shared key's value, when it names a known engine, wins over active.
//
// Engines that do not answer within start_timeout start degraded, with
// their breaker open and a WARN each, while at least one engine answers
// (see "Degraded start" in the package doc); when none does, Open fails
// with an error naming each engine and wrapping locker.ErrUnavailable. The
// source must answer within start_timeout. An invalid cfg fails with a
// *ValidationError. On error Open closes whatever it had started. cfg is
// copied: later changes to it have no effect.
//
// With a redis or redlock engine, Open also sends go-redis's own log lines to its
// logger (goredis.SetLogger with redis.SlogLogger): go-redis has one logger
// per process, so the latest Open's logger serves every go-redis client.
func Open(ctx context.Context, cfg *Config, opts ...Option) (_ *Failover, err error) {
	c, o, err := prepare(ctx, "Open", cfg, opts)
	if err != nil {
		return nil, err
	}
	if c.Source.Type == SourceFile && c.file == "" {
		return nil, &ValidationError{Fields: []*FieldError{{Field: "source.type",
			Msg: `"file" watches the file the configuration was loaded from: use a Config from Load`}}}
	}
	log := o.logger
	tel, err := o.observer()
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(c.Engines, func(e Engine) bool { return e.Type == TypeRedis || e.Type == TypeRedlock }) {
		// go-redis logs past the engines (a failed dial, per connection
		// and attempt) to stderr unless told otherwise, process-wide.
		goredis.SetLogger(redis.SlogLogger(log))
	}

	var cleanup []func() error // on failure, run in reverse
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				_ = cleanup[i]()
			}
		}
	}()

	started, errs := startEngines(ctx, c, log, tel)
	engines := make([]locker.Engine, 0, len(started))
	var clients []func() error
	for _, s := range started {
		if s.engine != nil {
			cleanup = append(cleanup, s.closeClient, s.engine.Close)
			engines = append(engines, s.engine)
			clients = append(clients, s.closeClient)
		}
	}
	if err := degraded(ctx, started, errs); err != nil {
		return nil, err
	}

	src, initial, closeSource, err := startSource(ctx, c, engines, log)
	if err != nil {
		return nil, callerOr(ctx, err)
	}
	cleanup = append(cleanup, closeSource)
	sopts := slices.Concat(switcherOptions(c, log, initial, src, tel), downAtStart(c, errs, src, initial), o.switcherOpts)
	sw, err := switcher.New(engines, sopts...)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	// The switcher owns the engines now.
	closers := slices.Concat(clients, []func() error{closeSource})
	cleanup = slices.Concat(closers, []func() error{sw.Close})
	return &Failover{
		Switcher: sw,
		source:   src,
		lockOpts: c.LockOptions(),
		closers:  closers,
	}, nil
}

// downAtStart marks the engines that failed to start (errs, by index) as
// down, and tells a file source when the engine it names is one of them.
func downAtStart(c *Config, errs []error, src switcher.Source, initial string) []switcher.Option {
	var opts []switcher.Option
	for i, err := range errs {
		if err == nil {
			continue
		}
		opts = append(opts, switcher.WithDownAtStart(c.Engines[i].Name, err))
		if f, ok := src.(*fileSource); ok && c.Engines[i].Name == initial {
			f.startedElsewhere()
		}
	}
	return opts
}

// switcherOptions returns the switcher options the configuration sets,
// starting on initial, watching src (nil for none), observed by tel (nil
// for none).
func switcherOptions(c *Config, log *slog.Logger, initial string, src switcher.Source, tel *telemetry.Telemetry) []switcher.Option {
	sopts := []switcher.Option{
		switcher.WithLogger(log),
		switcher.WithStart(initial),
		switcher.WithBreaker(uint32(min(int64(c.Breaker.Failures), math.MaxUint32)), c.Breaker.OpenTimeout),
		switcher.WithHealthCheck(c.Health.Every, c.Health.Timeout),
	}
	if c.Name != "" {
		sopts = append(sopts, switcher.WithName(c.Name))
	}
	if c.Breaker.OutageWait > 0 {
		sopts = append(sopts, switcher.WithOutageWait(c.Breaker.OutageWait))
	}
	if c.Failback.After > 0 {
		sopts = append(sopts, switcher.WithFailback(c.Failback.After))
	}
	if c.SafeSwitch.MaxTTL > 0 {
		sopts = append(sopts, switcher.WithSafeSwitch(c.SafeSwitch.MaxTTL))
	}
	if src != nil {
		sopts = append(sopts, switcher.WithSource(src))
	}
	if tel != nil {
		sopts = append(sopts, switcher.WithObserver(tel))
	}
	return sopts
}

// degraded decides whether Open can go on with the engines that failed to
// start (errs, one per engine, nil for those that answered): it can while
// one engine answered and every failure is an outage of an engine that was
// built, which the health checks retry. A refused identity, a bad setting,
// an engine that could not be built, or the caller giving up fail Open, as
// does no engine answering: then the error names each engine and why.
func degraded(ctx context.Context, built []started, errs []error) error {
	if err := errors.Join(errs...); err == nil {
		return nil
	} else if ctx.Err() != nil || !slices.Contains(errs, nil) {
		return callerOr(ctx, err)
	}
	var fatal []error
	for i, err := range errs {
		// Retrying an engine that refuses the credentials, or was
		// configured wrong, would never close its breaker; one that
		// could not be built (etcd authenticates while it builds its
		// client) has nothing to retry: say so now.
		if err != nil && (built[i].engine == nil || errors.Is(err, locker.ErrPermission) || !errors.Is(err, locker.ErrUnavailable)) {
			fatal = append(fatal, err)
		}
	}
	return errors.Join(fatal...)
}

// callerOr returns the caller's giving up, when that is why Open failed,
// rather than engines that look unavailable.
func callerOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("config: Open: %w (%w)", ctx.Err(), err)
	}
	return err
}

// started is one engine Open started, with the close of the client it
// dialled for it.
type started struct {
	engine      locker.Engine
	closeClient func() error
}

func noop() error { return nil }

// startEngines starts every engine in parallel, each within start_timeout,
// and returns, per engine, the engine built and why it did not answer
// (nil when it did). An engine that was built but did not answer is
// returned too, for Open to start degraded: its clients reconnect on their
// own. The caller closes what was built.
func startEngines(ctx context.Context, c *Config, log *slog.Logger, tel *telemetry.Telemetry) ([]started, []error) {
	out := make([]started, len(c.Engines))
	errs := make([]error, len(c.Engines))
	var wg sync.WaitGroup
	for i := range c.Engines {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
			defer cancel()
			out[i], errs[i] = buildEngine(c, i, log, tel)
			if errs[i] == nil {
				errs[i] = pingEngine(sctx, c, i, out[i].engine)
			}
			errs[i] = startError(c, i, errs[i])
		})
	}
	wg.Wait()
	return out, errs
}

// startError names engine i of c in err, a failure to start it, and makes
// sure a failure to reach its server wraps ErrUnavailable; nil stays nil.
// It says when the engine uses TLS: a server that refuses the handshake
// (TLS 1.3 without the client certificate it requires) may surface as a
// bare connection reset, which names nothing.
func startError(c *Config, i int, err error) error {
	if err == nil {
		return nil
	}
	e := &c.Engines[i]
	kind := e.Type
	if e.TLS.Enabled {
		kind += ", tls"
	}
	return fmt.Errorf("config: engines[%d] %q (%s): %w", i, e.Name, kind, unavailable(err))
}

// unavailable makes sure a failure to reach a server wraps ErrUnavailable.
func unavailable(err error) error {
	if err, denied := permissionDenied(err); denied {
		return err
	}
	if errors.Is(err, locker.ErrUnavailable) || errors.Is(err, locker.ErrInvalidArgument) {
		return err
	}
	return fmt.Errorf("%w: %w", locker.ErrUnavailable, err)
}

// startEngine starts and pings engine i of c, with a client dialled for it;
// when the engine does not answer, it closes what it built.
func startEngine(ctx context.Context, c *Config, i int, log *slog.Logger, tel *telemetry.Telemetry) (started, error) {
	s, err := buildEngine(c, i, log, tel)
	if err != nil {
		return started{}, err
	}
	if err := pingEngine(ctx, c, i, s.engine); err != nil {
		return started{}, errors.Join(err, closeQuietly(s.engine.Close, s.closeClient))
	}
	return s, nil
}

// buildEngine builds engine i of c, with a client dialled for it, without
// waiting for its server where the client allows: see the build functions.
func buildEngine(c *Config, i int, log *slog.Logger, tel *telemetry.Telemetry) (started, error) {
	e := &c.Engines[i]
	field := fmt.Sprintf("engines[%d]", i)
	switch e.Type {
	case TypeRedis:
		return buildRedis(e, field, log, tel)
	case TypeZK:
		return buildZK(e, field, log, tel)
	case TypeEtcd:
		return buildEtcd(e, field, c.StartTimeout, log, tel)
	case TypePostgres:
		return buildPostgres(e, field, c.StartTimeout, log, tel)
	case TypeRedlock:
		return buildRedlock(e, field, log, tel)
	}
	return started{}, fmt.Errorf("%w: unknown engine type %q", locker.ErrInvalidArgument, e.Type)
}

// pingEngine checks that eng, engine i of c, answers within ctx.
func pingEngine(ctx context.Context, c *Config, i int, eng locker.Engine) error {
	err := eng.Ping(ctx)
	if e := &c.Engines[i]; err != nil && e.Type == TypeEtcd {
		err = explainTLS(ctx, err, e.Endpoints, &e.TLS, fmt.Sprintf("engines[%d].tls", i))
	}
	return err
}

// buildRedis builds a redis engine; go-redis dials on first use, so this
// never waits for the server.
func buildRedis(e *Engine, field string, log *slog.Logger, tel *telemetry.Telemetry) (started, error) {
	client, err := engineRedisClient(e, field)
	if err != nil {
		return started{}, err
	}
	opts := engineOptions(e, log, tel, redis.WithName, redis.WithLogger, redis.WithObserver, redis.WithPrefix)
	if e.Fair {
		opts = append(opts, redis.WithFair())
	}
	eng, err := redis.New(client, opts...)
	if err != nil {
		_ = client.Close()
		return started{}, err
	}
	return started{eng, client.Close}, nil
}

// engineOptions returns the options of e's engine that every type takes,
// in its own Option type: its name, logger, observer (tel, when not nil)
// and prefix (when set).
func engineOptions[O any](e *Engine, log *slog.Logger, tel *telemetry.Telemetry,
	name func(string) O, logger func(*slog.Logger) O, observer func(observe.Observer) O, prefix func(string) O,
) []O {
	opts := []O{name(e.Name), logger(log)}
	if tel != nil {
		opts = append(opts, observer(tel))
	}
	if e.Prefix != "" {
		opts = append(opts, prefix(e.Prefix))
	}
	return opts
}

// redisOptions returns the go-redis options of a redis engine.
func redisOptions(e *Engine, field string) (*goredis.UniversalOptions, error) {
	tlsConf, err := e.TLS.config(field + ".tls")
	if err != nil {
		return nil, err
	}
	return &goredis.UniversalOptions{
		Addrs: e.Addrs, DB: e.DB, Username: e.Username, Password: e.Password,
		MasterName: e.MasterName, SentinelUsername: e.SentinelUsername, SentinelPassword: e.SentinelPassword,
		TLSConfig: tlsConf, DialTimeout: e.DialTimeout, ContextTimeoutEnabled: true,
	}, nil
}

// engineRedisClient returns the client of a redis engine.
func engineRedisClient(e *Engine, field string) (goredis.UniversalClient, error) {
	o, err := redisOptions(e, field)
	if err != nil {
		return nil, err
	}
	// One failure surfaces at once, for the switcher's breaker:
	// go-redis would otherwise dial five times and retry a command
	// three times, with backoffs, before it reports a dead server.
	// A stale pooled connection needs no retry: the pool checks
	// idle connections before it hands them out.
	o.DialerRetries = 1
	o.MaxRetries = -1
	return goredis.NewUniversalClient(o), nil
}

func buildZK(e *Engine, field string, log *slog.Logger, tel *telemetry.Telemetry) (started, error) {
	opts, err := zkOptions(e, field, log)
	if err != nil {
		return started{}, err
	}
	if tel != nil {
		opts = append(opts, zk.WithObserver(tel))
	}
	eng, err := zk.New(e.Servers, opts...)
	if err != nil {
		return started{}, err
	}
	return started{eng, noop}, nil
}

// zkOptions returns the options of a zk engine: the engine dials its own
// connection, with the settings of zkEngineConn.
func zkOptions(e *Engine, field string, log *slog.Logger) ([]zk.Option, error) {
	conn, err := zkEngineConn(e, field, log)
	if err != nil {
		return nil, err
	}
	opts := []zk.Option{zk.WithName(e.Name), zk.WithLogger(log),
		zk.WithSessionTimeout(conn.SessionTimeout), zk.WithConnectTimeout(conn.ConnectTimeout),
		// The session is waited for by Open's ping, within start_timeout;
		// an engine whose ensemble is down then starts degraded, and
		// gets its session when the ensemble is back.
		zk.WithLazyConnect()}
	if e.Prefix != "" {
		opts = append(opts, zk.WithPrefix(e.Prefix))
	}
	for _, a := range conn.Auth {
		opts = append(opts, zk.WithAuth(a.Scheme, string(a.Cred)))
	}
	if conn.TLS != nil {
		opts = append(opts, zk.WithTLS(conn.TLS))
	}
	return opts, nil
}

// zkEngineConn returns the connection settings of a zk engine: its
// servers, timeouts (the zk engine's defaults for those left out),
// credentials and TLS.
func zkEngineConn(e *Engine, field string, log *slog.Logger) (zkconn.Config, error) {
	tlsConf, err := e.TLS.config(field + ".tls")
	if err != nil {
		return zkconn.Config{}, err
	}
	return zkConnConfig(e.Servers, e.SessionTimeout, e.DialTimeout, e.Auth, tlsConf, field, log)
}

// zkConnConfig returns the settings of a ZooKeeper connection, of an
// engine or of the source, with the zk engine's default for a timeout left
// zero.
func zkConnConfig(servers []string, session, connect time.Duration, auth Auth, tlsConf *tls.Config, field string, log *slog.Logger) (zkconn.Config, error) {
	defaultConnect := zk.DefaultConnectTimeout
	if len(servers) > 1 {
		defaultConnect = zk.DefaultClusterConnectTimeout
	}
	cfg := zkconn.Config{
		Servers:        servers,
		SessionTimeout: orDefault(session, zk.DefaultSessionTimeout),
		ConnectTimeout: orDefault(connect, defaultConnect),
		TLS:            tlsConf,
		Logger:         log,
	}
	if auth.Scheme != "" {
		c, err := zkconn.NewCredential(auth.Scheme, auth.Credentials)
		if err != nil {
			return cfg, fmt.Errorf("%s.auth: %w: %v", field, locker.ErrInvalidArgument, err)
		}
		cfg.Auth = []zkconn.Credential{c}
	}
	return cfg, nil
}

// buildEtcd builds an etcd engine. The client connects in the background
// (grpc.NewClient), except that with a username it authenticates first,
// within its dial timeout.
func buildEtcd(e *Engine, field string, startTimeout time.Duration, log *slog.Logger, tel *telemetry.Telemetry) (started, error) {
	client, err := engineEtcdClient(e, field, startTimeout)
	if err != nil {
		return started{}, err
	}
	closeClient := func() error { return closeEtcd(client) }
	opts := engineOptions(e, log, tel, etcd.WithName, etcd.WithLogger, etcd.WithObserver, etcd.WithPrefix)
	eng, err := etcd.New(client, opts...)
	if err != nil {
		_ = closeClient()
		return started{}, err
	}
	return started{eng, closeClient}, nil
}

// engineEtcdClient returns the client of an etcd engine; its dial timeout
// defaults to start_timeout.
func engineEtcdClient(e *Engine, field string, startTimeout time.Duration) (*clientv3.Client, error) {
	return etcdClient(e.Endpoints, e.Username, e.Password, &e.TLS, field, orDefault(e.DialTimeout, startTimeout))
}

// closeQuietly runs the closes of a failed start; their errors add nothing
// to the start's.
func closeQuietly(closes ...func() error) error {
	for _, c := range closes {
		_ = c()
	}
	return nil
}

// etcdClient returns a client that reconnects within a second or two after
// an outage (gRPC's default backoff grows to two minutes), and that drops a
// connection whose server stopped answering: gRPC keepalive pings, at
// gRPC's shortest client interval (10s, above etcd's default
// --grpc-keepalive-min-time of 5s), each given 3s.
func etcdClient(endpoints []string, user, password string, t *TLS, field string, dial time.Duration) (*clientv3.Client, error) {
	tlsConf, err := t.config(field + ".tls")
	if err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		Username:             user,
		Password:             password,
		TLS:                  tlsConf,
		DialTimeout:          dial,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		Logger:               zap.NewNop(),
		DialOptions: append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: min(dial, 5*time.Second),
		})}, etcdServerName(tlsConf)...),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %q: %w", endpoints, err)
	}
	return client, nil
}

// closeEtcd closes an etcd client; the cancellation of its own context is
// how it closes, not an error.
func closeEtcd(c *clientv3.Client) error {
	if err := c.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// startSource dials the configured source and reads the engine to start
// with: the shared key's value when it names a known engine, else active.
func startSource(ctx context.Context, c *Config, engines []locker.Engine, log *slog.Logger) (switcher.Source, string, func() error, error) {
	if t := c.Source.Type; t != SourceFile && t != SourceEtcd && t != SourceZK {
		return nil, c.Active, noop, nil
	}
	sctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	defer cancel()
	h, err := dialSource(sctx, c, log)
	if err != nil {
		return nil, "", nil, err
	}
	if h.Kind == SourceFile {
		// The file's active engine is c.Active already.
		return h.Switcher, c.Active, h.Close, nil
	}
	data, err := readRaw(sctx, h)
	if err != nil {
		_ = h.Close()
		return nil, "", nil, err
	}
	return h.Switcher, initialEngine(c, engines, string(data), h.Kind+":"+h.Where, log), h.Close, nil
}

// initialEngine returns the engine a source's value names when it is one
// of engines, else the configuration's active engine.
func initialEngine(c *Config, engines []locker.Engine, value, where string, log *slog.Logger) string {
	v := strings.TrimSpace(value)
	if v == "" {
		return c.Active
	}
	if slices.ContainsFunc(engines, func(e locker.Engine) bool { return e.Name() == v }) {
		return v
	}
	log.Warn("config: the source names an unknown engine; starting on active", "source", where, "value", v, "active", c.Active)
	return c.Active
}

// zkConn connects to the ensemble of s and waits for a session within ctx
// and timeout; its Close waits for every goroutine it started.
func zkConn(ctx context.Context, s *Source, timeout time.Duration, log *slog.Logger) (*zkconn.Conn, error) {
	cfg, err := zkConnConfig(s.Servers, s.SessionTimeout, timeout, s.Auth, nil, "source", log)
	if err != nil {
		return nil, err
	}
	return zkconn.Dial(ctx, cfg)
}
