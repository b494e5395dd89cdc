package cfgops_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/cmd/lockctl/internal/cfgops"
	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// Dial starts only the engines asked for, reports one that does not
// answer instead of failing, and refuses an unknown name before dialling.
func TestDial(t *testing.T) {
	c := loadYAML(t, fmt.Sprintf(`
start_timeout: 1s
engines:
  - {name: redis, type: redis, addrs: [%q], prefix: dial-test}
  - {name: gone, type: redis, addrs: ["127.0.0.1:1"], prefix: dial-test}
  - {name: etcd, type: etcd, endpoints: [%q], prefix: dial-test}
`, redisAddr, etcdAddr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := cfgops.Dial(ctx, c, []string{"nope"}, quiet); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Dial(nope) = %v; want ErrInvalidArgument naming it", err)
	}

	es, err := cfgops.Dial(ctx, c, []string{"etcd"}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if len(es.Dialed) != 1 || es.Dialed[0].Name != "etcd" || es.Dialed[0].Engine == nil {
		t.Errorf("Dial(etcd) = %+v; want the etcd engine alone", es.Dialed)
	}
	if err := es.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}

	start := time.Now()
	es, err = cfgops.Dial(ctx, c, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Dial of every engine took %v; want within start_timeout (1s) and a little", took)
	}
	var names []string
	for _, e := range es.Started() {
		names = append(names, e.Name())
	}
	failed := es.Failed()
	if fmt.Sprint(names) != "[redis etcd]" || len(failed) != 1 || failed[0].Name != "gone" || !errors.Is(failed[0].Err, locker.ErrUnavailable) {
		t.Errorf("Dial() started %v, failed %+v; want redis and etcd started, gone unavailable", names, failed)
	}
	l, err := es.Started()[1].NewLocker("dial/x")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() on a dialled engine = %v", err)
	}
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// engines[].fair gives a fair redis engine.
func TestDialFair(t *testing.T) {
	c := loadYAML(t, fmt.Sprintf(`
engines:
  - {name: fair, type: redis, addrs: [%q], prefix: dial-fair, fair: true}
  - {name: plain, type: redis, addrs: [%q], prefix: dial-fair}
`, redisAddr, redisAddr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	es, err := cfgops.Dial(ctx, c, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	for i, want := range []bool{true, false} {
		e, ok := es.Dialed[i].Engine.(*redis.Engine)
		if !ok || e.Fair() != want {
			t.Errorf("engine %q: %T, Fair() = %v; want a *redis.Engine, %v", es.Dialed[i].Name, es.Dialed[i].Engine, ok && e.Fair(), want)
		}
	}
}

// A source's Snapshot and Restore put an etcd key or a zk node back as it
// was, its absence (and a zk node's missing parents) included.
func TestSourceRestore(t *testing.T) {
	engines := fmt.Sprintf("engines:\n  - {name: a, type: redis, addrs: [%q]}\n  - {name: b, type: redis, addrs: [%q]}\n", redisAddr, redisAddr)
	for _, tc := range []struct {
		name, source string
		read         func(t *testing.T) string // "" when absent
	}{
		{"etcd", fmt.Sprintf("source: {type: etcd, endpoints: [%q], key: /restore-test/active}\n", etcdAddr), func(t *testing.T) string {
			return etcdValue(t, "/restore-test/active")
		}},
		{"zk", fmt.Sprintf("source: {type: zk, servers: [%q], path: /restore-test/deep/active}\n", zkAddr), func(t *testing.T) string {
			return zkValue(t, "/restore-test")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := loadYAML(t, engines+tc.source)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			h, err := cfgops.DialSource(ctx, c, quiet)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			setter := h.Source().(switcher.Setter)
			initial, err := h.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _, _ = h.Restore(ctx, initial) }() // leave nothing for the next run

			for _, before := range []string{"", "a"} {
				if before != "" {
					if err := setter.Set(ctx, before); err != nil {
						t.Fatal(err)
					}
				}
				was := tc.read(t)
				snap, err := h.Snapshot(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := setter.Set(ctx, "b"); err != nil {
					t.Fatal(err)
				}
				if v, err := h.Read(ctx); err != nil || v.Engine != "b" || !v.Exists || v.Epoch == 0 {
					t.Errorf("Read() after Set(b) = %+v, %v; want b with an epoch", v, err)
				}
				changed, err := h.Restore(ctx, snap)
				if err != nil || !changed {
					t.Errorf("Restore() = %v, %v; want true, nil", changed, err)
				}
				if got := tc.read(t); got != was {
					t.Errorf("after Restore: %q; want %q as before", got, was)
				}
				if changed, err := h.Restore(ctx, snap); err != nil || changed {
					t.Errorf("second Restore() = %v, %v; want false, nil", changed, err)
				}
			}
		})
	}
}

// etcdValue describes the keys under prefix: "" when there are none.
func etcdValue(t *testing.T, prefix string) string {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "%s=%s;", kv.Key, kv.Value)
	}
	return b.String()
}

// zkValue describes the tree under root: "" when root does not exist.
func zkValue(t *testing.T, root string) string {
	t.Helper()
	conn, _, err := gozk.Connect([]string{zkAddr}, 5*time.Second, gozk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var b strings.Builder
	var walk func(string)
	walk = func(p string) {
		data, _, err := conn.Get(p)
		if errors.Is(err, gozk.ErrNoNode) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%s;", p, data)
		children, _, err := conn.Children(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range children {
			walk(p + "/" + c)
		}
	}
	walk(root)
	return b.String()
}

// A drill scope's Remove takes away everything under the drill prefixes,
// and the zk parents the drill created, and nothing of the application's.
func TestDrillScopeRemove(t *testing.T) {
	c := loadYAML(t, fmt.Sprintf(`
engines:
  - {name: redis, type: redis, addrs: [%q], prefix: scope-test/locks}
  - {name: zk, type: zk, servers: [%q], prefix: /scope-test-zk/app/locks, session_timeout: 4s}
  - {name: etcd, type: etcd, endpoints: [%q], prefix: scope-test/locks}
`, redisAddr, zkAddr, etcdAddr))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.ForDrill("Not-OK"); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("ForDrill(Not-OK) = %v; want ErrInvalidArgument", err)
	}
	scope, err := cfgops.NewDrillScope(ctx, c, "t1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	dc := scope.Config()
	for i, want := range []string{"scope-test/locks-lockctl-drill-t1", "/scope-test-zk/app/locks-lockctl-drill-t1", "scope-test/locks-lockctl-drill-t1"} {
		if dc.Engines[i].Prefix != want {
			t.Errorf("drill prefix of %s = %q; want %q", dc.Engines[i].Name, dc.Engines[i].Prefix, want)
		}
	}
	// The drill's locks, through a switcher on the drill config.
	sw, err := config.Open(ctx, dc, quiet)
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	defer sw.Close()
	for _, e := range sw.Engines() {
		l, err := e.NewLocker("drill/1")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.LockCtx(ctx); err != nil {
			t.Fatalf("%s: LockCtx() = %v", e.Name(), err)
		}
		if err := l.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := scope.Remove(ctx); err != nil {
		t.Fatalf("Remove() = %v", err)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer rc.Close()
	if keys, err := rc.Keys(ctx, "scope-test*").Result(); err != nil || len(keys) > 0 {
		t.Errorf("redis keys left: %v, %v", keys, err)
	}
	if got := etcdValue(t, "scope-test"); got != "" {
		t.Errorf("etcd key left: %q", got)
	}
	if got := zkValue(t, "/scope-test-zk"); got != "" {
		t.Errorf("zk nodes left: %s", got)
	}
}
