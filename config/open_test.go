package config_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// logRecorder is a slog handler that keeps the messages, for tests that
// wait for something to be logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.mu.Lock()
	r.msgs = append(r.msgs, b.String())
	r.mu.Unlock()
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// all returns the messages so far.
func (r *logRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// count returns how many messages contain s.
func (r *logRecorder) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

var quiet = config.WithLogger(slog.New(slog.DiscardHandler))

// eventually polls cond every 10ms until it holds or d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

func open(t *testing.T, c *config.Config, opts ...config.Option) *config.Failover {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sw, err := config.Open(ctx, c, opts...)
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	t.Cleanup(func() { _ = sw.Close() })
	return sw
}

func loadYAML(t *testing.T, content string) *config.Config {
	t.Helper()
	clearEnv(t)
	c, err := config.Load(writeFile(t, t.TempDir(), "orthrus.yaml", content))
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	return c
}

func TestOpenEveryEngine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := loadYAML(t, fmt.Sprintf(`
name: test
active: etcd
engines:
  - {name: redis, type: redis, addrs: [%q], prefix: config-test}
  - {name: zk, type: zk, servers: [%q], prefix: /config-test, session_timeout: 2s}
  - {name: etcd, type: etcd, endpoints: [%q], prefix: config-test}
  - {name: postgres, type: postgres, dsn: %q, prefix: config-test}
lock: {ttl: 20s}
source: {type: none} # switched by hand below
`, redisAddr, zkAddr, etcdAddr, pgDSN))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sw, err := config.Open(ctx, c, quiet)
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	if got := sw.Current(); got != "etcd" {
		t.Errorf("Current() = %q; want etcd (active)", got)
	}
	if sw.Name() != "test" || sw.Source() != nil {
		t.Errorf("Name(), Source() = %q, %v; want test, nil", sw.Name(), sw.Source())
	}
	for _, name := range []string{"redis", "zk", "etcd", "postgres"} {
		if _, err := sw.SwitchEngineTo(name); err != nil {
			t.Fatalf("SwitchEngineTo(%q) = %v", name, err)
		}
		l, err := sw.NewLocker("job")
		if err != nil {
			t.Fatalf("NewLocker() = %v", err)
		}
		if err := l.LockCtx(ctx); err != nil {
			t.Fatalf("%s: LockCtx() = %v", name, err)
		}
		if got := l.Engine(); got != name {
			t.Errorf("Lease.Engine() = %q; want %q", got, name)
		}
		if err := l.Unlock(); err != nil {
			t.Errorf("%s: Unlock() = %v", name, err)
		}
	}
	if err := sw.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := sw.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
}

