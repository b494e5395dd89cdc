package scalebench_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/engines/postgres"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// The servers are started by the benchmark itself, fresh for every run:
// a plain go test of this package starts nothing.
func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) { return func() {}, nil })
}

// setup is one engine on a fresh server.
type setup struct {
	engine locker.Engine
	server *testserver.Server
	// parents counts the parents of the benchmark's locks left on the
	// server (ZooKeeper).
	parents func() (int, error)
}

func redisSetup(b *testing.B) setup {
	s := testserver.Redis(b)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	b.Cleanup(func() { _ = c.Close() })
	e, err := redis.New(c)
	if err != nil {
		b.Fatal(err)
	}
	return setup{engine: e, server: s}
}

func etcdSetup(b *testing.B) setup {
	s := testserver.Etcd(b)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	e, err := etcd.New(c)
	if err != nil {
		b.Fatal(err)
	}
	return setup{engine: e, server: s}
}

func zkSetup(b *testing.B) setup {
	s := testserver.ZooKeeper(b)
	const prefix = "/scale"
	e, err := zk.New([]string{s.Addr()}, zk.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	parents := func() (int, error) {
		c, _, err := gozk.Connect([]string{s.Addr()}, 10*time.Second, gozk.WithLogger(quiet{}))
		if err != nil {
			return 0, err
		}
		defer c.Close()
		children, _, err := c.Children(prefix)
		left := 0
		for _, c := range children {
			if strings.HasPrefix(c, "scale%2F") {
				left++
			}
		}
		return left, err
	}
	return setup{engine: e, server: s, parents: parents}
}

func postgresSetup(b *testing.B) setup {
	s := testserver.Postgres(b)
	p, err := pgxpool.New(context.Background(), s.DSN())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	e, err := postgres.New(p)
	if err != nil {
		b.Fatal(err)
	}
	return setup{engine: e, server: s}
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

var setups = map[string]func(*testing.B) setup{"redis": redisSetup, "etcd": etcdSetup, "zk": zkSetup, "postgres": postgresSetup}

// env reads a benchmark parameter from the environment.
func env[T any](b *testing.B, key string, def T, parse func(string) (T, error)) T {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		b.Fatalf("%s=%q: %v", key, v, err)
	}
	return x
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want positive integers, got %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func words(s string) ([]string, error) {
	out := strings.Split(s, ",")
	for _, w := range out {
		if setups[w] == nil {
			return nil, fmt.Errorf("unknown engine %q (want redis, etcd, zk, postgres)", w)
		}
	}
	return out, nil
}

// BenchmarkScale: see the package documentation.
func BenchmarkScale(b *testing.B) {
	engines := env(b, "SCALE_ENGINES", []string{"redis", "etcd", "zk"}, words)
	ns := env(b, "SCALE_N", []int{10000}, ints)
	ttl := env(b, "SCALE_TTL", 3*time.Second, time.ParseDuration)
	hold := env(b, "SCALE_HOLD", 10*time.Second, time.ParseDuration)
	probes := env(b, "SCALE_PROBES", 1000, strconv.Atoi)
	if probes < 100 {
		b.Fatalf("SCALE_PROBES=%d: want at least 100", probes)
	}
	control := env(b, "SCALE_CONTROL", false, strconv.ParseBool)
	for _, name := range engines {
		for _, n := range ns {
			b.Run(fmt.Sprintf("%s/N=%d/TTL=%v", name, n, ttl), func(b *testing.B) {
				for range b.N {
					var ctl *setup
					if control {
						c := setups[name](b)
						ctl = &c
					}
					scale(b, setups[name](b), ctl, n, ttl, hold, probes)
				}
			})
		}
	}
}

// concurrency is how many acquisitions run at once.
const concurrency = 16

// scale runs one measurement on s; ctl, when not nil, is a control: an
// engine on a server of its own with nothing held.
func scale(b *testing.B, s setup, ctl *setup, n int, ttl, hold time.Duration, probes int) {
	defer s.engine.Close()
	p50s, p99s := probe(b, "probe-idle", ttl, probes, s.engine)
	idle50, idle99 := p50s[0], p99s[0]

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ls := make([]locker.Locker, n)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, concurrency)
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				l, err := s.engine.NewLocker(fmt.Sprintf("scale/%d", i), locker.WithTTL(ttl))
				if err == nil {
					var ok bool
					if ok, err = l.TryLock(); err == nil && !ok {
						err = fmt.Errorf("TryLock(scale/%d) = false; want it free", i)
					}
				}
				if err != nil {
					errs <- err
					return
				}
				ls[i] = l
			}
		}()
	}
	wg.Wait()
	acquired := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(n)/acquired.Seconds(), "acquires/s")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/hold")

	// Steady renewal: let every hold be renewed once, then measure the CPU
	// over at least a renewal interval (and half the hold time).
	held := time.Now()
	time.Sleep(ttl / 3)
	window := max(ttl/3, hold/2)
	stop := profile(b)
	client0, server0 := cpu(b, s.server)
	t0 := time.Now()
	time.Sleep(window)
	client1, server1 := cpu(b, s.server)
	stop()
	wall := time.Since(t0)
	b.ReportMetric(100*(client1-client0).Seconds()/wall.Seconds(), "client-cpu-%")
	b.ReportMetric(100*(server1-server0).Seconds()/wall.Seconds(), "server-cpu-%")

	if ctl != nil {
		defer ctl.engine.Close()
		p50s, p99s = probe(b, "probe-busy", ttl, probes, s.engine, ctl.engine)
		b.ReportMetric(p50s[1], "ctl-p50-ms")
		b.ReportMetric(p99s[1], "ctl-p99-ms")
		b.ReportMetric(p99s[0]/p99s[1], "p99/ctl-p99")
	} else {
		p50s, p99s = probe(b, "probe-busy", ttl, probes, s.engine)
	}
	p50, p99 := p50s[0], p99s[0]
	b.ReportMetric(idle50, "idle-p50-ms")
	b.ReportMetric(idle99, "idle-p99-ms")
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
	b.ReportMetric(p99/idle99, "p99/idle-p99")
	if rest := hold - time.Since(held); rest > 0 {
		time.Sleep(rest)
	}

	lost := 0
	for _, l := range ls {
		select {
		case <-l.(locker.Lease).Lost():
			lost++
		default:
		}
	}
	b.ReportMetric(float64(lost), "lost")
	start = time.Now()
	unlockAll(b, ls)
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "releases/s")

	if s.parents != nil {
		released := time.Now()
		var left int
		for {
			var err error
			if left, err = s.parents(); err != nil {
				b.Fatal(err)
			}
			if left == 0 || time.Since(released) > 90*time.Second {
				break
			}
			time.Sleep(time.Second)
		}
		b.ReportMetric(float64(left), "parents-left")
		b.ReportMetric(time.Since(released).Seconds(), "parents-gone-s")
	}
}

