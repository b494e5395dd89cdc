package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func ping(addr string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return redisPing(ctx, addr)
}

func TestRedisKillRestart(t *testing.T) {
	s := Redis(t)
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatalf("PING: %v", err)
	}
	ctx := ctxTimeout(t, 5*time.Second)
	if _, err := redisDo(ctx, s.Addr(), "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	// Stop then Restart works in the testing wrappers, and Stop is idempotent.
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatalf("PING after Stop+Restart: %v", err)
	}
	if !strings.Contains(s.Logs(), "Ready to accept connections") {
		t.Errorf("Logs() lacks the startup line:\n%s", s.Logs())
	}
}

func TestRedisPauseResume(t *testing.T) {
	s := Redis(t, WithArgs("--maxmemory", "10mb"))
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr(), 300*time.Millisecond); err == nil {
		t.Fatal("PING answered while paused")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
	v, err := redisDo(ctxTimeout(t, time.Second), s.Addr(), "CONFIG", "GET", "maxmemory")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(v); got != "[maxmemory 10485760]" {
		t.Errorf("WithArgs: CONFIG GET maxmemory = %s", got)
	}
	// Stop while paused must still end the process.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestNewRedisRemovesDir(t *testing.T) {
	s, err := NewRedis()
	if err != nil {
		if errors.Is(err, ErrNotInstalled) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	dir := s.Dir()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s still exists after Stop", dir)
	}
	if err := s.Restart(); err == nil {
		t.Error("Restart after Stop of a NewRedis server succeeded")
	}
}

func TestStartFailureReportsLog(t *testing.T) {
	Redis(t) // skips when redis-server is missing
	start := time.Now()
	s, err := NewRedis(WithArgs("--no-such-directive", "x"))
	if err == nil {
		s.Stop()
		t.Fatal("NewRedis with a bad directive succeeded")
	}
	if !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "no-such-directive") {
		t.Errorf("error lacks the cause or the log tail: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("failing start took %v", d)
	}
	s, err = NewRedis(WithStartTimeout(time.Nanosecond))
	if err == nil {
		s.Stop()
		t.Fatal("NewRedis with a 1ns start timeout succeeded")
	}
	if !strings.Contains(err.Error(), "not ready after 1ns") {
		t.Errorf("timeout error: %v", err)
	}
}

func TestRedisCluster(t *testing.T) {
	c := RedisCluster(t, 3)
	ctx := ctxTimeout(t, 10*time.Second)
	for _, s := range c.Servers {
		v, err := redisDo(ctx, s.Addr(), "CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		if info := v.(string); !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_size:3") {
			t.Fatalf("%s: CLUSTER INFO:\n%s", s, info)
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("key-%d", i)
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got, err := cc.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v", key, got, err)
		}
	}
}

func TestRedisClusterReplicas(t *testing.T) {
	c := RedisCluster(t, 2, WithReplicas(1))
	ctx := ctxTimeout(t, 10*time.Second)
	if len(c.Servers) != 4 {
		t.Fatalf("%d servers; want 2 masters and 2 replicas", len(c.Servers))
	}
	for i, r := range c.Servers[2:] {
		v, err := redisDo(ctx, r.Addr(), "INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		_, masterPort, _ := strings.Cut(c.Servers[i].Addr(), ":")
		if info := v.(string); !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_port:"+masterPort+"\r\n") {
			t.Errorf("%s: INFO replication:\n%s\nwant a replica of %s", r, info, c.Servers[i])
		}
	}
}

