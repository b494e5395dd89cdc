// Package idemtest is what the tests of idem and idemhttp share: the
// servers their TestMain starts, clients that fail fast, a store of each
// kind over its own connection, and the polling of an expiry.
package idemtest

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
)

// Addresses of the servers Main starts for the whole package.
var RedisAddr, EtcdAddr, ZKAddr string

// ZKTTLNodes is the zoo.cfg line that enables TTL nodes: ZooKeeper turns
// an unknown zoo.cfg key k into the system property zookeeper.k.
const ZKTTLNodes = "extendedTypesEnabled=true"

// Main runs the package's tests (testmain.Run) with a Redis, an etcd and
// a ZooKeeper server with TTL nodes, and gives their addresses to started
// before the tests run; it does not return.
func Main(m *testing.M, started func(redis, etcd, zk string)) {
	testmain.Run(m, func() (func(), error) {
		// The server deletes expired TTL nodes every 60s by default: every
		// 100ms here, so that a test sees it. The JVM reads this variable.
		_ = os.Setenv("JAVA_TOOL_OPTIONS", "-Dznode.container.checkIntervalMs=100")
		var servers []*testserver.Server
		stop := func() {
			for _, s := range servers {
				_ = s.Stop()
			}
		}
		for _, start := range []func() (*testserver.Server, error){
			func() (*testserver.Server, error) { return testserver.NewRedis() },
			func() (*testserver.Server, error) { return testserver.NewEtcd() },
			func() (*testserver.Server, error) { return testserver.NewZooKeeper(testserver.WithArgs(ZKTTLNodes)) },
		} {
			s, err := start()
			if err != nil {
				stop()
				return nil, err
			}
			servers = append(servers, s)
		}
		RedisAddr, EtcdAddr, ZKAddr = servers[0].Addr(), servers[1].Addr(), servers[2].Addr()
		started(RedisAddr, EtcdAddr, ZKAddr)
		return stop, nil
	})
}

// Addr returns the address of Main's server of kind: "redis", "etcd" or
// "zk".
func Addr(kind string) string {
	switch kind {
	case "redis":
		return RedisAddr
	case "etcd":
		return EtcdAddr
	}
	return ZKAddr
}

// StartServer starts a server of kind of the test's own (to pause, kill
// or restart), stopped at its end.
func StartServer(t *testing.T, kind string) *testserver.Server {
	t.Helper()
	switch kind {
	case "redis":
		return testserver.Redis(t)
	case "etcd":
		return testserver.Etcd(t)
	}
	return testserver.ZooKeeper(t, testserver.WithArgs(ZKTTLNodes))
}

// Clients that fail fast, as a service that wants its gate to degrade
// quickly would set them.

// RedisClient returns a client of the Redis server at addr.
func RedisClient(addr string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, ContextTimeoutEnabled: true})
}

// EtcdClient returns a client of the etcd server at addr.
func EtcdClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: time.Second, Logger: zap.NewNop()})
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// ZKConn returns a connection to the ZooKeeper server at addr.
func ZKConn(addr string) (*gozk.Conn, error) {
	c, _, err := gozk.Connect([]string{addr}, 2*time.Second, gozk.WithLogger(quietZK{}))
	return c, err
}

// OpenStore connects to the server of kind at addr and returns a store
// over the connection, with its keys under prefix, and a function that
// closes both.
func OpenStore(kind, addr, prefix string, opts ...idem.StoreOption) (idem.Store, func(), error) {
	opts = append([]idem.StoreOption{idem.WithPrefix(prefix)}, opts...)
	var s idem.Store
	var closeFn func()
	var err error
	switch kind {
	case "redis":
		c := RedisClient(addr)
		closeFn = func() { _ = c.Close() }
		s, err = idem.NewRedisStore(c, opts...)
	case "etcd":
		var c *clientv3.Client
		if c, err = EtcdClient(addr); err == nil {
			closeFn = func() { _ = c.Close() }
			s, err = idem.NewEtcdStore(c, opts...)
		}
	case "zk":
		if !strings.HasPrefix(prefix, "/") {
			prefix = "/" + prefix
		}
		var c *gozk.Conn
		if c, err = ZKConn(addr); err == nil {
			closeFn = c.Close
			var z *idem.ZKStore
			if z, err = idem.NewZKStore(c, nil, append(opts, idem.WithPrefix(prefix))...); err == nil {
				// The store first: it waits for its calls in flight, which
				// go-zookeeper would otherwise end with a data race when
				// the connection closes under them (seen in row 15).
				s, closeFn = z, func() { _ = z.Close(); c.Close() }
			}
		}
	default:
		return nil, nil, errors.New("unknown engine " + kind)
	}
	if err != nil {
		if closeFn != nil { // the client is open, the store failed
			closeFn()
		}
		return nil, nil, err
	}
	return s, closeFn, nil
}

// Eventually polls cond until it holds or within passes: an expiry is
// announced by nothing.
func Eventually(t testing.TB, within time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
