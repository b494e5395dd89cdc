package runonce_test

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// The servers shared by the package's tests.
var redisAddr, etcdAddr, zkAddr string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(m.Run()) // a runner process the test kills: no servers of its own
	}
	testmain.Run(m, func() (func(), error) {
		r, err := testserver.NewRedis()
		if err != nil {
			return nil, err
		}
		e, err := testserver.NewEtcd()
		if err != nil {
			_ = r.Stop()
			return nil, err
		}
		z, err := testserver.NewZooKeeper()
		if err != nil {
			_ = r.Stop()
			_ = e.Stop()
			return nil, err
		}
		redisAddr, etcdAddr, zkAddr = r.Addr(), e.Addr(), z.Addr()
		return func() { _ = r.Stop(); _ = e.Stop(); _ = z.Stop() }, nil
	})
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// process makes the engine of one more process: its own clients and
// sessions, on the servers every process of the test shares.
type process func(t *testing.T) locker.Engine

// processes are the engines the tests run on: each call is a new process.
func processes(t *testing.T) map[string]process {
	store, err := mem.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	return map[string]process{
		"mem": func(t *testing.T) locker.Engine {
			e, err := mem.New(mem.WithStore(store))
			return closing(t, e, err)
		},
		"redis": func(t *testing.T) locker.Engine { return newRedis(t) },
		"etcd":  func(t *testing.T) locker.Engine { return newEtcd(t) },
		"zk": func(t *testing.T) locker.Engine {
			e, err := zk.New([]string{zkAddr}, zk.WithLogger(quiet))
			return closing(t, e, err)
		},
		"switcher": func(t *testing.T) locker.Engine {
			e, err := switcher.New([]locker.Engine{newRedis(t), newEtcd(t)}, switcher.WithLogger(quiet))
			return closing(t, e, err)
		},
	}
}

func newRedis(t testing.TB) locker.Engine {
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	e, err := redis.New(c, redis.WithLogger(quiet))
	return closing(t, e, err)
}

func newEtcd(t testing.TB) locker.Engine {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e, err := etcd.New(c, etcd.WithLogger(quiet))
	return closing(t, e, err)
}

// closing fails the test on err, and closes e when the test ends, before
// the clients it was given (cleanups run last registered first).
func closing[E locker.Engine](t testing.TB, e E, err error) locker.Engine {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}
