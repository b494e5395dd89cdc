package lockdelay_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
)

// helperEnv names the engine a holder process the test kills runs on.
const helperEnv = "ORTHRUS_LOCKDELAY_HELPER"

// The killed holder's fixed lease, the delay, the session timeout that
// plays the TTL on ZooKeeper (fleettest's), and the target: the next grant
// comes no later than a second after the bar ends.
const (
	lease      = 2 * time.Second
	delay      = 3 * time.Second
	zkSession  = 2 * time.Second
	grantSlack = time.Second
)

// TestHelperHolder is the process TestKilledHolder kills: it takes the
// name with the delay (on Redis and etcd with a fixed lease), prints when
// it asked, and waits to be killed.
func TestHelperHolder(t *testing.T) {
	kind := os.Getenv(helperEnv)
	if kind == "" {
		t.Skip("run by TestKilledHolder")
	}
	servers.Redis, servers.Etcd, servers.ZooKeeper = os.Getenv("REDIS_ADDR"), os.Getenv("ETCD_ADDR"), os.Getenv("ZK_ADDR")
	opts := []locker.Option{locker.WithLockDelay(delay)}
	switch {
	case os.Getenv("RENEWED") != "":
		opts = append(opts, locker.WithTTL(lease))
	case kind != "zk":
		opts = append(opts, locker.WithLease(lease))
	}
	l := newLocker(t, servers.Processes(t)[kind](t), os.Getenv("NAME"), opts...)
	asked := time.Now()
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("held %d\n", asked.UnixNano())
	time.Sleep(time.Minute) // killed first
	t.Fatal("not killed")
}

// TestKilledHolder kills (SIGKILL) the process holding a name with a lock
// delay, and measures the next grant, to a waiter with the same delay on
// another engine, from the moment the hold would have expired:
//
//   - Redis, etcd and the switcher (on Redis): the holder has a fixed lease,
//     so its hold expires lease after its grant, which came between its
//     asking (printed by the holder) and the test reading that it holds.
//     The next grant must come no earlier than lease + delay after the
//     asking, no later than lease + delay + 1s after the reading.
//   - Redis and etcd, renewed: the holder renews a TTL of lease every third
//     of it, so its hold expires TTL after its last renewal, which came
//     less than a third of the TTL before the kill (etcd refreshes its
//     shared lease then too). The next grant must come between two thirds
//     of the TTL + delay and TTL + delay + 1s after the kill.
//   - ZooKeeper: the hold expires with the holder's session, at the
//     server's choosing (timeout after its last ping, which was before the
//     kill); the test watches the lock node and takes its deletion as the
//     expiry. The next grant must come delay to delay + 1s after it, and
//     no later than session timeout + delay + 1s after the kill.
func TestKilledHolder(t *testing.T) {
	for _, kind := range []string{"redis", "etcd", "zk", "switcher"} {
		t.Run(kind, func(t *testing.T) { killedHolder(t, kind, false) })
	}
	for _, kind := range []string{"redis", "etcd"} {
		t.Run(kind+"/renewed", func(t *testing.T) { killedHolder(t, kind, true) })
	}
}

func killedHolder(t *testing.T, kind string, renewed bool) {
	name := t.Name() + "/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+kind, "REDIS_ADDR="+servers.Redis, "ETCD_ADDR="+servers.Etcd,
		"ZK_ADDR="+servers.ZooKeeper, "NAME="+name)
	if renewed {
		cmd.Env = append(cmd.Env, "RENEWED=1")
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	read := time.Now() // after the grant
	var nanos int64
	if _, serr := fmt.Sscanf(line, "held %d\n", &nanos); serr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("holder process said %q, %v; want held <time>", line, err)
	}
	asked := time.Unix(0, nanos) // before the grant
	var deleted <-chan time.Time
	if kind == "zk" {
		deleted = watchHold(t, name)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()

	l := newLocker(t, servers.Processes(t)[kind](t), name, locker.WithLockDelay(delay))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() = %v; want the name granted after the delay", err)
	}
	got := time.Now()
	_ = l.Unlock()

	if renewed {
		t.Logf("TTL %v, delay %v: granted %v after the kill", lease, delay, got.Sub(killed))
		if d := got.Sub(killed); d < lease*2/3+delay || d > lease+delay+grantSlack {
			t.Errorf("granted %v after the kill; want between 2/3 TTL + delay (%v) and TTL + delay + %v (%v)", d, lease*2/3+delay, grantSlack, lease+delay+grantSlack)
		}
		return
	}
	if kind == "zk" {
		expired := <-deleted
		t.Logf("session %v, delay %v: granted %v after the node's deletion, %v after the kill", zkSession, delay, got.Sub(expired), got.Sub(killed))
		if d := got.Sub(expired); d < delay || d > delay+grantSlack {
			t.Errorf("granted %v after the killed holder's node was deleted; want delay (%v) to delay + %v", d, delay, grantSlack)
		}
		if d := got.Sub(killed); d > zkSession+delay+grantSlack {
			t.Errorf("granted %v after the kill; want within session timeout + delay + %v = %v", d, grantSlack, zkSession+delay+grantSlack)
		}
		return
	}
	t.Logf("lease %v, delay %v: granted %v after the holder asked, %v after its grant was read (%v after the kill)",
		lease, delay, got.Sub(asked), got.Sub(read), got.Sub(killed))
	if d := got.Sub(asked); d < lease+delay {
		t.Errorf("granted %v after the killed holder asked; want no earlier than lease + delay = %v", d, lease+delay)
	}
	if d := got.Sub(read); d > lease+delay+grantSlack {
		t.Errorf("granted %v after the killed holder's grant; want within lease + delay + %v = %v", d, grantSlack, lease+delay+grantSlack)
	}
}

// watchHold watches the lock node of name on ZooKeeper (the engine's
// default prefix) and sends when it was deleted.
func watchHold(t *testing.T, name string) <-chan time.Time {
	c, _, err := gozk.Connect([]string{servers.ZooKeeper}, 5*time.Second, gozk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	parent := zk.DefaultPrefix + "/" + zkconn.EscapeName(name)
	children, _, err := c.Children(parent)
	if err != nil {
		t.Fatal(err)
	}
	var node string
	for _, child := range children {
		if _, ok := zkconn.Sequence(child); ok && strings.Contains(child, "-lock-") {
			node = parent + "/" + child
		}
	}
	ok, _, events, err := c.ExistsW(node)
	if err != nil || !ok || node == "" {
		t.Fatalf("ExistsW(%q) = %v, %v; want the holder's node", node, ok, err)
	}
	deleted := make(chan time.Time, 1)
	go func() { // ends with the event, or with c's Close
		ev := <-events
		if ev.Type == gozk.EventNodeDeleted {
			deleted <- time.Now()
		}
		close(deleted)
	}()
	return deleted
}
