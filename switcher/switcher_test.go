package switcher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/lockertest"
	"github.com/orthrus-go/orthrus/switcher"
)

// Two Redis servers shared by the tests that do not break them.
var primaryAddr, secondaryAddr string

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		p, err := testserver.NewRedis()
		if err != nil {
			return nil, err
		}
		s, err := testserver.NewRedis()
		if err != nil {
			_ = p.Stop()
			return nil, err
		}
		primaryAddr, secondaryAddr = p.Addr(), s.Addr()
		return func() { _ = p.Stop(); _ = s.Stop() }, nil
	})
}

// redisEngine returns an engine on addr whose client fails fast when the
// server is gone or paused.
func redisEngine(t testing.TB, name, addr string) (*redis.Engine, *goredis.Client) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{
		Addr: addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	e, err := redis.New(c, redis.WithName(name), redis.WithPrefix("switcher-test"))
	if err != nil {
		t.Fatal(err)
	}
	return e, c
}

func newSwitcher(t testing.TB, addrs [2]string, opts ...switcher.Option) (*switcher.Switcher, [2]*goredis.Client) {
	t.Helper()
	p, pc := redisEngine(t, "primary", addrs[0])
	s, sc := redisEngine(t, "secondary", addrs[1])
	// The test's switchers are one fleet: its epoch record is its own on
	// the servers the package's tests share.
	opts = append([]switcher.Option{switcher.WithName(t.Name())}, opts...)
	sw, err := switcher.New([]locker.Engine{p, s}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Close() })
	return sw, [2]*goredis.Client{pc, sc}
}

// harness is a switcher over the two shared Redis servers, for the
// conformance suites.
func harness(t *testing.T) lockertest.Harness {
	p, pc := redisEngine(t, "primary", primaryAddr)
	s, _ := redisEngine(t, "secondary", secondaryAddr)
	sw, err := switcher.New([]locker.Engine{p, s})
	if err != nil {
		t.Fatal(err)
	}
	return lockertest.Harness{
		Engine: sw,
		Expire: func(ctx context.Context, name string) error { return pc.Del(ctx, p.LockKey(name)).Err() },
	}
}

func TestConformance(t *testing.T) { lockertest.Run(t, harness) }

func TestNewRejectsBadInput(t *testing.T) {
	a, _ := redisEngine(t, "a", primaryAddr)
	a2, _ := redisEngine(t, "a", secondaryAddr)
	defer a.Close()
	defer a2.Close()
	for _, tc := range []struct {
		desc    string
		engines []locker.Engine
		opts    []switcher.Option
	}{
		{"no engines", nil, nil},
		{"duplicate names", []locker.Engine{a, a2}, nil},
		{"nil engine", []locker.Engine{a, nil}, nil},
		{"WithBreaker(0, 1s)", []locker.Engine{a}, []switcher.Option{switcher.WithBreaker(0, time.Second)}},
		{"WithFailback(0)", []locker.Engine{a}, []switcher.Option{switcher.WithFailback(0)}},
		{"WithSafeSwitch(-1s)", []locker.Engine{a}, []switcher.Option{switcher.WithSafeSwitch(-time.Second)}},
		{"WithHealthCheck(0, 0)", []locker.Engine{a}, []switcher.Option{switcher.WithHealthCheck(0, 0)}},
		{"nil option", []locker.Engine{a}, []switcher.Option{nil}},
	} {
		if sw, err := switcher.New(tc.engines, tc.opts...); !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("New(%s) = %v; want ErrInvalidArgument", tc.desc, err)
			if sw != nil {
				sw.Close()
			}
		}
	}
}

func TestSwitchEngine(t *testing.T) {
	var events []switcher.Event
	var mu sync.Mutex
	got := make(chan struct{}, 10)
	sw, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr}, switcher.OnSwitch(func(ev switcher.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
		got <- struct{}{}
	}))
	if c := sw.Current(); c != "primary" {
		t.Fatalf("Current() = %q; want primary", c)
	}
	for _, want := range []string{"secondary", "primary"} { // cyclic
		if name, err := sw.SwitchEngine(); name != want || err != nil {
			t.Fatalf("SwitchEngine() = %q, %v; want %q, nil", name, err, want)
		}
		<-got
	}
	if _, err := sw.SwitchEngineTo("nope"); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("SwitchEngineTo(unknown) = %v; want ErrInvalidArgument", err)
	}
	if name, err := sw.SwitchEngineTo("secondary"); name != "secondary" || err != nil {
		t.Errorf("SwitchEngineTo(secondary) = %q, %v", name, err)
	}
	<-got
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 3 || events[0].From != "primary" || events[0].To != "secondary" || events[0].Reason != switcher.ReasonManual || events[2].Epoch != 3 {
		t.Errorf("events = %+v; want 3 manual switches with epochs 1..3", events)
	}
}

