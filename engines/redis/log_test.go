package redis_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/logtest"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// go-redis's own line for a dial that failed goes to the slog logger given
// to SlogLogger, as a WARN.
func TestSlogLogger(t *testing.T) {
	var out logtest.Buffer
	goredis.SetLogger(redis.SlogLogger(slog.New(slog.NewTextHandler(&out, nil))))
	defer logging.Enable() // go-redis's own logger again
	s := testserver.Redis(t)
	addr := s.Addr()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
	defer c.Close()
	e := newEngine(t, c)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := e.Ping(ctx); !errors.Is(err, locker.ErrUnavailable) {
		t.Fatalf("Ping() of a stopped server = %v; want ErrUnavailable", err)
	}
	const want = `level=WARN msg="go-redis: connection pool: failed to dial after 1 attempts: dial tcp ` // then the address and the cause
	if got := out.String(); !strings.Contains(got, want) {
		t.Errorf("slog output = %q; want a line with %q", got, want)
	}
}
