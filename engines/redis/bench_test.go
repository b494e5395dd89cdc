package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/orthrus-go/orthrus/internal/benchround"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// Benchmarks against the raw-client floor and the Go Redis lock libraries,
// each over a client of its own on the same server, with its defaults
// (orthrus's client has ContextTimeoutEnabled, as config.Open builds it).
// scripts/bench runs them in interleaved rounds and prints the ratios.

// benchTTL is the hold TTL of the peers that take one: orthrus's default.
const benchTTL = driver.DefaultTTL

// floorDelete is the compare-and-delete of the classic SET NX PX lock.
var floorDelete = goredis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)

// owner adapts a pair of calls to lockertest.Mutex.
type owner struct{ lock, unlock func() error }

func (o owner) Lock() error   { return o.lock() }
func (o owner) Unlock() error { return o.unlock() }

func benchClient(b *testing.B, contextTimeout bool) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: contextTimeout})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func orthrusImpl(b *testing.B) func(*testing.B, string) lockertest.Mutex {
	e := newEngine(b, benchClient(b, true))
	b.Cleanup(func() { _ = e.Close() })
	return func(b *testing.B, name string) lockertest.Mutex {
		l, err := e.NewLocker(name)
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
}

// orthrusCtx locks with LockCtx and a context that can be cancelled: the
// path where each attempt runs on a worker of the engine.
func orthrusCtx(b *testing.B) func(*testing.B, string) lockertest.Mutex {
	newMutex := orthrusImpl(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	return func(b *testing.B, name string) lockertest.Mutex {
		l := newMutex(b, name).(locker.Locker)
		return owner{lock: func() error { return l.LockCtx(ctx) }, unlock: l.Unlock}
	}
}

// floorImpl is SET NX PX and a compare-and-delete script: two round trips,
// no token, no waiting, no renewal.
func floorImpl(b *testing.B) func(*testing.B, string) lockertest.Mutex {
	c := benchClient(b, false)
	ctx := context.Background()
	return func(b *testing.B, name string) lockertest.Mutex {
		key := "bench:floor:" + name
		return owner{
			lock: func() error {
				ok, err := c.SetNX(ctx, key, "owner", benchTTL).Result()
				if err == nil && !ok {
					err = errors.New("floor: held")
				}
				return err
			},
			unlock: func() error { return floorDelete.Run(ctx, c, []string{key}, "owner").Err() },
		}
	}
}

// redislockImpl is github.com/bsm/redislock. It has no blocking wait: a
// contended Obtain retries on the linear back-off of its README's example.
func redislockImpl(b *testing.B) func(*testing.B, string) lockertest.Mutex {
	c := redislock.New(benchClient(b, false))
	ctx := context.Background()
	opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond)}
	return func(b *testing.B, name string) lockertest.Mutex {
		key := "bench:redislock:" + name
		var l *redislock.Lock
		return owner{
			lock: func() (err error) {
				l, err = c.Obtain(ctx, key, benchTTL, opt)
				return err
			},
			unlock: func() error { return l.Release(ctx) },
		}
	}
}

// rueidislockImpl is github.com/redis/rueidis/rueidislock, the fastest Go
// Redis lock by its README, over one node (a majority of one key) with
// keys as valid as the others' TTL. Its release is the cancel of the
// context a Lock returns.
func rueidislockImpl(b *testing.B) func(*testing.B, string) lockertest.Mutex {
	return rueidislockBounded(b, 0, nil)
}

// rueidislockBounded is rueidislockImpl whose waits end after bound (0:
// never) and start again, counted in rewaits. In hand-offs its waiter
// sometimes never wakes (redis/rueidis#602: parked in WithContext, the
// lock free), which stalled whole harness runs; a bound turns that into a
// delay its figures include. The hold outlives the bound: its context ends
// at Unlock.
func rueidislockBounded(b *testing.B, bound time.Duration, rewaits *atomic.Int64) func(*testing.B, string) lockertest.Mutex {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{redisAddr}},
		KeyMajority:  1,
		KeyValidity:  benchTTL,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	ctx := context.Background()
	return func(b *testing.B, name string) lockertest.Mutex {
		key := "bench:rueidislock:" + name
		var release context.CancelFunc
		lock := func() (err error) {
			_, release, err = l.WithContext(ctx, key)
			return err
		}
		if bound > 0 {
			lock = func() error {
				for {
					hold, end := context.WithCancel(ctx)
					timer := time.AfterFunc(bound, end)
					_, cancel, err := l.WithContext(hold, key)
					switch {
					case err == nil && timer.Stop():
						release = func() { cancel(); end() }
						return nil
					case err == nil: // granted as the bound ended the hold
						cancel()
					case !errors.Is(err, context.Canceled):
						end()
						return err
					}
					rewaits.Add(1)
				}
			}
		}
		return owner{lock: lock, unlock: func() error { release(); return nil }}
	}
}

