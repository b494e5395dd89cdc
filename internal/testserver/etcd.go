package testserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/orthrus-go/orthrus/internal/freeport"
)

func etcdURL(port int) string { return "http://" + hostPort(port) }

// NewEtcd starts a single-member etcd and waits until /health reports true.
// The caller must Stop it.
func NewEtcd(opts ...Option) (*Server, error) {
	c, err := newEtcd(1, "etcd", opts)
	if err != nil {
		return nil, err
	}
	s := c.Servers[0]
	s.probe = func(ctx context.Context) error { return etcdHealth(ctx, s.addr) }
	s.root, s.owned = c.root, c.owned // Stop removes the whole directory
	return s, nil
}

// NewEtcdCluster starts an n-member etcd cluster (static bootstrap) and waits
// until every member reports /health true, i.e. a leader is elected. The
// caller must Stop it.
func NewEtcdCluster(n int, opts ...Option) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("testserver: etcd cluster needs at least 1 member, got %d", n)
	}
	return newEtcd(n, "etcd-cluster", opts)
}

func newEtcd(n int, pattern string, opts []Option) (*Cluster, error) {
	o := buildOptions(opts)
	bin, err := lookBin("etcd", "etcd-server")
	if err != nil {
		return nil, err
	}
	c, roots, err := newCluster(o, pattern, n)
	if err != nil {
		return nil, err
	}
	c.isLeader = etcdIsLeader
	err = retry(func() error {
		c.Servers = nil
		if err := resetDirs(roots); err != nil {
			return err
		}
		ports, err := freeport.Loopback(2 * n) // client, peer
		if err != nil {
			return err
		}
		var initial []string
		for i := 0; i < n; i++ {
			initial = append(initial, fmt.Sprintf("m%d=%s", i, etcdURL(ports[2*i+1])))
		}
		token := fmt.Sprintf("testserver-%d", time.Now().UnixNano())
		for i := 0; i < n; i++ {
			s, err := newServer("etcd", hostPort(ports[2*i]), roots[i], bin, false, o)
			if err != nil {
				return err
			}
			client, peer := etcdURL(ports[2*i]), etcdURL(ports[2*i+1])
			s.args = append([]string{
				"--name", fmt.Sprintf("m%d", i),
				"--data-dir", s.dir,
				"--listen-client-urls", client,
				"--advertise-client-urls", client,
				"--listen-peer-urls", peer,
				"--initial-advertise-peer-urls", peer,
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-state", "new",
				"--initial-cluster-token", token,
				"--heartbeat-interval", "100",
				"--election-timeout", "1000",
				"--pre-vote", // etcd 3.5's default, off in Debian's 3.4
				"--logger", "zap",
				"--log-outputs", "stderr",
			}, o.args...)
			if o.tls != nil {
				if err := s.etcdTLSArgs(o.tls); err != nil {
					return err
				}
			}
			s.env = environ("ETCD") // ETCD_* variables would override the flags
			full := func(ctx context.Context) error { return etcdHealth(ctx, s.addr) }
			alive := func(ctx context.Context) error { return etcdVersion(ctx, s.addr) }
			s.probe = c.memberProbe(full, alive)
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

// etcdHealth succeeds when GET /health says {"health":"true"} (etcd 3.4
// answers false while the member has no leader).
func etcdHealth(ctx context.Context, addr string) error {
	code, body, err := httpDo(ctx, addr, "GET", "/health", "")
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &h) != nil || h.Health != "true" {
		return fmt.Errorf("GET /health: %d %s", code, strings.TrimSpace(string(body)))
	}
	return nil
}

// etcdVersion succeeds when the member's HTTP server answers.
func etcdVersion(ctx context.Context, addr string) error {
	code, body, err := httpDo(ctx, addr, "GET", "/version", "")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET /version: %d %s", code, strings.TrimSpace(string(body)))
	}
	return nil
}

// etcdIsLeader asks the member's gRPC gateway for its status and tells
// whether it names itself as leader.
func etcdIsLeader(ctx context.Context, s *Server) (bool, error) {
	code, body, err := httpDo(ctx, s.addr, "POST", "/v3/maintenance/status", "{}")
	if err != nil {
		return false, fmt.Errorf("%s: %w", s, err)
	}
	// 64-bit IDs are JSON strings in the gateway's output.
	var st struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
		Leader string `json:"leader"`
	}
	if code != http.StatusOK {
		return false, fmt.Errorf("%s: status: %d %s", s, code, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return false, fmt.Errorf("%s: status: %w: %s", s, err, body)
	}
	return st.Leader != "" && st.Leader != "0" && st.Leader == st.Header.MemberID, nil
}

// httpDo makes one HTTP/1.1 request on its own connection, so no transport
// goroutine or idle connection outlives it.
func httpDo(ctx context.Context, addr, method, path, body string) (int, []byte, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(probeTimeout))
	}
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Close = true
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := req.Write(conn); err != nil {
		return 0, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}
