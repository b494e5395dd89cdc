package config

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/switcher"
)

// Engine types.
const (
	TypeRedis    = "redis"
	TypeZK       = "zk"
	TypeEtcd     = "etcd"
	TypePostgres = "postgres"
	TypeRedlock  = "redlock"
)

// Source types.
const (
	SourceNone = "none"
	SourceFile = "file"
	SourceEtcd = "etcd"
	SourceZK   = "zk"
)

// defaultStartTimeout is the default of start_timeout; the other defaults
// are the switcher's and locker's own.
const defaultStartTimeout = 5 * time.Second

// defaultTTL is the default of lock.ttl: the locker's.
const defaultTTL = driver.DefaultTTL

// Config is the schema of a configuration file. Every field is optional
// unless it says otherwise; a zero value (a setting left out) means the
// default. Durations are Go duration strings ("30s", "1m30s"). The
// mapstructure tags are the keys in the file.
type Config struct {
	// Name names the switcher in logs. Default: "switcher".
	Name string `mapstructure:"name"`

	// Active is the engine that new acquisitions go to when Open returns.
	// With source.type "file", changing it in the file switches the running
	// switchers. Default: the first engine.
	Active string `mapstructure:"active"`

	// Engines are the lock engines in order: primary, secondary, ... The
	// breaker fails over to the next one in this order, and failback
	// returns to the first. Required: at least one.
	Engines []Engine `mapstructure:"engines"`

	// StartTimeout bounds how long Open waits for each engine, and for the
	// source, to answer; engines are started in parallel. An engine that
	// does not answer in time starts degraded, its breaker open, unless no
	// engine answers. Default: 5s.
	StartTimeout time.Duration `mapstructure:"start_timeout"`

	Lock       Lock       `mapstructure:"lock"`
	Breaker    Breaker    `mapstructure:"breaker"`
	Health     Health     `mapstructure:"health"`
	Failback   Failback   `mapstructure:"failback"`
	SafeSwitch SafeSwitch `mapstructure:"safe_switch"`
	Source     Source     `mapstructure:"source"`

	// file is the absolute path of the file Load read, "" for a Config
	// built in code. The file source watches it.
	file string
	// drill is the id of ForDrill's copy: the file source reads the file
	// through the same drill prefixes.
	drill string
	// secretsRead: the *_file secrets are in their settings.
	secretsRead bool
}