// redsyncImpl is github.com/go-redsync/redsync/v4 over one pool, with its
// defaults except the number of tries, unbounded so that a contended Lock
// waits as the others do.
func redsyncImpl(b *testing.B) func(*testing.B, string) lockertest.Mutex {
	rs := redsync.New(redsyncgoredis.NewPool(benchClient(b, false)))
	return func(b *testing.B, name string) lockertest.Mutex {
		m := rs.NewMutex("bench:redsync:"+name, redsync.WithTries(1<<30))
		return owner{lock: m.Lock, unlock: func() error { _, err := m.Unlock(); return err }}
	}
}

// implementations lists the implementations compared, the floor only where
// there is no waiting. scripts/bench rotates their order from round to round
// (ORTHRUS_BENCH_ROUND), so that none always runs first.
func implementations(withFloor bool) []string {
	names := []string{"orthrus", "orthrus-ctx", "floor", "redislock", "rueidislock", "redsync"}
	if !withFloor {
		names = slices.Delete(names, 2, 3)
	}
	return benchround.Rotate(names)
}

// implementation builds the named implementation for one sub-benchmark:
// a constructor of owners.
func implementation(b *testing.B, name string) func(*testing.B, string) lockertest.Mutex {
	switch name {
	case "orthrus":
		return orthrusImpl(b)
	case "orthrus-ctx":
		return orthrusCtx(b)
	case "floor":
		return floorImpl(b)
	case "redislock":
		return redislockImpl(b)
	case "rueidislock":
		return rueidislockImpl(b)
	case "redsync":
		return redsyncImpl(b)
	}
	b.Fatalf("unknown implementation %q", name)
	return nil
}

func benchName(b *testing.B) string { return fmt.Sprintf("%s/%d", b.Name(), time.Now().UnixNano()) }

// BenchmarkLockUnlock is one owner locking and unlocking one name,
// uncontended: two round trips for every implementation. cpu-us/op is the
// client process's CPU per cycle.
func BenchmarkLockUnlock(b *testing.B) {
	for _, im := range implementations(true) {
		b.Run(im, func(b *testing.B) {
			m := implementation(b, im)(b, benchName(b))
			cycle(b, m) // connection warm
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				cycle(b, m)
			}
			reportCPU(b, cpu0, b.N)
		})
	}
}

// BenchmarkAlternating runs the uncontended cycle of orthrus, the floor and
// redislock in turn, cycle by cycle, so that the load of a busy machine
// falls on all three alike, and reports orthrus's throughput relative to
// each (x-floor, x-redislock): the steadiest ratios this package measures.
func BenchmarkAlternating(b *testing.B) {
	names := []string{"orthrus", "floor", "redislock"}
	ms := make([]benchround.Mutex, len(names))
	for i, name := range names {
		ms[i] = implementation(b, name)(b, benchName(b))
	}
	benchround.ReportRelative(b, names, benchround.Alternate(b, ms))
}

// BenchmarkAlternatingParallel is BenchmarkAlternating by eight owners at
// once, each on names of its own, with rueidislock beside the floor and
// redislock: orthrus's throughput in parallel relative to each (x-floor,
// x-redislock, x-rueidislock), all under the same load at the same time.
func BenchmarkAlternatingParallel(b *testing.B) {
	const owners = 8
	names := []string{"orthrus", "floor", "redislock", "rueidislock"}
	mks := make([]func(*testing.B, string) lockertest.Mutex, len(names))
	for i, name := range names {
		mks[i] = implementation(b, name)
	}
	base := benchName(b)
	spent := benchround.AlternateParallel(b, owners, func(i int) []benchround.Mutex {
		ms := make([]benchround.Mutex, len(mks))
		for j, mk := range mks {
			ms[j] = mk(b, fmt.Sprintf("%s/%d", base, i))
		}
		return ms
	})
	benchround.ReportRelative(b, names, spent)
}