func TestZooKeeperRestart(t *testing.T) {
	s := ZooKeeper(t)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := zkRuok(ctx, s.Addr()); err != nil {
		t.Fatal(err)
	}
	if mode, err := zkMode(ctx, s.Addr()); err != nil || mode != "standalone" {
		t.Fatalf("srvr mode = %q, %v", mode, err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := zkRuok(ctx, s.Addr()); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}

func zkLeaders(t *testing.T, c *Cluster) []*Server {
	var leaders []*Server
	for _, s := range c.Servers {
		if !s.live.Load() {
			continue
		}
		mode, err := zkMode(ctxTimeout(t, time.Second), s.Addr())
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if mode == "leader" {
			leaders = append(leaders, s)
		} else if mode != "follower" {
			t.Fatalf("%s: mode %q", s, mode)
		}
	}
	return leaders
}

func TestZooKeeperEnsemble(t *testing.T) {
	c := ZooKeeperEnsemble(t, 3)
	leaders := zkLeaders(t, c)
	if len(leaders) != 1 {
		t.Fatalf("%d leaders, want 1", len(leaders))
	}
	old := leaders[0]
	if l, err := c.Leader(); err != nil || l != old {
		t.Fatalf("Leader() = %v, %v; want %v", l, err, old)
	}
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	l, err := c.WaitLeader(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l == old {
		t.Fatal("killed server is still leader")
	}
	if err := old.Restart(); err != nil {
		t.Fatal(err)
	}
	if mode, err := zkMode(ctxTimeout(t, time.Second), old.Addr()); err != nil || mode != "follower" {
		t.Fatalf("restarted old leader: mode %q, %v", mode, err)
	}
	if leaders := zkLeaders(t, c); len(leaders) != 1 || leaders[0] != l {
		t.Fatalf("leaders after restart: %v", leaders)
	}
}

func etcdClient(t *testing.T, endpoints []string) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestEtcd(t *testing.T) {
	s := Etcd(t)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := etcdHealth(ctx, s.Addr()); err != nil {
		t.Fatal(err)
	}
	cli := etcdClient(t, []string{s.Addr()})
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get k = %v", resp.Kvs)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	resp, err = cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get after restart: %v, %v", resp, err)
	}
}

func TestEtcdCluster(t *testing.T) {
	c := EtcdCluster(t, 3)
	old, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range c.Servers {
		ok, err := etcdIsLeader(ctxTimeout(t, time.Second), s)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d members claim leadership, want 1", n)
	}
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	l, err := c.WaitLeader(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l == old {
		t.Fatal("killed member is still leader")
	}
	ctx := ctxTimeout(t, 10*time.Second)
	cli := etcdClient(t, []string{l.Addr()})
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put after failover: %v", err)
	}
	if err := old.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := etcdHealth(ctx, old.Addr()); err != nil {
		t.Fatal(err)
	}
}

// After a failover, Rejoin brings the old master back as a replica of the
// new one, which the Sentinels then count as healthy.
func TestSentinelRejoin(t *testing.T) {
	s := RedisSentinel(t, 1, 3)
	ctx := ctxTimeout(t, time.Minute)
	old, err := s.CurrentMaster(ctx)
	if err != nil || old != s.Master {
		t.Fatalf("CurrentMaster() = %v, %v; want %v", old, err, s.Master)
	}
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	addr, err := s.WaitFailover(old.Addr(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Rejoin(old, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if m, err := s.CurrentMaster(ctx); err != nil || m.Addr() != addr || m != s.Replicas[0] {
		t.Fatalf("CurrentMaster() = %v, %v; want the promoted replica on %s", m, err, addr)
	}
	v, err := redisDo(ctx, old.Addr(), "ROLE")
	if role, _ := v.([]any); err != nil || len(role) < 3 || role[0] != "slave" || fmt.Sprintf("127.0.0.1:%v", role[2]) != addr {
		t.Errorf("ROLE of the rejoined server = %v, %v; want a replica of %s", v, err, addr)
	}
	if err := s.Rejoin(s.Replicas[0], 30*time.Second); err == nil {
		t.Error("Rejoin(the master) = nil; want an error")
	}
}

// pgConnect opens a connection to s, closed when t ends.
func pgConnect(ctx context.Context, t *testing.T, s *Server) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// PostgreSQL keeps its data over Kill and Restart, and a pause freezes the
// backends too: a query on a connection opened before it gets no answer.
func TestPostgresKillPauseRestart(t *testing.T) {
	s := Postgres(t)
	ctx := ctxTimeout(t, 30*time.Second)
	conn := pgConnect(ctx, t, s)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := conn.Exec(qctx, "SELECT 1")
	cancel()
	if err == nil {
		t.Fatal("a backend answered while the server was paused")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	again, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(context.Background())
	var v int
	if err := again.QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 7 {
		t.Fatalf("after Kill and Restart: SELECT = %d, %v; want 7", v, err)
	}
}

// With TLS, a client presenting a certificate of the test CA is let in.
func TestPostgresTLS(t *testing.T) {
	certs := TestCerts(t)
	s := Postgres(t, WithTLS(certs))
	ctx := ctxTimeout(t, 30*time.Second)
	cfg, err := pgx.ParseConfig("postgres://postgres@" + s.TLSAddr() + "/postgres")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLSConfig, err = certs.ClientConfig(); err != nil {
		t.Fatal(err)
	}
	cfg.Fallbacks = nil
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var ssl bool
	if err := conn.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Fatalf("pg_stat_ssl.ssl = %v, %v; want true", ssl, err)
	}
}

// A PostgreSQL server's CPU is its backends' too: work on one connection
// shows in Server.CPU, which the postmaster's own time would not.
func TestPostgresCPUCountsBackends(t *testing.T) {
	s := Postgres(t)
	ctx := ctxTimeout(t, 30*time.Second)
	conn := pgConnect(ctx, t, s)
	before, err := s.CPU()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT count(*) FROM generate_series(1, 20000000)"); err != nil {
		t.Fatal(err)
	}
	after, err := s.CPU()
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 100*time.Millisecond {
		t.Errorf("CPU() grew %v over a query of seconds; want the backend's time counted", after-before)
	}
	if own, err := ProcessCPU(s.Pid()); err != nil || own >= after {
		t.Errorf("ProcessCPU(postmaster) = %v, %v; want less than the server's %v", own, err, after)
	}
}
