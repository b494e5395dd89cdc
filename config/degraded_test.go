package config_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// startSlack is what Open may take beyond start_timeout (issue 24, target
// e: start_timeout + 0.5s).
const startSlack = 500 * time.Millisecond

// TestOpenDegradedStart: Open while the primary is down starts on the
// secondary at once, with the primary's breaker open; callers get locks
// with no error; when the primary comes back its breaker closes, and the
// switcher returns to it only with failback configured. With a shared
// source naming the primary, the process (a fleet of one, which sees the
// primary down) moves its fleet: the key names the secondary. The
// primary of each type is a real server, killed before Open and restarted
// after, so that each engine shows it can be built while its server is
// down.
func TestOpenDegradedStart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kind     string // of the primary
		source   string // "" for Load's default, the file
		failback string // "" for none
		back     bool   // the switcher returns to the primary
	}{
		{"redis primary, file source, no failback", config.TypeRedis, "", "", false},
		{"etcd primary, no source, failback", config.TypeEtcd, "{type: none}", "300ms", true},
		{"zk primary, file source, failback", config.TypeZK, "", "300ms", true},
		{"redis primary, etcd source naming it, no failback", config.TypeRedis, "etcd", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, primary := serverEngine(t, tc.kind, "primary", "degraded")
			// The server's process is the test's, not Open's, and
			// Restart starts it again.
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
				goleak.IgnoreAnyFunction("github.com/orthrus-go/orthrus/internal/testserver.(*Server).start.func1"))
			if err := srv.Kill(); err != nil {
				t.Fatal(err)
			}
			yaml := fmt.Sprintf(`
start_timeout: 1s
breaker: {open_timeout: 300ms}
health: {every: 50ms}
engines:
  - %s
  - {name: secondary, type: redis, addrs: [%q], prefix: degraded}
`, primary, redisAddr)
			switch tc.source {
			case "":
			case "etcd":
				key := "/config-test/" + t.Name()
				putKey(t, key, "primary")
				yaml += fmt.Sprintf("source: {type: etcd, endpoints: [%q], key: %q}\n", etcdAddr, key)
			default:
				yaml += "source: " + tc.source + "\n"
			}
			if tc.failback != "" {
				yaml += "failback: {after: " + tc.failback + "}\n"
			}
			c := loadYAML(t, yaml)
			var switches atomic.Int32
			rec := &logRecorder{}
			start := time.Now()
			sw, err := config.Open(context.Background(), c, config.WithLogger(slog.New(rec)),
				config.WithSwitcherOptions(switcher.OnSwitch(func(switcher.Event) { switches.Add(1) })))
			took := time.Since(start)
			if err != nil {
				t.Fatalf("Open() with the primary down = %v; want a switcher on the secondary", err)
			}
			defer sw.Close()
			t.Logf("Open() took %v with the primary down", took)
			if limit := c.StartTimeout + startSlack; took > limit {
				t.Errorf("Open() took %v; want at most start_timeout + %v = %v", took, startSlack, limit)
			}
			// With a shared source, the first decision (before any grant) is
			// the fleet's, made after Open returns.
			eventually(t, time.Second, "the switcher on the secondary", func() bool { return sw.Current() == "secondary" })
			if st := sw.States()[0]; st.Breaker != gobreaker.StateOpen || st.Healthy {
				t.Errorf("States()[0] = %+v; want primary with its breaker open, not healthy", st)
			}
			if n := rec.count("engine down at start"); n != 1 {
				t.Errorf("%d WARN logs for the engine down at start; want 1:\n%s", n, strings.Join(rec.all(), "\n"))
			}

			if errs := lockMany(t, sw, "degraded-"+tc.kind, 4, 10); errs > 0 {
				t.Errorf("%d of 40 Lock/Unlock failed while the primary is down; want 0", errs)
			}

			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			// The breaker's open period, then a ping: well within 15s
			// even on a loaded machine (a ZooKeeper session may take a
			// few seconds to be granted after a restart).
			eventually(t, 15*time.Second, "the primary's breaker closes", func() bool {
				st := sw.States()[0]
				return st.Breaker == gobreaker.StateClosed && st.Healthy
			})
			if tc.source == "etcd" { // the watch delivers the key's value on its own time
				eventually(t, 5*time.Second, "the secondary desired (the fleet moved the key)", func() bool { return sw.States()[1].Desired })
			}
			if tc.back {
				eventually(t, 5*time.Second, "the return to the primary", func() bool { return sw.Current() == "primary" })
				if errs := lockMany(t, sw, "degraded-"+tc.kind, 2, 5); errs > 0 {
					t.Errorf("%d of 10 Lock/Unlock failed after failback; want 0", errs)
				}
				return
			}
			// Without failback nothing may move: watch for longer than
			// a failback or a source's pull would take.
			// (A fleet's first decision, moving it off the primary, is
			// one switch.)
			before := switches.Load()
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) {
				if got := sw.Current(); got != "secondary" || switches.Load() != before {
					t.Fatalf("Current() = %q after %d more switches with the primary back and no failback; want secondary, 0", got, switches.Load()-before)
				}
				time.Sleep(20 * time.Millisecond) // polling a negative, with a deadline
			}
		})
	}
}

