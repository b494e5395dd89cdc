package zk_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestTLS(t *testing.T) {
	certs := testserver.TestCerts(t)
	s := testserver.ZooKeeper(t, testserver.WithTLS(certs))
	good, err := certs.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	// First, so that the server's TLS is warm (the JVM's first handshakes
	// are slow) when the failures below are timed. Its engines may take
	// longer than the default to connect: a JVM's handshakes on a loaded
	// machine took over 2s in CI, and this suite is about TLS, not
	// start time.
	t.Run("mutual TLS conformance", func(t *testing.T) {
		c := admin(t, s.Addr()) // the plain port, for the suite's hooks
		lockertest.Run(t, func(t *testing.T) lockertest.Harness {
			return harnessAt(t, s.TLSAddr(), c, zk.WithTLS(good), zk.WithConnectTimeout(10*time.Second))
		})
	})
	wrongName := good.Clone()
	wrongName.ServerName = "zk.example.com"
	noCert := good.Clone()
	noCert.Certificates = nil
	for _, tc := range []struct {
		desc string
		conf *tls.Config
	}{
		// The system's roots do not know the test CA.
		{"no CA", &tls.Config{ServerName: testserver.ServerName, Certificates: good.Certificates}},
		{"wrong server name", wrongName},
		// The server requires a client certificate (ssl.clientAuth=need).
		{"no client certificate", noCert},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel() // each waits the connect timeout
			start := time.Now()
			e, err := zk.New([]string{s.TLSAddr()}, zk.WithTLS(tc.conf), zk.WithConnectTimeout(2*time.Second), zk.WithLogger(quiet))
			if err == nil {
				e.Close()
			}
			if !errors.Is(err, locker.ErrUnavailable) || !strings.Contains(err.Error(), "tls") {
				t.Errorf("New() = %v; want ErrUnavailable naming tls", err)
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("failing took %v; want the connect timeout", d)
			}
		})
	}
	if err := zk.WithTLS(nil); err == nil {
		t.Errorf("WithTLS(nil) accepted")
	}
}

// Two applications share an ensemble over mutual TLS, each with its digest
// credentials and its own client certificate: their nodes carry
// CREATOR_ALL, so one cannot read, take, delete or force-unlock the other's
// locks, and what it gets is ErrPermission.
//
// CREATOR_ALL grants every identity of the creating session, and ZooKeeper
// adds the client certificate's (x509) to it: applications sharing a
// certificate share their locks, which the last subtest shows.
func TestDigestIsolation(t *testing.T) {
	certs := testserver.TestCerts(t)
	s := testserver.ZooKeeper(t, testserver.WithTLS(certs))
	confs := make(map[string]*tls.Config)
	for _, app := range []string{"app1", "app2"} {
		conf, err := certs.ClientConfigAs(app)
		if err != nil {
			t.Fatal(err)
		}
		confs[app] = conf
	}
	engine := func(app, prefix string, conf *tls.Config) *zk.Engine {
		// A JVM's TLS handshake on a loaded machine may take seconds:
		// this test is about isolation, not start time.
		e := newEngine(t, []string{s.TLSAddr()}, zk.WithTLS(conf), zk.WithAuth("digest", app+":"+app+"-secret"), zk.WithPrefix(prefix),
			zk.WithConnectTimeout(10*time.Second))
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	app2 := engine("app2", "/app2", confs["app2"])
	// app1's credentials pointed at app2's namespace.
	lockertest.Isolation(t, app2, engine("app1", "/app2", confs["app1"]))

	// Nor can app1 delete app2's held node by hand.
	held := must(app2.NewLocker("orders/1"))
	if err := held.Lock(); err != nil {
		t.Fatalf("app2 Lock() = %v", err)
	}
	defer held.Unlock()
	owner := admin(t, s.Addr())
	if err := owner.AddAuth("digest", []byte("app2:app2-secret")); err != nil {
		t.Fatal(err)
	}
	nodes, err := lockNodes(owner, app2.LockPath("orders/1"))
	if err != nil || len(nodes) != 1 {
		t.Fatalf("app2's nodes = %v, %v; want one", nodes, err)
	}
	other := admin(t, s.Addr())
	if err := other.AddAuth("digest", []byte("app1:app1-secret")); err != nil {
		t.Fatal(err)
	}
	if err := other.Delete(app2.LockPath("orders/1")+"/"+nodes[0], -1); !errors.Is(err, gozk.ErrNoAuth) {
		t.Errorf("deleting app2's node as app1 = %v; want ErrNoAuth", err)
	}

	t.Run("a shared certificate shares the locks", func(t *testing.T) {
		sharer := engine("app1", "/app2", confs["app2"])
		if _, err := sharer.Inspect(context.Background(), "orders/1"); err != nil {
			t.Errorf("Inspect() with app2's certificate and app1's digest = %v; want nil (x509 identity in the ACL)", err)
		}
	})
}
