package config_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/logtest"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// TLS files that do not exist or do not parse are errors naming the
// setting at fault, on every engine type and on the etcd source.
func TestTLSFileErrors(t *testing.T) {
	clearEnv(t)
	certs := testserver.TestCerts(t)
	dir := t.TempDir()
	garbage := writeFile(t, dir, "garbage.pem", "not a certificate\n")
	missing := filepath.Join(dir, "missing.pem")
	otherCert, _, err := certs.Issue("other", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc, tls, field string
	}{
		{"ca_file missing", fmt.Sprintf("{enabled: true, ca_file: %q}", missing), "tls.ca_file"},
		{"ca_file not PEM", fmt.Sprintf("{enabled: true, ca_file: %q}", garbage), "tls.ca_file"},
		{"cert_file missing", fmt.Sprintf("{enabled: true, cert_file: %q, key_file: %q}", missing, certs.ClientKeyFile), "tls.cert_file"},
		{"cert_file not PEM", fmt.Sprintf("{enabled: true, cert_file: %q, key_file: %q}", garbage, certs.ClientKeyFile), "tls.cert_file"},
		{"key_file missing", fmt.Sprintf("{enabled: true, cert_file: %q, key_file: %q}", certs.ClientCertFile, missing), "tls.key_file"},
		{"key_file not PEM", fmt.Sprintf("{enabled: true, cert_file: %q, key_file: %q}", certs.ClientCertFile, garbage), "tls.key_file"},
		{"key of another certificate", fmt.Sprintf("{enabled: true, cert_file: %q, key_file: %q}", otherCert, certs.ClientKeyFile), "tls.key_file"},
		{"key_file alone", fmt.Sprintf("{enabled: true, key_file: %q}", certs.ClientKeyFile), "tls.cert_file"},
		{"settings while disabled", fmt.Sprintf("{ca_file: %q}", certs.CAFile), "tls.enabled"},
	} {
		for _, where := range []struct{ engine, field string }{
			{"{name: r, type: redis, addrs: [x], tls: %s}", "engines[0]."},
			{"{name: e, type: etcd, endpoints: [x], tls: %s}", "engines[0]."},
			{"{name: z, type: zk, servers: [x], tls: %s}", "engines[0]."},
		} {
			yaml := "engines:\n  - " + fmt.Sprintf(where.engine, tc.tls) + "\n"
			_, err := config.Load(writeFile(t, t.TempDir(), "c.yaml", yaml))
			var fe *config.FieldError
			if !errors.As(err, &fe) || fe.Field != where.field+tc.field || !errors.Is(err, locker.ErrInvalidArgument) {
				t.Errorf("%s: Load(%s) = %v; want a FieldError on %s%s", tc.desc, yaml, err, where.field, tc.field)
			}
		}
	}
	yaml := fmt.Sprintf("engines:\n  - {name: r, type: redis, addrs: [x]}\nsource: {type: etcd, endpoints: [x], key: k, tls: {enabled: true, ca_file: %q}}\n", missing)
	var fe *config.FieldError
	if _, err := config.Load(writeFile(t, t.TempDir(), "c.yaml", yaml)); !errors.As(err, &fe) || fe.Field != "source.tls.ca_file" {
		t.Errorf("Load() with a missing source CA = %v; want a FieldError on source.tls.ca_file", err)
	}
}

