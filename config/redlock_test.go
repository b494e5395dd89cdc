package config_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// A redlock engine over three independent redis-servers takes a lock held
// on every node; Close closes the clients Open dialled for it. With four
// nodes, Open warns through its logger that the fourth adds no tolerance.
func TestOpenRedlock(t *testing.T) {
	var addrs []string
	for range 4 {
		addrs = append(addrs, testserver.Redis(t).Addr())
	}
	for _, tc := range []struct {
		name string
		n    int
		warn bool
	}{{"three", 3, false}, {"four", 4, true}} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			nodes := addrs[:tc.n]
			prefix := "config-redlock-" + tc.name
			c := loadYAML(t, fmt.Sprintf(`
engines:
  - {name: q, type: redlock, addrs: [%s], prefix: %s, node_timeout: 250ms}
  - {name: r, type: redis, addrs: [%q], prefix: %s}
lock: {ttl: 5s}
source: {type: none}
`, quoteList(nodes), prefix, redisAddr, prefix))
			rec := new(logRecorder)
			sw := open(t, c, config.WithLogger(slog.New(rec)))
			const even = "an even number of nodes tolerates no more failures than one node fewer"
			if got := rec.count(even); (got > 0) != tc.warn {
				t.Errorf("%d nodes: %d warnings %q in %q; want them: %v", tc.n, got, even, rec.all(), tc.warn)
			}
			lockOnEveryNode(t, sw, nodes, prefix+":{job}")
			if err := sw.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			for _, a := range nodes {
				eventually(t, 5*time.Second, a+": only the test's client left after Close", func() bool { return clients(t, a) == 1 })
			}
		})
	}
}

// lockOnEveryNode takes the lock "job" on sw's redlock engine and checks
// that every node holds its key.
func lockOnEveryNode(t *testing.T, sw *config.Failover, nodes []string, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := sw.NewLocker("job")
	if err != nil {
		t.Fatalf("NewLocker() = %v", err)
	}
	if err := l.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() = %v", err)
	}
	if got := l.Engine(); got != "q" {
		t.Errorf("Lease.Engine() = %q; want q, the redlock engine", got)
	}
	for _, a := range nodes {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		n, err := c.Exists(ctx, key).Result()
		_ = c.Close()
		if err != nil || n != 1 {
			t.Errorf("node %s: EXISTS %s = %d, %v; want the hold on every node", a, key, n, err)
		}
	}
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// clients counts the connections redis-server at addr has, the one asking
// included.
func clients(t *testing.T, addr string) int {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST on %s: %v", addr, err)
	}
	return strings.Count(strings.TrimSpace(list), "\n") + 1
}

func quoteList(addrs []string) string {
	q := make([]string, len(addrs))
	for i, a := range addrs {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, ", ")
}

// A redlock engine's node timeout comes from the file or the environment,
// and sets the engine's minimum TTL: 100ms + twice it.
func TestLoadRedlock(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, t.TempDir(), "c.yaml", `
lock: {ttl: 200ms}
engines:
  - {name: q, type: redlock, addrs: ["h1:6379", "h2:6379", "h3:6379"], node_timeout: 50ms, password: p}
`)
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("Load() = %v; want 200ms accepted with a 50ms node timeout", err)
	}
	if e := c.Engines[0]; e.NodeTimeout != 50*time.Millisecond || len(e.Addrs) != 3 || e.Password != "p" {
		t.Errorf("engine = %+v; want node_timeout 50ms, 3 addrs, the password", e)
	}
	t.Setenv(config.EnvName("q", "node_timeout"), "75ms")
	if _, err := config.Load(path); err == nil || !strings.Contains(err.Error(), `lock.ttl: 200ms is below 250ms, the minimum TTL of engine "q" (redlock)`) {
		t.Errorf("Load() with %s=75ms = %v; want lock.ttl below 250ms", config.EnvName("q", "node_timeout"), err)
	}
}

// A redlock engine's username, password_file and tls apply to every node:
// three redis-servers that require TLS with a client certificate and an
// ACL user grant a lock, and a wrong password fails Open with
// ErrPermission (not an outage, which a degraded start would retry).
func TestOpenRedlockTLS(t *testing.T) {
	clearEnv(t)
	certs := testserver.TestCerts(t)
	const secret = "redlock-pw-7d1e0a"
	var addrs []string
	for range 3 {
		s := testserver.Redis(t, testserver.WithTLS(certs))
		if err := testserver.RedisACL(s, "app1", secret, "~*", "&*", "+@all"); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, s.TLSAddr())
	}
	dir := t.TempDir()
	pw := writeFile(t, dir, "pw", secret+"\n")
	c, err := config.Load(writeFile(t, dir, "orthrus.yaml", fmt.Sprintf(`
engines:
  - name: q
    type: redlock
    addrs: [%s]
    prefix: config-redlock-tls
    node_timeout: 250ms
    username: app1
    password_file: %q
    tls: {enabled: true, ca_file: %q, cert_file: %q, key_file: %q}
source: {type: none}
`, quoteList(addrs), pw, certs.CAFile, certs.ClientCertFile, certs.ClientKeyFile)))
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	sw := open(t, c, quiet)
	lockOnEveryNode(t, sw, nil, "")
	if err := sw.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	c.Engines[0].Password = "not-" + secret
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sw, err = config.Open(ctx, c, quiet)
	if err == nil {
		_ = sw.Close()
	}
	if !errors.Is(err, locker.ErrPermission) || strings.Contains(err.Error(), secret) {
		t.Errorf("Open() with a wrong password = %v; want ErrPermission, without the secret", err)
	}
}
