package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/internal/freeport"
)

// SentinelMaster is the name under which the Sentinels of NewRedisSentinel
// monitor their master.
const SentinelMaster = "mymaster"

// Sentinel is a Redis master, its replicas and the Sentinels that monitor
// them, each a child process. The Sentinels mark the master down after
// 1s of silence and fail over to a replica with a quorum of a majority.
type Sentinel struct {
	// Cluster holds every process, master first, then the replicas, then
	// the Sentinels; its Stop stops them all.
	*Cluster
	Master    *Server // the master it started with
	Replicas  []*Server
	Sentinels []*Server
}

// SentinelAddrs returns the Sentinels' addresses, what a failover client
// is given.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, x := range s.Sentinels {
		addrs[i] = x.Addr()
	}
	return addrs
}

// MasterAddr asks the Sentinels, in turn, which address they give for the
// master.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var errs []error
	for _, x := range s.Sentinels {
		if !x.live.Load() {
			continue
		}
		addr, err := sentinelMaster(ctx, x)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("testserver: no Sentinel names a master: %w", errors.Join(errs...))
}

// sentinelMaster asks one Sentinel for the master's address.
func sentinelMaster(ctx context.Context, x *Server) (string, error) {
	v, err := redisDo(ctx, x.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster)
	if err != nil {
		return "", fmt.Errorf("%s: %w", x, err)
	}
	if a, ok := v.([]any); ok && len(a) == 2 {
		host, _ := a[0].(string)
		port, _ := a[1].(string)
		return host + ":" + port, nil
	}
	return "", fmt.Errorf("%s: unexpected reply %v", x, v)
}

// WaitFailover polls the Sentinels until every live one names a master
// other than from, and that master says it is one; it returns the new
// master's address.
func (s *Sentinel) WaitFailover(from string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		addr, err := s.agreedMaster(ctx)
		switch {
		case err != nil:
			last = err
		case addr == from:
			last = fmt.Errorf("the Sentinels still name %s", from)
		default:
			info, err := redisDo(ctx, addr, "ROLE")
			if a, ok := info.([]any); err == nil && ok && len(a) > 0 && a[0] == "master" {
				return addr, nil
			}
			last = fmt.Errorf("%s is not master yet (%v, %v)", addr, info, err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("testserver: no failover from %s within %v: %v", from, timeout, last)
		case <-time.After(pollInterval):
		}
	}
}

// agreedMaster returns the master address every live Sentinel names.
func (s *Sentinel) agreedMaster(ctx context.Context) (string, error) {
	var agreed string
	for _, x := range s.Sentinels {
		if !x.live.Load() {
			continue
		}
		addr, err := sentinelMaster(ctx, x)
		if err != nil {
			return "", err
		}
		if agreed != "" && addr != agreed {
			return "", fmt.Errorf("the Sentinels disagree: %s and %s", agreed, addr)
		}
		agreed = addr
	}
	return agreed, nil
}

// NewRedisSentinel starts a master, replicas replicas of it and sentinels
// Sentinels (redis-server --sentinel) monitoring it as SentinelMaster, and
// waits until the replicas are in sync and every Sentinel knows the
// replicas and the other Sentinels, so that a failover can happen. The
// caller must Stop it.
func NewRedisSentinel(replicas, sentinels int, opts ...Option) (*Sentinel, error) {
	if replicas < 1 || sentinels < 1 {
		return nil, fmt.Errorf("testserver: sentinel needs at least 1 replica and 1 Sentinel, got %d and %d", replicas, sentinels)
	}
	o := buildOptions(opts)
	bin, err := lookBin("redis-server", "redis-server")
	if err != nil {
		return nil, err
	}
	n := 1 + replicas + sentinels
	c, roots, err := newCluster(o, "redis-sentinel", n)
	if err != nil {
		return nil, err
	}
	var s *Sentinel
	err = retry(func() error {
		c.Servers = nil
		s = &Sentinel{Cluster: c}
		if err := resetDirs(roots); err != nil {
			return err
		}
		ports, err := freeport.Loopback(n)
		if err != nil {
			return err
		}
		for i := 0; i <= replicas; i++ {
			// A replica that (re)joins syncs at once, not after the 5s a
			// master waits by default for more replicas to share the
			// transfer.
			extra := []string{"--repl-diskless-sync-delay", "0"}
			if i > 0 {
				extra = append(extra, "--replicaof", "127.0.0.1", strconv.Itoa(ports[0]))
			}
			r, err := newRedisServer(roots[i], false, bin, ports[i], o, extra...)
			if err != nil {
				return err
			}
			c.Servers = append(c.Servers, r)
		}
		s.Master, s.Replicas = c.Servers[0], c.Servers[1:]
		for i := 1 + replicas; i < n; i++ {
			x, err := newSentinelServer(roots[i], bin, ports[i], ports[0], sentinels/2+1, o)
			if err != nil {
				return err
			}
			c.Servers = append(c.Servers, x)
			s.Sentinels = append(s.Sentinels, x)
		}
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		defer cancel()
		if err := launch(ctx, c.Servers); err != nil {
			return err
		}
		if err := s.waitMonitored(ctx, replicas, sentinels); err != nil {
			killAll(c.Servers)
			return err
		}
		return nil
	})
	if err != nil {
		c.abort()
		return nil, err
	}
	return s, nil
}