func cycle(b *testing.B, m lockertest.Mutex) {
	if err := m.Lock(); err != nil {
		b.Fatal(err)
	}
	if err := m.Unlock(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkParallel is eight owners, each locking and unlocking a name of
// its own: throughput under concurrency, with no contention.
func BenchmarkParallel(b *testing.B) {
	const owners = 8
	for _, im := range implementations(true) {
		b.Run(im, func(b *testing.B) {
			newMutex := implementation(b, im)
			var next atomic.Int64
			base := benchName(b)
			b.ReportAllocs()
			b.SetParallelism((owners + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				m := newMutex(b, fmt.Sprintf("%s/%d", base, next.Add(1)))
				for pb.Next() {
					if err := m.Lock(); err != nil {
						b.Error(err)
						return
					}
					if err := m.Unlock(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkHandoff is eight owners taking turns on one name; an op is one
// acquisition. It reports the median time from a holder's Unlock to
// another owner's Lock returning (handoff-ms, the relay to a parked waiter:
// woken, or polling), how often the owner that just released gets the lock again
// (self-%: a fair lock hands it to a waiter), the 99.9th percentile of the
// time in Lock (wait-p999-ms), and the client's allocations and CPU per
// acquisition.
func BenchmarkHandoff(b *testing.B) {
	const owners = 8
	for _, im := range implementations(false) {
		b.Run(im, func(b *testing.B) {
			var rewaits atomic.Int64
			var newMutex func(*testing.B, string) lockertest.Mutex
			if im == "rueidislock" {
				newMutex = rueidislockBounded(b, time.Second, &rewaits)
			} else {
				newMutex = implementation(b, im)
			}
			name := benchName(b)
			ms := make([]lockertest.Mutex, owners)
			for i := range ms {
				ms[i] = newMutex(b, name)
			}
			contend(b, ms)
			if im == "rueidislock" {
				b.ReportMetric(float64(rewaits.Load()), "rewaits")
			}
		})
	}
}

// contend makes owners take b.N turns on one name and reports as
// BenchmarkHandoff says.
func contend(b *testing.B, owners []lockertest.Mutex) {
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	s, err := takeTurns(owners, b.N)
	reportCPU(b, cpu0, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if len(s.handoffs) > 0 {
		b.ReportMetric(median(s.handoffs), "handoff-ms")
	}
	slices.Sort(s.waits)
	b.ReportMetric(millis(s.waits[len(s.waits)*999/1000]), "wait-p999-ms")
	b.ReportMetric(100*float64(s.self)/float64(len(s.waits)), "self-%")
}

// turns is what owners taking turns on one name measured: the times from
// a holder's Unlock to another owner's Lock returning, the times in Lock,
// and how often the owner that released got the lock again.
type turns struct {
	handoffs, waits []time.Duration
	self            int
}

// takeTurns makes owners take n turns on one name.
func takeTurns(owners []lockertest.Mutex, n int) (turns, error) {
	var (
		remaining atomic.Int64
		mu        sync.Mutex
		last      = -1
		released  time.Duration // since start, when the holder called Unlock; 0: none yet
		s         turns
		wg        sync.WaitGroup
	)
	errs := make(chan error, len(owners))
	remaining.Store(int64(n))
	start := time.Now()
	for i, m := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for remaining.Add(-1) >= 0 {
				t0 := time.Since(start)
				if err := m.Lock(); err != nil {
					errs <- err
					return
				}
				t1 := time.Since(start)
				mu.Lock()
				switch {
				case last == i:
					s.self++
				case released != 0:
					s.handoffs = append(s.handoffs, t1-released)
				}
				last = i
				s.waits = append(s.waits, t1-t0)
				released = time.Since(start)
				mu.Unlock()
				if err := m.Unlock(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return s, <-errs
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median sorts ds and returns its median in milliseconds.
func median(ds []time.Duration) float64 {
	slices.Sort(ds)
	return millis(ds[len(ds)/2])
}

func reportCPU(b *testing.B, cpu0 time.Duration, n int) {
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(n), "cpu-us/op")
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
		hook.commands.Store(0)
		cpu0, wall0 := cpuTime(), time.Now()
		time.Sleep(ttl) // observe three renewal periods
		cpu, wall := cpuTime()-cpu0, time.Since(wall0)
		b.ReportMetric(float64(hook.pipelines.Load()+hook.commands.Load())/3, "roundtrips/period")
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
