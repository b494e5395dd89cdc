package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
)

// The servers shared by the tests and examples.
var redisAddr, zkAddr, etcdAddr, pgDSN string

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		if addr := os.Getenv(redisLogChild); addr != "" {
			redisAddr = addr // the child of TestOpenRoutesGoRedisLogs, on its parent's server
			return func() {}, nil
		}
		r, err := testserver.NewRedis()
		if err != nil {
			return nil, err
		}
		z, err := testserver.NewZooKeeper()
		if err != nil {
			_ = r.Stop()
			return nil, err
		}
		e, err := testserver.NewEtcd()
		if err != nil {
			_ = r.Stop()
			_ = z.Stop()
			return nil, err
		}
		p, err := testserver.NewPostgres()
		if err != nil {
			_ = r.Stop()
			_ = z.Stop()
			_ = e.Stop()
			return nil, err
		}
		redisAddr, zkAddr, etcdAddr, pgDSN = r.Addr(), z.Addr(), e.Addr(), p.DSN()
		return func() { _ = r.Stop(); _ = z.Stop(); _ = e.Stop(); _ = p.Stop() }, nil
	})
}

// writeFile writes content to name in dir and returns its path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
