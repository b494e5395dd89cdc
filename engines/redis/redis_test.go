package redis_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// Servers shared by the package's tests and examples.
var (
	single       *testserver.Server
	cluster      *testserver.Cluster
	redisAddr    string
	clusterAddrs []string
)

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		if os.Getenv(fairWorkerEnv) != "" {
			return func() {}, nil // a worker of fair_test.go, on its parent's server
		}
		var err error
		if single, err = testserver.NewRedis(); err != nil {
			return nil, err
		}
		if cluster, err = testserver.NewRedisCluster(3); err != nil {
			_ = single.Stop()
			return nil, err
		}
		redisAddr, clusterAddrs = single.Addr(), cluster.Addrs()
		return func() { _ = single.Stop(); _ = cluster.Stop() }, nil
	})
}

func newSingle(t testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newCluster(t testing.TB) *goredis.ClusterClient {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: clusterAddrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newEngine(t testing.TB, c goredis.UniversalClient, opts ...redis.Option) *redis.Engine {
	t.Helper()
	e, err := redis.New(c, opts...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return e
}

func harness(t *testing.T, c goredis.UniversalClient) lockertest.Harness {
	e := newEngine(t, c, redis.WithPrefix("conformance"))
	return lockertest.Harness{
		Engine: e,
		Expire: func(ctx context.Context, name string) error {
			return c.Del(ctx, e.LockKey(name)).Err()
		},
		Residue: func(ctx context.Context, name string) (int, error) {
			in, err := e.Inspect(ctx, name)
			return in.Subscribers, err
		},
	}
}

func TestConformanceSingle(t *testing.T) {
	c := newSingle(t)
	lockertest.Run(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}

// With ContextTimeoutEnabled go-redis fails a command at its context's
// deadline: a wait whose deadline passes is still contention, and LockCtx
// returns ctx.Err() itself.
func TestConformanceContextTimeout(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	lockertest.Run(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}

func TestConformanceCluster(t *testing.T) {
	c := newCluster(t)
	lockertest.Run(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}

func TestNewRejectsBadInput(t *testing.T) {
	c := newSingle(t)
	for _, tc := range []struct {
		desc string
		c    goredis.UniversalClient
		opt  redis.Option
	}{
		{"nil client", nil, redis.WithName("x")},
		{"empty name", c, redis.WithName("")},
		{"empty prefix", c, redis.WithPrefix("")},
		{"prefix with a hash tag", c, redis.WithPrefix("a{b}")},
		{"nil logger", c, redis.WithLogger(nil)},
		{"zero request timeout", c, redis.WithRequestTimeout(0)},
		{"nil option", c, nil},
	} {
		if _, err := redis.New(tc.c, tc.opt); !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("New(%s) = %v; want ErrInvalidArgument", tc.desc, err)
		}
	}
}

func lease(l locker.Locker) locker.Lease { return l.(locker.Lease) }

// A late release or renewal by an owner whose hold expired must not touch
// the newer owner's hold.
func TestStaleOwnerCannotTouchNewHold(t *testing.T) {
	ctx := context.Background()
	c := newSingle(t)
	e := newEngine(t, c)
	defer e.Close()
	name := t.Name()
	lock := e.LockKey(name)

	old, _ := e.NewLocker(name, locker.WithTTL(600*time.Millisecond))
	next, _ := e.NewLocker(name, locker.WithLease(10*time.Second))
	if err := old.Lock(); err != nil {
		t.Fatal(err)
	}
	lost := lease(old).Lost()
	// The old hold vanishes (as after a long GC pause) and a new owner gets in.
	if err := c.Del(ctx, lock).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := next.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock() = %v, %v; want true, nil", ok, err)
	}
	// The old owner's watchdog runs into the new hold: it must see the loss
	// and leave the new hold's expiry alone.
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() not closed after the key changed owner")
	}
	if pttl := c.PTTL(ctx, lock).Val(); pttl < 8*time.Second {
		t.Errorf("PTTL of the new hold = %v; want about 10s (a stale renewal shortened it)", pttl)
	}
	if err := old.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("stale Unlock() = %v; want ErrLockLost", err)
	}
	tok, _, _ := strings.Cut(c.Get(ctx, lock).Val(), ":")
	if tok != strconv.FormatUint(lease(next).Token(), 10) {
		t.Errorf("hold token after the stale Unlock = %q; want the new owner's %d", tok, lease(next).Token())
	}
	if err := next.Unlock(); err != nil {
		t.Errorf("Unlock() by the new owner = %v", err)
	}
}

// Unlock must release even when the context the lock was taken with is gone.
func TestUnlockAfterCallerCancelled(t *testing.T) {
	c := newSingle(t)
	e := newEngine(t, c)
	defer e.Close()
	a, _ := e.NewLocker(t.Name())
	b, _ := e.NewLocker(t.Name())
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.LockCtx(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := a.Unlock(); err != nil {
		t.Fatalf("Unlock() after the caller's context was cancelled = %v; want nil", err)
	}
	if ok, err := b.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock() after that Unlock = %v, %v; want true, nil", ok, err)
	}
	_ = b.Unlock()
}

// The watchdog must keep renewing across dropped connections.
func TestWatchdogSurvivesReconnect(t *testing.T) {
	ctx := context.Background()
	c := newSingle(t)
	e := newEngine(t, c)
	defer e.Close()
	const ttl = 900 * time.Millisecond
	a, _ := e.NewLocker(t.Name(), locker.WithTTL(ttl))
	b, _ := e.NewLocker(t.Name())
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer admin.Close()
	lock := e.LockKey(t.Name())
	// Drop every client connection several times over several TTLs; the
	// key's expiry must keep being pushed back.
	for i := 0; i < 6; i++ {
		if err := admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(ttl)
		for {
			// Wait for one renewal after the kill: the expiry goes up again.
			if p := admin.PTTL(ctx, lock).Val(); p > ttl*3/4 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no renewal within %v after connections were killed", i, ttl)
			}
			time.Sleep(20 * time.Millisecond)
		}
		select {
		case <-lease(a).Lost():
			t.Fatalf("round %d: Lost() closed after a reconnect", i)
		default:
		}
		time.Sleep(ttl / 3)
	}
	if ok, err := b.TryLock(); ok || err != nil {
		t.Fatalf("TryLock() by another owner = %v, %v; want false, nil (hold kept alive)", ok, err)
	}
	if err := a.Unlock(); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	// A port with nothing behind it: the server we stop.
	s := testserver.Redis(t)
	addr := s.Addr()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	e := newEngine(t, c)
	defer e.Close()
	l, _ := e.NewLocker("x")
	start := time.Now()
	if err := l.Lock(); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Lock() = %v; want ErrUnavailable", err)
	}
	if ok, err := l.TryLock(); ok || !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("TryLock() = %v, %v; want false, ErrUnavailable", ok, err)
	}
	if err := e.Ping(context.Background()); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Ping() = %v; want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("failing took %v; want within the client's timeouts", d)
	}
}

