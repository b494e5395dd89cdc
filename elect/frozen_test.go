package elect_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/elect"
)

// fenceScript accepts a write (returns 1) only with a token at least as
// high as the highest the key has seen.
var fenceScript = goredis.NewScript(`
local max = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < max then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1`)

// fence is a fenced resource on the shared Redis server, as the processes
// of a fleet would write to it.
type fence struct {
	c   *goredis.Client
	key string
}

func newFence(t testing.TB, key string) *fence {
	c := goredis.NewClient(&goredis.Options{Addr: servers.Redis})
	t.Cleanup(func() { _ = c.Close() })
	return &fence{c: c, key: key}
}

func (f *fence) write(token uint64) (bool, error) {
	n, err := fenceScript.Run(context.Background(), f.c, []string{f.key}, strconv.FormatUint(token, 10)).Int()
	return n == 1, err
}

// frozenEnv names the engine of a leader process the test freezes.
const frozenEnv = "ORTHRUS_ELECT_FROZEN"

// TestHelperFrozenLeader is the process TestFrozenLeader freezes: it
// leads and writes to the fence every 20ms, saying what each write got,
// until its leadership ends.
func TestHelperFrozenLeader(t *testing.T) {
	c, lctx := helperLead(t, frozenEnv)
	if c == nil {
		t.Skip("run by TestFrozenLeader")
	}
	f := newFence(t, os.Getenv("ELECTION"))
	fmt.Println("leading", c.Token())
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-lctx.Done():
			fmt.Println("stopped")
			return
		case <-tick.C:
			ok, err := f.write(c.Token())
			// The same host's wall clock as the test's: when it wrote.
			fmt.Println("write", c.Token(), ok, time.Now().UnixNano(), err)
		}
	}
}

// A leader process frozen (SIGSTOP) past its TTL is replaced; once thawed
// it stops leading, and none of its writes after the new leader's first
// one is accepted by the fenced resource.
func TestFrozenLeader(t *testing.T) {
	for _, kind := range []string{"redis", "etcd", "zk"} {
		t.Run(kind, func(t *testing.T) {
			name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
			cmd, lines := startLeader(t, "TestHelperFrozenLeader", frozenEnv, kind, name)
			e := servers.Processes(t)[kind](t)
			next := newCandidate(t, e, name, elect.WithTTL(ttl))
			won := make(chan time.Time, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 4*ttl)
			defer cancel()
			go func() {
				if _, err := next.Campaign(ctx); err == nil {
					won <- time.Now()
				}
				close(won)
			}()
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			frozen := time.Now()
			at, ok := <-won
			if !ok {
				_ = cmd.Process.Signal(syscall.SIGCONT)
				t.Fatalf("no new leader %v into the freeze", 4*ttl)
			}
			t.Logf("new leader %v into the freeze (TTL %v)", at.Sub(frozen), ttl)
			if d := at.Sub(frozen); d > ttl+time.Second {
				t.Errorf("new leader %v into the freeze; want within TTL + 1s", d)
			}
			f := newFence(t, name)
			if ok, err := f.write(next.Token()); !ok || err != nil {
				t.Fatalf("new leader's write = %v, %v; want accepted", ok, err)
			}
			newWrite := time.Now()
			thawed := time.Now()
			if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			// Writes the old leader made before the freeze are in the pipe
			// already; those after it come once it thaws.
			var stale, refused int
			var stoppedAfter time.Duration
			stopped := false
			for !stopped && lines.Scan() {
				fields := strings.Fields(lines.Text())
				switch {
				case len(fields) == 1 && fields[0] == "stopped":
					stopped, stoppedAfter = true, time.Since(thawed)
				case len(fields) >= 4 && fields[0] == "write":
					if tok, _ := strconv.ParseUint(fields[1], 10, 64); tok >= next.Token() {
						t.Errorf("old leader's token %d not below the new leader's %d", tok, next.Token())
					}
					at, _ := strconv.ParseInt(fields[3], 10, 64)
					if time.Unix(0, at).Before(newWrite) {
						continue // written while it led
					}
					if fields[2] == "true" {
						stale++
					} else {
						refused++
					}
				}
			}
			t.Logf("thawed leader stopped %v after the thaw; its writes after the new leader's: %d accepted, %d refused by the fence",
				stoppedAfter, stale, refused)
			if stale > 0 {
				t.Errorf("%d stale writes of the old leader accepted; want 0", stale)
			}
			if !stopped {
				t.Errorf("thawed leader did not stop leading")
			}
			if err := next.Resign(); err != nil {
				t.Errorf("Resign() = %v", err)
			}
		})
	}
}
