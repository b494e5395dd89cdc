package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
// of engine.
func TestIdemLookupDelete(t *testing.T) {
	rs, es, zs := testserver.Redis(t), testserver.Etcd(t), testserver.ZooKeeper(t, testserver.WithArgs("extendedTypesEnabled=true"))
	cfgPath := filepath.Join(t.TempDir(), "locks.yaml")
	cfg := fmt.Sprintf(`engines:
  - {name: r, type: redis, addrs: [%q]}
  - {name: e, type: etcd, endpoints: [%q]}
  - {name: z, type: zk, servers: [%q]}
`, rs.Addr(), es.Addr(), zs.Addr())
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

			code, out, errOut := lockctlRun(t, "", "idem", "lookup", "--config", cfgPath, "--engine", engine, "--app", "billing",
				"--json", `{"amount":1200,"order":"A-17"}`)
			if code != 0 {
				t.Fatalf("lookup exited %d: %s", code, errOut)
			}
			for _, want := range []string{id, "succeeded", `9 bytes: "receipt-9"`} {
				if !strings.Contains(out, want) {
					t.Errorf("lookup output lacks %q:\n%s", want, out)
				}
			}
			if code, _, errOut := lockctlRun(t, "n\n", "idem", "delete", "--config", cfgPath, "--engine", engine, "--app", "billing", "--id", id); code != 1 || !strings.Contains(errOut, "not confirmed") {
				t.Errorf("unconfirmed delete exited %d, %q; want 1, not confirmed", code, errOut)
			}
			code, out, errOut = lockctlRun(t, "", "idem", "delete", "--config", cfgPath, "--engine", engine, "--app", "billing", "--yes", "--id", id)
			if code != 0 || !strings.Contains(out, "deleted the succeeded record") {
				t.Fatalf("delete exited %d: %s%s", code, out, errOut)
			}
			if code, _, errOut := lockctlRun(t, "", "idem", "lookup", "--config", cfgPath, "--engine", engine, "--app", "billing", "--id", id); code != 1 || !strings.Contains(errOut, "no record") {
				t.Errorf("lookup after delete exited %d, %q; want 1, no record", code, errOut)
			}
			if tk, _, err := g.Begin(ctx, map[string]any{"order": "A-17", "amount": 1200}); tk == nil || err != nil {
				t.Errorf("Begin after delete = %v, %v; want a ticket", tk, err)
			}
		})
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
