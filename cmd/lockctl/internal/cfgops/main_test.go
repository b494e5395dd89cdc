package cfgops_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
)

// The servers shared by the tests.
var redisAddr, zkAddr, etcdAddr string

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		var servers []*testserver.Server
		stop := func() {
			for _, s := range servers {
				_ = s.Stop()
			}
		}
		for _, start := range []func(...testserver.Option) (*testserver.Server, error){testserver.NewRedis, testserver.NewZooKeeper, testserver.NewEtcd} {
			s, err := start()
			if err != nil {
				stop()
				return nil, err
			}
			servers = append(servers, s)
		}
		redisAddr, zkAddr, etcdAddr = servers[0].Addr(), servers[1].Addr(), servers[2].Addr()
		return stop, nil
	})
}

var quiet = config.WithLogger(slog.New(slog.DiscardHandler))

// loadYAML loads content, with no ORTHRUS_ variable of the environment.
func loadYAML(t *testing.T, content string) *config.Config {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "ORTHRUS_") {
			t.Setenv(k, "")
		}
	}
	path := filepath.Join(t.TempDir(), "orthrus.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	return c
}
