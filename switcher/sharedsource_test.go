package switcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/switcher"
	"github.com/orthrus-go/orthrus/switcher/etcdsource"
	"github.com/orthrus-go/orthrus/switcher/zksource"
)

// sharedKey is one key or node of a shared source, seen by the processes
// of a fleet (each with its own connection) and by an operator.
type sharedKey struct {
	// source returns a new process's source over the key, on a connection
	// of its own.
	source func(t *testing.T) switcher.Source
	// set is an operator's write of engine.
	set func(t *testing.T, engine string)
	// get returns the value and its epoch, read with the server's own
	// client; ok is false when the key does not exist.
	get func() (engine string, epoch uint64, ok bool, err error)
	// server serves the key: the tests that break it resume it.
	server *testserver.Server
}

// sharedSources start one server per kind of shared source and return a
// key on it that was never written, one per call.
var sharedSources = []struct {
	name  string
	start func(t *testing.T) func(t *testing.T, key string) sharedKey
}{
	{"etcd", func(t *testing.T) func(*testing.T, string) sharedKey {
		es := testserver.Etcd(t)
		admin := etcdClient(t, es.Addr())
		return func(t *testing.T, key string) sharedKey {
			key = "/switcher-test/" + key
			return sharedKey{
				source: func(t *testing.T) switcher.Source {
					src, err := etcdsource.New(etcdClient(t, es.Addr()), key)
					if err != nil {
						t.Fatal(err)
					}
					return src
				},
				set: func(t *testing.T, engine string) {
					if _, err := admin.Put(context.Background(), key, engine); err != nil {
						t.Fatal(err)
					}
				},
				server: es,
				get: func() (string, uint64, bool, error) {
					resp, err := admin.Get(context.Background(), key)
					if err != nil || len(resp.Kvs) == 0 {
						return "", 0, false, err
					}
					return string(resp.Kvs[0].Value), uint64(resp.Kvs[0].Version), true, nil
				},
			}
		}
	}},
	{"zk", func(t *testing.T) func(*testing.T, string) sharedKey {
		zs := testserver.ZooKeeper(t)
		admin := zkConn(t, zs.Addr())
		return func(t *testing.T, key string) sharedKey {
			path := "/switcher-test/" + key
			writer, err := zksource.New(admin, path)
			if err != nil {
				t.Fatal(err)
			}
			return sharedKey{
				source: func(t *testing.T) switcher.Source {
					src, err := zksource.New(zkConn(t, zs.Addr()), path)
					if err != nil {
						t.Fatal(err)
					}
					return src
				},
				set: func(t *testing.T, engine string) {
					if err := writer.Set(context.Background(), engine); err != nil {
						t.Fatal(err)
					}
				},
				server: zs,
				get: func() (string, uint64, bool, error) {
					data, st, err := admin.Get(path)
					if errors.Is(err, gozk.ErrNoNode) {
						return "", 0, false, nil
					}
					if err != nil {
						return "", 0, false, err
					}
					return string(data), uint64(st.Version) + 1, true, nil // zksource's epoch
				},
			}
		}
	}},
}

// read returns the key's value and epoch; ok is false when it does not
// exist.
func (k sharedKey) read(t *testing.T) (engine string, epoch uint64, ok bool) {
	t.Helper()
	engine, epoch, ok, err := k.get()
	if err != nil {
		t.Fatal(err)
	}
	return engine, epoch, ok
}

// The fleet's promises with a shared source, for every kind of shared
// source: one server per kind, one key per case.
func TestSharedSourceFleet(t *testing.T) {
	for _, kind := range sharedSources {
		t.Run(kind.name, func(t *testing.T) {
			newKey := kind.start(t)
			t.Run("UnwrittenKeyCreatedByFirstProposal", func(t *testing.T) {
				testUnwrittenKeyCreatedByFirstProposal(t, newKey(t, "unwritten"))
			})
			t.Run("SameEngineAdoptsEpoch", func(t *testing.T) {
				testSameEngineAdoptsEpoch(t, newKey(t, "same-engine"))
			})
			t.Run("LateStarterHasFleetEpoch", func(t *testing.T) {
				testLateStarterHasFleetEpoch(t, newKey(t, "late"))
			})
			t.Run("UnknownEngineIsNotProposedAgainst", func(t *testing.T) {
				testUnknownEngineIsNotProposedAgainst(t, newKey(t, "unknown"))
			})
			for _, c := range []cutOff{
				{fault: "blackhole"},
				{fault: "refuse", written: true},
				{fault: "refuse", isolation: switcher.IsolationAlone},
				// A starved process's votes come late: they are counted
				// still, not read as a fleet that agrees.
				{fault: "refuse", written: true, lateVotes: 2},
			} {
				name := "CutOffMovesNobody/" + c.fault + map[bool]string{true: "/written", false: "/unwritten"}[c.written] + "/" + c.isolation.String()
				if c.lateVotes > 0 {
					name += "/late-votes"
				}
				t.Run(name, func(t *testing.T) {
					testCutOffMovesNobody(t, newKey(t, "cut-"+c.fault+"-"+c.isolation.String()), c)
				})
			}
			// Last: these pause the server.
			t.Run("SourceDownAtStartGrantsAlone", func(t *testing.T) {
				testSourceDownAtStartGrantsAlone(t, newKey(t, "down"))
			})
			t.Run("AloneOnUnwrittenKeyThenCreate", func(t *testing.T) {
				testAloneOnUnwrittenKeyThenCreate(t, newKey(t, "alone"))
			})
		})
	}
}

