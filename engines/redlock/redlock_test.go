package redlock_test

import (
	"context"
	"errors"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redlock"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// nodeCount is how many masters the package's shared servers are.
const nodeCount = 5

// The package's shared masters, for the tests that do not stop one, and
// the examples.
var shared []*testserver.Server

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		if helperMode() {
			return func() {}, nil // a helper process of pause_test.go, on its parent's servers
		}
		stop := func() {
			for _, s := range shared {
				_ = s.Stop()
			}
		}
		for range nodeCount {
			s, err := testserver.NewRedis()
			if err != nil {
				stop()
				return nil, err
			}
			shared = append(shared, s)
		}
		return stop, nil
	})
}

func addrsOf(servers []*testserver.Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// clients returns a client per address, closed when the test ends.
func clients(t testing.TB, addrs []string) []goredis.UniversalClient {
	t.Helper()
	cs := make([]goredis.UniversalClient, len(addrs))
	for i, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a, MaxRetries: -1, DialerRetries: 1})
		cs[i] = c
		t.Cleanup(func() { _ = c.Close() })
	}
	return cs
}

func newEngine(t testing.TB, nodes []goredis.UniversalClient, opts ...redlock.Option) *redlock.Engine {
	t.Helper()
	e, err := redlock.New(nodes, opts...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return e
}

func harness(t *testing.T, cs []goredis.UniversalClient) lockertest.Harness {
	e := newEngine(t, cs, redlock.WithPrefix("conformance"))
	return lockertest.Harness{
		Engine: e,
		Expire: func(ctx context.Context, name string) error {
			for _, c := range cs {
				if err := c.Del(ctx, e.LockKey(name)).Err(); err != nil {
					return err
				}
			}
			return nil
		},
		Residue: func(ctx context.Context, name string) (int, error) {
			in, err := e.Inspect(ctx, name)
			return in.Subscribers, err
		},
	}
}

func TestConformance(t *testing.T) {
	cs := clients(t, addrsOf(shared))
	lockertest.Run(t, func(t *testing.T) lockertest.Harness { return harness(t, cs) })
}

func TestNewRejectsBadInput(t *testing.T) {
	cs := clients(t, addrsOf(shared))
	cluster := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrsOf(shared[:1])})
	defer cluster.Close()
	for _, tc := range []struct {
		desc  string
		nodes []goredis.UniversalClient
		opt   redlock.Option
	}{
		{"two nodes", cs[:2], redlock.WithName("x")},
		{"no nodes", nil, redlock.WithName("x")},
		{"the same node twice", []goredis.UniversalClient{cs[0], cs[1], cs[0]}, redlock.WithName("x")},
		{"a cluster client", []goredis.UniversalClient{cs[0], cs[1], cluster}, redlock.WithName("x")},
		{"a nil node", []goredis.UniversalClient{cs[0], cs[1], nil}, redlock.WithName("x")},
		{"empty name", cs, redlock.WithName("")},
		{"empty prefix", cs, redlock.WithPrefix("")},
		{"nil logger", cs, redlock.WithLogger(nil)},
		{"nil observer", cs, redlock.WithObserver(nil)},
		{"zero node timeout", cs, redlock.WithNodeTimeout(0)},
		{"nil option", cs, nil},
	} {
		if _, err := redlock.New(tc.nodes, tc.opt); !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("New(%s) = %v; want ErrInvalidArgument", tc.desc, err)
		}
	}
}

// The read-write lock and the semaphore are refused, saying why.
func TestFamilyUnsupported(t *testing.T) {
	e := newEngine(t, clients(t, addrsOf(shared)))
	defer e.Close()
	if _, err := e.NewRWLock("rw"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("NewRWLock() = %v; want ErrUnsupported", err)
	}
	if _, err := e.NewSemaphore("sem", 2); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("NewSemaphore() = %v; want ErrUnsupported", err)
	}
}