// Engine is one lock engine. Name, Type and the addresses of its type are
// required; the other settings are optional, and a setting of another type
// (servers on a redis engine, say) is an error.
type Engine struct {
	// Name identifies the engine in Lease.Engine, logs, active, and the
	// environment overrides. Required, unique.
	Name string `mapstructure:"name"`
	// Type is redis, zk, etcd, postgres or redlock. Required.
	Type string `mapstructure:"type"`
	// Prefix is the namespace of the engine's keys or nodes (for postgres:
	// the schema of its tables), so that applications sharing a server do
	// not collide. Default: the engine's ("orthrus" for redis, etcd,
	// postgres and redlock, "/orthrus" for zk).
	Prefix string `mapstructure:"prefix"`

	// Addrs are redis "host:port" addresses: one for a single node, several
	// for a Cluster, or the Sentinels when MasterName is set. For redlock,
	// the independent masters, at least 3 and each once, one client each
	// (an even count works but tolerates no more failures than one fewer,
	// which Open logs as a warning). Required for redis and redlock.
	Addrs []string `mapstructure:"addrs"`
	// DB is the redis database; it must be 0 with a Cluster. Default: 0.
	DB int `mapstructure:"db"`
	// MasterName is the Sentinel master name: with it, Addrs are Sentinels
	// and the client follows their failovers. Redis only.
	MasterName string `mapstructure:"master_name"`
	// SentinelUsername and SentinelPassword authenticate to the Sentinels,
	// with MasterName. Redis only.
	SentinelUsername string `mapstructure:"sentinel_username"`
	SentinelPassword string `mapstructure:"sentinel_password"`
	// SentinelPasswordFile names a file holding SentinelPassword instead.
	SentinelPasswordFile string `mapstructure:"sentinel_password_file"`
	// Fair makes the engine's mutexes strictly first come, first served
	// across processes, with a queue of waiters in Redis (redis.WithFair).
	// Give every engine sharing the prefix the same setting. It is also
	// what lets a redis engine rank waiters by lock.weight. Redis only.
	// Default: false.
	Fair bool `mapstructure:"fair"`

	// Servers are ZooKeeper "host:port" addresses. Required for zk.
	Servers []string `mapstructure:"servers"`
	// SessionTimeout is the ZooKeeper session timeout: how long a dead
	// process keeps its holds (locker TTLs do not apply to zk). zk only.
	// Default: 10s.
	SessionTimeout time.Duration `mapstructure:"session_timeout"`
	// Auth authenticates the ZooKeeper session; nodes then get the
	// creator-only ACL. zk only.
	Auth Auth `mapstructure:"auth"`

	// NodeTimeout bounds each request to one node of a redlock engine
	// (redlock.WithNodeTimeout); the engine's MinTTL is 100ms + twice it.
	// redlock only. Default: redlock.DefaultNodeTimeout (100ms).
	NodeTimeout time.Duration `mapstructure:"node_timeout"`

	// Endpoints are etcd client URLs or "host:port". Required for etcd.
	Endpoints []string `mapstructure:"endpoints"`

	// DSN is a PostgreSQL connection string, as a URL
	// ("postgres://app@db:5432/app?sslmode=verify-full") or key=value
	// pairs. Required for postgres, or DSNFile. Username, Password and TLS,
	// when set, override the DSN's. postgres only.
	DSN string `mapstructure:"dsn"`
	// DSNFile names a file holding DSN instead (a trailing newline is
	// dropped): a mounted secret. Not with dsn. postgres only.
	DSNFile string `mapstructure:"dsn_file"`

	// Username and Password authenticate to redis (ACL user; the password
	// alone for requirepass; for redlock, to every node), etcd or postgres.
	// Prefer the environment for the password:
	// ORTHRUS_ENGINES_<NAME>_PASSWORD. redis, redlock, etcd and postgres.
	Username string `mapstructure:"username"`
	Password string `mapstructure:"password"`
	// PasswordFile names a file holding the password (a trailing newline
	// is dropped), read by Load: a mounted secret instead of a password in
	// the file. Not with password. redis, redlock, etcd and postgres.
	PasswordFile string `mapstructure:"password_file"`
	// TLS secures the connections. redis, redlock (every node), etcd, zk
	// (the servers' secure
	// client port) and postgres (instead of the DSN's sslmode: TLS
	// required, the certificate verified unless insecure_skip_verify).
	TLS TLS `mapstructure:"tls"`

	// DialTimeout bounds one connection attempt (redis, etcd) or, for zk,
	// the wait for a session and every request across reconnections (the
	// engine's connect timeout). Default: the client's (redis and redlock
	// 5s, etcd
	// start_timeout, zk 2s with one server and 5s with several, postgres
	// start_timeout unless the DSN's connect_timeout says).
	DialTimeout time.Duration `mapstructure:"dial_timeout"`
}

// Auth is a ZooKeeper credential, for instance scheme "digest" with
// credentials "user:password".
type Auth struct {
	Scheme      string `mapstructure:"scheme"`
	Credentials string `mapstructure:"credentials"`
	// CredentialsFile names a file holding Credentials instead.
	CredentialsFile string `mapstructure:"credentials_file"`
}

