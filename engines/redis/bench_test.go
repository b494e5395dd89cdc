package redis_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// floorDelete is the compare-and-delete of the classic SET NX PX lock.
var floorDelete = goredis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)

// BenchmarkLockUnlock compares one uncontended Lock+Unlock cycle with the
// raw-client floor, SET NX PX plus a compare-and-delete EVAL: two round
// trips each.
func BenchmarkLockUnlock(b *testing.B) {
	ctx := context.Background()
	c := newSingle(b)
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			ok, err := c.SetNX(ctx, "bench:floor", "owner", 30*time.Second).Result()
			if !ok || err != nil {
				b.Fatalf("SET NX = %v, %v", ok, err)
			}
			if err := floorDelete.Run(ctx, c, []string{"bench:floor"}, "owner").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("orthrus", func(b *testing.B) {
		e := newEngine(b, c)
		defer e.Close()
		l, _ := e.NewLocker("bench:orthrus")
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := l.Lock(); err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// LockCtx with a context that can be cancelled: each attempt runs on a
	// goroutine of the engine, so that the caller returns when it ends.
	b.Run("orthrus-ctx", func(b *testing.B) {
		e := newEngine(b, c)
		defer e.Close()
		l, _ := e.NewLocker("bench:orthrus-ctx")
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := l.LockCtx(ctx); err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The two alternate cycle by cycle, so that a busy machine slows both
	// alike: floor/orthrus is orthrus's throughput relative to the floor.
	b.Run("interleaved", func(b *testing.B) {
		e := newEngine(b, c)
		defer e.Close()
		l, _ := e.NewLocker("bench:interleaved")
		var floor, ours time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if ok, err := c.SetNX(ctx, "bench:floor", "owner", 30*time.Second).Result(); !ok || err != nil {
				b.Fatalf("SET NX = %v, %v", ok, err)
			}
			if err := floorDelete.Run(ctx, c, []string{"bench:floor"}, "owner").Err(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := l.Lock(); err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(); err != nil {
				b.Fatal(err)
			}
			floor, ours = floor+t1.Sub(t0), ours+time.Since(t1)
		}
		b.ReportMetric(floor.Seconds()/ours.Seconds(), "floor/orthrus")
	})
}

// BenchmarkHandoff has 8 owners take turns on one name and reports the
// median hand-off: a woken waiter, not a polling one.
func BenchmarkHandoff(b *testing.B) {
	e := newEngine(b, newSingle(b))
	defer e.Close()
	owners := make([]lockertest.Mutex, 8)
	for i := range owners {
		owners[i], _ = e.NewLocker("bench:handoff")
	}
	lockertest.Handoff(b, owners)
}

// BenchmarkScale holds 10,000 names with the watchdog on and reports, over
// three renewal periods, the renewal round trips per period and the
// process CPU as a share of one core. The TTL is 3s, ten times shorter than
// the default, so the renewal load is ten times the default's.
func BenchmarkScale(b *testing.B) {
	const names, ttl = 10000, 3 * time.Second
	c := newSingle(b)
	hook := &countingHook{}
	c.AddHook(hook)
	e := newEngine(b, c)
	defer e.Close()
	lockers := make([]locker.Locker, names)
	for i := range lockers {
		lockers[i], _ = e.NewLocker(fmt.Sprintf("bench:scale:%d", i), locker.WithTTL(ttl))
		if err := lockers[i].Lock(); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i++ {
		hook.pipelines.Store(0)
		cpu0, wall0 := cpuTime(), time.Now()
		time.Sleep(ttl) // observe three renewal periods
		cpu, wall := cpuTime()-cpu0, time.Since(wall0)
		b.ReportMetric(float64(hook.pipelines.Load())/3, "roundtrips/period")
		b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu-%")
	}
	b.StopTimer()
	for _, l := range lockers {
		if err := l.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
