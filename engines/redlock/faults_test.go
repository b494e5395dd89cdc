package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/engines/redlock"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/switcher"
)

// servers starts n masters of the test's own, stopped when it ends.
func servers(t *testing.T, n int) []*testserver.Server {
	t.Helper()
	ss := make([]*testserver.Server, n)
	for i := range ss {
		ss[i] = testserver.Redis(t)
	}
	return ss
}

// each applies op to servers, stopping at the first error.
func each(servers []*testserver.Server, op func(*testserver.Server) error) error {
	for _, s := range servers {
		if err := op(s); err != nil {
			return err
		}
	}
	return nil
}

// For a quorum engine "the server" of the fault suite is a majority of its
// nodes: what a minority does is the engine's business (it rides it out,
// see TestMinorityDown); a majority frozen or killed is the engine frozen
// or down. lockertest.RunFaults checks every kind of the lock family, which
// this engine refuses, so these are its mutex checks, with its bounds.
type faulty struct {
	e        *redlock.Engine
	majority []*testserver.Server
}

func newFaulty(t *testing.T, opts ...redlock.Option) faulty {
	ss := servers(t, nodeCount)
	e := newEngine(t, clients(t, addrsOf(ss)), append([]redlock.Option{redlock.WithLogger(quietLog)}, opts...)...)
	t.Cleanup(func() { _ = e.Close() })
	f := faulty{e: e, majority: ss[:e.Quorum()]}
	l, _ := e.NewLocker("warm")
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	_ = l.Unlock()
	return f
}

func (f faulty) pause(t *testing.T) {
	t.Helper()
	if err := each(f.majority, (*testserver.Server).Pause); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.resume)
}

func (f faulty) resume() { _ = each(f.majority, (*testserver.Server).Resume) }

// Bounds: faultWait is longer than driver.OutageAfter, shortWait shorter.
const (
	faultWait = driver.OutageAfter + 200*time.Millisecond
	shortWait = driver.OutageAfter / 3
	slack     = 200 * time.Millisecond
)

