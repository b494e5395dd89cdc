package config_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// DialClient gives the raw client of each engine type, connected as Open
// connects the engine: over mutual TLS with the application's credentials.
func TestDialClientTLS(t *testing.T) {
	clearEnv(t)
	certs := testserver.TestCerts(t)
	rs := testserver.Redis(t, testserver.WithTLS(certs))
	es := testserver.Etcd(t, testserver.WithTLS(certs))
	zs := testserver.ZooKeeper(t, testserver.WithTLS(certs))
	const redisSecret, etcdSecret = "redis-pw-1d5e", "etcd-pw-7c2a"
	if err := testserver.RedisACL(rs, "app1", redisSecret, "~app1:*", "+@all"); err != nil {
		t.Fatal(err)
	}
	if err := testserver.EtcdAuth(es, testserver.EtcdUser{Name: "app1", Password: etcdSecret, Prefix: "app1"}); err != nil {
		t.Fatal(err)
	}
	tlsYAML := fmt.Sprintf("{enabled: true, ca_file: %q, cert_file: %q, key_file: %q}", certs.CAFile, certs.ClientCertFile, certs.ClientKeyFile)
	c := loadYAML(t, fmt.Sprintf(`
start_timeout: 5s
engines:
  - {name: redis, type: redis, addrs: [%q], username: app1, password: %s, tls: %s}
  - {name: etcd, type: etcd, endpoints: [%q], username: app1, password: %s, tls: %s}
  - {name: zk, type: zk, servers: [%q], auth: {scheme: digest, credentials: "app1:zk-pw"}, tls: %s}
`, rs.TLSAddr(), redisSecret, tlsYAML, es.TLSAddr(), etcdSecret, tlsYAML, zs.TLSAddr(), tlsYAML))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, tc := range []struct {
		engine string
		use    func(*config.Client) error // a write and a read with the raw client
	}{
		{"redis", func(cl *config.Client) error {
			if err := cl.Redis.Set(ctx, "app1:k", "v", 0).Err(); err != nil {
				return err
			}
			got, err := cl.Redis.Get(ctx, "app1:k").Result()
			if err == nil && got != "v" {
				err = fmt.Errorf("Get = %q; want v", got)
			}
			return err
		}},
		{"etcd", func(cl *config.Client) error {
			if _, err := cl.Etcd.Put(ctx, "app1/k", "v"); err != nil {
				return err
			}
			got, err := cl.Etcd.Get(ctx, "app1/k")
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
			if _, err := cl.ZK.Create("/dialclient", []byte("v"), 0, cl.ZKACL); err != nil {
				return err
			}
			got, _, err := cl.ZK.Get("/dialclient")
			if err == nil && string(got) != "v" {
				err = fmt.Errorf("Get = %q; want v", got)
			}
			return err
		}},
	} {
		cl, err := config.DialClient(ctx, c, tc.engine, quiet)
		if err != nil {
			t.Errorf("DialClient(%s) = %v", tc.engine, err)
			continue
		}
		if cl.Name != tc.engine || cl.Type != tc.engine {
			t.Errorf("DialClient(%s) = %s of type %s; want the engine", tc.engine, cl.Name, cl.Type)
		}
		if err := tc.use(cl); err != nil {
			t.Errorf("%s: %v", tc.engine, err)
		}
		if err := cl.Close(); err != nil {
			t.Errorf("%s: Close() = %v", tc.engine, err)
		}
		if err := cl.Close(); err != nil {
			t.Errorf("%s: second Close() = %v; want the first's, nil", tc.engine, err)
		}
	}

	// The credentials are the engine's: refused ones are ErrPermission.
	wrong := *c
	wrong.Engines = c.Engines[:1:1]
	wrong.Engines[0].Password = "not-" + redisSecret
	if _, err := config.DialClient(ctx, &wrong, "redis", quiet); !errors.Is(err, locker.ErrPermission) || strings.Contains(err.Error(), redisSecret) {
		t.Errorf("DialClient() with a wrong password = %v; want ErrPermission, without the secret", err)
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