// A hold stays on the engine that granted it: re-entry and Unlock go there
// after a switch, while new owners go to the new engine.
func TestHoldsArePinned(t *testing.T) {
	ctx := context.Background()
	sw, clients := newSwitcher(t, [2]string{primaryAddr, secondaryAddr})
	pe := redisKey("pinned")
	a, _ := sw.NewLocker("pinned")
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.SwitchEngine(); err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(); err != nil { // re-entry, on the primary
		t.Fatal(err)
	}
	if got := a.Engine(); got != "primary" {
		t.Errorf("Engine() after the switch = %q; want primary (pinned)", got)
	}
	b, _ := sw.NewLocker("pinned")
	if ok, err := b.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock() on the new engine = %v, %v; want true, nil (the switch window: documented)", ok, err)
	}
	if got := b.Engine(); got != "secondary" {
		t.Errorf("new owner's Engine() = %q; want secondary", got)
	}
	for i := 0; i < 2; i++ {
		if err := a.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	if n := clients[0].Exists(ctx, pe).Val(); n != 0 {
		t.Errorf("the primary still has the key after the pinned Unlock")
	}
	if n := clients[1].Exists(ctx, pe).Val(); n != 1 {
		t.Errorf("the secondary lost the new owner's key")
	}
	_ = b.Unlock()
}

// redisKey is the key the Redis engines of these tests use for name.
func redisKey(name string) string { return "switcher-test:{" + name + "}" }

// fencedResource accepts a write only with a token not below the highest
// it has seen.
type fencedResource struct {
	mu      sync.Mutex
	highest uint64
}

func (r *fencedResource) write(token uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.highest {
		return false
	}
	r.highest = token
	return true
}

// After a switch, a holder from the old engine is refused by a resource
// that checks tokens, once the new engine's holder has written.
func TestFencingAcrossSwitch(t *testing.T) {
	sw, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr})
	var res fencedResource
	old, _ := sw.NewLocker("fenced")
	if err := old.Lock(); err != nil {
		t.Fatal(err)
	}
	oldTok := old.Token()
	if !res.write(oldTok) {
		t.Fatal("first write refused")
	}
	if _, err := sw.SwitchEngine(); err != nil {
		t.Fatal(err)
	}
	next, _ := sw.NewLocker("fenced")
	if err := next.Lock(); err != nil {
		t.Fatal(err)
	}
	newTok := next.Token()
	if newTok <= oldTok {
		t.Fatalf("token after the switch %d <= token before %d", newTok, oldTok)
	}
	if !res.write(newTok) {
		t.Error("the new holder's write was refused")
	}
	if res.write(oldTok) {
		t.Error("the stale holder from the old engine could still write")
	}
	_ = old.Unlock()
	_ = next.Unlock()
}