// A fleet whose key was never written (every new fleet) moves as one when
// the primary dies: the first proposal creates the key, and every process
// follows it, on one engine at one epoch.
func testUnwrittenKeyCreatedByFirstProposal(t *testing.T, key sharedKey) {
	primary := testserver.Redis(t)
	const fleet = 3
	events := make(chan switcher.Event, 16)
	sws := make([]*switcher.Switcher, fleet)
	for i := range sws {
		sws[i], _ = newSwitcher(t, [2]string{primary.Addr(), secondaryAddr}, switcher.WithSource(key.source(t)),
			switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
	}
	// Every process has read the key (and found none) before the fault.
	for _, sw := range sws {
		lockOnce(t, sw, "unwritten-ready")
	}
	killed := time.Now()
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	first, last, breaker := awaitFleetSwitch(t, events, fleet)
	engine, epoch, ok := key.read(t)
	if !ok || engine != "secondary" || epoch != 1 {
		t.Fatalf("the key after the failover: %q at epoch %d, exists %v; want secondary at epoch 1", engine, epoch, ok)
	}
	for i, sw := range sws {
		if got, cur := sw.Epoch(), sw.Current(); got != epoch || cur != "secondary" {
			t.Errorf("process %d: Epoch(), Current() = %d, %q; want %d, secondary", i, got, cur, epoch)
		}
	}
	t.Logf("first switch %v after the kill, spread %v, %d by breaker", first.Sub(killed), last.Sub(first), breaker)
	if breaker != 1 {
		t.Errorf("%d processes switched by their own breaker; want 1 proposal, the rest following it", breaker)
	}
	if spread := last.Sub(first); spread > 300*time.Millisecond {
		t.Errorf("spread between first and last switch %v; want <= 300ms", spread)
	}
}

// A process already on the engine the source names takes the source's
// epoch, as the processes that switched to it did.
func testSameEngineAdoptsEpoch(t *testing.T, key sharedKey) {
	events := make(chan switcher.Event, 8)
	sw, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr}, switcher.WithSource(key.source(t)),
		switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
	lockOnce(t, sw, "same-engine-ready") // the key was read: it does not exist
	key.set(t, "primary")
	_, want, _ := key.read(t)
	waitFor(t, "the source's value", func() bool { return sw.States()[0].Desired })
	waitFor(t, "the source's epoch", func() bool { return sw.Epoch() >= want })
	if got, cur := sw.Epoch(), sw.Current(); got != want || cur != "primary" {
		t.Errorf("Epoch(), Current() = %d, %q; want %d, primary", got, cur, want)
	}
	if tok := lockOnce(t, sw, "same-engine"); tok>>44 != want {
		t.Errorf("token epoch = %d; want the source's epoch %d", tok>>44, want)
	}
	select {
	case ev := <-events:
		t.Errorf("event %+v; want none: the engine did not change", ev)
	default:
	}
}

// A process started after the fleet switched twice grants its first lock
// on the fleet's engine at the fleet's epoch, whichever engine that is.
func testLateStarterHasFleetEpoch(t *testing.T, key sharedKey) {
	fleet := make([]*switcher.Switcher, 2)
	for i := range fleet {
		fleet[i], _ = newSwitcher(t, [2]string{primaryAddr, secondaryAddr}, switcher.WithSource(key.source(t)))
	}
	for _, engine := range []string{"primary", "secondary", "primary", "secondary"} {
		key.set(t, engine)
		_, epoch, _ := key.read(t)
		for _, sw := range fleet {
			waitFor(t, "the fleet to follow the key", func() bool { return sw.Current() == engine && sw.Epoch() == epoch })
		}
		if epoch < 3 { // two switches at least
			continue
		}
		src := key.source(t) // connected: the process's start, not its dial, is timed
		began := time.Now()
		late, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr}, switcher.WithSource(src))
		l, err := late.NewLocker("late-" + engine)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := l.TryLock(); !ok || err != nil {
			t.Fatalf("TryLock() = %v, %v; want true, nil", ok, err)
		}
		t.Logf("key %q at epoch %d: first grant %v after New", engine, epoch, time.Since(began))
		if got, tok := l.Engine(), l.Token(); got != engine || tok>>44 != epoch {
			t.Errorf("key %q at epoch %d: the new process's first grant is on %q at epoch %d; want %q at %d",
				engine, epoch, got, tok>>44, engine, epoch)
		}
		_ = l.Unlock()
	}
}

