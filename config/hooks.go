package config

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/internal/confighook"
	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/telemetry"
)

// lockctl's operator calls start what they start through these, so that
// they connect as Open does; see package confighook for why they are lent
// rather than exported.
func init() {
	confighook.Set(confighook.Hooks[Config, Option]{
		Prepare: func(ctx context.Context, fn string, cfg *Config, opts []Option) (*Config, confighook.Settings, error) {
			c, o, err := prepare(ctx, fn, cfg, opts)
			return c, confighook.Settings{Log: o.logger, Observer: o.observer}, err
		},
		StartEngine: func(ctx context.Context, c *Config, i int, log *slog.Logger, tel *telemetry.Telemetry) (locker.Engine, func() error, error) {
			s, err := startEngine(ctx, c, i, log, tel)
			return s.engine, s.closeClient, startError(c, i, err)
		},
		RedisClient: func(c *Config, i int) (goredis.UniversalClient, error) {
			return plainRedisClient(&c.Engines[i], engineField(i))
		},
		RedlockClients: func(c *Config, i int) ([]goredis.UniversalClient, func() error, error) {
			return redlockClients(&c.Engines[i], engineField(i), plainRedisClient)
		},
		EtcdClient: func(c *Config, i int) (*clientv3.Client, error) {
			return engineEtcdClient(&c.Engines[i], engineField(i), c.StartTimeout)
		},
		ZKConfig: func(c *Config, i int, log *slog.Logger) (zkconn.Config, error) {
			return zkEngineConn(&c.Engines[i], engineField(i), log)
		},
		PostgresPool: func(c *Config, i int) (*pgxpool.Pool, error) {
			return postgresPool(&c.Engines[i], engineField(i), c.StartTimeout)
		},
		CloseEtcd: closeEtcd,
		ExplainTLS: func(ctx context.Context, err error, c *Config, i int) error {
			e := &c.Engines[i]
			return explainTLS(ctx, err, e.Endpoints, &e.TLS, engineField(i)+".tls")
		},
		Unavailable: unavailable,
		CallerOr:    callerOr,
		DialSource:  dialSource,
		WriteFile:   writeFile,
	})
}

// plainRedisClient returns a client with the settings of a redis engine,
// but go-redis's retries, which Open's engines turn off for their breakers.
func plainRedisClient(e *Engine, field string) (goredis.UniversalClient, error) {
	o, err := redisOptions(e, field)
	if err != nil {
		return nil, err
	}
	return goredis.NewUniversalClient(o), nil
}

func engineField(i int) string { return fmt.Sprintf("engines[%d]", i) }
