package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

func fenceKey(e *redis.Engine, name string) string { return e.LockKey(name) + ":fence" }

func lockToken(t *testing.T, l locker.Locker) uint64 {
	t.Helper()
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	tok := lease(l).Token()
	if err := l.Unlock(); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	return tok
}

// waitGone waits until key no longer exists: Redis expires it.
func waitGone(t *testing.T, c *goredis.Client, key string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for c.Exists(context.Background(), key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists after %v", key, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An idle fence key expires, and the next token is still higher: the
// counter starts again from the server clock, which has passed every token
// the expired counter gave.
func TestFenceKeyExpiresTokensIncrease(t *testing.T) {
	ctx := context.Background()
	c := newSingle(t)
	const idle = time.Second
	e := newEngine(t, c, redis.WithFenceIdle(idle))
	defer e.Close()
	l, _ := e.NewLocker(t.Name())
	fence := fenceKey(e, t.Name())

	first := lockToken(t, l)
	second := lockToken(t, l)
	if second <= first {
		t.Fatalf("second token = %d; want > %d", second, first)
	}
	if pttl := c.PTTL(ctx, fence).Val(); pttl <= 0 || pttl > idle {
		t.Errorf("PTTL(fence) after a grant = %v; want at most %v", pttl, idle)
	}
	waitGone(t, c, fence, 5*time.Second)
	if third := lockToken(t, l); third <= second {
		t.Errorf("token after the fence key expired = %d; want > %d", third, second)
	}

	// A counter ahead of the clock (more than 1000 grants a second for a
	// while) goes on from where it is, and its key stays until the clock
	// has passed it.
	ahead := time.Now().Add(time.Hour).UnixMilli()/256*256 + 255
	if err := c.Set(ctx, fence, ahead, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got := lockToken(t, l); got != uint64(ahead+1) {
		t.Errorf("token with the counter ahead = %d; want %d", got, ahead+1)
	}
	if pttl := c.PTTL(ctx, fence).Val(); pttl < time.Hour {
		t.Errorf("PTTL(fence) with the counter an hour ahead = %v; want over an hour", pttl)
	}
}

func TestWithFenceIdleRejectsBadInput(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond, 999 * time.Millisecond} {
		if _, err := redis.New(newSingle(t), redis.WithFenceIdle(d)); !errors.Is(err, locker.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "WithFenceIdle") {
			t.Errorf("New(WithFenceIdle(%v)) = %v; want ErrInvalidArgument naming WithFenceIdle", d, err)
		}
	}
}

// commandCalls reads how many times Redis ran cmd (INFO commandstats).
func commandCalls(t *testing.T, c *goredis.Client, cmd string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// A release publishes only when someone waits.
func TestNoPublishWithoutWaiters(t *testing.T) {
	s := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	e := newEngine(t, c)
	defer e.Close()
	a, _ := e.NewLocker(t.Name())
	b, _ := e.NewLocker(t.Name())
	for i := 0; i < 10; i++ {
		lockToken(t, a)
	}
	if n := commandCalls(t, c, "publish"); n != 0 {
		t.Errorf("PUBLISH calls after 10 uncontended cycles = %d; want 0", n)
	}
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Lock() }()
	eventually(t, func() bool {
		in, err := e.Inspect(context.Background(), t.Name())
		return err == nil && in.Subscribers > 0
	})
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiting Lock() = %v", err)
	}
	if n := commandCalls(t, c, "publish"); n != 1 {
		t.Errorf("PUBLISH calls after a release with a waiter = %d; want 1", n)
	}
	_ = b.Unlock()
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// One release wakes one waiter; each in turn gets the lock through the
// release messages, never by waiting for the holder's TTL to run out.
func TestWaitersWokenInTurn(t *testing.T) {
	c := newSingle(t)
	e := newEngine(t, c)
	defer e.Close()
	const waiters = 5
	holder, _ := e.NewLocker(t.Name())
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, waiters)
	errs := make(chan error, waiters)
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		l, _ := e.NewLocker(t.Name())
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // the TTL is 30s
			defer cancel()
			if err := l.LockCtx(ctx); err != nil {
				errs <- err
				return
			}
			got <- i
			errs <- l.Unlock()
		}()
	}
	// A waiter that gives up passes its turn on.
	quitter, _ := e.NewLocker(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if err := quitter.LockCtx(ctx); err != context.DeadlineExceeded {
		t.Errorf("LockCtx() of a waiter that gives up = %v; want DeadlineExceeded", err)
	}
	cancel()
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
	}
	if len(got) != waiters {
		t.Errorf("%d waiters got the lock; want %d", len(got), waiters)
	}
}

