package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// opsTTL is the TTL of the test's own holds: renewed every second, so that
// a forced-out holder learns of it within about a second.
const opsTTL = 3 * time.Second

// TestOps runs status, holders, unlock and switch, then a drill, as an
// operator would: the real command on a config file with source.type file,
// against real servers, while this test process holds locks through the
// same file.
func TestOps(t *testing.T) {
	redisAddr := testserver.Redis(t).Addr()
	zkAddr := testserver.ZooKeeper(t).Addr()
	etcdAddr := testserver.Etcd(t).Addr()
	redisEngine := fmt.Sprintf(`{name: redis, type: redis, addrs: [%q], prefix: lockctl-ops}`, redisAddr)
	zkEngine := fmt.Sprintf(`{name: zk, type: zk, servers: [%q], prefix: /lockctl-ops, session_timeout: 4s}`, zkAddr)
	etcdEngine := fmt.Sprintf(`{name: etcd, type: etcd, endpoints: [%q], prefix: lockctl-ops}`, etcdAddr)
	pgEngine := fmt.Sprintf(`{name: postgres, type: postgres, dsn: %q, prefix: lockctl-ops}`, testserver.Postgres(t).DSN())
	redlockEngine := fmt.Sprintf(`{name: redlock, type: redlock, addrs: [%s], prefix: lockctl-ops, node_timeout: 250ms}`, quoteList(redlockNodes(t)))

	for _, v := range []struct {
		name    string
		engines []string // engine lines, primary first
		names   []string // their names
	}{
		{"redis-zk", []string{redisEngine, zkEngine}, []string{"redis", "zk"}},
		{"etcd-zk", []string{etcdEngine, zkEngine}, []string{"etcd", "zk"}},
		{"postgres-redis", []string{pgEngine, redisEngine}, []string{"postgres", "redis"}},
		{"redlock-redis", []string{redlockEngine, redisEngine}, []string{"redlock", "redis"}},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			testOps(t, writeOpsConfig(t, v.names[0], v.engines), v.names)
		})
	}
	t.Run("drill", func(t *testing.T) {
		t.Parallel()
		path := writeOpsConfig(t, "redis", []string{redisEngine, zkEngine})
		before := readFile(t, path)
		code, out, errOut := lockctlRun(t, "", "drill", "--config", path, "--duration", "5s", "--switch-at", "2s", "--workers", "8", "--names", "16")
		t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
		if code != 0 {
			t.Fatalf("lockctl drill exited %d; want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		for _, want := range []string{"switch redis → zk (source)", "violations:      0", "PASS"} {
			if !strings.Contains(out, want) {
				t.Errorf("drill output lacks %q\nstdout:\n%s\nstderr:\n%s", want, out, errOut)
			}
		}
		if got := readFile(t, path); got != before {
			t.Errorf("config after the drill:\n%s\nwant it as before the drill's switch:\n%s", got, before)
		}
	})
}

// redlockNodes starts the three independent redis-servers of a redlock
// engine and returns their addresses.
func redlockNodes(t *testing.T) []string {
	var addrs []string
	for range 3 {
		addrs = append(addrs, testserver.Redis(t).Addr())
	}
	return addrs
}

func quoteList(addrs []string) string {
	q := make([]string, len(addrs))
	for i, a := range addrs {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, ", ")
}

