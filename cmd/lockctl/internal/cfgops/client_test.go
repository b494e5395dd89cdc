package cfgops_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/orthrus-go/orthrus/cmd/lockctl/internal/cfgops"
	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// checkDialClients checks that DialClient gives the raw client of each
// engine of c, named after its type and connected as Open connects the
// engine, by a write and a read in the application's namespace "app1";
// TestOpenTLSWithSecrets runs it over mutual TLS with credentials.
func checkDialClients(ctx context.Context, t *testing.T, c *config.Config, opts ...config.Option) {
	t.Helper()
	for _, tc := range []struct {
		engine string
		use    func(*cfgops.Client) error
	}{
		{"redis", func(cl *cfgops.Client) error {
			if err := cl.Redis.Set(ctx, "app1:dialclient", "v", 0).Err(); err != nil {
				return err
			}
			got, err := cl.Redis.Get(ctx, "app1:dialclient").Result()
			if err == nil && got != "v" {
				err = fmt.Errorf("Get = %q; want v", got)
			}
			return err
		}},
		{"etcd", func(cl *cfgops.Client) error {
			if _, err := cl.Etcd.Put(ctx, "app1/dialclient", "v"); err != nil {
				return err
			}
			got, err := cl.Etcd.Get(ctx, "app1/dialclient")
			if err == nil && (len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v") {
				err = fmt.Errorf("Get = %v; want v", got.Kvs)
			}
			return err
		}},
		{"zk", func(cl *cfgops.Client) error {
			// The engine's ACL: creator-only with credentials.
			if len(cl.ZKACL) != 1 || cl.ZKACL[0].Scheme != "auth" {
				return fmt.Errorf("ZKACL = %v; want the auth scheme", cl.ZKACL)
			}
			// The parent, which an engine would have made, when none has.
			for _, p := range []string{"/app1", "/app1/dialclient"} {
				if _, err := cl.ZK.Create(p, []byte("v"), 0, cl.ZKACL); err != nil && (p == "/app1/dialclient" || !errors.Is(err, gozk.ErrNodeExists)) {
					return err
				}
			}
			got, _, err := cl.ZK.Get("/app1/dialclient")
			if err == nil && string(got) != "v" {
				err = fmt.Errorf("Get = %q; want v", got)
			}
			return err
		}},
	} {
		cl, err := cfgops.DialClient(ctx, c, tc.engine, false, opts...)
		if err != nil {
			t.Errorf("DialClient(%s) = %v", tc.engine, err)
			continue
		}
		if cl.Name != tc.engine || cl.Type != tc.engine {
			t.Errorf("DialClient(%s) = %s of type %s; want the engine", tc.engine, cl.Name, cl.Type)
		}
		if err := tc.use(cl); err != nil {
			t.Errorf("DialClient(%s): %v", tc.engine, err)
		}
		if err := cl.Close(); err != nil {
			t.Errorf("DialClient(%s): Close() = %v", tc.engine, err)
		}
		if err := cl.Close(); err != nil {
			t.Errorf("DialClient(%s): second Close() = %v; want the first's, nil", tc.engine, err)
		}
	}
}

// DialClient refuses bad arguments before dialling, and reports a server
// that does not answer within start_timeout.
func TestDialClientErrors(t *testing.T) {
	c := loadYAML(t, `
start_timeout: 500ms
engines:
  - {name: redis, type: redis, addrs: ["127.0.0.1:1"]}
  - {name: etcd, type: etcd, endpoints: ["127.0.0.1:1"]}
  - {name: zk, type: zk, servers: ["127.0.0.1:1"]}
  - {name: quorum, type: redlock, addrs: ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}
`)
	ctx := context.Background()
	// A redlock engine has no store of the idempotency gate: said at once.
	if _, err := cfgops.DialClient(ctx, c, "quorum", false, quiet); !errors.Is(err, locker.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), `"quorum" (redlock)`) || !strings.Contains(err.Error(), "no raw client for a redlock engine: the idempotency gate stores on redis, etcd or zk") {
		t.Errorf("DialClient(quorum) = %v; want ErrInvalidArgument saying a redlock engine has no idempotency store", err)
	}
	if _, err := cfgops.DialClient(ctx, c, "nope", false, quiet); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("DialClient(nope) = %v; want ErrInvalidArgument naming it", err)
	}
	if _, err := cfgops.DialClient(ctx, nil, "redis", false); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("DialClient(nil config) = %v; want ErrInvalidArgument", err)
	}
	for _, name := range []string{"redis", "etcd", "zk"} {
		start := time.Now()
		cl, err := cfgops.DialClient(ctx, c, name, false, quiet)
		if err == nil {
			_ = cl.Close()
		}
		if !errors.Is(err, locker.ErrUnavailable) || !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("DialClient(%s) of a dead server = %v; want ErrUnavailable naming it", name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("DialClient(%s) of a dead server took %v; want about start_timeout (500ms)", name, d)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cfgops.DialClient(cctx, c, "zk", false, quiet); !errors.Is(err, context.Canceled) {
		t.Errorf("DialClient() with a cancelled context = %v; want context.Canceled", err)
	}
}

// TestDialClientWhileAnotherEngineIsDown: DialClient dials only the engine
// it is asked for.
func TestDialClientWhileAnotherEngineIsDown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := loadYAML(t, fmt.Sprintf(`
start_timeout: 1s
engines:
  - {name: down, type: redis, addrs: ["127.0.0.1:1"]}
  - {name: up, type: redis, addrs: [%q]}
`, redisAddr))
	cl, err := cfgops.DialClient(context.Background(), c, "up", false, quiet)
	if err != nil {
		t.Fatalf("DialClient(up) = %v; want a client", err)
	}
	defer cl.Close()
	if err := cl.Redis.Ping(context.Background()).Err(); err != nil {
		t.Errorf("Ping() = %v", err)
	}
}

