package config_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/config"
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
		use    func(*config.Client) error
	}{
		{"redis", func(cl *config.Client) error {
			if err := cl.Redis.Set(ctx, "app1:dialclient", "v", 0).Err(); err != nil {
				return err
			}
			got, err := cl.Redis.Get(ctx, "app1:dialclient").Result()
			if err == nil && got != "v" {
				err = fmt.Errorf("Get = %q; want v", got)
			}
			return err
		}},
		{"etcd", func(cl *config.Client) error {
			if _, err := cl.Etcd.Put(ctx, "app1/dialclient", "v"); err != nil {
				return err
			}
			got, err := cl.Etcd.Get(ctx, "app1/dialclient")
			if err == nil && (len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v") {
				err = fmt.Errorf("Get = %v; want v", got.Kvs)
			}
			return err
		}},
		{"zk", func(cl *config.Client) error {
			// The engine's ACL: creator-only with credentials.
			if len(cl.ZKACL) != 1 || cl.ZKACL[0].Scheme != "auth" {
				return fmt.Errorf("ZKACL = %v; want the auth scheme", cl.ZKACL)
			}
			if _, err := cl.ZK.Create("/app1/dialclient", []byte("v"), 0, cl.ZKACL); err != nil {
				return err
			}
			got, _, err := cl.ZK.Get("/app1/dialclient")
			if err == nil && string(got) != "v" {
				err = fmt.Errorf("Get = %q; want v", got)
			}
			return err
		}},
	} {
		cl, err := config.DialClient(ctx, c, tc.engine, opts...)
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
	clearEnv(t)
	c := loadYAML(t, `
start_timeout: 500ms
engines:
  - {name: redis, type: redis, addrs: ["127.0.0.1:1"]}
  - {name: etcd, type: etcd, endpoints: ["127.0.0.1:1"]}
  - {name: zk, type: zk, servers: ["127.0.0.1:1"]}
`)
	ctx := context.Background()
	if _, err := config.DialClient(ctx, c, "nope", quiet); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("DialClient(nope) = %v; want ErrInvalidArgument naming it", err)
	}
	if _, err := config.DialClient(ctx, nil, "redis"); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("DialClient(nil config) = %v; want ErrInvalidArgument", err)
	}
	for _, name := range []string{"redis", "etcd", "zk"} {
		start := time.Now()
		cl, err := config.DialClient(ctx, c, name, quiet)
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
	if _, err := config.DialClient(cctx, c, "zk", quiet); !errors.Is(err, context.Canceled) {
		t.Errorf("DialClient() with a cancelled context = %v; want context.Canceled", err)
	}
}