// Killing the primary under load: the breaker opens, acquisitions move to
// the secondary, and callers blocked in Lock get their lock, not an error.
func TestBreakerFailover(t *testing.T) {
	primary := testserver.Redis(t)
	switched := make(chan switcher.Event, 4)
	sw, _ := newSwitcher(t, [2]string{primary.Addr(), secondaryAddr}, switcher.OnSwitch(func(ev switcher.Event) { switched <- ev }))

	const workers = 8
	var (
		stop            atomic.Bool
		errs            atomic.Int64
		perEngine       sync.Map
		wg              sync.WaitGroup
		firstOnSecond   atomic.Int64
		killedAt        atomic.Int64
		inside          [4]atomic.Int64
		overlapsByOwner atomic.Int64
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				name := fmt.Sprintf("load-%d", i%4)
				l, _ := sw.NewLocker(name, locker.WithTTL(2*time.Second))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := l.LockCtx(ctx)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				eng := l.Engine()
				if eng == "secondary" && killedAt.Load() != 0 {
					firstOnSecond.CompareAndSwap(0, time.Now().UnixNano())
				}
				n, _ := perEngine.LoadOrStore(eng, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				if eng == "secondary" {
					if inside[i%4].Add(1) != 1 {
						overlapsByOwner.Add(1)
					}
					inside[i%4].Add(-1)
				}
				_ = l.Unlock() // holds on the dead primary fail to unlock: expected
			}
		}()
	}
	// Let the load run on the primary first.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n, ok := perEngine.Load("primary"); ok && n.(*atomic.Int64).Load() > 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no load on the primary")
		}
		time.Sleep(10 * time.Millisecond)
	}
	killedAt.Store(time.Now().UnixNano())
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	var ev switcher.Event
	select {
	case ev = <-switched:
	case <-time.After(10 * time.Second):
		t.Fatal("no switch 10s after the primary was killed")
	}
	latency := ev.At.Sub(time.Unix(0, killedAt.Load()))
	// Let the load run on the secondary for a while.
	deadline = time.Now().Add(10 * time.Second)
	for {
		if n, ok := perEngine.Load("secondary"); ok && n.(*atomic.Int64).Load() > 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no load on the secondary")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	p, _ := perEngine.Load("primary")
	s, _ := perEngine.Load("secondary")
	t.Logf("switch %s->%s (%s) %v after the kill; acquisitions: primary %d, secondary %d; errors %d",
		ev.From, ev.To, ev.Reason, latency, p.(*atomic.Int64).Load(), s.(*atomic.Int64).Load(), errs.Load())
	if ev.From != "primary" || ev.To != "secondary" || ev.Reason != switcher.ReasonBreaker {
		t.Errorf("event = %+v; want primary -> secondary by breaker", ev)
	}
	if latency > time.Second {
		t.Errorf("switch latency %v; want under 1s", latency)
	}
	if n := errs.Load(); n != 0 {
		t.Errorf("%d blocked callers got an error; want 0", n)
	}
	if n := overlapsByOwner.Load(); n != 0 {
		t.Errorf("%d overlapping holds on the secondary", n)
	}
}

// chanSource is a Source fed by a channel.
type chanSource chan switcher.Desired

func (c chanSource) Watch(ctx context.Context, apply func(switcher.Desired)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case d := <-c:
			apply(d)
		}
	}
}

func TestSourceSwitches(t *testing.T) {
	src := make(chanSource)
	events := make(chan switcher.Event, 4)
	sw, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr}, switcher.WithSource(src),
		switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
	src <- switcher.Desired{Engine: "nope", Epoch: 7} // logged and ignored
	src <- switcher.Desired{Engine: "secondary", Epoch: 5}
	ev := <-events
	if ev.To != "secondary" || ev.Reason != switcher.ReasonSource || ev.Epoch != 5 {
		t.Errorf("event = %+v; want to secondary by source at epoch 5 (the unknown engine ignored)", ev)
	}
	if got := sw.Current(); got != "secondary" {
		t.Errorf("Current() = %q; want secondary", got)
	}
	l, _ := sw.NewLocker("src")
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	if tok := l.Token(); tok>>44 != 5 {
		t.Errorf("token epoch = %d; want the source's epoch 5", tok>>44)
	}
	_ = l.Unlock()
}

