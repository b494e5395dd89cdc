package switcher_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/netfault"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// cutOff is one process of three losing its link to the fleet's engine
// while the other two reach it.
type cutOff struct {
	fault     string // "blackhole" or "refuse"
	written   bool   // the key names the primary; else it was never written
	isolation switcher.Isolation
	// lateVotes is how many of the cut-off process's first roster reads
	// after the cut answer past the health timeout (by 100ms), as a
	// starved process's do.
	lateVotes int32
}

// lateRoster is a shared source whose roster answers its next reads
// 100ms past the health timeout while late is above zero.
type lateRoster struct {
	switcher.Source
	switcher.Proposer
	switcher.Announcer
	switcher.Roster
	late atomic.Int32
}

func newLateRoster(src switcher.Source) *lateRoster {
	return &lateRoster{Source: src, Proposer: src.(switcher.Proposer), Announcer: src.(switcher.Announcer), Roster: src.(switcher.Roster)}
}

func (r *lateRoster) Members(ctx context.Context) ([]switcher.Member, error) {
	if r.late.Add(-1) >= 0 {
		select {
		case <-time.After(switcher.DefaultHealthTimeout + 100*time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return r.Roster.Members(ctx)
}

// A process cut off alone from the fleet's engine moves nobody: no other
// process switches and the key is untouched. With IsolationWait it grants
// nowhere meanwhile — its callers get ErrUnavailable within their budget —
// and grants on the fleet's engine again within a second of the heal; with
// IsolationAlone it goes to the secondary alone, at the fleet's epoch, and
// comes back.
func testCutOffMovesNobody(t *testing.T, key sharedKey, c cutOff) {
	if c.written {
		key.set(t, "primary")
	}
	_, epoch, _ := key.read(t)
	const fleet = 3
	events := make([]chan switcher.Event, fleet)
	links := make([]*netfault.Link, fleet)
	sws := make([]*switcher.Switcher, fleet)
	late := newLateRoster(key.source(t))
	for i := range sws {
		events[i] = make(chan switcher.Event, 16)
		links[i] = netfault.New(t, primaryAddr)
		src := key.source(t)
		if i == 0 {
			src = late
		}
		opts := []switcher.Option{switcher.WithSource(src), switcher.OnSwitch(func(ev switcher.Event) { events[i] <- ev })}
		if i == 0 {
			opts = append(opts, switcher.WithIsolation(c.isolation))
		}
		sws[i], _ = newSwitcher(t, [2]string{links[i].Addr(), secondaryAddr}, opts...)
		lockOnce(t, sws[i], "cut-ready") // every process has read the key and announced itself
	}
	roster := key.source(t).(switcher.Roster)
	waitFor(t, "the roster to list the fleet", func() bool {
		ms, err := roster.Members(context.Background())
		return err == nil && len(ms) == fleet
	})
	late.late.Store(c.lateVotes)
	switch c.fault {
	case "blackhole":
		if err := links[0].Blackhole(); err != nil {
			t.Fatal(err)
		}
	case "refuse":
		links[0].Refuse()
	}
	cut := time.Now()
	waitFor(t, "the cut-off process's breaker to open", func() bool { return sws[0].States()[0].Breaker != gobreaker.StateClosed })
	t.Logf("breaker open %v after the cut", time.Since(cut))

	l, err := sws[0].NewLocker("cut-name")
	if err != nil {
		t.Fatal(err)
	}
	if c.isolation == switcher.IsolationAlone {
		ev := awaitEvent(t, events[0])
		if ev.To != "secondary" || ev.Epoch != epoch {
			t.Errorf("the cut-off process's event %+v; want a move to secondary alone, at the fleet's epoch %d", ev, epoch)
		}
		if ok, err := l.TryLock(); !ok || err != nil || l.Engine() != "secondary" {
			t.Errorf("TryLock() = %v, %v on %q; want a grant on secondary", ok, err, l.Engine())
		} else {
			_ = l.Unlock()
		}
	} else {
		// The answer waits for the votes, which may come late.
		bound := 100*time.Millisecond + time.Duration(c.lateVotes)*(switcher.DefaultHealthTimeout+100*time.Millisecond)
		began := time.Now()
		ok, err := l.TryLock()
		if took := time.Since(began); ok || !errors.Is(err, locker.ErrUnavailable) || took > bound {
			t.Errorf("TryLock() on the cut-off process = %v, %v after %v; want false, ErrUnavailable within %v", ok, err, took, bound)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		began = time.Now()
		err = l.LockCtx(ctx)
		cancel()
		if took := time.Since(began); err == nil || took > bound+500*time.Millisecond {
			t.Errorf("LockCtx(500ms) on the cut-off process = %v after %v; want an error within %v", err, took, bound+500*time.Millisecond)
		}
	}
	for i, sw := range sws[1:] {
		h, err := sw.NewLocker("healthy")
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := h.TryLock(); !ok || err != nil || h.Engine() != "primary" {
			t.Errorf("process %d: TryLock() = %v, %v on %q; want a grant on primary", i+1, ok, err, h.Engine())
		} else {
			_ = h.Unlock()
		}
	}
	// Absence cannot be awaited: give the votes many health checks.
	time.Sleep(time.Second)
	for i := range sws {
		select {
		case ev := <-events[i]:
			t.Errorf("process %d switched: %+v; want no switch", i, ev)
		default:
		}
	}
	if got, gotEp, ok := key.read(t); ok != c.written || c.written && (got != "primary" || gotEp != epoch) {
		t.Errorf("the key after the cut: %q at epoch %d, exists %v; want it untouched", got, gotEp, ok)
	}

	if err := links[0].Heal(); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	waitFor(t, "a grant on the fleet's engine after the heal", func() bool {
		ok, err := l.TryLock()
		if ok && err == nil {
			defer l.Unlock()
			return l.Engine() == "primary"
		}
		return false
	})
	took := time.Since(healed)
	t.Logf("first grant on primary %v after the heal", took)
	if took > time.Second {
		t.Errorf("first grant on the fleet's engine %v after the heal; want <= 1s", took)
	}
	if got := sws[0].Epoch(); got != epoch {
		t.Errorf("the cut-off process's epoch after the heal = %d; want the fleet's, %d", got, epoch)
	}
}

// awaitEvent returns the next event, failing the test after 5s.
func awaitEvent(t *testing.T, events <-chan switcher.Event) switcher.Event {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
		return switcher.Event{}
	}
}

// With the primary down and every request to the secondary 400ms late
// (past the 300ms health timeout), the slow secondary is all there is:
// its breaker stays closed, so there is never a second with no engine,
// and callers get their locks.
func TestSlowSecondaryAfterPrimaryDies(t *testing.T) {
	primary := testserver.Redis(t)
	link := netfault.New(t, secondaryAddr)
	p, _ := redisEngine(t, "primary", primary.Addr())
	// go-redis's default timeouts: the test's 300ms would fail every
	// request, 400ms late.
	c := goredis.NewClient(&goredis.Options{Addr: link.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redis.New(c, redis.WithName("secondary"), redis.WithPrefix("switcher-test"))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := switcher.New([]locker.Engine{p, s}, switcher.WithName(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Close() })
	lockOnce(t, sw, "slow-ready")
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the switch to the secondary", func() bool { return sw.Current() == "secondary" })
	if err := link.Latency(200 * time.Millisecond); err != nil { // each way: every answer 400ms late
		t.Fatal(err)
	}
	var noEngine, longest time.Duration
	var since time.Time
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		closed := false
		for _, st := range sw.States() {
			closed = closed || st.Breaker == gobreaker.StateClosed
		}
		switch {
		case !closed && since.IsZero():
			since = time.Now()
		case closed && !since.IsZero():
			noEngine = time.Since(since)
			longest, since = max(longest, noEngine), time.Time{}
		}
	}
	if !since.IsZero() {
		longest = max(longest, time.Since(since))
	}
	if longest >= time.Second {
		t.Errorf("%v with no engine's breaker closed; want no interval of 1s or more", longest)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, _ := sw.NewLocker("slow")
	began := time.Now()
	if err := l.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() on the slow secondary = %v; want the lock", err)
	}
	t.Logf("granted on %s after %v; longest stretch with no engine %v", l.Engine(), time.Since(began), longest)
	_ = l.Unlock()
}
