package redis_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
	"github.com/orthrus-go/orthrus/switcher"
)

// appACL gives an application's user its keys and channels, and the
// commands of ACLCommands, as the package documentation says.
func appACL(t *testing.T, s *testserver.Server, app string) {
	t.Helper()
	rules := []string{"~" + app + ":*", "&" + app + ":*", "-@all"}
	for _, cmd := range strings.Fields(redis.ACLCommands) {
		rules = append(rules, "+"+cmd)
	}
	if err := testserver.RedisACL(s, app, app+"-secret", rules...); err != nil {
		t.Fatal(err)
	}
}

// tlsClient dials the server's TLS port with conf and fails fast.
func tlsClient(t *testing.T, s *testserver.Server, conf *tls.Config, user, password string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{
		Addr: s.TLSAddr(), TLSConfig: conf, Username: user, Password: password,
		DialTimeout: time.Second, MaxRetries: -1, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestTLS(t *testing.T) {
	certs := testserver.TestCerts(t)
	s := testserver.Redis(t, testserver.WithTLS(certs))
	good, err := certs.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}

	bad := map[string]*tls.Config{
		// The system's roots do not know the test CA.
		"no CA": {ServerName: testserver.ServerName, Certificates: good.Certificates},
		"wrong server name": func() *tls.Config {
			c := good.Clone()
			c.ServerName = "redis.example.com"
			return c
		}(),
		// The server requires a client certificate (tls-auth-clients yes).
		"no client certificate": func() *tls.Config {
			c := good.Clone()
			c.Certificates = nil
			return c
		}(),
	}
	for name, conf := range bad {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, tlsClient(t, s, conf, "", ""))
			defer e.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			err := e.Ping(ctx)
			if err == nil {
				t.Fatal("Ping() = nil; want ErrUnavailable naming tls")
			}
			// With TLS 1.3 the client's handshake ends before the server
			// checks the client's certificate: the server's refusal comes
			// as an alert naming tls, or, when the client writes first, as
			// a reset of the connection.
			named := strings.Contains(err.Error(), "tls") || (name == "no client certificate" && strings.Contains(err.Error(), "reset by peer"))
			if !errors.Is(err, locker.ErrUnavailable) || !named {
				t.Errorf("Ping() = %v; want ErrUnavailable naming tls", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("Ping failed after %v; want at once", d)
			}
		})
	}

	t.Run("mutual TLS", func(t *testing.T) {
		e := newEngine(t, tlsClient(t, s, good, "", ""))
		defer e.Close()
		l, _ := e.NewLocker(t.Name())
		if ok, err := l.TryLock(); !ok || err != nil {
			t.Fatalf("TryLock() = %v, %v; want true, nil", ok, err)
		}
		if err := l.Unlock(); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
	})
}

// Two applications share a Redis, each with an ACL user restricted to its
// prefix: one cannot read, take, delete or force-unlock the other's locks,
// and what it gets is ErrPermission, which the breaker does not count.
func TestACLIsolation(t *testing.T) {
	certs := testserver.TestCerts(t)
	s := testserver.Redis(t, testserver.WithTLS(certs))
	conf, err := certs.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, app := range []string{"app1", "app2", "conformance"} {
		appACL(t, s, app)
	}
	c1 := tlsClient(t, s, conf, "app1", "app1-secret")
	c2 := tlsClient(t, s, conf, "app2", "app2-secret")
	app1 := newEngine(t, c1, redis.WithPrefix("app1"), redis.WithName("app1"))
	defer app1.Close()
	app2 := newEngine(t, c2, redis.WithPrefix("app2"))
	defer app2.Close()

	// The whole contract holds for a restricted user over mutual TLS:
	// ACLCommands is enough.
	t.Run("conformance as a restricted user", func(t *testing.T) {
		c := tlsClient(t, s, conf, "conformance", "conformance-secret")
		lockertest.Run(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
	})

	// app1's credentials pointed at app2's namespace.
	intruder := newEngine(t, c1, redis.WithPrefix("app2"), redis.WithName("intruder"))
	defer intruder.Close()
	lockertest.Isolation(t, app2, intruder)
	// Nor can app1's user delete app2's keys by hand.
	if err := c1.Del(ctx, app2.LockKey("orders/1")).Err(); !goredis.IsPermissionError(err) {
		t.Errorf("DEL of app2's key with app1's user = %v; want NOPERM", err)
	}
	wantPermission := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, locker.ErrPermission) || errors.Is(err, locker.ErrUnavailable) {
			t.Errorf("%s = %v; want ErrPermission, not ErrUnavailable", what, err)
		}
	}

	// Wrong credentials are a permission problem too.
	wrong := newEngine(t, tlsClient(t, s, conf, "app1", "not-the-password"), redis.WithPrefix("app1"))
	defer wrong.Close()
	wantPermission("Ping() with a wrong password", wrong.Ping(ctx))

	// The switcher's breaker does not count refusals: after more of them
	// than its threshold, it still acquires on the intruder's engine.
	sw, err := switcher.New([]locker.Engine{intruder, app1}, switcher.WithBreaker(1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	sl, _ := sw.NewLocker("orders/1")
	for range 3 {
		_, err := sl.TryLock()
		wantPermission("switcher TryLock()", err)
	}
	if got := sw.Current(); got != intruder.Name() {
		t.Errorf("Current() = %q after refusals; want %q (no switch)", got, intruder.Name())
	}
}
