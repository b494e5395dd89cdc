package config

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orthrus-go/orthrus/engines/postgres"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/telemetry"
)

// buildPostgres builds a postgres engine over a pool of its own; the pool
// dials on first use, so this never waits for the server.
func buildPostgres(e *Engine, field string, startTimeout time.Duration, log *slog.Logger, tel *telemetry.Telemetry) (started, error) {
	pool, err := postgresPool(e, field, startTimeout)
	if err != nil {
		return started{}, err
	}
	closePool := func() error { pool.Close(); return nil }
	opts := engineOptions(e, log, tel, postgres.WithName, postgres.WithLogger, postgres.WithObserver, postgres.WithSchema)
	eng, err := postgres.New(pool, opts...)
	if err != nil {
		pool.Close()
		return started{}, err
	}
	return started{eng, closePool}, nil
}

// postgresPool returns the connection pool of a postgres engine: the
// DSN's settings, with username, password and TLS overriding it, and a
// connect timeout of dial_timeout, else the DSN's, else start_timeout.
func postgresPool(e *Engine, field string, startTimeout time.Duration) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.DSN)
	if err != nil {
		// pgx's message names the DSN with its password masked.
		return nil, &FieldError{Field: field + ".dsn", Msg: err.Error()}
	}
	cc := cfg.ConnConfig
	if e.Username != "" {
		cc.User = e.Username
	}
	if e.Password != "" {
		cc.Password = e.Password
	}
	if e.TLS.Enabled {
		if cc.TLSConfig, err = e.TLS.config(field + ".tls"); err != nil {
			return nil, err
		}
		if cc.TLSConfig.ServerName == "" {
			cc.TLSConfig.ServerName = cc.Host
		}
		cc.Fallbacks = nil // TLS or nothing, whatever the DSN's sslmode
	}
	switch {
	case e.DialTimeout > 0:
		cc.ConnectTimeout = e.DialTimeout
	case cc.ConnectTimeout == 0:
		cc.ConnectTimeout = startTimeout
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", field, locker.ErrInvalidArgument, err)
	}
	return pool, nil
}
