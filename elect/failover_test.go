package elect_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/elect"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// helperEnv names the engine a leader process the test kills runs on.
const helperEnv = "ORTHRUS_ELECT_HELPER"

// ttl is the leadership TTL of the failover tests; ZooKeeper's session
// timeout is the same (internal/fleettest).
const ttl = 2 * time.Second

// TestHelperLeader is the process TestKilledLeader kills: it leads, says
// so, and waits to be killed.
func TestHelperLeader(t *testing.T) {
	c, lctx := helperLead(t, helperEnv)
	if c == nil {
		t.Skip("run by TestKilledLeader")
	}
	fmt.Println("leading")
	<-lctx.Done() // killed first
	t.Fatalf("leadership ended before the process was killed: %v", context.Cause(lctx))
}

// helperLead is the start of a leader process: when env names an engine
// kind, it campaigns on it for the election the parent named, and returns
// once it leads; otherwise (a test run, not a process started by one) it
// returns nil.
func helperLead(t *testing.T, env string) (*elect.Candidate, context.Context) {
	e := helperEngine(t, env)
	if e == nil {
		return nil, nil
	}
	c := newCandidate(t, e, os.Getenv("ELECTION"), elect.WithTTL(ttl))
	lctx, err := c.Campaign(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c, lctx
}

// helperEngine is the engine of a process a test started: when env names
// an engine kind, one of that kind on the servers the parent named;
// otherwise (a test run, not a process started by one) nil.
func helperEngine(t *testing.T, env string) locker.Engine {
	kind := os.Getenv(env)
	if kind == "" {
		return nil
	}
	servers.Redis, servers.Etcd, servers.ZooKeeper = os.Getenv("REDIS_ADDR"), os.Getenv("ETCD_ADDR"), os.Getenv("ZK_ADDR")
	return servers.Processes(t)[kind](t)
}

// startProcess runs a helper test of this binary on election name and
// engine kind (env tells it which, helperEngine reads it), with extra
// environment variables; it returns the process and its stdin and stdout.
// The process is killed when the test ends (cleanup, after which its
// output ends; the caller reads it to the end before then if it must).
func startProcess(t *testing.T, helper, env, kind, name string, extra ...string) (*exec.Cmd, io.WriteCloser, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$")
	cmd.Env = append(append(os.Environ(), env+"="+kind, "REDIS_ADDR="+servers.Redis, "ETCD_ADDR="+servers.Etcd,
		"ZK_ADDR="+servers.ZooKeeper, "ELECTION="+name), extra...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, in, out
}

// startLeader runs the helper test of this binary that leads election
// name on kind (env tells it which), and waits until it says it leads. The
// process is killed when the test ends; the rest of its output follows.
func startLeader(t *testing.T, helper, env, kind, name string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd, _, out := startProcess(t, helper, env, kind, name)
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "leading") {
		t.Fatalf("leader process said %q, %v; want leading", lines.Text(), lines.Err())
	}
	return cmd, lines
}

// A leader process killed (SIGKILL) is replaced within its TTL plus a
// second (ZooKeeper: the session timeout plus a second).
func TestKilledLeader(t *testing.T) {
	for _, kind := range []string{"redis", "etcd", "zk"} {
		t.Run(kind, func(t *testing.T) {
			name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
			cmd, _ := startLeader(t, "TestHelperLeader", helperEnv, kind, name)
			e := servers.Processes(t)[kind](t)
			old, err := elect.CurrentLeader(context.Background(), e, name)
			if err != nil || old.PID != cmd.Process.Pid {
				t.Errorf("CurrentLeader() = %+v, %v; want the leader process (pid %d)", old, err, cmd.Process.Pid)
			}
			next := newCandidate(t, e, name, elect.WithTTL(ttl))
			won := make(chan time.Time, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 3*ttl)
			defer cancel()
			go func() {
				if _, err := next.Campaign(ctx); err == nil {
					won <- time.Now()
				}
				close(won)
			}()
			killed := time.Now()
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			at, ok := <-won
			if !ok {
				t.Fatalf("no new leader %v after the kill", 3*ttl)
			}
			took := at.Sub(killed)
			t.Logf("new leader %v after the kill (TTL %v)", took, ttl)
			if took > ttl+time.Second {
				t.Errorf("new leader %v after the kill; want within TTL + 1s (%v)", took, ttl+time.Second)
			}
			if next.Token() <= old.Token && old.Engine == kind {
				t.Errorf("new leader's token %d; want above the killed leader's %d", next.Token(), old.Token)
			}
			if err := next.Resign(); err != nil {
				t.Errorf("Resign() = %v", err)
			}
		})
	}
}

// Through a switcher, a switch leaves the leader leading on the old engine;
// a candidate campaigning on the new engine does not win until the old
// leader resigns, and then wins with a higher token.
func TestLeadershipAcrossSwitch(t *testing.T) {
	procs := servers.Processes(t)
	swA, swB := procs["switcher"](t).(*switcher.Switcher), procs["switcher"](t).(*switcher.Switcher)
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	a, b := newCandidate(t, swA, name, elect.WithTTL(ttl)), newCandidate(t, swB, name, elect.WithTTL(ttl))
	actx, err := a.Campaign(context.Background())
	if err != nil {
		t.Fatalf("Campaign() = %v", err)
	}
	before := swA.Current()
	for _, sw := range []*switcher.Switcher{swA, swB} {
		if _, err := sw.SwitchEngine(); err != nil {
			t.Fatalf("SwitchEngine() = %v", err)
		}
	}
	t.Logf("leader on %q; switched to %q", before, swB.Current())

	ctx, cancel := context.WithTimeout(context.Background(), 2*ttl)
	defer cancel()
	won := make(chan error, 1)
	go func() { _, err := b.Campaign(ctx); won <- err }()
	l, err := elect.CurrentLeader(context.Background(), swB, name)
	if err != nil || l.Owner != a.Owner() || l.Engine != before {
		t.Errorf("CurrentLeader() after the switch = %+v, %v; want %s on %q", l, err, a.Owner(), before)
	}
	select {
	case err := <-won:
		t.Fatalf("candidate on the new engine won (%v) while the leader still led on the old one", err)
	case <-time.After(ttl + time.Second): // past the TTL: the old leader renews and keeps leading
	}
	if actx.Err() != nil {
		t.Errorf("old leader's leadership ended after the switch: %v", context.Cause(actx))
	}
	tokA := a.Token()
	resigned := time.Now()
	if err := a.Resign(); err != nil {
		t.Fatalf("Resign() = %v", err)
	}
	if err := <-won; err != nil {
		t.Fatalf("Campaign() on the new engine after the old leader resigned = %v", err)
	}
	t.Logf("new leader %v after the old one resigned", time.Since(resigned))
	if tokB := b.Token(); tokB <= tokA {
		t.Errorf("new leader's token %d; want above the old leader's %d", tokB, tokA)
	}
	if l, err := elect.CurrentLeader(context.Background(), swA, name); err != nil || l.Owner != b.Owner() || l.Engine != swB.Current() {
		t.Errorf("CurrentLeader() = %+v, %v; want %s on %q", l, err, b.Owner(), swB.Current())
	}
	if err := b.Resign(); err != nil {
		t.Errorf("Resign() = %v", err)
	}
	if _, err := elect.CurrentLeader(context.Background(), swA, name); !errors.Is(err, elect.ErrNoLeader) {
		t.Errorf("CurrentLeader() after the last resignation = %v; want ErrNoLeader", err)
	}
}
