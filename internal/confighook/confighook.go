// Package confighook lends lockctl's operator calls (Dial, DialClient,
// DialSource, drill scopes: cmd/lockctl/internal/cfgops) the means by which
// package config reaches servers, so that they start engines, clients and
// the source exactly as config.Open does without those means being part of
// config's API. config cannot export them, and they cannot live below
// config, since they work on its schema; so config fills Hooks in once, in
// its init, and cfgops reads them. This is grpc-go's internal-hook pattern.
package confighook

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
	"github.com/orthrus-go/orthrus/telemetry"
)

// Settings are what the options of a call (config.Option) asked for.
type Settings struct {
	Log *slog.Logger
	// Observer returns the telemetry the options ask for, nil without.
	Observer func() (*telemetry.Telemetry, error)
}

// Source is the configured source dialled on its own.
type Source struct {
	// Kind is file, etcd or zk; Where the file's path, the key or the node.
	Kind, Where string
	// Switcher is the source as the switcher uses it.
	Switcher switcher.Source
	// Get reads the raw value; exists is false for a missing key or node.
	Get func(ctx context.Context) (data []byte, exists bool, version uint64, err error)
	// Etcd and ZK are the connections of an etcd and a zk source.
	Etcd *clientv3.Client
	ZK   *zkconn.Conn
	// Close closes what dialling opened.
	Close func() error
}

// Hooks are config's means, over its Config C and Option O. Engine i is
// C's Engines[i]; errors name it as config's own do.
type Hooks[C, O any] struct {
	// Prepare checks ctx, cfg and opts for the call fn (named in errors)
	// and returns a validated copy of cfg, secrets read, defaults set.
	Prepare func(ctx context.Context, fn string, cfg *C, opts []O) (*C, Settings, error)
	// StartEngine builds and pings engine i within ctx as Open does, and
	// returns it with the close of its client; the error names engine i.
	StartEngine func(ctx context.Context, c *C, i int, log *slog.Logger, tel *telemetry.Telemetry) (locker.Engine, func() error, error)
	// RedisClient, EtcdClient and ZKConfig give the client of engine i
	// as Open dials it (a Redis client keeps go-redis's retries).
	RedisClient func(c *C, i int) (goredis.UniversalClient, error)
	EtcdClient  func(c *C, i int) (*clientv3.Client, error)
	ZKConfig    func(c *C, i int, log *slog.Logger) (zkconn.Config, error)
	// RedlockClients gives one client per node of redlock engine i, each
	// as RedisClient makes a redis engine's client of that one address,
	// and the close of them all.
	RedlockClients func(c *C, i int) ([]goredis.UniversalClient, func() error, error)
	// PostgresPool gives the connection pool of postgres engine i as Open
	// makes it; the caller closes it.
	PostgresPool func(c *C, i int) (*pgxpool.Pool, error)
	// CloseEtcd closes an etcd client, its own cancellation no error.
	CloseEtcd func(*clientv3.Client) error
	// ExplainTLS adds to err, a failed first contact with etcd engine i,
	// why a TLS handshake fails, if it does.
	ExplainTLS func(ctx context.Context, err error, c *C, i int) error
	// Unavailable makes a failure to reach a server wrap
	// locker.ErrUnavailable (or ErrPermission for refused credentials).
	Unavailable func(error) error
	// CallerOr puts ctx's error first when the caller gave up.
	CallerOr func(ctx context.Context, err error) error
	// DialSource connects to the source of c, within ctx.
	DialSource func(ctx context.Context, c *C, log *slog.Logger) (*Source, error)
	// WriteFile replaces the configuration file at path with data,
	// atomically, as the file source's Set writes it.
	WriteFile func(path string, data []byte) error
}

// hooks is written once, by config's init, before any reader can run.
var hooks any

// Set is for package config's init.
func Set[C, O any](h Hooks[C, O]) { hooks = h }

// Get returns the hooks config set; C and O must be config's types.
func Get[C, O any]() Hooks[C, O] { return hooks.(Hooks[C, O]) }