// A key that names no engine of this process is nothing to follow: a
// breaker switch is made alone, as without a shared source, and the key is
// neither overwritten nor proposed against again and again.
func testUnknownEngineIsNotProposedAgainst(t *testing.T, key sharedKey) {
	primary := testserver.Redis(t)
	key.set(t, "nowhere")
	_, epoch, _ := key.read(t)
	events := make(chan switcher.Event, 8)
	sw, _ := newSwitcher(t, [2]string{primary.Addr(), secondaryAddr}, switcher.WithSource(key.source(t)),
		switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
	lockOnce(t, sw, "unknown-ready")
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.To != "secondary" || ev.Reason != switcher.ReasonBreaker {
			t.Fatalf("event %+v; want a breaker switch to secondary", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no switch 5s after the primary was killed")
	}
	// Absence cannot be awaited: give the decider several health checks.
	select {
	case ev := <-events:
		t.Errorf("event %+v; want one switch only", ev)
	case <-time.After(300 * time.Millisecond):
	}
	if got, gotEp, ok := key.read(t); got != "nowhere" || gotEp != epoch || !ok {
		t.Errorf("the key after the switch: %q at epoch %d, exists %v; want it untouched, nowhere at %d", got, gotEp, ok, epoch)
	}
}

// A process whose shared source does not answer at start still grants,
// on its start engine, once the read has had the health timeout: the wait
// for the fleet's epoch never becomes an outage of its own.
func testSourceDownAtStartGrantsAlone(t *testing.T, key sharedKey) {
	src := key.source(t) // connected before the pause
	if err := key.server.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = key.server.Resume() })
	const healthTimeout = 200 * time.Millisecond
	sw, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr}, switcher.WithSource(src),
		switcher.WithHealthCheck(100*time.Millisecond, healthTimeout))
	l, err := sw.NewLocker("down-at-start")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	ok, err := l.TryLock()
	took := time.Since(began)
	if !ok || err != nil {
		t.Fatalf("TryLock() = %v, %v; want true, nil", ok, err)
	}
	t.Logf("first grant %v after New with the source paused", took)
	if got := l.Engine(); got != "primary" {
		t.Errorf("Engine() = %q; want the start engine, primary", got)
	}
	if took > healthTimeout+500*time.Millisecond {
		t.Errorf("the first grant took %v; want about the health timeout, %v", took, healthTimeout)
	}
	_ = l.Unlock()
}

// A fleet whose key was never written and whose source does not answer
// when the primary dies switches alone, each at epoch 1; once the source
// answers, one proposal creates the key with that decision and the fleet
// agrees on it.
func testAloneOnUnwrittenKeyThenCreate(t *testing.T, key sharedKey) {
	primary := testserver.Redis(t)
	events := make(chan switcher.Event, 16)
	sws := make([]*switcher.Switcher, 2)
	for i := range sws {
		sws[i], _ = newSwitcher(t, [2]string{primary.Addr(), secondaryAddr}, switcher.WithSource(key.source(t)),
			switcher.OnSwitch(func(ev switcher.Event) { events <- ev }))
		lockOnce(t, sws[i], "alone-ready")
	}
	if err := key.server.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = key.server.Resume() })
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	for range sws {
		select {
		case ev := <-events:
			if ev.To != "secondary" || ev.Reason != switcher.ReasonBreaker || ev.Epoch != 1 {
				t.Errorf("event = %+v; want a breaker switch to secondary at epoch 1, alone", ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("not every process switched alone within 5s")
		}
	}
	if err := key.server.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the key to record the switch", func() bool {
		engine, epoch, ok, err := key.get() // fails until the admin's connection is back
		return err == nil && ok && engine == "secondary" && epoch == 1
	})
	for i, sw := range sws {
		waitFor(t, "the process to follow the recorded switch", func() bool { return sw.States()[1].Desired })
		if got, cur := sw.Epoch(), sw.Current(); got != 1 || cur != "secondary" {
			t.Errorf("process %d: Epoch(), Current() = %d, %q; want 1, secondary", i, got, cur)
		}
	}
}

// lockOnce takes and releases a lock on sw and returns its token.
func lockOnce(t *testing.T, sw *switcher.Switcher, name string) uint64 {
	t.Helper()
	l, err := sw.NewLocker(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx(%q) = %v; want nil", name, err)
	}
	tok := l.Token()
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	return tok
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// zkConn returns a ZooKeeper connection with a session, closed when the
// test ends.
func zkConn(t *testing.T, addr string) *gozk.Conn {
	t.Helper()
	conn, events, err := gozk.Connect([]string{addr}, 2*time.Second, gozk.WithLogger(quietZK{}), gozk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("Connect(%q) = %v", addr, err)
	}
	t.Cleanup(conn.Close)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == gozk.StateHasSession {
				go func() {
					for range events { // until the connection closes
					}
				}()
				return conn
			}
		case <-deadline:
			t.Fatalf("no session with %s within 10s", addr)
		}
	}
}