func TestFailback(t *testing.T) {
	primary := testserver.Redis(t)
	events := make(chan switcher.Event, 4)
	sw, _ := newSwitcher(t, [2]string{primary.Addr(), secondaryAddr},
		switcher.WithFailback(500*time.Millisecond), switcher.WithBreaker(3, 300*time.Millisecond),
		switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.To != "secondary" || ev.Reason != switcher.ReasonBreaker {
		t.Fatalf("event = %+v; want a breaker switch to secondary", ev)
	}
	restarted := time.Now()
	if err := primary.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.To != "primary" || ev.Reason != switcher.ReasonFailback {
			t.Fatalf("event = %+v; want failback to primary", ev)
		}
		if d := ev.At.Sub(restarted); d < 500*time.Millisecond {
			t.Errorf("failback %v after the restart; want after the healthy period of 500ms", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no failback 15s after the primary came back")
	}
	l, _ := sw.NewLocker("fb")
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	if got := l.Engine(); got != "primary" {
		t.Errorf("Engine() after failback = %q; want primary", got)
	}
	_ = l.Unlock()
}

// With safe switching, the new engine does not grant a name still held on
// the old one.
func TestSafeSwitch(t *testing.T) {
	sw, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr}, switcher.WithSafeSwitch(10*time.Second))
	old, _ := sw.NewLocker("safe")
	if err := old.Lock(); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.SwitchEngine(); err != nil {
		t.Fatal(err)
	}
	next, _ := sw.NewLocker("safe")
	if ok, err := next.TryLock(); ok || err != nil {
		t.Fatalf("TryLock() while the old engine holds the name = %v, %v; want false, nil", ok, err)
	}
	got := make(chan error, 1)
	go func() { got <- next.LockCtx(context.Background()) }()
	released := time.Now()
	if err := old.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("LockCtx() after the old hold was released = %v", err)
	}
	t.Logf("granted on the new engine %v after the old hold was released", time.Since(released))
	if eng := next.Engine(); eng != "secondary" {
		t.Errorf("Engine() = %q; want secondary", eng)
	}
	_ = next.Unlock()
}

// An Unlock on a frozen engine, with the client's default timeouts (a
// 3s read timeout that ignores the context), never holds its caller: it
// returns ErrUnavailable within the health timeout, and at once after the
// engine's breaker opened; the caller's next Lock goes to the engine the
// switcher names, and the releases finish once the engine answers again.
func TestUnlockOnFrozenEngine(t *testing.T) {
	primary := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: primary.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	p, err := redis.New(c, redis.WithName("primary"), redis.WithPrefix("switcher-test"))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := redisEngine(t, "secondary", secondaryAddr)
	switched := make(chan switcher.Event, 1)
	sw, err := switcher.New([]locker.Engine{p, s}, switcher.OnSwitch(func(ev switcher.Event) { switched <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Close() })

	first, _ := sw.NewLocker("frozen-unlock-1")
	second, _ := sw.NewLocker("frozen-unlock-2")
	for _, l := range []locker.Handle{first, second} {
		if err := l.Lock(); err != nil || l.Engine() != "primary" {
			t.Fatalf("Lock() = %v on %q; want nil on primary", err, l.Engine())
		}
	}
	if err := primary.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Resume() })

	start := time.Now()
	err = first.Unlock()
	returned := time.Now()
	if took := returned.Sub(start); !errors.Is(err, locker.ErrUnavailable) || took > driver.DefaultReleaseWait+100*time.Millisecond {
		t.Errorf("Unlock() on a frozen engine = %v after %v; want ErrUnavailable within %v", err, took, driver.DefaultReleaseWait+100*time.Millisecond)
	}
	select {
	case ev := <-switched:
		if ev.To != "secondary" {
			t.Fatalf("switch = %+v; want to secondary", ev)
		}
		// The breaker opened just before the switch: Unlock gave up then.
		if late := returned.Sub(ev.At); late > 100*time.Millisecond {
			t.Errorf("Unlock() returned %v after the switch; want within 100ms of the breaker opening", late)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no switch 10s after the primary froze")
	}
	start = time.Now()
	err = second.Unlock()
	if took := time.Since(start); !errors.Is(err, locker.ErrUnavailable) || took > 50*time.Millisecond {
		t.Errorf("Unlock() once the breaker opened = %v after %v; want ErrUnavailable at once", err, took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := first.LockCtx(ctx); err != nil || first.Engine() != "secondary" {
		t.Fatalf("LockCtx() after the switch = %v on %q; want nil on secondary", err, first.Engine())
	}
	_ = first.Unlock()

	if err := primary.Resume(); err != nil {
		t.Fatal(err)
	}
	// The releases went on in the background: both keys go long before
	// their 30s TTL.
	keys := []string{p.LockKey("frozen-unlock-1"), p.LockKey("frozen-unlock-2")}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := c.Exists(context.Background(), keys...).Result()
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the held keys still on the primary 10s after it thawed (err %v); want the releases finished", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