// TestDialClientAllowDown: with allowDown, DialClient returns the client of
// a server that is down, with Down set, and the client works once the
// server is back; without, it fails naming the engine.
func TestDialClientAllowDown(t *testing.T) {
	for _, kind := range []string{config.TypeRedis, config.TypeEtcd, config.TypeZK} {
		t.Run(kind, func(t *testing.T) {
			srv, engine := serverEngine(t, kind, "down")
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
				goleak.IgnoreAnyFunction("github.com/orthrus-go/orthrus/internal/testserver.(*Server).start.func1"))
			if err := srv.Kill(); err != nil {
				t.Fatal(err)
			}
			c := loadYAML(t, fmt.Sprintf("start_timeout: 1s\nengines:\n  - %s\n  - {name: up, type: redis, addrs: [%q]}\n", engine, redisAddr))
			ctx := context.Background()
			if cl, err := cfgops.DialClient(ctx, c, "down", false, quiet); err == nil {
				_ = cl.Close()
				t.Errorf("DialClient(down) = nil error; want ErrUnavailable")
			} else if !errors.Is(err, locker.ErrUnavailable) || !strings.Contains(err.Error(), `engines[0] "down"`) {
				t.Errorf("DialClient(down) = %v; want ErrUnavailable naming engines[0] \"down\"", err)
			}
			start := time.Now()
			cl, err := cfgops.DialClient(ctx, c, "down", true, quiet)
			if err != nil {
				t.Fatalf("DialClient(down, allowDown) = %v; want a client", err)
			}
			defer cl.Close()
			if took := time.Since(start); took > c.StartTimeout+500*time.Millisecond {
				t.Errorf("DialClient() took %v; want at most %v", took, c.StartTimeout+500*time.Millisecond)
			}
			if !errors.Is(cl.Down, locker.ErrUnavailable) {
				t.Errorf("Client.Down = %v; want ErrUnavailable", cl.Down)
			}
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			eventually(t, 15*time.Second, "a write through the client", func() bool {
				ctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				switch kind {
				case config.TypeRedis:
					return cl.Redis.Set(ctx, "allowdown", "v", 0).Err() == nil
				case config.TypeEtcd:
					_, err := cl.Etcd.Put(ctx, "allowdown", "v")
					return err == nil
				default:
					_, err := cl.ZK.Create("/allowdown", []byte("v"), 0, cl.ZKACL)
					return err == nil || errors.Is(err, gozk.ErrNodeExists)
				}
			})
		})
	}
}

// serverEngine starts a server of kind and returns it with the YAML of an
// engine named name on it.
func serverEngine(t *testing.T, kind, name string) (*testserver.Server, string) {
	t.Helper()
	start, key, more := testserver.Redis, "addrs", ""
	switch kind {
	case config.TypeEtcd:
		start, key = testserver.Etcd, "endpoints"
	case config.TypeZK:
		start, key, more = testserver.ZooKeeper, "servers", ", session_timeout: 4s"
	}
	srv := start(t)
	return srv, fmt.Sprintf("{name: %s, type: %s, %s: [%q]%s}", name, kind, key, srv.Addr(), more)
}

// eventually polls cond until it holds or d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) { // polling with a deadline
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}
