package testserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/orthrus-go/orthrus/internal/freeport"
)

const (
	zkJar       = "/usr/share/java/zookeeper.jar"
	zkLogJar    = "/usr/share/java/slf4j-simple.jar" // an SLF4J binding so the log says something
	zkMainClass = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
	zkTickTime  = 200 // ms
)

// zkJava returns the java binary and the command line that runs
// QuorumPeerMain with cfg. zookeeper.jar's manifest Class-Path names the
// other jars it needs (netty, jute, slf4j-api, metrics, ...), which is also
// all that Debian's zkEnv.sh puts on the classpath.
func zkJava(cfg string) (string, []string, error) {
	if _, err := os.Stat(zkJar); err != nil {
		return "", nil, fmt.Errorf("%w: %s not found (apt-get install zookeeper)", ErrNotInstalled, zkJar)
	}
	java, err := lookBin("java", "zookeeper")
	if err != nil {
		return "", nil, err
	}
	cp := zkJar
	if _, err := os.Stat(zkLogJar); err == nil {
		cp += ":" + zkLogJar
	}
	args := []string{
		"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
		"-Djava.net.preferIPv4Stack=true",
		"-Dzookeeper.jmx.log4j.disable=true",
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.snapshot.trust.empty=true",
		"-Dzookeeper.cnxTimeout=1000", // quorum connection timeout, for paused peers
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
		"-cp", cp,
		zkMainClass, cfg,
	}
	return java, args, nil
}

func zkConfig(dataDir string, clientPort int, servers []string, o *options) string {
	lines := []string{
		fmt.Sprintf("tickTime=%d", zkTickTime),
		"initLimit=50", // 10s
		"syncLimit=10", // 2s
		"minSessionTimeout=500",
		"maxSessionTimeout=60000",
		"dataDir=" + dataDir,
		fmt.Sprintf("clientPort=%d", clientPort),
		"clientPortAddress=127.0.0.1",
		"admin.enableServer=false",
		"4lw.commands.whitelist=*",
		"forceSync=no",
		"maxClientCnxns=0",
	}
	lines = append(lines, servers...)
	lines = append(lines, o.args...)
	return strings.Join(lines, "\n") + "\n"
}

func newZKServer(root string, owned bool, clientPort int, servers []string, myid int, o *options) (*Server, error) {
	s, err := newServer("zookeeper", hostPort(clientPort), root, "", owned, o)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(root, "zoo.cfg")
	if o.tls != nil {
		if servers, err = s.zkTLSLines(o.tls, servers); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(cfg, []byte(zkConfig(s.dir, clientPort, servers, o)), 0o600); err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	if myid > 0 {
		if err := os.WriteFile(filepath.Join(s.dir, "myid"), []byte(fmt.Sprintf("%d\n", myid)), 0o600); err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
	}
	if s.bin, s.args, err = zkJava(cfg); err != nil {
		return nil, err
	}
	if o.tls != nil {
		s.args = zkNettyClasspath(s.args)
	}
	s.env = environ("")
	s.probe = func(ctx context.Context) error { _, err := zkMode(ctx, s.addr); return err }
	return s, nil
}

// NewZooKeeper starts a standalone ZooKeeper server and waits until srvr
// reports it serving. The caller must Stop it.
func NewZooKeeper(opts ...Option) (*Server, error) {
	o := buildOptions(opts)
	if _, _, err := zkJava(""); err != nil {
		return nil, err
	}
	return startSingle(o, "zookeeper", func(root string, owned bool, port int) (*Server, error) {
		return newZKServer(root, owned, port, nil, 0, o)
	})
}

// NewZooKeeperEnsemble starts an n-server ZooKeeper quorum and waits until
// every server is serving as leader or follower. The caller must Stop it.
func NewZooKeeperEnsemble(n int, opts ...Option) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("testserver: ZooKeeper ensemble needs at least 1 server, got %d", n)
	}
	o := buildOptions(opts)
	if _, _, err := zkJava(""); err != nil {
		return nil, err
	}
	c, roots, err := newCluster(o, "zookeeper-ensemble", n)
	if err != nil {
		return nil, err
	}
	c.isLeader = func(ctx context.Context, s *Server) (bool, error) {
		mode, err := zkMode(ctx, s.addr)
		return mode == "leader", err
	}
	err = retry(func() error {
		c.Servers = nil
		if err := resetDirs(roots); err != nil {
			return err
		}
		ports, err := freeport.Loopback(3 * n) // client, quorum, election
		if err != nil {
			return err
		}
		var servers []string
		for i := 0; i < n; i++ {
			servers = append(servers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2]))
		}
		for i := 0; i < n; i++ {
			s, err := newZKServer(roots[i], false, ports[3*i], servers, i+1, o)
			if err != nil {
				return err
			}
			full := s.probe
			s.probe = c.memberProbe(full, func(ctx context.Context) error { return zkRuok(ctx, s.addr) })
			c.Servers = append(c.Servers, s)
		}
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		defer cancel()
		return launch(ctx, c.Servers)
	})
	if err != nil {
		c.abort()
		return nil, err
	}
	return c, nil
}

// zk4lw sends a four-letter-word command and returns the whole answer.
func zk4lw(ctx context.Context, addr, cmd string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(probeTimeout))
	}
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// zkRuok tells whether the server process answers (not whether it serves).
func zkRuok(ctx context.Context, addr string) error {
	out, err := zk4lw(ctx, addr, "ruok")
	if err != nil {
		return err
	}
	if out != "imok" {
		return fmt.Errorf("ruok answered %q", out)
	}
	return nil
}

// zkMode returns the "Mode:" srvr reports (standalone, leader, follower,
// observer), or an error when the server is not serving.
func zkMode(ctx context.Context, addr string) (string, error) {
	out, err := zk4lw(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if mode, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(mode), nil
		}
	}
	return "", fmt.Errorf("srvr answered %q", strings.TrimSpace(out))
}
