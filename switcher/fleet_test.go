package switcher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/switcher"
	"github.com/orthrus-go/orthrus/switcher/etcdsource"
)

func etcdClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A breaker switch in one process of a fleet sharing an etcd key moves
// every process, at once and to one epoch.
func TestFleetFollowsOneBreakerDecision(t *testing.T) {
	es, primary := testserver.Etcd(t), testserver.Redis(t)
	const key = "/switcher-test/fleet/active"
	cli := etcdClient(t, es.Addr())
	if _, err := cli.Put(context.Background(), key, "primary"); err != nil {
		t.Fatal(err)
	}
	const fleet = 3
	events := make(chan switcher.Event, 16)
	sws := make([]*switcher.Switcher, fleet)
	var roster switcher.Roster
	for i := range sws {
		src, err := etcdsource.New(etcdClient(t, es.Addr()), key)
		roster = src
		if err != nil {
			t.Fatal(err)
		}
		sws[i], _ = newSwitcher(t, [2]string{primary.Addr(), secondaryAddr}, switcher.WithSource(src),
			switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
	}
	// Every process follows the key before the fault.
	for _, sw := range sws {
		waitFor(t, "the source's first value", func() bool { return sw.States()[0].Desired })
	}
	killed := time.Now()
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	first, last, breaker := awaitFleetSwitch(t, events, fleet)
	resp, err := cli.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.Kvs[0].Value); got != "secondary" {
		t.Errorf("the key holds %q after the failover; want secondary", got)
	}
	want := uint64(resp.Kvs[0].Version)
	for i, sw := range sws {
		if got := sw.Epoch(); got != want {
			t.Errorf("process %d: Epoch() = %d; want the key's version %d", i, got, want)
		}
	}
	// Each process announces what it does: operators see one fleet.
	waitFor(t, "every process to announce the secondary at the key's epoch", func() bool {
		ms, err := roster.Members(context.Background())
		ok := err == nil && len(ms) == fleet
		for _, m := range ms {
			ok = ok && m.Engine == "secondary" && m.Desired == "secondary" && m.Epoch == want
		}
		return ok
	})
	t.Logf("first switch %v after the kill, spread %v, %d by breaker", first.Sub(killed), last.Sub(first), breaker)
	if breaker != 1 {
		t.Errorf("%d processes switched by their own breaker; want 1 proposal, the rest following it", breaker)
	}
	if spread := last.Sub(first); spread > 300*time.Millisecond {
		t.Errorf("spread between first and last switch %v; want <= 300ms", spread)
	}
}

// A source that names an engine this process cannot use is deferred, said
// so, and followed once the engine is healthy again.
func TestSourceNamingDownEngineIsDeferred(t *testing.T) {
	secondary := testserver.Redis(t)
	src := make(chanSource)
	events := make(chan switcher.Event, 8)
	sw, _ := newSwitcher(t, [2]string{primaryAddr, secondary.Addr()}, switcher.WithSource(src),
		switcher.WithBreaker(3, 300*time.Millisecond), switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
	if err := secondary.Pause(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the paused secondary's breaker to open", func() bool { return !sw.States()[1].Healthy && sw.States()[1].Breaker.String() != "closed" })
	src <- switcher.Desired{Engine: "secondary", Epoch: 2}
	if ev := <-events; ev.Reason != switcher.ReasonDeferred || ev.From != "primary" || ev.To != "secondary" {
		t.Fatalf("event = %+v; want primary deferring secondary", ev)
	}
	if got, st := sw.Current(), sw.States(); got != "primary" || !st[1].Desired {
		t.Fatalf("Current() = %q, States() = %+v; want primary current and secondary desired", got, st)
	}
	resumed := time.Now()
	if err := secondary.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.To != "secondary" || ev.Reason != switcher.ReasonSource || ev.Epoch != 2 {
			t.Fatalf("event = %+v; want the source's switch to secondary at epoch 2", ev)
		}
		t.Logf("followed the source %v after the engine came back", ev.At.Sub(resumed))
	case <-time.After(5 * time.Second):
		t.Fatal("did not follow the source 5s after its engine came back")
	}
}

// A caller waiting on an engine that hangs gets its lock on the engine
// switched to, not an error.
func TestWaitMovedBySwitchGetsTheLock(t *testing.T) {
	primary := testserver.Redis(t)
	sw, _ := newSwitcher(t, [2]string{primary.Addr(), secondaryAddr})
	holder, _ := sw.NewLocker("moved")
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	waiter, _ := sw.NewLocker("moved")
	got := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	go func() { got <- waiter.LockCtx(ctx) }()
	waitForWaiters(t, sw)
	if err := primary.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Resume() })
	switched := time.Now()
	if _, err := sw.SwitchEngineTo("secondary"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("LockCtx() = %v; want the lock on the secondary", err)
	}
	t.Logf("granted on the secondary %v after the switch", time.Since(switched))
	if d := time.Since(switched); d > time.Second {
		t.Errorf("granted %v after the switch; want well under a second", d)
	}
	if eng := waiter.Engine(); eng != "secondary" {
		t.Errorf("Engine() = %q; want secondary", eng)
	}
	_ = waiter.Unlock()
}