// TestOpenLockTTL: lock.ttl is the default of every Locker, and the
// caller's options win over it.
func TestOpenLockTTL(t *testing.T) {
	c := loadYAML(t, fmt.Sprintf(`
engines:
  - {name: redis, type: redis, addrs: [%q], prefix: config-ttl}
lock: {ttl: 7s}
`, redisAddr))
	sw := open(t, c, quiet)
	rc := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer rc.Close()
	for _, tc := range []struct {
		name string
		opts []locker.Option
		max  time.Duration
	}{
		{"config", nil, 7 * time.Second},
		{"caller", []locker.Option{locker.WithTTL(3 * time.Second)}, 3 * time.Second},
	} {
		l, err := sw.NewLocker("ttl-"+tc.name, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Lock(); err != nil {
			t.Fatal(err)
		}
		keys, err := rc.Keys(context.Background(), "config-ttl*ttl-"+tc.name+"*").Result()
		if err != nil || len(keys) == 0 {
			t.Fatalf("%s: no key for the lock: %v, %v", tc.name, keys, err)
		}
		var ttl time.Duration
		for _, k := range keys {
			if strings.HasSuffix(k, ":fence") {
				continue // the fencing counter, whose TTL is its own
			}
			if d, _ := rc.PTTL(context.Background(), k).Result(); d > ttl {
				ttl = d
			}
		}
		if ttl <= 0 || ttl > tc.max {
			t.Errorf("%s: PTTL = %v; want at most %v", tc.name, ttl, tc.max)
		}
		_ = l.Unlock()
	}
}

// silent accepts connections and never answers: a server that hangs.
func silent(t *testing.T) string { return greeter(t, "") }

// greeter accepts connections and writes greeting on each, as a server
// whose protocol speaks first does (nothing for ""), then leaves them open
// until the test ends.
func greeter(t *testing.T, greeting string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, greeting) // a new socket's buffer takes it at once
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// TestOpenUnreachable: an engine that does not answer, whatever the way,
// starts degraded within start_timeout: its breaker open, a WARN naming it
// and why, the switcher on the engine that answered.
func TestOpenUnreachable(t *testing.T) {
	hang := silent(t)
	for _, tc := range []struct {
		name, engine string
	}{
		{"redis hangs", fmt.Sprintf("{name: bad, type: redis, addrs: [%q]}", hang)},
		{"redis refuses", "{name: bad, type: redis, addrs: [\"127.0.0.1:1\"]}"},
		{"zk hangs", fmt.Sprintf("{name: bad, type: zk, servers: [%q], dial_timeout: 500ms}", hang)},
		{"etcd hangs", fmt.Sprintf("{name: bad, type: etcd, endpoints: [%q]}", hang)},
		{"etcd refuses", "{name: bad, type: etcd, endpoints: [\"127.0.0.1:1\"]}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			c := loadYAML(t, fmt.Sprintf(`
start_timeout: 500ms
engines:
  - {name: bad, type: redis, addrs: ["127.0.0.1:1"]}
  - {name: good, type: redis, addrs: [%q]}
`, redisAddr))
			c.Engines[0] = loadYAML(t, "engines:\n  - "+tc.engine+"\n").Engines[0]
			logs := &logRecorder{}
			start := time.Now()
			sw, err := config.Open(context.Background(), c, config.WithLogger(slog.New(logs)))
			elapsed := time.Since(start)
			if err != nil {
				t.Fatalf("Open() = %v; want a switcher on good", err)
			}
			defer sw.Close()
			if got := sw.Current(); got != "good" {
				t.Errorf("Current() = %q; want good", got)
			}
			if st := sw.States()[0]; st.Breaker != gobreaker.StateOpen {
				t.Errorf("States()[0].Breaker = %v; want open", st.Breaker)
			}
			if logs.count(`engines[0] "bad"`) == 0 || logs.count("engine down at start") != 1 {
				t.Errorf("logs:\n%s\nwant one WARN naming engines[0] \"bad\"", strings.Join(logs.all(), "\n"))
			}
			if elapsed > 500*time.Millisecond+startSlack {
				t.Errorf("Open() took %v; want at most start_timeout (500ms) + %v", elapsed, startSlack)
			}
		})
	}
}

func TestOpenUnreachableSource(t *testing.T) {
	hang := silent(t)
	for _, tc := range []struct{ name, source string }{
		{"etcd", fmt.Sprintf("{type: etcd, endpoints: [%q], key: /k}", hang)},
		{"zk", fmt.Sprintf("{type: zk, servers: [%q], path: /k}", hang)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			c := loadYAML(t, fmt.Sprintf("start_timeout: 500ms\nengines:\n  - {name: good, type: redis, addrs: [%q]}\nsource: %s\n", redisAddr, tc.source))
			start := time.Now()
			sw, err := config.Open(context.Background(), c, quiet)
			if err == nil {
				_ = sw.Close()
				t.Fatal("Open() = nil error; want ErrUnavailable")
			}
			if !errors.Is(err, locker.ErrUnavailable) || !strings.Contains(err.Error(), "source") {
				t.Errorf("Open() = %v; want ErrUnavailable naming the source", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("Open() took %v; want about start_timeout (500ms)", d)
			}
		})
	}
}

func TestOpenInvalid(t *testing.T) {
	if _, err := config.Open(context.Background(), nil); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Open(nil) = %v; want ErrInvalidArgument", err)
	}
	c := &config.Config{Engines: []config.Engine{{Name: "a", Type: "redis"}}}
	var ve *config.ValidationError
	if _, err := config.Open(context.Background(), c); !errors.As(err, &ve) || !strings.Contains(err.Error(), "engines[0].addrs: empty") {
		t.Errorf("Open(no addrs) = %v; want a ValidationError naming engines[0].addrs", err)
	}
	c = &config.Config{
		Engines: []config.Engine{{Name: "a", Type: "redis", Addrs: []string{redisAddr}}},
		Source:  config.Source{Type: "file"},
	}
	if _, err := config.Open(context.Background(), c); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), "source.type") {
		t.Errorf("Open(file source, no file) = %v; want an error naming source.type", err)
	}
	if _, err := config.Open(context.Background(), c, config.WithLogger(nil)); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Open(WithLogger(nil)) = %v; want ErrInvalidArgument", err)
	}
	var nilCtx context.Context
	if _, err := config.Open(nilCtx, c); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Open(nil ctx) = %v; want ErrInvalidArgument", err)
	}
}

func TestOpenCancelled(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := &config.Config{Engines: []config.Engine{{Name: "a", Type: "redis", Addrs: []string{redisAddr}}}}
	if _, err := config.Open(ctx, c, quiet); !errors.Is(err, context.Canceled) {
		t.Errorf("Open(cancelled) = %v; want context.Canceled", err)
	}
}

// A Config built in code works without Load: zero means default.
func TestOpenConfigInCode(t *testing.T) {
	var got []switcher.Event
	var mu sync.Mutex
	c := &config.Config{
		Active: "b",
		Engines: []config.Engine{
			{Name: "a", Type: config.TypeRedis, Addrs: []string{redisAddr}, Prefix: "config-code-a"},
			{Name: "b", Type: config.TypeRedis, Addrs: []string{redisAddr}, Prefix: "config-code-b"},
		},
	}
	sw := open(t, c, quiet, config.WithSwitcherOptions(switcher.OnSwitch(func(ev switcher.Event) {
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	})))
	if sw.Current() != "b" {
		t.Errorf("Current() = %q; want b", sw.Current())
	}
	// Starting on active is not a switch: the first event is the next switch.
	if _, err := sw.SwitchEngineTo("a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "OnSwitch sees the switch b -> a, and nothing before it", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1 && got[0].From == "b" && got[0].To == "a"
	})
}

// twoRedis is the engines of a file: two redis engines, a and b.
func twoRedis() string {
	return fmt.Sprintf(`
engines:
  - {name: a, type: redis, addrs: [%[1]q], prefix: config-file-a}
  - {name: b, type: redis, addrs: [%[1]q], prefix: config-file-b}
`, redisAddr)
}

func TestFileSource(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	write := func(content string) {
		t.Helper()
		// Write and rename, as editors and config management do.
		tmp := filepath.Join(dir, ".orthrus.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "orthrus.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	valid := func(active string) string {
		return "active: " + active + "\nsource: {type: file}\n" + twoRedis()
	}
	write(valid("a"))
	c, err := config.Load(filepath.Join(dir, "orthrus.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logRecorder{}
	sw := open(t, c, config.WithLogger(slog.New(logs)))
	if sw.Current() != "a" {
		t.Fatalf("Current() = %q; want a", sw.Current())
	}

	write(valid("b"))
	eventually(t, time.Second, "switch to b", func() bool { return sw.Current() == "b" })

	// In place, as a plain write does.
	if err := os.WriteFile(filepath.Join(dir, "orthrus.yaml"), []byte(valid("a")), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "switch to a", func() bool { return sw.Current() == "a" })

	const rejected = "not valid; keeping the last good configuration"
	for i, bad := range []string{
		"active: b\nengines: [\n",                          // malformed YAML
		"active: [b]\nsource: {type: file}\n" + twoRedis(), // wrong type
		valid("nope"), // fails validation
		"",            // truncated
	} {
		write(bad)
		eventually(t, 2*time.Second, fmt.Sprintf("bad file %d logged", i), func() bool { return logs.count(rejected) > i })
		if sw.Current() != "a" {
			t.Fatalf("after bad file %d: Current() = %q; want a (kept)", i, sw.Current())
		}
	}
	write(valid("b"))
	eventually(t, time.Second, "switch to b after bad files", func() bool { return sw.Current() == "b" })

	// Other changes are not applied while running, and say so.
	write("active: b\nlock: {ttl: 10s}\nsource: {type: file}\n" + twoRedis())
	eventually(t, 2*time.Second, "other changes logged", func() bool { return logs.count("other than active") > 0 })
}

func TestEtcdSource(t *testing.T) {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A key and fleet name of this run alone: the engines' epoch records of
	// other fleets, or of this test's earlier runs (-count), do not raise
	// its epochs above the key's versions.
	run := time.Now().UnixNano()
	key := fmt.Sprintf("/config-test/%s-%d", t.Name(), run)
	if _, err := client.Put(ctx, key, "b"); err != nil {
		t.Fatal(err)
	}
	c := loadYAML(t, fmt.Sprintf("name: etcd-source-%d\nactive: a\nsource: {type: etcd, endpoints: [%q], key: %q}\n", run, etcdAddr, key)+twoRedis())
	// Two processes of a fleet.
	sw1, sw2 := open(t, c, quiet), open(t, c, quiet)
	for i, sw := range []*config.Failover{sw1, sw2} {
		if sw.Current() != "b" {
			t.Errorf("switcher %d: Current() = %q; want b (the key wins over active)", i, sw.Current())
		}
	}
	setter, ok := sw1.Source().(switcher.Setter)
	if !ok {
		t.Fatalf("Source() = %T; want a switcher.Setter", sw1.Source())
	}
	if err := setter.Set(ctx, "a"); err != nil {
		t.Fatalf("Set() = %v", err)
	}
	for i, sw := range []*config.Failover{sw1, sw2} {
		eventually(t, time.Second, fmt.Sprintf("switcher %d follows the key", i), func() bool { return sw.Current() == "a" })
	}
	// Both reach the key's version as their epoch.
	got, err := client.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	version := uint64(got.Kvs[0].Version)
	// Not a latency target (the switcher's tests measure those): generous
	// for a loaded machine.
	eventually(t, 5*time.Second, "epochs agree", func() bool { return sw1.Epoch() == version && sw2.Epoch() == version })
}

func TestZKSource(t *testing.T) {
	conn, _, err := gozk.Connect([]string{zkAddr}, 5*time.Second, gozk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	path := fmt.Sprintf("/config-test-%s-%d", t.Name(), time.Now().UnixNano()) // fresh under -count
	if _, err := conn.Create(path, []byte("b"), 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		t.Fatal(err)
	}
	c := loadYAML(t, fmt.Sprintf("name: zk-source\nactive: a\nsource: {type: zk, servers: [%q], path: %q}\n", zkAddr, path)+twoRedis())
	sw := open(t, c, quiet)
	if sw.Current() != "b" {
		t.Errorf("Current() = %q; want b (the node wins over active)", sw.Current())
	}
	if _, err := conn.Set(path, []byte("a"), -1); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "switcher follows the node", func() bool { return sw.Current() == "a" })
	if sw.Epoch() != 2 {
		t.Errorf("Epoch() = %d; want 2 (version 1 + 1)", sw.Epoch())
	}
}

// TestFileSourceSymlinkSwap: a Kubernetes ConfigMap volume updates a file
// by swapping the ..data symlink its path goes through.
func TestFileSourceSymlinkSwap(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	version := func(name, active string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name), "orthrus.yaml", "active: "+active+"\nsource: {type: file}\n"+twoRedis())
	}
	version("..v1", "a")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "orthrus.yaml")
	if err := os.Symlink(filepath.Join("..data", "orthrus.yaml"), path); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	sw := open(t, c, quiet)
	if sw.Current() != "a" {
		t.Fatalf("Current() = %q; want a", sw.Current())
	}
	version("..v2", "b")
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "switch to b", func() bool { return sw.Current() == "b" })
}
