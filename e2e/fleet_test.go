package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/switcher"
	"github.com/orthrus-go/orthrus/switcher/etcdsource"
)

// fleetMember is the child process of TestFleetFlip: one service with a
// switcher built from the config file in E2E_FLEET_CONFIG. It says
// "ready", then prints "switched ENGINE UNIXNANO" for every switch and
// "locked ENGINE" once it took a lock on the new engine, until its stdin
// closes.
func fleetMember() int {
	cfg, err := config.Load(os.Getenv("E2E_FLEET_CONFIG"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	events := make(chan switcher.Event, 8)
	sw, err := config.Open(context.Background(), cfg, config.WithSwitcherOptions(switcher.OnSwitch(func(ev switcher.Event) { events <- ev })))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer sw.Close()
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	fmt.Println("ready", sw.Current())
	for {
		select {
		case <-stdinClosed:
			return 0
		case ev := <-events:
			fmt.Println("switched", ev.To, ev.At.UnixNano())
			l, err := sw.NewLocker("fleet")
			if err == nil {
				err = l.Lock()
			}
			if err != nil {
				fmt.Println("error", err)
				continue
			}
			fmt.Println("locked", l.Engine())
			_ = l.Unlock()
		}
	}
}

// Drill 5: three processes share an etcd switch key; one write moves all
// three within a second.
func TestFleetFlip(t *testing.T) {
	es, ra, rb := testserver.Etcd(t), testserver.Redis(t), testserver.Redis(t)
	cfgPath := filepath.Join(t.TempDir(), "fleet.yaml")
	const key = "/e2e/fleet/active"
	cfg := fmt.Sprintf(`active: redis-a
engines:
  - {name: redis-a, type: redis, addrs: [%q]}
  - {name: redis-b, type: redis, addrs: [%q]}
source:
  type: etcd
  endpoints: [%q]
  key: %s
`, ra.Addr(), rb.Addr(), es.Addr(), key)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	type member struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		lines chan string
	}
	var members []*member
	for i := 0; i < 3; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "E2E_FLEET_MEMBER=1", "E2E_FLEET_CONFIG="+cfgPath)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		m := &member{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				m.lines <- sc.Text()
			}
			close(m.lines)
		}()
		members = append(members, m)
		t.Cleanup(func() {
			_ = stdin.Close()
			_ = cmd.Wait()
		})
	}
	next := func(i int, m *member) string {
		select {
		case line, ok := <-m.lines:
			if !ok {
				t.Fatalf("member %d exited", i)
			}
			if strings.HasPrefix(line, "error") {
				t.Fatalf("member %d: %s", i, line)
			}
			return line
		case <-time.After(30 * time.Second):
			t.Fatalf("member %d said nothing for 30s", i)
		}
		return ""
	}
	for i, m := range members {
		if line := next(i, m); line != "ready redis-a" {
			t.Fatalf("member %d: %q; want ready on redis-a", i, line)
		}
	}

	c, err := clientv3.New(clientv3.Config{Endpoints: []string{es.Addr()}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	src, err := etcdsource.New(c, key)
	if err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	if err := src.Set(context.Background(), "redis-b"); err != nil {
		t.Fatal(err)
	}
	for i, m := range members {
		f := strings.Fields(next(i, m))
		if len(f) != 3 || f[0] != "switched" || f[1] != "redis-b" {
			t.Fatalf("member %d: %q; want a switch to redis-b", i, f)
		}
		at, _ := strconv.ParseInt(f[2], 10, 64)
		lag := time.Unix(0, at).Sub(written)
		t.Logf("member %d switched %v after the write", i, lag)
		if lag > time.Second {
			t.Errorf("member %d switched %v after the write; want within 1s", i, lag)
		}
		if line := next(i, m); line != "locked redis-b" {
			t.Errorf("member %d: %q; want its next lock on redis-b", i, line)
		}
	}
}
