package redis_test

import (
	"context"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

type valueKey struct{}

// valueHook records the valueKey of the contexts the client runs scripts
// under.
type valueHook struct {
	mu   sync.Mutex
	seen []any
}

func (*valueHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *valueHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() == "evalsha" {
			h.mu.Lock()
			h.seen = append(h.seen, ctx.Value(valueKey{}))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (*valueHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestRequestKeepsContextValues: a Lock's request carries its caller's
// context values (a trace span, for go-redis's instrumentation) also when
// that context cannot end; only a bare context.Background() shares the
// engine's bounded context.
func TestRequestKeepsContextValues(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer c.Close()
	hook := &valueHook{}
	c.AddHook(hook)
	e := newEngine(t, c)
	defer e.Close()
	l, err := e.NewLocker(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LockCtx(context.WithValue(context.Background(), valueKey{}, "caller")); err != nil {
		t.Fatalf("LockCtx() = %v", err)
	}
	defer l.Unlock()
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.seen) == 0 || hook.seen[0] != "caller" {
		t.Fatalf("the acquire script ran under contexts with values %v; want the caller's first", hook.seen)
	}
}