// With ContextTimeoutEnabled the caller's deadline is the socket's too; a
// LockCtx whose deadline passes while a request is on the wire still
// returns the deadline itself, never ErrUnavailable.
func TestDeadlineNotUnavailable(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer c.Close()
	e := newEngine(t, c)
	defer e.Close()
	holder, _ := e.NewLocker(t.Name())
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock()
	for i := 0; i < 200; i++ {
		l, _ := e.NewLocker(t.Name())
		// Deadlines from 0.1 to 2ms: during the first attempt, the
		// subscription or a later attempt.
		d := time.Duration(1+i%20) * 100 * time.Microsecond
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err := l.LockCtx(ctx)
		cancel()
		if err != context.DeadlineExceeded {
			t.Fatalf("LockCtx(%v deadline) = %v; want context.DeadlineExceeded itself", d, err)
		}
	}
}

// infoInt reads a numeric field of INFO section.
func infoInt(tb testing.TB, c *goredis.Client, section, field string) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatalf("INFO %s %s = %q", section, field, v)
			}
			return n
		}
	}
	tb.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// memory is what fenceMemory measured: Redis used_memory before, right
// after n names were locked once each, and once the counters expired, which
// took back after the last Unlock.
type memory struct {
	base, peak, after int64
	keys              int64 // right after the last Unlock
	back              time.Duration
	settled           bool // keys gone and used_memory within 10% of base
}

// fenceMemory locks n distinct names once each, eight owners at a time, on
// a server of its own, and waits up to idle+wait for Redis to expire their
// fencing counters.
func fenceMemory(tb testing.TB, n int, idle, wait time.Duration) memory {
	ctx := context.Background()
	s := testserver.Redis(tb)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), PoolSize: 8})
	defer c.Close()
	e, err := redis.New(c, redis.WithFenceIdle(idle), redis.WithPrefix("memory"))
	if err != nil {
		tb.Fatal(err)
	}
	defer e.Close()
	// Warm up: scripts loaded, connections open, no key left.
	l, _ := e.NewLocker("warm")
	if err := l.Lock(); err != nil {
		tb.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
		tb.Fatal(err)
	}
	if err := c.Del(ctx, e.LockKey("warm")+":fence").Err(); err != nil {
		tb.Fatal(err)
	}
	var m memory
	m.base = infoInt(tb, c, "memory", "used_memory")

	const owners = 8
	var wg sync.WaitGroup
	errs := make(chan error, owners)
	for o := 0; o < owners; o++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := o; i < n; i += owners {
				l, err := e.NewLocker("order/" + strconv.Itoa(i))
				if err == nil {
					err = l.Lock()
				}
				if err == nil {
					err = l.Unlock()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	done := time.Now()
	m.peak = infoInt(tb, c, "memory", "used_memory")
	m.keys = c.DBSize(ctx).Val()
	for time.Since(done) < idle+wait {
		keys := c.DBSize(ctx).Val()
		m.after = infoInt(tb, c, "memory", "used_memory")
		if keys == 0 && m.after <= m.base*11/10 {
			m.back, m.settled = time.Since(done), true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return m
}

// Names locked once leave nothing behind: their fencing counters expire
// after the idle time and Redis memory returns to where it was. A small
// run; BenchmarkFenceMemory is the full one.
func TestFenceMemory(t *testing.T) {
	const n, idle = 5000, time.Second
	m := fenceMemory(t, n, idle, 20*time.Second)
	t.Logf("%d names: used_memory %d before, %d with %d keys after locking, %d %v after the last Unlock", n, m.base, m.peak, m.keys, m.after, m.back)
	if m.keys == 0 || m.peak <= m.base {
		t.Errorf("after locking %d names: %d keys, used_memory %d from %d; want the counters of the last names there", n, m.keys, m.peak, m.base)
	}
	if !m.settled {
		t.Errorf("used_memory = %d 20s after the idle time; want keys gone and within 10%% of %d", m.after, m.base)
	}
}

// BenchmarkFenceMemory locks 1,000,000 distinct names once each, with the
// default fence idle time, and reports Redis used_memory before, right
// after (with the keys left then: the counters of the last idle time's
// names), and once it is back within 10% of before (back-s after the last
// Unlock). Run it alone: go test -run '^$' -bench FenceMemory -benchtime 1x
func BenchmarkFenceMemory(b *testing.B) {
	const n = 1000000
	for i := 0; i < b.N; i++ {
		m := fenceMemory(b, n, redis.DefaultFenceIdle, 2*time.Minute)
		if !m.settled {
			b.Errorf("used_memory = %d two minutes after the idle time; want within 10%% of %d", m.after, m.base)
		}
		mb := func(v int64) float64 { return float64(v) / (1 << 20) }
		b.ReportMetric(mb(m.base), "base-MB")
		b.ReportMetric(mb(m.peak), "end-MB")
		b.ReportMetric(float64(m.keys), "end-keys")
		b.ReportMetric(mb(m.after), "after-MB")
		b.ReportMetric(m.back.Seconds(), "back-s")
	}
}
