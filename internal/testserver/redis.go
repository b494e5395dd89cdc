package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/orthrus-go/orthrus/internal/freeport"
)

const redisSlots = 16384

func redisArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--logfile", "", // stdout, which goes to the log file
	}
}

func newRedisServer(root string, owned bool, bin string, port int, o *options, extra ...string) (*Server, error) {
	s, err := newServer("redis-server", hostPort(port), root, bin, owned, o)
	if err != nil {
		return nil, err
	}
	s.args = append(redisArgs(port, s.dir), extra...)
	if o.tls != nil {
		tlsArgs, err := s.redisTLSArgs(o.tls)
		if err != nil {
			return nil, err
		}
		s.args = append(s.args, tlsArgs...)
	}
	s.args = append(s.args, o.args...)
	s.env = environ("")
	s.probe = func(ctx context.Context) error { return redisPing(ctx, s.addr) }
	return s, nil
}

// NewRedis starts a standalone redis-server (no persistence) and waits until
// it answers PING. The caller must Stop it.
func NewRedis(opts ...Option) (*Server, error) {
	o := buildOptions(opts)
	bin, err := lookBin("redis-server", "redis-server")
	if err != nil {
		return nil, err
	}
	return startSingle(o, "redis", func(root string, owned bool, port int) (*Server, error) {
		return newRedisServer(root, owned, bin, port, o)
	})
}

// NewRedisCluster starts masters cluster-enabled redis-server nodes, and
// WithReplicas replicas of each (none by default), spreads all 16384 slots
// over the masters, joins the nodes with CLUSTER MEET, makes the replicas
// replicate, and waits until CLUSTER INFO reports cluster_state:ok on every
// node and every replica is in sync. Servers holds the masters first, then
// the replicas: replica j of master i is Servers[masters*(1+j)+i]. The
// caller must Stop it.
func NewRedisCluster(masters int, opts ...Option) (*Cluster, error) {
	o := buildOptions(opts)
	if masters < 1 || o.replicas < 0 {
		return nil, fmt.Errorf("testserver: redis cluster needs at least 1 master and no negative replicas, got %d and %d", masters, o.replicas)
	}
	bin, err := lookBin("redis-server", "redis-server")
	if err != nil {
		return nil, err
	}
	n := masters * (1 + o.replicas)
	c, roots, err := newCluster(o, "redis-cluster", n)
	if err != nil {
		return nil, err
	}
	err = retry(func() error {
		c.Servers = nil
		if err := resetDirs(roots); err != nil {
			return err
		}
		ports, err := freeport.Loopback(2 * n) // client port, cluster bus port
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			s, err := newRedisServer(roots[i], false, bin, ports[2*i], o,
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "1000",
				"--cluster-port", strconv.Itoa(ports[2*i+1]),
				// A replica syncs at once, not after the default 5s a
				// master waits for more replicas to share the transfer.
				"--repl-diskless-sync-delay", "0",
			)
			if err != nil {
				return err
			}
			c.Servers = append(c.Servers, s)
		}
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		defer cancel()
		if err := launch(ctx, c.Servers); err != nil {
			return err
		}
		if err := setupRedisCluster(ctx, c.Servers, masters, ports); err != nil {
			killAll(c.Servers)
			return err
		}
		return nil
	})
	if err != nil {
		c.abort()
		return nil, err
	}
	return c, nil
}

// setupRedisCluster gives the first masters servers the slots and makes
// the others their replicas, in turn.
func setupRedisCluster(ctx context.Context, servers []*Server, masters int, ports []int) error {
	n := len(servers)
	for i, s := range servers[:masters] {
		lo, hi := i*redisSlots/masters, (i+1)*redisSlots/masters-1
		if _, err := redisDo(ctx, s.addr, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return s.failure("CLUSTER SET-CONFIG-EPOCH: %v", err)
		}
		if _, err := redisDo(ctx, s.addr, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return s.failure("CLUSTER ADDSLOTSRANGE %d %d: %v", lo, hi, err)
		}
	}
	for i := 1; i < n; i++ {
		if _, err := redisDo(ctx, servers[0].addr, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(ports[2*i]), strconv.Itoa(ports[2*i+1])); err != nil {
			return servers[0].failure("CLUSTER MEET %s: %v", servers[i].addr, err)
		}
	}
	state := func(s *Server, want ...string) error {
		return s.pollUntil(ctx, func(ctx context.Context) error {
			v, err := redisDo(ctx, s.addr, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			info, _ := v.(string)
			for _, w := range want {
				if !strings.Contains(info, w) {
					return fmt.Errorf("cluster not ready yet, no %q: %q", w, firstLines(info, 3))
				}
			}
			return nil
		})
	}
	known := fmt.Sprintf("cluster_known_nodes:%d\r\n", n)
	for i, r := range servers[masters:] {
		// A replica must know its master before it can replicate it.
		if err := state(r, known); err != nil {
			return err
		}
		m := servers[i%masters]
		id, err := redisDo(ctx, m.addr, "CLUSTER", "MYID")
		if err != nil {
			return m.failure("CLUSTER MYID: %v", err)
		}
		if _, err := redisDo(ctx, r.addr, "CLUSTER", "REPLICATE", fmt.Sprint(id)); err != nil {
			return r.failure("CLUSTER REPLICATE %v: %v", id, err)
		}
	}
	for _, s := range servers {
		if err := state(s, "cluster_state:ok", known); err != nil {
			return err
		}
	}
	for _, r := range servers[masters:] {
		if err := r.waitReplicaLinked(ctx); err != nil {
			return err
		}
	}
	return nil
}

// waitReplicaLinked waits until replica s is in sync with its master.
func (s *Server) waitReplicaLinked(ctx context.Context) error {
	return s.pollUntil(ctx, func(ctx context.Context) error {
		v, err := redisDo(ctx, s.addr, "INFO", "replication")
		if err != nil {
			return err
		}
		if info, _ := v.(string); !strings.Contains(info, "master_link_status:up") {
			return errors.New("replication link not up yet")
		}
		return nil
	})
}

// pollUntil polls probe until it succeeds or ctx ends.
func (s *Server) pollUntil(ctx context.Context, probe func(context.Context) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitReady(ctx, probe)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func redisPing(ctx context.Context, addr string) error {
	v, err := redisDo(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("PING answered %q", v)
	}
	return nil
}

// redisDo sends one command over a new connection and reads the reply. It
// returns a string for simple and bulk strings, int64 for integers, []any for
// arrays and nil for null replies; error replies are returned as errors.
func redisDo(ctx context.Context, addr string, args ...string) (any, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(probeTimeout))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return nil, err
	}
	return readRESP(bufio.NewReader(conn))
}

func readRESP(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty RESP line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, errors.New(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readRESP(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	}
	return nil, fmt.Errorf("unexpected RESP reply %q", line)
}