func TestPasswordFileErrors(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	secret := writeFile(t, dir, "secret", "s3cret-in-file\n")
	empty := writeFile(t, dir, "empty", "\n")
	for _, tc := range []struct {
		desc, engine, field string
	}{
		{"missing file", fmt.Sprintf("{name: r, type: redis, addrs: [x], password_file: %q}", filepath.Join(dir, "nope")), "engines[0].password_file"},
		{"empty file", fmt.Sprintf("{name: r, type: redis, addrs: [x], password_file: %q}", empty), "engines[0].password_file"},
		{"both", fmt.Sprintf("{name: r, type: redis, addrs: [x], password: p, password_file: %q}", secret), "engines[0].password_file"},
		{"on zk", fmt.Sprintf("{name: z, type: zk, servers: [x], password_file: %q}", secret), "engines[0].password_file"},
		{"etcd without username", fmt.Sprintf("{name: e, type: etcd, endpoints: [x], password_file: %q}", secret), "engines[0].username"},
		{"dsn both", fmt.Sprintf("{name: p, type: postgres, dsn: 'postgres://x', dsn_file: %q}", secret), "engines[0].dsn_file"},
		{"dsn file on etcd", fmt.Sprintf("{name: e, type: etcd, endpoints: [x], dsn_file: %q}", secret), "engines[0].dsn_file"},
		{"zk credentials both", fmt.Sprintf("{name: z, type: zk, servers: [x], auth: {scheme: digest, credentials: 'a:b', credentials_file: %q}}", secret), "engines[0].auth.credentials_file"},
	} {
		yaml := "engines:\n  - " + tc.engine + "\n"
		_, err := config.Load(writeFile(t, t.TempDir(), "c.yaml", yaml))
		var fe *config.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: Load() = %v; want a FieldError on %s", tc.desc, err, tc.field)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret-in-file") {
			t.Errorf("%s: Load() = %v; shows the secret", tc.desc, err)
		}
	}
	// The file's content, without its newline, is the password.
	c, err := config.Load(writeFile(t, t.TempDir(), "c.yaml", fmt.Sprintf("engines:\n  - {name: r, type: redis, addrs: [x], password_file: %q}\n", secret)))
	if err != nil || c.Engines[0].Password != "s3cret-in-file" {
		t.Errorf("Load() = %v; want the password read from the file", err)
	}
	// A DSN from a file, as a mounted secret holds it.
	c, err = config.Load(writeFile(t, t.TempDir(), "c.yaml", fmt.Sprintf("engines:\n  - {name: p, type: postgres, dsn_file: %q}\n", secret)))
	if err != nil || c.Engines[0].DSN != "s3cret-in-file" {
		t.Errorf("Load() = %v; want the DSN read from the file", err)
	}
	// Environment overrides name a file too.
	t.Setenv(config.EnvName("r", "password_file"), secret)
	c, err = config.Load(writeFile(t, t.TempDir(), "c.yaml", "engines:\n  - {name: r, type: redis, addrs: [x]}\n"))
	if err != nil || c.Engines[0].Password != "s3cret-in-file" {
		t.Errorf("Load() with %s = %v; want the password read from the file", config.EnvName("r", "password_file"), err)
	}
}

// Every engine over mutual TLS with its application's credentials, given
// through the environment and secret files: the engines work; the logs of
// the run (at debug level, refusals included) and the errors never show a
// secret. (lockctl's cfgops tests dial the raw clients the same way.)
func TestOpenTLSWithSecrets(t *testing.T) {
	clearEnv(t)
	certs := testserver.TestCerts(t)
	rs := testserver.Redis(t, testserver.WithTLS(certs))
	es := testserver.Etcd(t, testserver.WithTLS(certs))
	zs := testserver.ZooKeeper(t, testserver.WithTLS(certs))
	const redisSecret, etcdSecret, zkSecret = "redis-pw-4a7f1c", "etcd-pw-9b2e6d", "zk-pw-3c8d0e"
	rules := []string{"~app1:*", "&app1:*", "-@all"}
	for _, cmd := range strings.Fields(redis.ACLCommands) {
		rules = append(rules, "+"+cmd)
	}
	if err := testserver.RedisACL(rs, "app1", redisSecret, rules...); err != nil {
		t.Fatal(err)
	}
	if err := testserver.EtcdAuth(es, testserver.EtcdUser{Name: "app1", Password: etcdSecret, Prefix: "app1"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	etcdFile := writeFile(t, dir, "etcd-password", etcdSecret+"\n")
	zkFile := writeFile(t, dir, "zk-credentials", "app1:"+zkSecret)
	tlsYAML := fmt.Sprintf("{enabled: true, ca_file: %q, cert_file: %q, key_file: %q}", certs.CAFile, certs.ClientCertFile, certs.ClientKeyFile)
	yaml := fmt.Sprintf(`
start_timeout: 5s
engines:
  - {name: redis, type: redis, addrs: [%q], prefix: app1, username: app1, tls: %s}
  - {name: etcd, type: etcd, endpoints: [%q], prefix: app1, username: app1, password_file: %q, tls: %s}
  - {name: zk, type: zk, servers: [%q], prefix: /app1, auth: {scheme: digest, credentials_file: %q}, tls: %s}
`, rs.TLSAddr(), tlsYAML, es.TLSAddr(), etcdFile, tlsYAML, zs.TLSAddr(), zkFile, tlsYAML)
	t.Setenv(config.EnvName("redis", "password"), redisSecret)
	c, err := config.Load(writeFile(t, dir, "orthrus.yaml", yaml))
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}

	var logs logtest.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sw := open(t, c, config.WithLogger(logger))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The file source's first value would undo a switch by hand made
	// before it arrived.
	eventually(t, 5*time.Second, "the file source's value", func() bool {
		return slices.ContainsFunc(sw.States(), func(st switcher.EngineState) bool { return st.Desired })
	})
	// A switch by hand to an engine still failing its first checks (a
	// JVM's TLS handshake on a loaded machine takes seconds) moves on to
	// the next: this test is about TLS, not start time.
	eventually(t, 15*time.Second, "every engine healthy", func() bool {
		return !slices.ContainsFunc(sw.States(), func(st switcher.EngineState) bool {
			return !st.Healthy || st.Breaker != gobreaker.StateClosed
		})
	})
	for _, name := range []string{"redis", "zk", "etcd"} {
		if _, err := sw.SwitchEngineTo(name); err != nil {
			t.Fatal(err)
		}
		l, err := sw.NewLocker("job")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.LockCtx(ctx); err != nil {
			t.Fatalf("%s: LockCtx() = %v", name, err)
		}
		if got := l.(locker.Lease).Engine(); got != name {
			t.Fatalf("LockCtx() after SwitchEngineTo(%q) granted on %q; states %+v; log:\n%s", name, got, sw.States(), logs.String())
		}
		if err := l.Unlock(); err != nil {
			t.Errorf("%s: Unlock() = %v", name, err)
		}
	}
	if err := sw.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}

	// A wrong password is refused: ErrPermission, not an outage.
	wrong := *c
	wrong.Engines = c.Engines[:1:1]
	wrong.Engines[0].Password = "not-" + redisSecret
	_, err = config.Open(ctx, &wrong, config.WithLogger(logger))
	if !errors.Is(err, locker.ErrPermission) || errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Open() with a wrong password = %v; want ErrPermission", err)
	}

	out := logs.String() + "\n" + fmt.Sprint(err)
	if !strings.Contains(out, "level=") {
		t.Errorf("nothing was logged: the check below would prove nothing")
	}
	for _, secret := range []string{redisSecret, etcdSecret, zkSecret} {
		if strings.Contains(out, secret) {
			t.Errorf("the logs or errors show the secret %q:\n%s", secret, out)
		}
	}
}

