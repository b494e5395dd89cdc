package idem_test

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

// Addresses of the servers TestMain starts for the whole package (the
// Examples use them too).
var redisAddr, etcdAddr, zkAddr string

// zkTTLNodes is the zoo.cfg line that enables TTL nodes: ZooKeeper turns
// an unknown zoo.cfg key k into the system property zookeeper.k.
const zkTTLNodes = "extendedTypesEnabled=true"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
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
		// The server deletes expired TTL nodes every 60s by default: every
		// 100ms here, so that a test sees it. The JVM reads this variable.
		_ = os.Setenv("JAVA_TOOL_OPTIONS", "-Dznode.container.checkIntervalMs=100")
		z, err := testserver.NewZooKeeper(testserver.WithArgs(zkTTLNodes))
		if err != nil {
			_ = r.Stop()
			_ = e.Stop()
			return nil, err
		}
		redisAddr, etcdAddr, zkAddr = r.Addr(), e.Addr(), z.Addr()
		return func() { _ = r.Stop(); _ = e.Stop(); _ = z.Stop() }, nil
	})
}

// Clients that fail fast, as a service that wants its gate to degrade
// quickly would set them.
func redisClient(addr string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, ContextTimeoutEnabled: true})
}

func etcdClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: time.Second, Logger: zap.NewNop()})
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

func zkConn(addr string) (*gozk.Conn, error) {
	c, _, err := gozk.Connect([]string{addr}, 2*time.Second, gozk.WithLogger(quietZK{}))
	return c, err
}

// engine builds a store of one kind on a server for a test.
type engine struct {
	kind string
	// expiry is the shortest expiry the engine honours: etcd leases are
	// whole seconds.
	expiry time.Duration
}

var engines = []engine{
	{"redis", 300 * time.Millisecond},
	{"etcd", time.Second},
	{"zk", 300 * time.Millisecond},
}

func addrOf(kind string) string {
	switch kind {
	case "redis":
		return redisAddr
	case "etcd":
		return etcdAddr
	}
	return zkAddr
}

// openStore connects to addr and returns a store over the connection and
// a function that closes both.
func openStore(kind, addr, prefix string, opts ...idem.StoreOption) (idem.Store, func(), error) {
	opts = append([]idem.StoreOption{idem.WithPrefix(prefix)}, opts...)
	switch kind {
	case "redis":
		c := redisClient(addr)
		s, err := idem.NewRedisStore(c, opts...)
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return s, func() { _ = c.Close() }, nil
	case "etcd":
		c, err := etcdClient(addr)
		if err != nil {
			return nil, nil, err
		}
		s, err := idem.NewEtcdStore(c, opts...)
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return s, func() { _ = c.Close() }, nil
	case "zk":
		c, err := zkConn(addr)
		if err != nil {
			return nil, nil, err
		}
		if !strings.HasPrefix(prefix, "/") {
			prefix = "/" + prefix
		}
		s, err := idem.NewZKStore(c, nil, append(opts, idem.WithPrefix(prefix))...)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return s, func() { c.Close(); _ = s.Close() }, nil
	}
	return nil, nil, errors.New("unknown engine " + kind)
}

// newStore is openStore for a test, on the package's server of kind, in a
// namespace of the test's own.
func newStore(t testing.TB, kind string, opts ...idem.StoreOption) idem.Store {
	t.Helper()
	return storeOn(t, kind, addrOf(kind), opts...)
}

func storeOn(t testing.TB, kind, addr string, opts ...idem.StoreOption) idem.Store {
	t.Helper()
	s, closeFn, err := openStore(kind, addr, "idemtest/"+strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return s
}

func newGate(t testing.TB, s idem.Store, opts ...idem.Option) *idem.Gate {
	t.Helper()
	g, err := idem.New("test-app", s, append([]idem.Option{idem.WithLogger(testLogger(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, error)) {
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
		time.Sleep(20 * time.Millisecond) // polling an expiry: nothing announces it
	}
}