func TestMajorityPaused(t *testing.T) {
	f := newFaulty(t)
	f.pause(t)
	l, _ := f.e.NewLocker("paused")
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	start := time.Now()
	if err := f.e.Ping(ctx); !errors.Is(err, locker.ErrUnavailable) || time.Since(start) > faultWait+slack {
		t.Errorf("Ping() = %v after %v; want ErrUnavailable by its deadline", err, time.Since(start))
	}
	cancel()
	start = time.Now()
	if ok, err := l.TryLock(); ok || !errors.Is(err, locker.ErrUnavailable) || time.Since(start) > driver.DefaultRequestTimeout+slack {
		t.Errorf("TryLock() = %v, %v after %v; want false, ErrUnavailable within %v", ok, err, time.Since(start), driver.DefaultRequestTimeout)
	}
	if ok, err := l.TryLockTimeout(faultWait); ok || !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("TryLockTimeout(%v) = %v, %v; want false, ErrUnavailable", faultWait, ok, err)
	}
	if ok, err := l.TryLockTimeout(shortWait); ok || err != nil {
		t.Errorf("TryLockTimeout(%v) = %v, %v; want false, nil: a short wait only runs out of time", shortWait, ok, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	start = time.Now()
	err := l.LockCtx(ctx)
	if late := time.Since(start) - faultWait; err != context.DeadlineExceeded || late > slack {
		t.Errorf("LockCtx() = %v, %v after its deadline; want DeadlineExceeded itself, at once", err, late)
	}
}

// TryLock on a frozen majority ends within driver.DefaultRequestTimeout
// whatever the node timeout: no attempt starts that could not end by then.
// With a 700ms node timeout it went on to 2.8s (the bound counted from the
// first attempt's end, and let a last attempt start just before it).
func TestTryLockBoundWhilePaused(t *testing.T) {
	f := newFaulty(t, redlock.WithNodeTimeout(700*time.Millisecond))
	f.pause(t)
	l, _ := f.e.NewLocker("bound")
	start := time.Now()
	ok, err := l.TryLock()
	if took := time.Since(start); ok || !errors.Is(err, locker.ErrUnavailable) || took > driver.DefaultRequestTimeout+slack {
		t.Errorf("TryLock() = %v, %v after %v; want false, ErrUnavailable within %v", ok, err, took, driver.DefaultRequestTimeout)
	}
}

func TestMajorityKilled(t *testing.T) {
	f := newFaulty(t)
	if err := each(f.majority, (*testserver.Server).Kill); err != nil {
		t.Fatal(err)
	}
	l, _ := f.e.NewLocker("killed")
	start := time.Now()
	ok, err := l.TryLock()
	if ok || !errors.Is(err, locker.ErrUnavailable) || !errors.Is(err, locker.ErrRefused) || time.Since(start) > 250*time.Millisecond {
		t.Errorf("TryLock() = %v, %v after %v; want false, ErrUnavailable and ErrRefused at once", ok, err, time.Since(start))
	}
	// Every killed node is named, on one line: lockctl prints it in a table.
	if msg := err.Error(); strings.Contains(msg, "\n") || !errors.Is(err, syscall.ECONNREFUSED) || strings.Count(msg, "refused") < len(f.majority) {
		t.Errorf("TryLock() error = %q; want the %d refusals on one line, matching ECONNREFUSED", msg, len(f.majority))
	}
}

// A wait cancelled while a majority is frozen returns ctx.Err() at once,
// and once the nodes are back nothing of it is left: no subscription, and
// the next owner gets the name when its holder lets go.
func TestCancelWhilePaused(t *testing.T) {
	f := newFaulty(t)
	holder, _ := f.e.NewLocker("cancel")
	waiter, _ := f.e.NewLocker("cancel")
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- waiter.LockCtx(ctx) }()
	awaitSubscribers(t, f.e, "cancel", 1)
	f.pause(t)
	cancel()
	start := time.Now()
	if err := <-done; err != context.Canceled || time.Since(start) > slack {
		t.Errorf("LockCtx() cancelled while paused = %v after %v; want context.Canceled at once", err, time.Since(start))
	}
	f.resume()
	awaitSubscribers(t, f.e, "cancel", 0)
	if err := holder.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
	next, _ := f.e.NewLocker("cancel")
	if ok, err := next.TryLock(); !ok || err != nil {
		t.Errorf("TryLock() after the cancelled wait = %v, %v; want true, nil", ok, err)
	}
}

// Unlock while a majority is frozen returns within the release wait.
func TestUnlockWhilePaused(t *testing.T) {
	f := newFaulty(t)
	l, _ := f.e.NewLocker("unlock")
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	f.pause(t)
	start := time.Now()
	err := l.Unlock()
	if took := time.Since(start); took > driver.DefaultReleaseWait+slack || (err != nil && !errors.Is(err, locker.ErrUnavailable)) {
		t.Errorf("Unlock() while paused = %v after %v; want nil or ErrUnavailable within %v", err, took, driver.DefaultReleaseWait)
	}
}

// awaitSubscribers waits until Inspect counts want waiters of name.
func awaitSubscribers(t *testing.T, e *redlock.Engine, name string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		in, err := e.Inspect(context.Background(), name)
		if err == nil && in.Subscribers == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect(%q) = %+v, %v; want %d subscribers", name, in, err, want)
		}
		time.Sleep(5 * time.Millisecond) // polling the servers' state, not synchronising goroutines
	}
}