// unlockAll releases every hold, concurrency at a time; a lost hold's
// ErrLockLost is counted as lost already.
func unlockAll(b *testing.B, ls []locker.Locker) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(ls); i = int(next.Add(1)) - 1 {
				if err := ls[i].Unlock(); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(failed.Load()), "unlock-errors")
}

// probe times probes Lock+Unlock pairs on a new name of each engine of
// es, one engine after the other, and returns the p50 and p99 of each in
// milliseconds. Probing a control engine in turn with the engine under
// test exposes both to the same machine at the same moments: the ratio of
// their p99s shows what the held locks cost, not what else the machine was
// doing.
func probe(b *testing.B, name string, ttl time.Duration, probes int, es ...locker.Engine) (p50, p99 []float64) {
	ls := make([]locker.Locker, len(es))
	ds := make([][]time.Duration, len(es))
	for i, e := range es {
		l, err := e.NewLocker(name, locker.WithTTL(ttl))
		if err != nil {
			b.Fatal(err)
		}
		ls[i], ds[i] = l, make([]time.Duration, probes)
	}
	for n := range probes {
		for i, l := range ls {
			t := time.Now()
			if err := l.Lock(); err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(); err != nil {
				b.Fatal(err)
			}
			ds[i][n] = time.Since(t)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, d := range ds {
		slices.Sort(d)
		p50, p99 = append(p50, ms(d[len(d)/2])), append(p99, ms(d[len(d)*99/100]))
	}
	return p50, p99
}

// profile writes a CPU profile of the steady renewal to the file
// SCALE_PROFILE names, if any, for go tool pprof.
func profile(b *testing.B) (stop func()) {
	path := os.Getenv("SCALE_PROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// cpu returns the CPU time this process and server have used so far (a
// PostgreSQL server's backends included).
func cpu(b *testing.B, server *testserver.Server) (client, srv time.Duration) {
	client, err := testserver.ProcessCPU(os.Getpid())
	if err == nil {
		srv, err = server.CPU()
	}
	if err != nil {
		b.Fatalf("reading CPU time: %v", err)
	}
	return client, srv
}
