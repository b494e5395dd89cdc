// Package fleettest gives the tests of packages built over any engine
// (runonce, elect) a fleet of processes: real Redis, etcd and ZooKeeper
// servers started once, and for each engine kind a constructor of one
// more process's engine, with its own clients and sessions.
package fleettest

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

// Servers are the addresses of the servers a fleet shares.
type Servers struct{ Redis, Etcd, ZooKeeper string }

// Start starts a Redis, an etcd and a ZooKeeper server, for TestMain;
// stop stops them.
func Start() (s Servers, stop func(), err error) {
	r, err := testserver.NewRedis()
	if err != nil {
		return s, nil, err
	}
	e, err := testserver.NewEtcd()
	if err != nil {
		_ = r.Stop()
		return s, nil, err
	}
	z, err := testserver.NewZooKeeper()
	if err != nil {
		_ = r.Stop()
		_ = e.Stop()
		return s, nil, err
	}
	return Servers{Redis: r.Addr(), Etcd: e.Addr(), ZooKeeper: z.Addr()}, func() { _ = r.Stop(); _ = e.Stop(); _ = z.Stop() }, nil
}

// Main is a TestMain: it runs the tests around the servers of a fleet,
// started once into *s and checked for leaks by testmain.Run; in a child
// process that a test started with one of envs set, it runs the tests
// alone, on the servers the parent names.
func Main(m *testing.M, s *Servers, envs ...string) {
	for _, env := range envs {
		if os.Getenv(env) != "" {
			os.Exit(m.Run())
		}
	}
	testmain.Run(m, func() (stop func(), err error) {
		*s, stop, err = Start()
		return stop, err
	})
}

// Process makes the engine of one more process, closed when the test
// ends.
type Process func(t testing.TB) locker.Engine

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Processes returns a Process per engine kind: "mem" (the processes share
// one store), "redis", "etcd", "zk", and "switcher" (over a Redis and an
// etcd engine, Redis first).
func (s Servers) Processes(t testing.TB) map[string]Process {
	store, err := mem.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	return map[string]Process{
		"mem": func(t testing.TB) locker.Engine {
			e, err := mem.New(mem.WithStore(store))
			return closing(t, e, err)
		},
		"redis": s.redis,
		"etcd":  s.etcd,
		"zk": func(t testing.TB) locker.Engine {
			e, err := zk.New([]string{s.ZooKeeper}, zk.WithLogger(quiet), zk.WithSessionTimeout(2*time.Second))
			return closing(t, e, err)
		},
		"switcher": func(t testing.TB) locker.Engine {
			e, err := switcher.New([]locker.Engine{s.redis(t), s.etcd(t)}, switcher.WithLogger(quiet))
			return closing(t, e, err)
		},
	}
}

func (s Servers) redis(t testing.TB) locker.Engine {
	c := goredis.NewClient(&goredis.Options{Addr: s.Redis, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	e, err := redis.New(c, redis.WithLogger(quiet))
	return closing(t, e, err)
}

func (s Servers) etcd(t testing.TB) locker.Engine {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Etcd}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
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
