package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/idem/internal/idemtest"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// newSwitcher returns a switcher over a Redis and an etcd engine, named as
// the stores newStore makes, with its health checks slowed down so that
// only the test switches.
func newSwitcher(t *testing.T) *switcher.Switcher {
	t.Helper()
	rc := idemtest.RedisClient(redisAddr)
	t.Cleanup(func() { _ = rc.Close() })
	ec, err := idemtest.EtcdClient(etcdAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ec.Close() })
	re, err := redis.New(rc, redis.WithName("redis"))
	if err != nil {
		t.Fatal(err)
	}
	ee, err := etcd.New(ec, etcd.WithName("etcd"))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := switcher.New([]locker.Engine{re, ee}, switcher.WithHealthCheck(time.Hour, time.Second), switcher.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Close() })
	return sw
}

// A stream of operations through a switched gate while the switcher moves
// from Redis to etcd: tickets stay pinned to the store that issued them,
// the new store does not see the old one's records unless the gate checks
// the previous store.
func TestSwitchMidStream(t *testing.T) {
	ctx := context.Background()
	for _, checkPrevious := range []bool{false, true} {
		t.Run(fmt.Sprintf("check-previous=%v", checkPrevious), func(t *testing.T) {
			sw := newSwitcher(t)
			stores := []idem.Store{newStore(t, "redis"), newStore(t, "etcd")}
			opts := []idem.Option{idem.WithLogger(testLogger(t))}
			if checkPrevious {
				opts = append(opts, idem.WithCheckPrevious(time.Second))
			}
			g, err := idem.NewSwitched("test-app", sw.Current, stores, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = g.Close() })

			// Before the switch: ten operations, five done, five running.
			var running []*idem.Ticket
			for i := range 10 {
				tk := mustRun(t, g, fmt.Sprintf("op-%d", i))
				if tk.Store() != "redis" {
					t.Fatalf("ticket on %q; want redis", tk.Store())
				}
				if i < 5 {
					if err := tk.Succeed(ctx, []byte("r")); err != nil {
						t.Fatal(err)
					}
				} else {
					running = append(running, tk)
				}
			}
			if _, err := sw.SwitchEngineTo("etcd"); err != nil {
				t.Fatal(err)
			}
			// The running attempts report after the switch: to Redis.
			for _, tk := range running {
				if err := tk.Done(ctx, nil); err != nil {
					t.Fatalf("Done after the switch = %v; want nil", err)
				}
			}
			for i := range 10 {
				content := fmt.Sprintf("op-%d", i)
				id, _ := g.Identify(content)
				rec, _, ok, err := g.Lookup(ctx, "redis", id)
				if err != nil || !ok || rec.State != idem.Succeeded {
					t.Errorf("%s on redis: %+v, %v, %v; want succeeded", content, rec, ok, err)
				}
				tk, dup := begin(t, g, content)
				switch {
				case checkPrevious && dup == nil:
					t.Errorf("%s ran again on %q after the switch; want a duplicate from redis", content, tk.Store())
				case checkPrevious && (dup.Store != "redis" || dup.State != idem.Succeeded):
					t.Errorf("%s: duplicate %+v; want succeeded on redis", content, *dup)
				case !checkPrevious && tk == nil:
					t.Errorf("%s: duplicate %+v; want it to run on etcd (records stay on the old engine)", content, *dup)
				case !checkPrevious && tk.Store() != "etcd":
					t.Errorf("%s ran on %q; want etcd", content, tk.Store())
				}
			}
			// New operations go to etcd.
			if tk := mustRun(t, g, "op-new"); tk.Store() != "etcd" {
				t.Errorf("new operation on %q; want etcd", tk.Store())
			}
		})
	}
}

// The previous store is checked only while it answers: once it fails, the
// gate stops waiting for it.
func TestCheckPreviousDown(t *testing.T) {
	srv := idemtest.StartServer(t, "redis")
	old := storeOn(t, "redis", srv.Addr(), idem.WithName("old"))
	cur := newStore(t, "redis", idem.WithName("new"))
	engine := "old"
	g, err := idem.NewSwitched("test-app", func() string { return engine }, []idem.Store{old, cur},
		idem.WithCheckPrevious(time.Second), idem.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	mustRun(t, g, "before")
	engine = "new"
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	start := time.Now()
	if tk := mustRun(t, g, "first"); tk.Store() != "new" {
		t.Fatalf("ran on %q; want new", tk.Store())
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("first Begin after the switch took %v with the previous store paused; want about its 1s budget", took)
	}
	start = time.Now()
	mustRun(t, g, "second")
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("second Begin took %v; want no wait for the previous store", took)
	}
}

