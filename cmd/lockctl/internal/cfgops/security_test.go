package cfgops_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/cmd/lockctl/internal/cfgops"
	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// Security says how an engine is secured, never with its secret.
func TestSecurity(t *testing.T) {
	mutual := config.TLS{Enabled: true, CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem"}
	for _, tc := range []struct {
		e    config.Engine
		want string
	}{
		{config.Engine{}, "no tls"},
		{config.Engine{TLS: config.TLS{Enabled: true}}, "tls"},
		{config.Engine{TLS: config.TLS{Enabled: true, InsecureSkipVerify: true}}, "tls unverified"},
		{config.Engine{TLS: mutual, Username: "app1", Password: "secret-1"}, "tls mutual, user app1, password"},
		{config.Engine{TLS: mutual, Username: "app1", Password: "secret-1", PasswordFile: "/run/pw"}, "tls mutual, user app1, password from file"},
		{config.Engine{TLS: mutual, Auth: config.Auth{Scheme: "digest", Credentials: "app1:secret-1"}}, "tls mutual, digest user app1"},
		{config.Engine{Auth: config.Auth{Scheme: "x509", Credentials: "secret-1"}}, "no tls, x509 auth"},
		{pg("postgres://app1:secret-1@db:5432/app?sslmode=verify-full"), "tls, user app1, password in dsn"},
		{pg("host=db1,db2 user=app1 sslmode=disable"), "no tls, user app1"},
		{pg("postgres://app1@db/app"), "tls if offered (sslmode prefer), user app1"},
		{pg("postgres://app1@db/app?sslmode=require"), "tls unverified, user app1"},
		{config.Engine{Type: config.TypeRedlock, Addrs: []string{"a:1", "b:1", "c:1"}, TLS: mutual, Username: "app1", PasswordFile: "/run/pw"}, "tls mutual, user app1, password from file"},
		{config.Engine{Type: config.TypePostgres, DSNFile: "/run/dsn", DSN: "postgres://app1:secret-1@db/app?sslmode=disable"}, "no tls, user app1, dsn from file"},
	} {
		if got := cfgops.Security(&tc.e); got != tc.want {
			t.Errorf("Security(%+v) = %q; want %q", tc.e, got, tc.want)
		}
	}
}

func pg(dsn string) config.Engine { return config.Engine{Type: config.TypePostgres, DSN: dsn} }

// A postgres engine's addresses are its DSN's hosts, every one, and never
// its credentials.
func TestAddrsPostgres(t *testing.T) {
	e := pg("postgres://app1:secret-1@db1:5433,db2/app")
	if got := strings.Join(cfgops.Addrs(&e), " "); got != "db1:5433 db2:5432" {
		t.Errorf("Addrs() = %q; want \"db1:5433 db2:5432\"", got)
	}
	redlock := config.Engine{Type: config.TypeRedlock, Addrs: []string{"a:1", "b:1", "c:1"}, Password: "secret-1"}
	if got := strings.Join(cfgops.Addrs(&redlock), " "); got != "a:1 b:1 c:1" {
		t.Errorf("Addrs(redlock) = %q; want every node", got)
	}
	etcd := config.Engine{Type: config.TypeEtcd, Endpoints: []string{"https://u:secret-1@e1:2379"}}
	if got := strings.Join(cfgops.Addrs(&etcd), " "); got != "https://e1:2379" {
		t.Errorf("Addrs(etcd) = %q; want the endpoint without its credentials", got)
	}
}

// DialClient dials every engine over mutual TLS with the application's
// credentials, from the environment and secret files, as Open dials the
// engines; a wrong password is ErrPermission; neither its logs (if any: the
// ZooKeeper connection's) nor its errors show a secret.
func TestDialClientTLSWithSecrets(t *testing.T) {
	certs := testserver.TestCerts(t)
	servers := []*testserver.Server{
		testserver.Redis(t, testserver.WithTLS(certs)),
		testserver.Etcd(t, testserver.WithTLS(certs)),
		testserver.ZooKeeper(t, testserver.WithTLS(certs)),
	}
	secrets := []string{"redis-pw-7e21aa", "etcd-pw-04bd3c", "zk-pw-e85f17"}
	acl := []string{"~app1:*", "&app1:*", "-@all"}
	for _, cmd := range strings.Fields(redis.ACLCommands) {
		acl = append(acl, "+"+cmd)
	}
	if err := testserver.RedisACL(servers[0], "app1", secrets[0], acl...); err != nil {
		t.Fatal(err)
	}
	if err := testserver.EtcdAuth(servers[1], testserver.EtcdUser{Name: "app1", Password: secrets[1], Prefix: "app1"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := make([]string, 2)
	for i, content := range []string{secrets[1] + "\n", "app1:" + secrets[2]} {
		files[i] = filepath.Join(dir, fmt.Sprint("secret", i))
		if err := os.WriteFile(files[i], []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tls := fmt.Sprintf("{enabled: true, ca_file: %q, cert_file: %q, key_file: %q}", certs.CAFile, certs.ClientCertFile, certs.ClientKeyFile)
	c := loadYAML(t, "start_timeout: 5s\nengines:\n"+
		fmt.Sprintf("  - {name: redis, type: redis, addrs: [%q], username: app1, tls: %s}\n", servers[0].TLSAddr(), tls)+
		fmt.Sprintf("  - {name: etcd, type: etcd, endpoints: [%q], username: app1, password_file: %q, tls: %s}\n", servers[1].TLSAddr(), files[0], tls)+
		// A JVM's TLS handshake on a loaded machine can take more than
		// the default 2s; this test is about credentials, not latency.
		fmt.Sprintf("  - {name: zk, type: zk, servers: [%q], dial_timeout: 10s, auth: {scheme: digest, credentials_file: %q}, tls: %s}\n", servers[2].TLSAddr(), files[1], tls))
	c.Engines[0].Password = secrets[0] // as from ORTHRUS_ENGINES_REDIS_PASSWORD

	logs, err := os.Create(filepath.Join(dir, "log")) // a file: the clients' goroutines write at once
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	logger := config.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	checkDialClients(ctx, t, c, logger)

	wrong := *c
	wrong.Engines = c.Engines[:1:1]
	wrong.Engines[0].Password = "not-" + secrets[0]
	_, err = cfgops.DialClient(ctx, &wrong, "redis", false, logger)
	if !errors.Is(err, locker.ErrPermission) || errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("DialClient() with a wrong password = %v; want ErrPermission", err)
	}
	logged, rerr := os.ReadFile(logs.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	out := string(logged) + "\n" + fmt.Sprint(err) // the error at least is there to check
	for _, secret := range secrets {
		if strings.Contains(out, secret) {
			t.Errorf("the logs or errors show the secret %q:\n%s", secret, out)
		}
	}
}