// With one node of five killed, and then with two, acquisitions go on;
// with three, they fail with ErrUnavailable within the caller's budget, and
// go on again once one is back.
func TestMinorityDown(t *testing.T) {
	ss := servers(t, nodeCount)
	e := newEngine(t, clients(t, addrsOf(ss)), redlock.WithLogger(quietLog))
	defer e.Close()
	lockUnlock := func(what string) {
		t.Helper()
		l, _ := e.NewLocker("minority")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.LockCtx(ctx); err != nil {
			t.Fatalf("%s: LockCtx() = %v", what, err)
		}
		if err := l.Unlock(); err != nil {
			t.Fatalf("%s: Unlock() = %v", what, err)
		}
	}
	lockUnlock("all up")
	for k := 1; k < e.Quorum(); k++ {
		if err := ss[k-1].Kill(); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			lockUnlock(fmt.Sprintf("%d killed, round %d", k, i))
		}
	}
	if err := ss[e.Quorum()-1].Kill(); err != nil {
		t.Fatal(err)
	}
	l, _ := e.NewLocker("minority")
	const budget = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	ok, err := l.TryLock()
	if took := time.Since(start); ok || !errors.Is(err, locker.ErrUnavailable) || took > budget {
		t.Errorf("TryLock() with %d of %d killed = %v, %v after %v; want false, ErrUnavailable within %v", e.Quorum(), nodeCount, ok, err, took, budget)
	}
	if err := l.LockCtx(ctx); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("LockCtx() with a majority killed = %v; want an error", err)
	}
	if err := e.Ping(context.Background()); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Ping() with a majority killed = %v; want ErrUnavailable", err)
	}
	if err := ss[0].Restart(); err != nil {
		t.Fatal(err)
	}
	// go-redis probes a server whose dials failed once a second before it
	// dials again.
	deadline := time.Now().Add(5 * time.Second)
	for err := e.Ping(context.Background()); err != nil; err = e.Ping(context.Background()) {
		if time.Now().After(deadline) {
			t.Fatalf("Ping() with a majority back = %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling the client's reconnection
	}
	lockUnlock("a majority back")
}

var quietLog = newQuietLog()

// A majority killed opens the engine's breaker in a switcher: the next
// acquisition moves to the secondary, and the caller, whose budget allows
// it, sees no error.
func TestMajorityKilledSwitches(t *testing.T) {
	f := newFaulty(t, redlock.WithName("redlock"))
	secondary, err := mem.New(mem.WithName("mem"))
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan switcher.Event, 4)
	sw, err := switcher.New([]locker.Engine{f.e, secondary}, switcher.WithLogger(quietLog),
		switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	before, _ := sw.NewLocker("before")
	if err := before.Lock(); err != nil || before.Engine() != "redlock" {
		t.Fatalf("Lock() = %v on %q; want a hold on redlock", err, before.Engine())
	}
	if err := each(f.majority, (*testserver.Server).Kill); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	after, _ := sw.NewLocker("after")
	if err := after.LockCtx(ctx); err != nil || after.Engine() != "mem" {
		t.Fatalf("LockCtx() = %v on %q; want a hold on mem", err, after.Engine())
	}
	defer func() { _ = after.Unlock() }()
	if ev := <-events; ev.From != "redlock" || ev.To != "mem" || ev.Reason != switcher.ReasonBreaker {
		t.Errorf("switch = %+v; want redlock to mem by its breaker", ev)
	}
}

// An engine started while a node is frozen closes within its node timeout,
// not the client's read timeout (3s): the subscription's connection is
// dialled with the node timeout.
func TestCloseWithFrozenNode(t *testing.T) {
	ss := servers(t, nodeCount)
	if err := ss[0].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss[0].Resume() })
	cs := make([]goredis.UniversalClient, len(ss))
	for i, s := range ss {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
		cs[i] = c
		t.Cleanup(func() { _ = c.Close() })
	}
	e := newEngine(t, cs, redlock.WithLogger(quietLog))
	l, _ := e.NewLocker("frozen")
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock() with 1 of %d nodes frozen = %v", nodeCount, err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	start := time.Now()
	if err := e.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close() took %v with a node frozen; want well within a second", took)
	}
}