// A Redis restart without persistence loses the holds: the holders learn it,
// and tokens keep increasing even though the counter was lost too.
func TestRestartLosesHoldsTokensIncrease(t *testing.T) {
	s := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	e := newEngine(t, c)
	defer e.Close()
	a, _ := e.NewLocker(t.Name(), locker.WithTTL(900*time.Millisecond))
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	before := lease(a).Token()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease(a).Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost() not closed after a restart that lost the key")
	}
	if err := a.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() = %v; want ErrLockLost", err)
	}
	b, _ := e.NewLocker(t.Name())
	if err := b.Lock(); err != nil {
		t.Fatalf("Lock() after restart = %v", err)
	}
	if after := lease(b).Token(); after <= before {
		t.Errorf("token after restart = %d; want > %d", after, before)
	}
	_ = b.Unlock()
}

// countingHook counts the round trips the client makes (pipelines and
// single commands), and the commands in pipelines.
type countingHook struct{ pipelines, commands, pipelined atomic.Int64 }

func (h *countingHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *countingHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.commands.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.pipelines.Add(1)
		h.pipelined.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Renewals falling due together go out in one script call per chunk of
// holds (128, the scheduler's; a late chunk, of up to 1024, as calls of
// 128 in one pipeline), not one command per hold: the round trips per
// renewal period stay far below the number of holds.
func TestRenewalsBatched(t *testing.T) {
	c := newSingle(t)
	hook := &countingHook{}
	c.AddHook(hook)
	e := newEngine(t, c)
	defer e.Close()
	const n, ttl = 300, 1500 * time.Millisecond
	lockers := make([]locker.Locker, n)
	for i := range lockers {
		lockers[i], _ = e.NewLocker(t.Name()+strconv.Itoa(i), locker.WithTTL(ttl))
		if err := lockers[i].Lock(); err != nil {
			t.Fatal(err)
		}
	}
	hook.pipelines.Store(0)
	hook.commands.Store(0)
	hook.pipelined.Store(0)
	// Observe three renewal periods (renewal every ttl/3).
	time.Sleep(ttl)
	pipelines, commands, pipelined := hook.pipelines.Load(), hook.commands.Load(), hook.pipelined.Load()
	t.Logf("%d holds, %v: %d single commands, %d pipelines of %d commands", n, ttl, commands, pipelines, pipelined)
	if pipelines+commands == 0 {
		t.Fatalf("no renewal call in %v; want about 9", ttl)
	}
	// About three calls a period, a few more where the observed time cuts
	// a period; one EVAL may follow a first EVALSHA. One command per hold
	// would be 900.
	if commands+pipelined > 30 {
		t.Errorf("%d single commands and %d pipelines of %d commands for %d holds in 3 renewal periods; want at most 30 commands", commands, pipelines, pipelined, n)
	}
	for i, l := range lockers {
		if err := l.Unlock(); err != nil {
			t.Fatalf("Unlock() #%d = %v (hold not kept alive)", i, err)
		}
	}
}
