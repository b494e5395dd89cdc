package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/internal/testserver"
)

// lockctl idem looks up and deletes the records a gate made, on each kind
// of engine, over plain connections and over mutual TLS (the same servers'
// TLS ports), dialled as config dials the engines.
func TestIdemLookupDelete(t *testing.T) {
	certs := testserver.TestCerts(t)
	tlsOn := testserver.WithTLS(certs)
	rs, es, zs := testserver.Redis(t, tlsOn), testserver.Etcd(t, tlsOn), testserver.ZooKeeper(t, tlsOn, testserver.WithArgs("extendedTypesEnabled=true"))
	tlsYAML := fmt.Sprintf("{enabled: true, ca_file: %q, cert_file: %q, key_file: %q}", certs.CAFile, certs.ClientCertFile, certs.ClientKeyFile)
	cfgPath := filepath.Join(t.TempDir(), "locks.yaml")
	cfg := fmt.Sprintf(`engines:
  - {name: r, type: redis, addrs: [%q]}
  - {name: e, type: etcd, endpoints: [%q]}
  - {name: z, type: zk, servers: [%q]}
  - {name: r-tls, type: redis, addrs: [%q], tls: %s}
  - {name: e-tls, type: etcd, endpoints: [%q], tls: %s}
  - {name: z-tls, type: zk, servers: [%q], tls: %s}
`, rs.Addr(), es.Addr(), zs.Addr(), rs.TLSAddr(), tlsYAML, es.TLSAddr(), tlsYAML, zs.TLSAddr(), tlsYAML)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	rc := goredis.NewClient(&goredis.Options{Addr: rs.Addr()})
	defer rc.Close()
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{es.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	zc, _, err := gozk.Connect([]string{zs.Addr()}, 5*time.Second, gozk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	r, _ := idem.NewRedisStore(rc)
	e, _ := idem.NewEtcdStore(ec)
	z, _ := idem.NewZKStore(zc, nil)
	defer z.Close()

	ctx := context.Background()
	for _, s := range []idem.Store{r, e, z} {
		engine := map[idem.Store]string{r: "r", e: "e", z: "z"}[s]
		t.Run(engine, func(t *testing.T) {
			g, err := idem.New("billing", s)
			if err != nil {
				t.Fatal(err)
			}
			tk, _, err := g.Begin(ctx, map[string]any{"order": "A-17", "amount": 1200})
			if err != nil || tk == nil {
				t.Fatalf("Begin = %v, %v", tk, err)
			}
			if err := tk.Succeed(ctx, []byte("receipt-9")); err != nil {
				t.Fatal(err)
			}
			id := tk.ID().String()

			// The same record through the plain and the TLS port.
			for _, via := range []string{engine, engine + "-tls"} {
				code, out, errOut := lockctlRun(t, "", "idem", "lookup", "--config", cfgPath, "--engine", via, "--app", "billing",
					"--json", `{"amount":1200,"order":"A-17"}`)
				if code != 0 {
					t.Fatalf("lookup on %s exited %d: %s", via, code, errOut)
				}
				for _, want := range []string{id, "succeeded", `9 bytes: "receipt-9"`} {
					if !strings.Contains(out, want) {
						t.Errorf("lookup on %s: output lacks %q:\n%s", via, want, out)
					}
				}
				if !regexp.MustCompile(`(?m)^ENGINE +` + regexp.QuoteMeta(via) + `$`).MatchString(out) {
					t.Errorf("lookup on %s: output does not name the engine:\n%s", via, out)
				}
			}
			if code, _, errOut := lockctlRun(t, "n\n", "idem", "delete", "--config", cfgPath, "--engine", engine, "--app", "billing", "--id", id); code != 1 || !strings.Contains(errOut, "not confirmed") {
				t.Errorf("unconfirmed delete exited %d, %q; want 1, not confirmed", code, errOut)
			}
			code, out, errOut := lockctlRun(t, "", "idem", "delete", "--config", cfgPath, "--engine", engine+"-tls", "--app", "billing", "--yes", "--id", id)
			if code != 0 || !strings.Contains(out, "deleted the succeeded record") {
				t.Fatalf("delete over TLS exited %d: %s%s", code, out, errOut)
			}
			if code, _, errOut := lockctlRun(t, "", "idem", "lookup", "--config", cfgPath, "--engine", engine, "--app", "billing", "--id", id); code != 1 || !strings.Contains(errOut, "no record") {
				t.Errorf("lookup after delete exited %d, %q; want 1, no record", code, errOut)
			}
			if tk, _, err := g.Begin(ctx, map[string]any{"order": "A-17", "amount": 1200}); tk == nil || err != nil {
				t.Errorf("Begin after delete = %v, %v; want a ticket", tk, err)
			}
		})
	}

	// A TLS port that wants a client certificate refuses one without: an
	// error that names the engine and TLS, within start_timeout.
	noCert := filepath.Join(t.TempDir(), "nocert.yaml")
	if err := os.WriteFile(noCert, fmt.Appendf(nil, `start_timeout: 2s
engines:
  - {name: r-tls, type: redis, addrs: [%q], tls: {enabled: true, ca_file: %q}}
  - {name: e-tls, type: etcd, endpoints: [%q], tls: {enabled: true, ca_file: %q}}
`, rs.TLSAddr(), certs.CAFile, es.TLSAddr(), certs.CAFile), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, engine := range []string{"r-tls", "e-tls"} {
		start := time.Now()
		code, _, errOut := lockctlRun(t, "", "idem", "lookup", "--config", noCert, "--engine", engine, "--app", "billing", "order-1")
		t.Logf("%s without a client certificate: %s", engine, errOut)
		if code != 1 || !strings.Contains(errOut, "tls") || !strings.Contains(errOut, strconv.Quote(engine)) {
			t.Errorf("lookup on %s without a client certificate exited %d, %q; want 1, an error naming %s and tls", engine, code, errOut, engine)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("lookup on %s without a client certificate took %v; want about start_timeout (2s)", engine, d)
		}
	}

	for _, args := range [][]string{
		{"idem"},
		{"idem", "lookup", "--config", cfgPath, "order-1"},                          // no --app
		{"idem", "lookup", "--config", cfgPath, "--app", "a"},                       // no operation
		{"idem", "lookup", "--config", cfgPath, "--app", "a", "--id", "zz"},         // bad id
		{"idem", "lookup", "--config", cfgPath, "--app", "a", "--engine", "x", "o"}, // unknown engine
		{"idem", "lookup", "--config", cfgPath, "--app", "a", "--json", "{", "o"},   // two operations
	} {
		if code, _, errOut := lockctlRun(t, "", args...); code == 0 || errOut == "" {
			t.Errorf("lockctl %q exited %d, %q; want an error", args, code, errOut)
		}
	}
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}