// putKey writes value at key in the shared etcd.
func putKey(t *testing.T, key, value string) {
	t.Helper()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

// lockMany takes and releases a lock workers×rounds times, from workers
// goroutines, logs what failed and returns how many calls did.
func lockMany(t *testing.T, sw *config.Failover, name string, workers, rounds int) int {
	var errs atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			l, err := sw.NewLocker(fmt.Sprintf("%s-%d", name, w))
			if err != nil {
				errs.Add(int32(rounds))
				t.Logf("owner %d: NewLocker: %v", w, err)
				return
			}
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := l.LockCtx(ctx)
				cancel()
				if err == nil {
					err = l.Unlock()
				}
				if err != nil {
					errs.Add(1)
					t.Logf("owner %d: %v", w, err)
				}
			}
		})
	}
	wg.Wait()
	return int(errs.Load())
}

// TestOpenDegradedBound: engines of every type that hang (accept and never
// answer) are waited for concurrently, each at most start_timeout, however
// long their own dial timeouts are.
func TestOpenDegradedBound(t *testing.T) {
	hang := silent(t) // its goroutine ends in a Cleanup, after the check
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := loadYAML(t, fmt.Sprintf(`
start_timeout: 1s
source: {type: none}
engines:
  - {name: redis-hang, type: redis, addrs: [%q]}
  - {name: etcd-hang, type: etcd, endpoints: [%q]}
  - {name: zk-hang, type: zk, servers: [%q]}
  - {name: good, type: redis, addrs: [%q], prefix: degraded-bound}
`, hang, hang, hang, redisAddr))
	start := time.Now()
	sw, err := config.Open(context.Background(), c, quiet)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Open() = %v; want a switcher on good", err)
	}
	defer sw.Close()
	t.Logf("Open() took %v with three engines hanging", took)
	if limit := c.StartTimeout + startSlack; took > limit {
		t.Errorf("Open() took %v; want at most %v", took, limit)
	}
	if got := sw.Current(); got != "good" {
		t.Errorf("Current() = %q; want good", got)
	}
	for _, st := range sw.States()[:3] {
		if st.Breaker != gobreaker.StateOpen {
			t.Errorf("%s: breaker %v; want open", st.Name, st.Breaker)
		}
	}
}

// TestOpenNoEngineAnswers: Open fails, within start_timeout + 0.5s, with an
// error naming each engine and wrapping ErrUnavailable.
func TestOpenNoEngineAnswers(t *testing.T) {
	hang := silent(t) // its goroutine ends in a Cleanup, after the check
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := loadYAML(t, fmt.Sprintf(`
start_timeout: 1s
engines:
  - {name: redis-refuses, type: redis, addrs: ["127.0.0.1:1"]}
  - {name: etcd-hangs, type: etcd, endpoints: [%q]}
  - {name: zk-hangs, type: zk, servers: [%q]}
`, hang, hang))
	start := time.Now()
	sw, err := config.Open(context.Background(), c, quiet)
	took := time.Since(start)
	if err == nil {
		_ = sw.Close()
		t.Fatal("Open() = nil error with no engine answering; want ErrUnavailable")
	}
	t.Logf("Open() took %v: %v", took, err)
	if !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Open() = %v; want it to wrap ErrUnavailable", err)
	}
	for i, name := range []string{"redis-refuses", "etcd-hangs", "zk-hangs"} {
		if want := fmt.Sprintf("engines[%d] %q", i, name); !strings.Contains(err.Error(), want) {
			t.Errorf("Open() = %v; want it to name %s", err, want)
		}
	}
	// Open answers by start_timeout, then closes what it built: closing
	// a ZooKeeper connection that never had a session can take go-zookeeper
	// up to a second more (its Close waits that long for an answer to its
	// close request, which may be queued after its loop has ended).
	if limit := c.StartTimeout + startSlack + time.Second; took > limit {
		t.Errorf("Open() took %v; want at most %v", took, limit)
	}
}

