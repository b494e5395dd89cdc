package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/internal/testserver"
)

// servers are the real servers of the drill tests, and read-only views of
// what is left on them.
type servers struct {
	redis, zk, etcd, postgres string // postgres: a DSN
}

func startServers(t *testing.T) servers {
	return servers{testserver.Redis(t).Addr(), testserver.ZooKeeper(t).Addr(), testserver.Etcd(t).Addr(), testserver.Postgres(t).DSN()}
}

// pgSchemas lists the PostgreSQL schemas whose name starts with prefix.
func (s servers) pgSchemas(t *testing.T, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.postgres)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(ctx, "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", prefix)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func (s servers) redisKeys(t *testing.T, pattern string) []string {
	t.Helper()
	return redisKeysOn(t, s.redis, pattern)
}

// redisKeysOn lists the keys of the redis-server at addr that match
// pattern.
func redisKeysOn(t *testing.T, addr, pattern string) []string {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	keys, err := c.Keys(context.Background(), pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// etcd returns a client of the etcd server, closed when the test ends,
// and a context for one request.
func (s servers) etcdClient(t *testing.T) (*clientv3.Client, context.Context) {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(func() { cancel(); _ = c.Close() })
	return c, ctx
}

func (s servers) etcdGet(t *testing.T, key string, prefix bool) map[string]string {
	t.Helper()
	c, ctx := s.etcdClient(t)
	var opts []clientv3.OpOption
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := c.Get(ctx, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func (s servers) etcdPut(t *testing.T, key, value string) {
	t.Helper()
	c, ctx := s.etcdClient(t)
	if _, err := c.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

// zkTree lists the nodes under the root whose path starts with prefix.
func (s servers) zkTree(t *testing.T, prefix string) []string {
	t.Helper()
	conn, _, err := gozk.Connect([]string{s.zk}, 5*time.Second, gozk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out []string
	var walk func(p string)
	walk = func(p string) {
		children, _, err := conn.Children(p)
		if err != nil {
			t.Fatalf("zk children %s: %v", p, err)
		}
		for _, c := range children {
			child := strings.TrimSuffix(p, "/") + "/" + c
			if strings.HasPrefix(child, prefix) || strings.HasPrefix(prefix, child+"/") {
				if strings.HasPrefix(child, prefix) {
					out = append(out, child)
				}
				walk(child)
			}
		}
	}
	walk("/")
	return out
}

// After a drill on a user's config, the file, the source key or node, and
// the application's prefixes are exactly as before: nothing left, nothing
// changed, whichever the source.
func TestDrillLeavesNoTrace(t *testing.T) {
	s := startServers(t)
	nodes := redlockNodes(t)
	for _, tc := range []struct {
		name    string
		active  string
		engines string
		source  string
		args    []string
	}{
		{"file", "redis", fmt.Sprintf(`  - {name: redis, type: redis, addrs: [%q], prefix: notrace-file/locks}
  - {name: zk, type: zk, servers: [%q], prefix: /notrace-file/locks, session_timeout: 4s}
`, s.redis, s.zk), "", nil},
		{"etcd", "etcd", fmt.Sprintf(`  - {name: etcd, type: etcd, endpoints: [%q], prefix: notrace-etcd/locks}
  - {name: redis, type: redis, addrs: [%q], prefix: notrace-etcd/locks}
`, s.etcd, s.redis), fmt.Sprintf("source: {type: etcd, endpoints: [%q], key: /notrace-etcd/active}\n", s.etcd), nil},
		{"zk", "zk", fmt.Sprintf(`  - {name: zk, type: zk, servers: [%q], prefix: /notrace-zk/locks, session_timeout: 4s}
  - {name: etcd, type: etcd, endpoints: [%q], prefix: notrace-zk/locks}
`, s.zk, s.etcd), fmt.Sprintf("source: {type: zk, servers: [%q], path: /notrace-zk/switch/active}\n", s.zk), nil},
		{"postgres", "postgres", fmt.Sprintf(`  - {name: postgres, type: postgres, dsn: %q, prefix: notrace-postgres}
  - {name: redis, type: redis, addrs: [%q], prefix: notrace-postgres/locks}
`, s.postgres, s.redis), "", nil},
		{"redlock", "redlock", fmt.Sprintf(`  - {name: redlock, type: redlock, addrs: [%s], prefix: notrace-redlock/locks, node_timeout: 250ms}
  - {name: redis, type: redis, addrs: [%q], prefix: notrace-redlock/locks}
`, quoteList(nodes), s.redis), "", nil},
		{"fleet", "redis", fmt.Sprintf(`  - {name: redis, type: redis, addrs: [%q], prefix: notrace-fleet/locks}
  - {name: etcd, type: etcd, endpoints: [%q], prefix: notrace-fleet/locks}
`, s.redis, s.etcd), fmt.Sprintf("source: {type: etcd, endpoints: [%q], key: /notrace-fleet/active}\n", s.etcd),
			[]string{"--processes", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app := "notrace-" + tc.name
			if tc.name == "fleet" {
				s.etcdPut(t, "/notrace-fleet/active", "redis") // a key that exists: put back as it was
			}
			path := filepath.Join(t.TempDir(), "app.yaml")
			// These cases check that the drill's planned switch goes
			// through the source and leaves nothing behind. Beside a CPU
			// hog, a starved engine can miss the 300ms health default three
			// times running (etcd did, 404ms after the planned switch), and
			// its breaker then rightly switches first: the failover tests
			// look at that, not these.
			health := "health: {timeout: 2s}\n"
			content := "# the application's own config\nactive: " + tc.active + "   # comment kept\nstart_timeout: 3s\nlock: {ttl: 3s}\n" + tc.source + health + "engines:\n" + tc.engines
			writeFile(t, path, content)
			sourceBefore := s.etcdGet(t, "/"+app, true)
			dir := t.TempDir()
			args := append([]string{"drill", "--config", path, "--duration", "4s", "--switch-at", "1500ms", "--workers", "4", "--names", "8", "--report", dir}, tc.args...)
			code, out, errOut := lockctlRun(t, "", args...)
			t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
			if code != 0 {
				t.Fatalf("lockctl drill exited %d; want 0", code)
			}
			for _, want := range []string{"(source)", "PASS", "cleaned: "} {
				if tc.name != "fleet" && !strings.Contains(out, want) {
					t.Errorf("drill output lacks %q", want)
				}
			}
			if got := readFile(t, path); got != content {
				t.Errorf("config file after the drill:\n%s\nwant it byte-identical:\n%s", got, content)
			}
			if got := s.etcdGet(t, "/"+app, true); fmt.Sprint(got) != fmt.Sprint(sourceBefore) {
				t.Errorf("etcd under /%s after the drill = %v; want %v", app, got, sourceBefore)
			}
			if got := s.redisKeys(t, app+"*"); len(got) > 0 {
				t.Errorf("redis keys left under %s*: %v", app, got)
			}
			for _, n := range nodes {
				if got := redisKeysOn(t, n, app+"*"); len(got) > 0 {
					t.Errorf("redlock node %s: keys left under %s*: %v", n, app, got)
				}
			}
			if got := s.etcdGet(t, app, true); len(got) > 0 {
				t.Errorf("etcd keys left under %s: %v", app, got)
			}
			if got := s.zkTree(t, "/"+app); len(got) > 0 {
				t.Errorf("zk nodes left under /%s: %v", app, got)
			}
			if got := s.pgSchemas(t, app); len(got) > 0 {
				t.Errorf("postgres schemas left named %s*: %v", app, got)
			}
			if tc.name == "fleet" {
				checkFleetReport(t, out, filepath.Join(dir, "report.json"))
				checkInBrowser(t, filepath.Join(dir, "report.html"))
			}
		})
	}
}

func checkFleetReport(t *testing.T, out, path string) {
	t.Helper()
	if !strings.Contains(out, "3 of 3 processes followed") || !strings.Contains(out, "fleet split:") || !strings.Contains(out, "fenced out:      p3") {
		t.Errorf("fleet drill output lacks the fleet figures:\n%s", out)
	}
	r := readReportJSON(t, path)
	f := r.Fleet
	if f == nil || len(f.Processes) != 3 || len(f.Switches) != 1 || f.Switches[0].Switched != 3 || len(f.Fencing) != 3 {
		t.Fatalf("report.json fleet = %+v; want 3 processes that all followed one switch", f)
	}
	if f.Switches[0].Spread > time.Second || f.Split > time.Second {
		t.Errorf("fleet spread %v, split %v; want both under 1s for a source flip", f.Switches[0].Spread, f.Split)
	}
	for _, p := range f.Processes {
		if len(p.Grants) != 0 || len(p.Timeline) == 0 || p.Timeline[len(p.Timeline)-1].Current != "etcd" {
			t.Errorf("process %s: %d grants kept, timeline of %d ticks ending on %q; want none kept and a timeline ending on etcd",
				p.Process, len(p.Grants), len(p.Timeline), p.Timeline[len(p.Timeline)-1].Current)
		}
	}
	if r.Acquired["redis"] == 0 || r.Acquired["etcd"] == 0 || r.Workers != 12 {
		t.Errorf("merged report: acquired %v, %d workers; want both engines used by 12 workers", r.Acquired, r.Workers)
	}
}

// Ctrl-C in the middle of a drill puts the flipped file back too.
func TestDrillInterruptedRestores(t *testing.T) {
	s := startServers(t)
	path := filepath.Join(t.TempDir(), "app.yaml")
	content := fmt.Sprintf(`active: redis
engines:
  - {name: redis, type: redis, addrs: [%q], prefix: interrupted/locks}
  - {name: etcd, type: etcd, endpoints: [%q], prefix: interrupted/locks}
`, s.redis, s.etcd)
	writeFile(t, path, content)
	cmd := exec.Command(os.Args[0], "drill", "--config", path, "--duration", "60s", "--switch-at", "500ms", "--workers", "2", "--names", "4")
	cmd.Env = lockctlEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.HasPrefix(readFile(t, path), "active: etcd") {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the drill did not flip the file within 20s\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the drill did not end within 20s of Ctrl-C")
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if got := readFile(t, path); got != content {
		t.Errorf("config file after Ctrl-C:\n%s\nwant it byte-identical:\n%s", got, content)
	}
	if got := s.redisKeys(t, "interrupted*"); len(got) > 0 {
		t.Errorf("redis keys left: %v", got)
	}
	if got := s.etcdGet(t, "interrupted", true); len(got) > 0 {
		t.Errorf("etcd keys left: %v", got)
	}
}