// TLS configures TLS to a server.
type TLS struct {
	// Enabled turns TLS on; the other fields require it.
	Enabled bool `mapstructure:"enabled"`
	// CAFile is a PEM bundle of the CAs to trust. Default: the system's.
	CAFile string `mapstructure:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// mutual TLS; both or neither.
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
	// InsecureSkipVerify accepts any server certificate. Tests only.
	InsecureSkipVerify bool `mapstructure:"insecure_skip_verify"`
	// ServerName is the name to verify the server certificate against.
	// Default: the host of the address dialled.
	ServerName string `mapstructure:"server_name"`
}

// Lock holds the defaults of every Locker of the switcher Open returns.
type Lock struct {
	// TTL is how long a hold outlives its owner; the watchdog renews it
	// every TTL/3 (locker.WithTTL). ZooKeeper holds live as long as the
	// session instead (session_timeout). At least the largest MinTTL of
	// the engines: redis and zk 100ms, etcd 1s, redlock 100ms + twice its
	// node_timeout (300ms by default). Default: 30s.
	TTL time.Duration `mapstructure:"ttl"`
	// Weight ranks every Locker's waits among a name's waiters, heavier
	// first, 1 to 10 (locker.WithWeight); a caller's WithWeight overrides
	// it. redis with fair: true, postgres, and etcd and zk (mutexes and
	// read-write locks) rank waiters; redis without fair, an etcd or zk
	// semaphore and redlock refuse an acquisition with a weight above 1
	// (errors.ErrUnsupported). Default: 1 (0, unset, is 1).
	Weight int `mapstructure:"weight"`
}

// Breaker configures each engine's circuit breaker (switcher.WithBreaker).
type Breaker struct {
	// Failures is how many consecutive engine failures open the breaker.
	// Default: 3.
	Failures int `mapstructure:"failures"`
	// OpenTimeout is how long an open breaker stays open before a health
	// check may close it again. Default: 500ms.
	OpenTimeout time.Duration `mapstructure:"open_timeout"`
	// OutageWait is how long a waiting acquisition keeps retrying while
	// every engine's breaker is open before it fails with
	// locker.ErrUnavailable (switcher.WithOutageWait). Default: the
	// switcher's (5s).
	OutageWait time.Duration `mapstructure:"outage_wait"`
}

// Health configures the pings of every engine (switcher.WithHealthCheck).
type Health struct {
	// Every is the interval between two pings of an engine. Default: 100ms.
	Every time.Duration `mapstructure:"every"`
	// Timeout bounds one ping. Default: 300ms.
	Timeout time.Duration `mapstructure:"timeout"`
}

// Failback configures the return to the first engine (switcher.WithFailback).
type Failback struct {
	// After is how long the first engine must have been healthy before the
	// switcher returns to it. Default: 0, failback is manual.
	After time.Duration `mapstructure:"after"`
}

// SafeSwitch configures switcher.WithSafeSwitch.
type SafeSwitch struct {
	// MaxTTL is the window after a switch during which the new engine
	// grants a name only once the previous engine cannot hold it; it must
	// cover the longest TTL in use (at least lock.ttl). Default: 0, off.
	MaxTTL time.Duration `mapstructure:"max_ttl"`
}

// Source is the watched key that names the active engine.
type Source struct {
	// Type is none, file (the active key of this very file), etcd (a key
	// shared by a fleet) or zk (a node shared by a fleet). Default: file
	// for a configuration Load read, so that editing active moves the
	// running switchers; none for a Config built in code.
	Type string `mapstructure:"type"`

	// Endpoints, Key, Username, Password and TLS locate the etcd key.
	// Endpoints and Key are required for etcd.
	Endpoints []string `mapstructure:"endpoints"`
	Key       string   `mapstructure:"key"`
	Username  string   `mapstructure:"username"`
	Password  string   `mapstructure:"password"`
	TLS       TLS      `mapstructure:"tls"`
	// PasswordFile names a file holding Password instead.
	PasswordFile string `mapstructure:"password_file"`

	// Servers, Path, SessionTimeout and Auth locate the ZooKeeper node.
	// Servers and Path (absolute) are required for zk.
	Servers        []string      `mapstructure:"servers"`
	Path           string        `mapstructure:"path"`
	SessionTimeout time.Duration `mapstructure:"session_timeout"`
	Auth           Auth          `mapstructure:"auth"`

	// DialTimeout bounds one connection attempt to etcd.
	// Default: start_timeout.
	DialTimeout time.Duration `mapstructure:"dial_timeout"`
}

// File returns the absolute path of the file the Config was loaded from,
// or "" for a Config built in code.
func (c *Config) File() string { return c.file }

// Load reads the configuration file at path (YAML, TOML or JSON, by its
// extension: .yaml, .yml, .toml, .json), applies the environment overrides
// (see the package documentation), validates the result and fills in the
// defaults. A file that cannot be parsed or does not validate gives an
// error wrapping locker.ErrInvalidArgument, a *ValidationError naming each
// bad field; a file that cannot be read gives the fs error.
func Load(path string) (*Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	c, err := load(abs)
	if err != nil {
		return nil, err
	}
	c.file = abs
	return c, nil
}

func load(path string) (*Config, error) {
	ext := strings.ToLower(filepath.Ext(path))
	switch ext {
	case ".yaml", ".yml", ".toml", ".json":
	default:
		return nil, fmt.Errorf("config: %s: %w: unsupported format %q (want .yaml, .yml, .toml or .json)", path, locker.ErrInvalidArgument, ext)
	}
	v := viper.New()
	v.SetConfigFile(path)
	v.SetConfigType(ext[1:])
	if err := v.ReadInConfig(); err != nil {
		var pe viper.ConfigParseError
		if errors.As(err, &pe) {
			if se := syntaxError(path, ext[1:]); se != nil {
				return nil, fmt.Errorf("config: %s: %w: %w", path, locker.ErrInvalidArgument, se)
			}
			return nil, fmt.Errorf("config: %s: %w: %w", path, locker.ErrInvalidArgument, err)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("config: %w", err)
		}
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	c := new(Config)
	// Every check runs, whatever decode found, so that one round reports
	// every problem; a value of the wrong type is reported once, by decode.
	problems, mistyped := decode(v.AllSettings(), c)
	problems = append(problems, c.applyEnv(environ())...)
	if c.Source.Type == "" {
		// A file names its active engine: editing it moves the switcher.
		c.Source.Type = SourceFile
	}
	problems = append(problems, c.readSecretFiles()...)
	problems = append(problems, besides(c.validate(), mistyped)...)
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Field < problems[j].Field })
		return nil, &ValidationError{File: path, Fields: problems}
	}
	c.setDefaults()
	return c, nil
}

// setDefaults fills in the defaults of the settings left zero.
func (c *Config) setDefaults() {
	if c.Active == "" && len(c.Engines) > 0 {
		c.Active = c.Engines[0].Name
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = defaultStartTimeout
	}
	if c.Lock.TTL == 0 {
		c.Lock.TTL = defaultTTL
	}
	if c.Breaker.Failures == 0 {
		c.Breaker.Failures = switcher.DefaultFailures
	}
	if c.Breaker.OpenTimeout == 0 {
		c.Breaker.OpenTimeout = switcher.DefaultOpenTimeout
	}
	if c.Health.Every == 0 {
		c.Health.Every = switcher.DefaultHealthEvery
	}
	if c.Health.Timeout == 0 {
		c.Health.Timeout = switcher.DefaultHealthTimeout
	}
	if c.Source.Type == "" {
		c.Source.Type = SourceNone
	}
}

// clone returns a deep copy: Open keeps its own.
func (c *Config) clone() *Config {
	d := *c
	d.Engines = make([]Engine, len(c.Engines))
	for i, e := range c.Engines {
		e.Addrs = append([]string(nil), e.Addrs...)
		e.Servers = append([]string(nil), e.Servers...)
		e.Endpoints = append([]string(nil), e.Endpoints...)
		d.Engines[i] = e
	}
	d.Source.Endpoints = append([]string(nil), c.Source.Endpoints...)
	d.Source.Servers = append([]string(nil), c.Source.Servers...)
	return &d
}

// LockOptions returns the locker options the configuration sets for every
// Locker: locker.WithTTL(lock.ttl), and locker.WithWeight(lock.weight)
// when above 1. Failover.NewLocker applies them before the caller's own
// options, which take precedence.
func (c *Config) LockOptions() []locker.Option {
	ttl := c.Lock.TTL
	if ttl <= 0 {
		ttl = defaultTTL
	}
	opts := []locker.Option{locker.WithTTL(ttl)}
	if c.Lock.Weight > 1 {
		opts = append(opts, locker.WithWeight(c.Lock.Weight))
	}
	return opts
}