// writeOpsConfig writes a YAML config of engines with source.type file and
// returns its path.
func writeOpsConfig(t *testing.T, active string, engines []string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# lockctl ops test\nname: ops\n")
	fmt.Fprintf(&b, "active: %s # lockctl switch rewrites this line\n", active)
	b.WriteString("source: {type: file}\nlock: {ttl: 3s}\nengines:   # primary first\n")
	for _, e := range engines {
		b.WriteString("  - " + e + "\n")
	}
	path := filepath.Join(t.TempDir(), "locks.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func testOps(t *testing.T, path string, names []string) {
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sw, err := config.Open(ctx, cfg, config.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	t.Cleanup(func() { _ = sw.Close() })

	// status: every engine, in order, the first one current.
	if got := status(t, path, names); got != names[0] {
		t.Errorf("status marks %q named; want %q", got, names[0])
	}

	for _, e := range sw.Engines() {
		t.Run(e.Name(), func(t *testing.T) {
			testHolders(t, path, e)
			if _, err := e.NewRWLock("ops-family"); errors.Is(err, errors.ErrUnsupported) {
				testNoFamily(t, path, e)
				return
			}
			testFamilyOps(t, path, e)
		})
	}

	// switch rewrites the file in place; status and the running switcher
	// (this process, watching the file) follow.
	before := readFile(t, path)
	code, _, errOut := lockctlRun(t, "", "switch", "--config", path, "nope")
	if code == 0 || !strings.Contains(errOut, `"nope"`) {
		t.Errorf("lockctl switch nope: exit %d, stderr %q; want non-zero naming \"nope\"", code, errOut)
	}
	if got := readFile(t, path); got != before {
		t.Errorf("config after a failed switch:\n%s\nwant it unchanged:\n%s", got, before)
	}
	target := names[1]
	code, out, errOut := lockctlRun(t, "", "switch", "--config", path, target)
	if code != 0 || !strings.Contains(out, "switched") {
		t.Fatalf("lockctl switch %s: exit %d, stdout %q, stderr %q; want 0 and switched", target, code, out, errOut)
	}
	want := strings.Replace(before, "active: "+names[0]+" #", "active: "+target+" #", 1)
	if got := readFile(t, path); got != want {
		t.Errorf("config after switch %s:\n%s\nwant:\n%s", target, got, want)
	}
	if got := status(t, path, names); got != target {
		t.Errorf("status after switch %s marks %q named; want %q", target, got, target)
	}
	deadline := time.Now().Add(2 * time.Second)
	for sw.Current() != target && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	if got := sw.Current(); got != target {
		t.Errorf("the running switcher's Current() = %q 2s after switch; want %q", got, target)
	}
}

// status runs lockctl status, checks that it lists the engines in order,
// healthy, and returns the one the source (the file) names.
func status(t *testing.T, path string, names []string) string {
	t.Helper()
	code, out, errOut := lockctlRun(t, "", "status", "--config", path)
	if code != 0 {
		t.Fatalf("lockctl status: exit %d, stderr %q; want 0", code, errOut)
	}
	rows := statusRows(t, out)
	if len(rows) != len(names) {
		t.Fatalf("lockctl status:\n%s\nwant %d engines", out, len(names))
	}
	current := ""
	for i, name := range names {
		f := strings.Fields(rows[name])
		if len(f) < 5 || f[1] != role(i) || f[2] != "unknown" || f[len(f)-2] != "ok" {
			t.Errorf("lockctl status row of %s = %q; want %s, processes unknown (a file source), healthy", name, rows[name], role(i))
			continue
		}
		if f[3] == "named" {
			if current != "" {
				t.Errorf("lockctl status:\n%s\nwant one engine named", out)
			}
			current = name
		}
	}
	return current
}

// testHolders holds a name on engine e in this process, then runs holders
// and unlock on it.
func testHolders(t *testing.T, path string, e locker.Engine) {
	name := fmt.Sprintf("ops/%s/%d", e.Name(), time.Now().UnixNano())
	owner := "lockctl-ops-test:" + e.Name()
	l, err := e.NewLocker(name, locker.WithOwner(owner), locker.WithTTL(opsTTL))
	if err != nil {
		t.Fatalf("NewLocker() = %v", err)
	}
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	held := l.(locker.Lease)
	released := false
	defer func() {
		if !released {
			_ = l.Unlock()
		}
	}()
	token := strconv.FormatUint(held.Token(), 10)

	code, out, errOut := lockctlRun(t, "", "holders", "--config", path, name)
	if code != 0 {
		t.Fatalf("lockctl holders: exit %d, stderr %q; want 0", code, errOut)
	}
	row := rowOf(out, e.Name())
	in, inspectable := e.(inspect.Inspector)
	if !inspectable {
		t.Fatalf("engine %s implements neither Inspect nor ForceUnlock; want both", e.Name())
	}
	f := strings.Fields(row)
	if len(f) < 4 || f[1] != "holder" || f[2] != owner || f[3] != token {
		t.Errorf("lockctl holders row of %s = %q; want holder %s with token %s\n%s", e.Name(), row, owner, token, out)
	}

	code, _, errOut = lockctlRun(t, "", "unlock", "--config", path, name)
	if code == 0 || !strings.Contains(errOut, "--force") {
		t.Errorf("lockctl unlock without --force: exit %d, stderr %q; want non-zero naming --force", code, errOut)
	}
	checkHeld(t, l)

	code, out, errOut = lockctlRun(t, "n\n", "unlock", "--force", "--config", path, name)
	if code == 0 || !strings.Contains(out, "[y/N]") || !strings.Contains(errOut, "nothing removed") {
		t.Errorf("lockctl unlock --force answered n: exit %d, stdout %q, stderr %q; want a prompt, non-zero, nothing removed", code, out, errOut)
	}
	checkHeld(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if info, err := in.Inspect(ctx, name); err != nil || info.Holder == nil || info.Holder.Token != held.Token() {
		t.Errorf("Inspect() after a refused unlock = %+v, %v; want the hold with token %d", info, err, held.Token())
	}

	code, out, errOut = lockctlRun(t, "", "unlock", "--force", "--yes", "--config", path, name)
	if code != 0 || !strings.Contains(out, "removed the hold") || !strings.Contains(out, owner) {
		t.Fatalf("lockctl unlock --force --yes: exit %d, stdout %q, stderr %q; want 0 and the hold of %s removed", code, out, errOut, owner)
	}
	select {
	case <-held.Lost():
	case <-time.After(2 * opsTTL):
		t.Fatalf("Lost() of the forced-out hold not closed within %v", 2*opsTTL)
	}
	released = true
	if err := l.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() of the forced-out hold = %v; want ErrLockLost", err)
	}
	if info, err := in.Inspect(ctx, name); err != nil || info.Holder != nil {
		t.Errorf("Inspect() after unlock --force = %+v, %v; want no holder", info, err)
	}
}

// rowOf returns the first line of out that starts with engine's name.
func rowOf(out, engine string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == engine {
			return line
		}
	}
	return ""
}

// checkHeld fails the test when l's hold was lost.
func checkHeld(t *testing.T, l locker.Handle) {
	t.Helper()
	select {
	case <-l.Lost():
		t.Fatal("the hold was lost; want it kept")
	default:
	}
}

// With an engine stopped (connection refused), status still reports each
// engine's health at once, and exits non-zero naming the engine down.
func TestStatusWithAnEngineDown(t *testing.T) {
	up := testserver.Redis(t)
	down := testserver.Redis(t)
	if err := down.Stop(); err != nil {
		t.Fatal(err)
	}
	path := writeOpsConfig(t, "up", []string{
		fmt.Sprintf(`{name: up, type: redis, addrs: [%q]}`, up.Addr()),
		fmt.Sprintf(`{name: down, type: redis, addrs: [%q], dial_timeout: 300ms}`, down.Addr()),
	})
	code, out, errOut := lockctlRun(t, "", "status", "--config", path)
	if code == 0 {
		t.Errorf("lockctl status with an engine down exited 0; want non-zero")
	}
	rows := statusRows(t, out)
	if !strings.Contains(rows["up"], " ok") || !strings.Contains(rows["down"], "DOWN") {
		t.Errorf("status rows:\n%s\nwant up ok and down DOWN", out)
	}
	if !strings.Contains(errOut, "engine(s) down: down") {
		t.Errorf("stderr %q; want it to name the engine down", errOut)
	}
}

// A redlock engine with one of its three nodes frozen: status calls it
// healthy but names the node that does not answer, and commands exit
// promptly instead of waiting on the frozen node at close.
func TestStatusRedlockNodeFrozen(t *testing.T) {
	var servers []*testserver.Server
	var addrs []string
	for range 3 {
		s := testserver.Redis(t)
		servers, addrs = append(servers, s), append(addrs, s.Addr())
	}
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = servers[2].Resume() })
	engine := fmt.Sprintf(`{name: redlock, type: redlock, addrs: [%s], prefix: lockctl-frozen, node_timeout: 250ms}`, quoteList(addrs))
	path := writeOpsConfig(t, "redlock", []string{engine})
	start := time.Now()
	code, out, errOut := lockctlRun(t, "", "status", "--config", path)
	if took := time.Since(start); code != 0 || took > 2*time.Second {
		t.Fatalf("lockctl status exited %d after %v; want 0 within 2s\nstdout:\n%s\nstderr:\n%s", code, took, out, errOut)
	}
	if want := "ok ("; !strings.Contains(out, want) || !strings.Contains(out, "1 of 3 nodes not answering: "+addrs[2]) {
		t.Errorf("status lacks the healthy quorum with node %s named as not answering\nstdout:\n%s", addrs[2], out)
	}
}
