package idem_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/idem/internal/idemtest"
)

// Addresses of the servers TestMain starts for the whole package (the
// Examples use them too).
var redisAddr, etcdAddr, zkAddr string

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	idemtest.Main(m, func(redis, etcd, zk string) { redisAddr, etcdAddr, zkAddr = redis, etcd, zk })
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

// newStore is storeOn the package's server of kind.
func newStore(t testing.TB, kind string, opts ...idem.StoreOption) idem.Store {
	t.Helper()
	return storeOn(t, kind, idemtest.Addr(kind), opts...)
}

// storeOn returns a store of kind on the server at addr, in a namespace of
// the test's own.
func storeOn(t testing.TB, kind, addr string, opts ...idem.StoreOption) idem.Store {
	t.Helper()
	s, closeFn, err := idemtest.OpenStore(kind, addr, "idemtest/"+strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()), opts...)
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