// TestOpenDegradedEtcdWithCredentials: an etcd engine with a username
// authenticates while its client is built, so with its cluster down there
// is no engine to start degraded: Open fails, naming it.
func TestOpenDegradedEtcdWithCredentials(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := loadYAML(t, fmt.Sprintf(`
start_timeout: 1s
engines:
  - {name: etcd-auth, type: etcd, endpoints: ["127.0.0.1:1"], username: app, password: secret}
  - {name: good, type: redis, addrs: [%q]}
`, redisAddr))
	start := time.Now()
	sw, err := config.Open(context.Background(), c, quiet)
	took := time.Since(start)
	if err == nil {
		_ = sw.Close()
		t.Fatal("Open() = nil error; want one naming engines[0]")
	}
	if !errors.Is(err, locker.ErrUnavailable) || !strings.Contains(err.Error(), `engines[0] "etcd-auth"`) || strings.Contains(err.Error(), "good") {
		t.Errorf("Open() = %v; want ErrUnavailable naming engines[0] \"etcd-auth\" only", err)
	}
	if limit := c.StartTimeout + startSlack; took > limit {
		t.Errorf("Open() took %v; want at most %v", took, limit)
	}
}

// serverEngine starts a server of kind and returns it with the YAML of an
// engine named name on it, with prefix unless it is empty.
func serverEngine(t *testing.T, kind, name, prefix string) (*testserver.Server, string) {
	t.Helper()
	var srv *testserver.Server
	var addrs string
	switch kind {
	case config.TypeRedis:
		srv = testserver.Redis(t)
		addrs = "addrs"
	case config.TypeEtcd:
		srv = testserver.Etcd(t)
		addrs = "endpoints"
	case config.TypeZK:
		srv = testserver.ZooKeeper(t)
		addrs = "servers"
		if prefix != "" {
			prefix = "/" + prefix
		}
	default:
		t.Fatalf("serverEngine: unknown kind %q", kind)
	}
	engine := fmt.Sprintf("{name: %s, type: %s, %s: [%q]", name, kind, addrs, srv.Addr())
	if prefix != "" {
		engine += ", prefix: " + prefix
	}
	if kind == config.TypeZK {
		engine += ", session_timeout: 4s"
	}
	return srv, engine + "}"
}

// TestOpenZKStartTimeout: Open of a lone zk engine is bounded by
// start_timeout whatever its address does: hang, refuse, or speak another
// protocol first (a wrong port: SSH, MySQL...), which is reported as such
// at once, without go-zookeeper allocating the gigabytes that the greeting
// reads as a packet length, again at every reconnection. (Before
// WithLazyConnect, Open waited for the session its own dial timeout, 5s.)
func TestOpenZKStartTimeout(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		why        string // in the error
	}{
		{"hangs", silent(t), "deadline exceeded"},
		{"refuses", "127.0.0.1:1", "refused"},
		{"speaks first", greeter(t, "SSH-2.0-OpenSSH_9.6\r\n"), `answered "SSH-": not a ZooKeeper server`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			c := loadYAML(t, fmt.Sprintf("start_timeout: 1s\nsource: {type: none}\nengines:\n  - {name: z, type: zk, servers: [%q]}\n", tc.addr))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			sw, err := config.Open(context.Background(), c, quiet)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if err == nil {
				_ = sw.Close()
				t.Fatal("Open() = nil error; want ErrUnavailable")
			}
			if !errors.Is(err, locker.ErrUnavailable) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("Open() = %v; want ErrUnavailable saying %q", err, tc.why)
			}
			// A second more: see TestOpenNoEngineAnswers.
			if limit := c.StartTimeout + startSlack + time.Second; took > limit {
				t.Errorf("Open() took %v; want at most %v", took, limit)
			}
			if mb := (after.TotalAlloc - before.TotalAlloc) >> 20; mb > 64 {
				t.Errorf("Open() allocated %d MB; want a few", mb)
			}
		})
	}
}
