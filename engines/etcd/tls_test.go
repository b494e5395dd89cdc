package etcd_test

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// tlsClient connects to the server's TLS port with conf and, when user is
// set, authenticates.
func tlsClient(t *testing.T, s *testserver.Server, conf *tls.Config, user, password string) (*clientv3.Client, error) {
	t.Helper()
	cfg := clientConfig(s.TLSAddr())
	cfg.TLS, cfg.Username, cfg.Password = conf, user, password
	c, err := clientv3.New(cfg)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

// A client that cannot complete the handshake fails at its deadline:
// clientv3 waits for a ready connection and reports only the deadline, so
// config.Open names the TLS failure itself (config/tls_test.go). gRPC
// verifies the endpoint's host, not tls.Config.ServerName: the wrong-name
// case is config's server_name, tested there.
func TestTLS(t *testing.T) {
	certs := testserver.TestCerts(t)
	s := testserver.Etcd(t, testserver.WithTLS(certs))
	good, err := certs.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	noCert := good.Clone()
	noCert.Certificates = nil
	for name, conf := range map[string]*tls.Config{
		"no CA": {ServerName: testserver.ServerName, Certificates: good.Certificates},
		// The server requires a client certificate (--client-cert-auth).
		"no client certificate": noCert,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each waits the ping's deadline
			c, err := tlsClient(t, s, conf, "", "")
			if err != nil {
				t.Fatalf("clientv3.New() = %v", err)
			}
			e := newEngine(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			if err := e.Ping(ctx); !errors.Is(err, locker.ErrUnavailable) {
				t.Errorf("Ping() = %v; want ErrUnavailable", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("failing took %v; want the ping's deadline", d)
			}
		})
	}
	t.Run("mutual TLS", func(t *testing.T) {
		c, err := tlsClient(t, s, good, "", "")
		if err != nil {
			t.Fatal(err)
		}
		l := newLocker(t, newEngine(t, c), t.Name())
		if ok, err := l.TryLock(); !ok || err != nil {
			t.Fatalf("TryLock() = %v, %v; want true, nil", ok, err)
		}
		if err := l.Unlock(); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
	})
}

// Two applications share an etcd, each user's role granting only its own
// prefix: one cannot read, take, delete or force-unlock the other's locks,
// and what it gets is ErrPermission.
func TestAuthIsolation(t *testing.T) {
	certs := testserver.TestCerts(t)
	s := testserver.Etcd(t, testserver.WithTLS(certs))
	conf, err := certs.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	var users []testserver.EtcdUser
	for _, app := range []string{"app1", "app2", "conformance"} {
		users = append(users, testserver.EtcdUser{Name: app, Password: app + "-secret", Prefix: app})
	}
	if err := testserver.EtcdAuth(s, users...); err != nil {
		t.Fatal(err)
	}
	connect := func(user, password string) *clientv3.Client {
		c, err := tlsClient(t, s, conf, user, password)
		if err != nil {
			t.Fatalf("clientv3.New as %s: %v", user, err)
		}
		return c
	}
	c1, c2 := connect("app1", "app1-secret"), connect("app2", "app2-secret")

	// The whole contract holds for a restricted user over mutual TLS.
	t.Run("conformance as a restricted user", func(t *testing.T) {
		c := connect("conformance", "conformance-secret")
		lockertest.Run(t, func(t *testing.T) lockertest.Harness { return harnessFor(t, c) })
	})

	// app1's credentials pointed at app2's namespace.
	app2 := newEngine(t, c2, etcd.WithPrefix("app2"))
	lockertest.Isolation(t, app2, newEngine(t, c1, etcd.WithPrefix("app2")))
	// Nor can app1's user delete app2's keys by hand.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c1.Delete(ctx, "app2/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("deleting app2/ as app1 = %v; want permission denied", err)
	}

	// Wrong credentials fail the client before there is an engine;
	// config.Open reports them as ErrPermission (config/tls_test.go).
	if _, err := tlsClient(t, s, conf, "app1", "not-the-password"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("clientv3.New with a wrong password = %v; want ErrAuthFailed", err)
	}
}
