package testserver

import (
	"errors"
	"os"
	"testing"
)

// Redis starts a standalone redis-server for the test; see NewRedis.
func Redis(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := NewRedis(append(opts[:len(opts):len(opts)], withBase(t.TempDir()))...)
	return serverFor(t, s, err, "redis-server")
}

// RedisCluster starts a Redis Cluster of masters nodes for the test; see
// NewRedisCluster.
func RedisCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	c, err := NewRedisCluster(masters, append(opts[:len(opts):len(opts)], withBase(t.TempDir()))...)
	return clusterFor(t, c, err, "redis-server")
}

// ZooKeeper starts a standalone ZooKeeper server for the test; see
// NewZooKeeper.
func ZooKeeper(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := NewZooKeeper(append(opts[:len(opts):len(opts)], withBase(t.TempDir()))...)
	return serverFor(t, s, err, "zookeeper")
}

// ZooKeeperEnsemble starts an n-server ZooKeeper ensemble for the test; see
// NewZooKeeperEnsemble.
func ZooKeeperEnsemble(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	c, err := NewZooKeeperEnsemble(n, append(opts[:len(opts):len(opts)], withBase(t.TempDir()))...)
	return clusterFor(t, c, err, "zookeeper")
}

// Etcd starts a single-member etcd for the test; see NewEtcd.
func Etcd(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := NewEtcd(append(opts[:len(opts):len(opts)], withBase(t.TempDir()))...)
	return serverFor(t, s, err, "etcd-server")
}

// EtcdCluster starts an n-member etcd cluster for the test; see
// NewEtcdCluster.
func EtcdCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	c, err := NewEtcdCluster(n, append(opts[:len(opts):len(opts)], withBase(t.TempDir()))...)
	return clusterFor(t, c, err, "etcd-server")
}

// Postgres starts a PostgreSQL server for the test; see NewPostgres. Run
// as root, Stop removes its directory, so it cannot be restarted after
// Stop (Kill and Restart keep it).
func Postgres(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := NewPostgres(append(opts[:len(opts):len(opts)], withBase(t.TempDir()))...)
	return serverFor(t, s, err, "postgresql")
}

func serverFor(t testing.TB, s *Server, err error, pkg string) *Server {
	t.Helper()
	check(t, err, pkg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", s, s.Logs())
		}
		if err := s.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return s
}

func clusterFor(t testing.TB, c *Cluster, err error, pkg string) *Cluster {
	t.Helper()
	check(t, err, pkg)
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range c.Servers {
				t.Logf("%s log:\n%s", s, s.Logs())
			}
		}
		if err := c.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return c
}

// check fails the test on err; a missing binary skips it instead, except
// when CI=true.
func check(t testing.TB, err error, pkg string) {
	t.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ErrNotInstalled) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: not skipping; run scripts/test as root or: sudo apt-get install %s)", err, pkg)
		}
		t.Skipf("%v; to run this test: sudo apt-get install %s", err, pkg)
	}
	t.Fatalf("%v", err)
}