func newSentinelServer(root, bin string, port, masterPort, quorum int, o *options) (*Server, error) {
	s, err := newServer("redis-sentinel", hostPort(port), root, bin, false, o)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(root, "sentinel.conf") // Sentinel rewrites it
	lines := []string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"dir " + s.dir,
		"daemonize no",
		`logfile ""`,
		"protected-mode no",
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", SentinelMaster, masterPort, quorum),
		"sentinel down-after-milliseconds " + SentinelMaster + " 1000",
		"sentinel failover-timeout " + SentinelMaster + " 5000",
		"sentinel parallel-syncs " + SentinelMaster + " 1",
	}
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	s.args = []string{conf, "--sentinel"}
	s.env = environ("")
	s.probe = func(ctx context.Context) error { return redisPing(ctx, s.addr) }
	return s, nil
}

// waitMonitored waits until the replicas are in sync with the master and
// every Sentinel knows them and the other Sentinels.
func (s *Sentinel) waitMonitored(ctx context.Context, replicas, sentinels int) error {
	for _, r := range s.Replicas {
		if err := r.waitReplicaLinked(ctx); err != nil {
			return err
		}
	}
	for _, x := range s.Sentinels {
		if err := x.pollUntil(ctx, func(ctx context.Context) error {
			v, err := redisDo(ctx, x.addr, "SENTINEL", "MASTER", SentinelMaster)
			if err != nil {
				return err
			}
			got := fieldMap(v)
			if got["num-slaves"] != strconv.Itoa(replicas) || got["num-other-sentinels"] != strconv.Itoa(sentinels-1) {
				return fmt.Errorf("knows %s replicas and %s other Sentinels; want %d and %d",
					got["num-slaves"], got["num-other-sentinels"], replicas, sentinels-1)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// fieldMap reads a Sentinel reply of alternating field names and values.
func fieldMap(v any) map[string]string {
	fields, _ := v.([]any)
	m := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		val, _ := fields[i+1].(string)
		m[k] = val
	}
	return m
}

// CurrentMaster returns the server that every live Sentinel names as the
// master.
func (s *Sentinel) CurrentMaster(ctx context.Context) (*Server, error) {
	addr, err := s.agreedMaster(ctx)
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	for _, x := range s.Servers[:1+len(s.Replicas)] {
		if x.addr == addr {
			return x, nil
		}
	}
	return nil, fmt.Errorf("testserver: the Sentinels name %q, not a server of the set", addr)
}

// Rejoin brings x, a server of the set that was killed or stopped (the
// old master after a failover), back as a replica of the current master,
// and waits until it is in sync and every live Sentinel counts it as a
// healthy replica, so that the next failover may promote it. Sentinel
// would demote a plain Restart of the old master itself, but 15-16s
// later (it waits 8s after an instance changes role, and reads a
// replica's INFO every 10s); Rejoin starts it with --replicaof the new
// master instead.
func (s *Sentinel) Rejoin(x *Server, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m, err := s.CurrentMaster(ctx)
	if err != nil {
		return err
	}
	if m == x {
		return fmt.Errorf("testserver: rejoin %s: it is the master", x)
	}
	host, port, _ := strings.Cut(m.addr, ":")
	x.mu.Lock()
	if i := slices.Index(x.args, "--replicaof"); i >= 0 {
		x.args = slices.Delete(x.args, i, i+3)
	}
	x.args = append(x.args, "--replicaof", host, port)
	x.mu.Unlock()
	if err := x.Restart(); err != nil {
		return err
	}
	if err := x.waitReplicaLinked(ctx); err != nil {
		return err
	}
	for _, sen := range s.Sentinels {
		if !sen.live.Load() {
			continue
		}
		if err := sen.pollUntil(ctx, func(ctx context.Context) error {
			v, err := redisDo(ctx, sen.addr, "SENTINEL", "REPLICAS", SentinelMaster)
			if err != nil {
				return err
			}
			replicas, _ := v.([]any)
			for _, r := range replicas {
				f := fieldMap(r)
				if f["name"] != x.addr {
					continue
				}
				if f["flags"] != "slave" || f["master-link-status"] != "ok" {
					return fmt.Errorf("sees %s as %q, link %q", x, f["flags"], f["master-link-status"])
				}
				return nil
			}
			return fmt.Errorf("does not know %s as a replica", x)
		}); err != nil {
			return err
		}
	}
	return nil
}

// RedisSentinel starts a master with replicas and Sentinels for the test;
// see NewRedisSentinel.
func RedisSentinel(t testing.TB, replicas, sentinels int, opts ...Option) *Sentinel {
	t.Helper()
	s, err := NewRedisSentinel(replicas, sentinels, append(opts[:len(opts):len(opts)], withBase(t.TempDir()))...)
	if err != nil {
		check(t, err, "redis-server")
	}
	clusterFor(t, s.Cluster, nil, "redis-server")
	return s
}
