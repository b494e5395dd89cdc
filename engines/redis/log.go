package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// ClientLogger writes go-redis's own log lines to a slog.Logger. go-redis
// logs what its clients meet past the engine (a failed dial of the
// connection pool, for one, per connection and attempt: dozens in an
// outage) through a logger of its own, to stderr by default; WithLogger
// does not reach it. Route them with
//
//	goredis.SetLogger(redis.SlogLogger(logger))
//
// which config.Open does with its logger. go-redis has one logger for the
// whole process: the last one set serves every client of every engine.
type ClientLogger struct {
	log *slog.Logger
}

// SlogLogger returns a ClientLogger that writes to l, or to slog.Default()
// when l is nil, at WARN, with the go-redis prefix "redis: " turned into
// "go-redis: ".
func SlogLogger(l *slog.Logger) *ClientLogger { return &ClientLogger{log: l} }

// Printf implements go-redis's logging interface.
func (c *ClientLogger) Printf(ctx context.Context, format string, v ...any) {
	l := c.log
	if l == nil {
		l = slog.Default()
	}
	l.WarnContext(ctx, "go-redis: "+strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}