// LockCtx returns exactly ctx.Err() when the caller's deadline passes on a
// hung engine, and soon after it.
func TestDeadlineOnHungEngineIsCtxErr(t *testing.T) {
	primary := testserver.Redis(t)
	sw, _ := newSwitcher(t, [2]string{primary.Addr(), secondaryAddr}, switcher.WithHealthCheck(time.Hour, time.Second))
	holder, _ := sw.NewLocker("deadline")
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := primary.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Resume() })
	waiter, _ := sw.NewLocker("deadline")
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	err := waiter.LockCtx(ctx)
	late := time.Since(deadlineOf(ctx))
	if err != context.DeadlineExceeded || !errors.Is(err, ctx.Err()) {
		t.Errorf("LockCtx() = %v; want exactly context.DeadlineExceeded", err)
	}
	if late > 100*time.Millisecond {
		t.Errorf("LockCtx returned %v after its deadline; want within 100ms", late)
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// waitForWaiters waits until an acquisition of sw is parked on an engine.
func waitForWaiters(t *testing.T, sw *switcher.Switcher) {
	t.Helper()
	waitFor(t, "a parked waiter", func() bool { return switcher.Waiting(sw) > 0 })
}

// waitFor polls cond until it holds, failing after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// When the shared source does not answer, each process switches alone, at
// the epoch the proposal would have had; once the source is back, one
// proposal records the switch and the fleet agrees on it.
func TestSourceDownSwitchAloneThenConverge(t *testing.T) {
	es, primary := testserver.Etcd(t), testserver.Redis(t)
	const key = "/switcher-test/alone/active"
	cli := etcdClient(t, es.Addr())
	if _, err := cli.Put(context.Background(), key, "primary"); err != nil {
		t.Fatal(err)
	}
	events := make(chan switcher.Event, 16)
	sws := make([]*switcher.Switcher, 2)
	for i := range sws {
		src, err := etcdsource.New(etcdClient(t, es.Addr()), key)
		if err != nil {
			t.Fatal(err)
		}
		sws[i], _ = newSwitcher(t, [2]string{primary.Addr(), secondaryAddr}, switcher.WithSource(src),
			switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
		waitFor(t, "the source's first value", func() bool { return sws[i].States()[0].Desired })
	}
	if err := es.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	for range sws {
		select {
		case ev := <-events:
			if ev.To != "secondary" || ev.Reason != switcher.ReasonBreaker || ev.Epoch != 2 {
				t.Errorf("event = %+v; want a breaker switch to secondary at epoch 2, alone", ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("not every process switched alone within 5s")
		}
	}
	if err := es.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the key to record the switch", func() bool {
		resp, err := cli.Get(context.Background(), key)
		return err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == "secondary" && resp.Kvs[0].Version == 2
	})
	for i, sw := range sws {
		waitFor(t, "the process to follow the recorded switch", func() bool { return sw.States()[1].Desired })
		if got, cur := sw.Epoch(), sw.Current(); got != 2 || cur != "secondary" {
			t.Errorf("process %d: Epoch(), Current() = %d, %q; want 2, secondary", i, got, cur)
		}
	}
}

// A process that switched alone proposes its switch again once the
// source answers. When that proposal gets no answer in time, while the
// watch delivers the fleet's decision for the very engine the process is
// on (another process's proposal won), the process has nothing left to
// propose: it stays at the fleet's epoch. Proposing again from that epoch
// would raise every process's epoch for no switch, the race behind a
// flaky AloneOnUnwrittenKeyThenCreate whose fleet ended at epoch 2.
func TestFailedProposalAgreedByWatch(t *testing.T) {
	es, primary := testserver.Etcd(t), testserver.Redis(t)
	const key = "/switcher-test/agreed/active"
	src, err := etcdsource.New(etcdClient(t, es.Addr()), key)
	if err != nil {
		t.Fatal(err)
	}
	gated := &gatedProposer{src: src, entered: make(chan uint64, 8), release: make(chan struct{}), failed: make(chan struct{})}
	// A name of its own: the epoch record on the shared secondary outlives
	// a run (-count).
	sw, _ := newSwitcher(t, [2]string{primary.Addr(), secondaryAddr}, switcher.WithSource(gated),
		switcher.WithHealthCheck(20*time.Millisecond, 200*time.Millisecond),
		switcher.WithName(fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())))
	t.Cleanup(gated.open) // before Close, should the test end early
	lockOnce(t, sw, "agreed-ready")
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the switch alone, then its retry, held
		select {
		case from := <-gated.entered:
			if from != 0 {
				t.Fatalf("proposal %d from epoch %d; want 0, the key was never written", i+1, from)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no proposal %d within 5s", i+1)
		}
	}
	if got := sw.Current(); got != "secondary" || !switcher.Alone(sw) {
		t.Fatalf("Current(), Alone() = %q, %v; want secondary, alone", got, switcher.Alone(sw))
	}
	// Another process's proposal wins while the retry is out.
	other, err := etcdsource.New(etcdClient(t, es.Addr()), key)
	if err != nil {
		t.Fatal(err)
	}
	if d, won, err := other.Propose(context.Background(), 0, "secondary"); !won || err != nil {
		t.Fatalf("the other process's Propose(0, secondary) = %+v, %v, %v; want it to win", d, won, err)
	}
	waitFor(t, "the watch to deliver the fleet's decision", func() bool { return sw.States()[1].Desired })
	gated.open() // the retry gets no answer
	<-gated.failed
	// Absence cannot be awaited: give the decider several rounds.
	select {
	case from := <-gated.entered:
		t.Errorf("a proposal from epoch %d after the fleet agreed on this process's engine; want none", from)
	case <-time.After(300 * time.Millisecond):
	}
	if switcher.Alone(sw) {
		t.Error("Alone() = true; want the process back with the fleet's decision")
	}
	d, ok, err := src.Read(context.Background())
	if err != nil || !ok || d != (switcher.Desired{Engine: "secondary", Epoch: 1}) {
		t.Errorf("key = %+v, %v, %v; want secondary at epoch 1, as the fleet decided", d, ok, err)
	}
	if got := sw.Epoch(); got != 1 {
		t.Errorf("Epoch() = %d; want the fleet's, 1", got)
	}
}

// gatedProposer passes a shared source through, but fails its first
// proposal at once and its second once release closes: a source that does
// not answer, then one that answers too late. entered receives the epoch
// each proposal is from; failed closes as the second returns.
type gatedProposer struct {
	src     *etcdsource.Source
	entered chan uint64
	release chan struct{}
	failed  chan struct{}
	opened  sync.Once

	mu    sync.Mutex
	calls int
}

func (g *gatedProposer) open() { g.opened.Do(func() { close(g.release) }) }

func (g *gatedProposer) Watch(ctx context.Context, apply func(switcher.Desired)) error {
	return g.src.Watch(ctx, apply)
}

func (g *gatedProposer) Read(ctx context.Context) (switcher.Desired, bool, error) {
	return g.src.Read(ctx)
}

func (g *gatedProposer) Propose(ctx context.Context, from uint64, engine string) (switcher.Desired, bool, error) {
	g.entered <- from
	g.mu.Lock()
	g.calls++
	n := g.calls
	g.mu.Unlock()
	switch n {
	case 1:
	case 2:
		defer close(g.failed)
		<-g.release
	default:
		return g.src.Propose(ctx, from, engine)
	}
	return switcher.Desired{}, false, context.DeadlineExceeded
}

// A breaker switch away from the engine a non-shared source names holds
// until the source names another: failback stays manual.
func TestBreakerSwitchHoldsAgainstUnchangedSource(t *testing.T) {
	primary := testserver.Redis(t)
	src := make(chanSource)
	events := make(chan switcher.Event, 8)
	sw, _ := newSwitcher(t, [2]string{primary.Addr(), secondaryAddr}, switcher.WithSource(src),
		switcher.WithBreaker(3, 200*time.Millisecond), switcher.WithHealthCheck(20*time.Millisecond, 100*time.Millisecond),
		switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
	src <- switcher.Desired{Engine: "primary"}
	waitFor(t, "the source's value", func() bool { return sw.States()[0].Desired })
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.To != "secondary" || ev.Reason != switcher.ReasonBreaker {
		t.Fatalf("event = %+v; want a breaker switch to secondary", ev)
	}
	if err := primary.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the primary to be healthy again", func() bool {
		st := sw.States()[0]
		return st.Healthy && st.Breaker.String() == "closed"
	})
	// Absence cannot be awaited: give the decider several health checks.
	select {
	case ev := <-events:
		t.Fatalf("event %+v after the primary came back; want none without failback or a new source value", ev)
	case <-time.After(200 * time.Millisecond):
	}
	// A new value from the source decides again.
	src <- switcher.Desired{Engine: "primary"}
	select {
	case ev := <-events:
		if ev.To != "primary" || ev.Reason != switcher.ReasonSource {
			t.Errorf("event = %+v; want the source's switch to primary", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("did not follow the source's new value")
	}
}

// awaitFleetSwitch waits for the switch to the secondary of each of fleet
// processes, and returns when the first and the last switched and how
// many did by their own breaker.
func awaitFleetSwitch(t *testing.T, events <-chan switcher.Event, fleet int) (first, last time.Time, breaker int) {
	t.Helper()
	for range fleet {
		select {
		case ev := <-events:
			if ev.To != "secondary" {
				t.Fatalf("event %+v; want a switch to secondary", ev)
			}
			if ev.Reason == switcher.ReasonBreaker {
				breaker++
			}
			if first.IsZero() {
				first = ev.At
			}
			last = ev.At
		case <-time.After(5 * time.Second):
			t.Fatal("not every process switched 5s after the primary was killed")
		}
	}
	return first, last, breaker
}