// checks hears the gate's checks of the previous store.
type checks struct {
	store string
	ok    atomic.Int32 // checks of store that it answered
}

func (*checks) BeginStart(ctx context.Context) context.Context { return ctx }
func (*checks) BeginEnd(context.Context, idem.BeginEvent)      {}
func (*checks) Pending(string, int)                            {}

func (c *checks) StoreCall(_ context.Context, store, op string, _ time.Duration, err error) {
	if store == c.store && op == "get" && err == nil {
		c.ok.Add(1)
	}
}

// A previous store whose check failed is marked healthy again by the next
// check it answers: an attempt still pinned to it then reports there at
// once, instead of queueing its outcome for a store that is back (5fe6be1).
func TestCheckPreviousBack(t *testing.T) {
	ctx := context.Background()
	srv := idemtest.StartServer(t, "redis")
	old := storeOn(t, "redis", srv.Addr(), idem.WithName("old"))
	cur := newStore(t, "redis", idem.WithName("new"))
	var engine atomic.Value
	engine.Store("old")
	obs := &checks{store: "old"}
	g, err := idem.NewSwitched("test-app", func() string { return engine.Load().(string) }, []idem.Store{old, cur},
		idem.WithCheckPrevious(500*time.Millisecond), idem.WithObserver(obs), idem.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	pinned := mustRun(t, g, "pinned")
	engine.Store("new")
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	mustRun(t, g, "while-paused") // its check of old fails
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	// The checks resume after a pause of their own (5s): Begin until one
	// is answered.
	n := 0
	idemtest.Eventually(t, 15*time.Second, "a check of the previous store answered", func() (bool, error) {
		n++
		mustRun(t, g, fmt.Sprintf("after-%d", n))
		return obs.ok.Load() > 0, nil
	})
	if err := pinned.Done(ctx, nil); err != nil {
		t.Fatalf("Done on the previous store once a check answered = %v; want nil (written, not queued)", err)
	}
	rec, _, ok, err := g.Lookup(ctx, "old", pinned.ID())
	if err != nil || !ok || rec.State != idem.Succeeded {
		t.Errorf("record on old = %+v, %v, %v; want succeeded", rec, ok, err)
	}
}

// A current engine without a store counts as an unavailable store.
func TestSwitchedUnknownEngine(t *testing.T) {
	g, err := idem.NewSwitched("test-app", func() string { return "nowhere" }, []idem.Store{newStore(t, "redis")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	if _, _, err := g.Begin(context.Background(), "x"); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Begin = %v; want ErrUnavailable", err)
	}
}

// Workers keep beginning and finishing operations while the switcher moves
// from Redis to etcd under them: every ticket's Done succeeds on the store
// that issued it, and every record is there.
func TestSwitchUnderLoad(t *testing.T) {
	ctx := context.Background()
	sw := newSwitcher(t)
	g, err := idem.NewSwitched("test-app", sw.Current, []idem.Store{newStore(t, "redis"), newStore(t, "etcd")},
		idem.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	const workers, perWorker = 8, 40
	type done struct {
		content string
		store   string
		err     error
	}
	results := make(chan done, workers*perWorker)
	halfway := make(chan struct{})
	var started atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				if started.Add(1) == workers*perWorker/2 {
					close(halfway)
				}
				content := fmt.Sprintf("w%d-op%d", w, i)
				tk, dup, err := g.Begin(ctx, content)
				if err == nil && dup != nil {
					err = fmt.Errorf("duplicate %+v of a new operation", *dup)
				}
				if err != nil {
					results <- done{content, "", err}
					continue
				}
				results <- done{content, tk.Store(), tk.Done(ctx, nil)}
			}
		}()
	}
	<-halfway
	if _, err := sw.SwitchEngineTo("etcd"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	on := map[string]int{}
	for r := range results {
		if r.err != nil {
			t.Errorf("%s: %v", r.content, r.err)
			continue
		}
		on[r.store]++
		id, _ := g.Identify(r.content)
		rec, _, ok, err := g.Lookup(ctx, r.store, id)
		if err != nil || !ok || rec.State != idem.Succeeded {
			t.Errorf("%s on %s: %+v, %v, %v; want succeeded", r.content, r.store, rec, ok, err)
		}
	}
	t.Logf("operations per store: %v", on)
	if on["redis"] == 0 || on["etcd"] == 0 {
		t.Errorf("operations per store %v; want some on each side of the switch", on)
	}
}
