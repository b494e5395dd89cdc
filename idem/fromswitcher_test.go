package idem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/idem/internal/idemtest"
	"github.com/orthrus-go/orthrus/locker"
)

// A gate built from config.Open's switcher while one engine (ZooKeeper,
// the secondary) does not answer: FromSwitcher dials nothing, builds a
// store per engine on their clients, and Begin works on the engine that
// answers. A down engine that becomes current is an unavailable store.
func TestFromSwitcherConfigOpenDegraded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "orthrus.yaml")
	yaml := `
start_timeout: 1s
active: redis
engines:
  - {name: redis, type: redis, addrs: ["` + redisAddr + `"]}
  - {name: etcd, type: etcd, endpoints: ["` + etcdAddr + `"]}
  - {name: zk, type: zk, servers: ["127.0.0.1:1"]}
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sw, err := config.Open(ctx, cfg, config.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatalf("config.Open with zk down = %v; want a degraded start", err)
	}
	defer sw.Close()
	start := time.Now()
	g, err := idem.FromSwitcher(sw, fmt.Sprintf("test-app-%s-%d", t.Name(), time.Now().UnixNano()), idem.WithLogger(testLogger(t)), idem.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatalf("FromSwitcher = %v", err)
	}
	defer g.Close()
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("FromSwitcher took %v; want no dialling", took)
	}
	tk := mustRun(t, g, "order-1")
	if tk.Store() != "redis" {
		t.Errorf("ticket on %q; want redis", tk.Store())
	}
	if err := tk.Done(ctx, nil); err != nil {
		t.Fatal(err)
	}
	mustDup(t, g, "order-1", idem.Succeeded)
	if _, err := sw.SwitchEngineTo("etcd"); err != nil {
		t.Fatal(err)
	}
	if tk := mustRun(t, g, "order-2"); tk.Store() != "etcd" {
		t.Errorf("ticket on %q after the switch; want etcd", tk.Store())
	}
	if _, _, err := g.Begin(ctx, "order-3"); err != nil {
		t.Fatal(err)
	}
}

func TestFromSwitcherErrors(t *testing.T) {
	if _, err := idem.FromSwitcher(nil, "app"); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("FromSwitcher(nil) = %v; want ErrInvalidArgument", err)
	}
	sw := newSwitcher(t)
	if _, err := idem.FromSwitcher(sw, ""); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), "application key") {
		t.Errorf("FromSwitcher with no key = %v; want ErrInvalidArgument naming the key", err)
	}
	if _, err := idem.FromSwitcher(sw, "app", idem.WithPending(-1)); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithPending") {
		t.Errorf("FromSwitcher(WithPending(-1)) = %v; want ErrInvalidArgument naming the option", err)
	}
	for _, opt := range []idem.Option{idem.WithLocalCache(0, time.Second), idem.WithLocalCache(1, 0), idem.WithObserver(nil)} {
		if _, err := idem.New("app", newStore(t, "redis"), opt); !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("New with a bad option = %v; want ErrInvalidArgument", err)
		}
	}
}

// A Begin whose store does not answer while the switcher moves goes to the
// new engine within the caller's context, and does not then wait for the
// previous store's check (it just failed): about one request timeout.
func TestBeginFollowsSwitchAfterFailure(t *testing.T) {
	srv := idemtest.StartServer(t, "redis")
	old := storeOn(t, "redis", srv.Addr(), idem.WithName("old"))
	cur := newStore(t, "redis", idem.WithName("new"))
	mustRun(t, newGate(t, old), "warm-up") // connected before the fault
	// NewSwitched and the first pick see "old"; by the time the Create
	// there fails, the switcher has moved.
	var calls atomic.Int32
	current := func() string {
		if calls.Add(1) <= 2 {
			return "old"
		}
		return "new"
	}
	g, err := idem.NewSwitched(fmt.Sprint("test-app-", time.Now().UnixNano()), current, []idem.Store{old, cur}, idem.WithLogger(testLogger(t)),
		idem.WithRequestTimeout(300*time.Millisecond), idem.WithCheckPrevious(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	start := time.Now()
	tk := mustRun(t, g, "order-1")
	took := time.Since(start)
	if tk.Store() != "new" {
		t.Errorf("ticket on %q; want new", tk.Store())
	}
	if took > 1500*time.Millisecond {
		t.Errorf("Begin took %v; want about the request timeout (300ms), not also the previous store's check (2s)", took)
	}
	if st := g.Stats(); st.Refused != 0 || st.Run != 1 {
		t.Errorf("Stats = %+v; want 1 run, 0 refused", st)
	}
}

// A Begin whose create timed out on a paused store leaves no record behind
// once the store is back: the server applies the write when it resumes,
// and the gate deletes that record (it holds this attempt's token), so a
// retry runs well before the expiry rather than being told it runs.
func TestTimedOutCreateCleanedUp(t *testing.T) {
	srv := idemtest.StartServer(t, "redis")
	g := newGate(t, storeOn(t, "redis", srv.Addr()), idem.WithRequestTimeout(300*time.Millisecond), idem.WithExpiry(time.Minute))
	mustRun(t, g, "warm-up")
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.Begin(context.Background(), "order-1"); !errors.Is(err, locker.ErrUnavailable) {
		t.Fatalf("Begin on a paused store = %v; want ErrUnavailable", err)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	idemtest.Eventually(t, 10*time.Second, "the retry runs", func() (bool, error) {
		tk, _, err := g.Begin(context.Background(), "order-1")
		return tk != nil, err
	})
	// The recorder takes the clean-up off its queue just after the store
	// answered it, which a Begin may see first.
	idemtest.Eventually(t, 5*time.Second, "the clean-up off the pending queue", func() (bool, error) {
		return g.Pending() == 0, nil
	})
}