// A TLS failure at Open names TLS, within start_timeout, for etcd too,
// whose client alone reports only a deadline; tls.server_name is what the
// etcd client verifies.
func TestOpenTLSFailures(t *testing.T) {
	clearEnv(t)
	certs := testserver.TestCerts(t)
	es := testserver.Etcd(t, testserver.WithTLS(certs))
	rs := testserver.Redis(t, testserver.WithTLS(certs))
	mutual := fmt.Sprintf("cert_file: %q, key_file: %q", certs.ClientCertFile, certs.ClientKeyFile)
	ca := fmt.Sprintf("ca_file: %q", certs.CAFile)
	for _, tc := range []struct {
		desc, tls string
		ok        bool
	}{
		{"no CA", "{enabled: true, " + mutual + "}", false},
		{"wrong server name", "{enabled: true, server_name: other.example.com, " + ca + ", " + mutual + "}", false},
		{"no client certificate", "{enabled: true, " + ca + "}", false},
		{"server name given", "{enabled: true, server_name: localhost, " + ca + ", " + mutual + "}", true},
	} {
		for _, engine := range []string{
			fmt.Sprintf("{name: etcd, type: etcd, endpoints: [%q], tls: %s}", es.TLSAddr(), tc.tls),
			fmt.Sprintf("{name: redis, type: redis, addrs: [%q], dial_timeout: 500ms, tls: %s}", rs.TLSAddr(), tc.tls),
		} {
			c := loadYAML(t, "start_timeout: 1s\nengines:\n  - "+engine+"\n")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			sw, err := config.Open(ctx, c, quiet)
			cancel()
			if tc.ok {
				if err != nil {
					t.Errorf("%s: Open(%s) = %v", tc.desc, engine, err)
				} else {
					_ = sw.Close()
				}
				continue
			}
			if err == nil {
				_ = sw.Close()
			}
			t.Logf("%s: %v", tc.desc, err)
			if !errors.Is(err, locker.ErrUnavailable) || !strings.Contains(err.Error(), "tls") {
				t.Errorf("%s: Open(%s) = %v; want ErrUnavailable naming tls", tc.desc, engine, err)
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("%s: Open failed after %v; want within start_timeout", tc.desc, d)
			}
		}
	}
}
