package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redlock"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// fenced is a resource that accepts a write only with a token at least the
// highest it has seen: what a fencing token is for.
type fenced struct {
	mu   sync.Mutex
	high uint64
}

// write reports whether it took the write: token is at least the highest
// seen.
func (f *fenced) write(token uint64) (taken bool) {
	f.mu.Lock()
	if taken = token >= f.high; taken {
		f.high = token
	}
	f.mu.Unlock()
	return taken
}

// scenarioTTL is the holds' TTL in the scenarios: short, so that expiry
// and renewal show within the test, well above the engine's MinTTL.
const scenarioTTL = 2 * time.Second

// splitHold has client 1 take name while nodes 3 and 4 (D and E) are
// frozen, so that it holds A, B and C only, as in the seed's scenarios,
// after a first grant with every node up so that every counter exists.
func splitHold(t *testing.T, ss []*testserver.Server, name string) (locker.Handle, *redlock.Engine) {
	t.Helper()
	e1 := newEngine(t, clients(t, addrsOf(ss)), redlock.WithLogger(quietLog))
	t.Cleanup(func() { _ = e1.Close() })
	warm, _ := e1.NewLocker(name)
	if err := warm.Lock(); err != nil {
		t.Fatal(err)
	}
	_ = warm.Unlock()
	awaitGone(t, ss, e1.LockKey(name)) // Unlock returns once a majority deleted it
	for _, s := range ss[3:] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	l1, _ := e1.NewLocker(name, locker.WithTTL(scenarioTTL))
	if err := l1.Lock(); err != nil {
		t.Fatalf("client 1: Lock() = %v", err)
	}
	for _, s := range ss[3:] {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	return l1, e1
}

// secondClient is another process's engine over fresh connections.
func secondClient(t *testing.T, ss []*testserver.Server, name string) locker.Handle {
	t.Helper()
	e2 := newEngine(t, clients(t, addrsOf(ss)), redlock.WithLogger(quietLog))
	t.Cleanup(func() { _ = e2.Close() })
	l2, _ := e2.NewLocker(name, locker.WithTTL(scenarioTTL))
	return l2
}

func lost(l locker.Lease) bool {
	select {
	case <-l.Lost():
	default:
		return false
	}
	return true
}

func awaitLost(t *testing.T, l locker.Lease, within time.Duration, who string) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(within):
		t.Fatalf("%s: Lost() not closed within %v", who, within)
	}
}

// checkFenced: both clients write, the newer token first; the older one is
// refused.
func checkFenced(t *testing.T, older, newer locker.Handle) {
	t.Helper()
	if newer.Token() <= older.Token() {
		t.Fatalf("tokens: client 2 %d, client 1 %d; want client 2's higher", newer.Token(), older.Token())
	}
	var r fenced
	if !r.write(newer.Token()) {
		t.Errorf("the resource refused client 2's write with token %d", newer.Token())
	}
	if r.write(older.Token()) {
		t.Errorf("the resource took client 1's write with token %d after client 2's %d", older.Token(), newer.Token())
	}
}

// Scenario (a) without a restart delay: C, which client 1 held, restarts
// without its data and client 2 takes C, D and E while client 1 still
// holds A and B and has not learnt otherwise. Two holders at once: what
// Redlock cannot prevent. The fencing token tells them apart: C's new
// counter starts from its clock, past client 1's token.
func TestRestartWithoutDataNoDelay(t *testing.T) {
	ss := servers(t, nodeCount)
	name := "scenario-a"
	l1, _ := splitHold(t, ss, name)
	if err := ss[2].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := ss[2].Restart(); err != nil {
		t.Fatal(err)
	}
	l2 := secondClient(t, ss, name)
	if ok, err := l2.TryLock(); !ok || err != nil {
		t.Fatalf("client 2: TryLock() = %v, %v; want true, nil (C, D and E are free)", ok, err)
	}
	if lost(l1) {
		t.Errorf("client 1 already lost its hold; want two holders at once")
	}
	checkFenced(t, l1, l2)
	// Client 1's next renewal finds C taken: a majority is out of reach.
	awaitLost(t, l1, 2*scenarioTTL, "client 1")
}

// Scenario (a) with a restart delay of the TTL: client 1's renewals reach
// only A and B while C is down, so client 1 loses its hold at its TTL,
// before C is back; client 2 then takes a majority, with a higher token.
func TestRestartWithoutDataDelayed(t *testing.T) {
	ss := servers(t, nodeCount)
	name := "scenario-a-delay"
	l1, _ := splitHold(t, ss, name)
	if err := ss[2].Kill(); err != nil {
		t.Fatal(err)
	}
	awaitLost(t, l1, 2*scenarioTTL, "client 1 while C is down")
	if err := ss[2].Restart(); err != nil {
		t.Fatal(err)
	}
	l2 := secondClient(t, ss, name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*scenarioTTL)
	defer cancel()
	if err := l2.LockCtx(ctx); err != nil {
		t.Fatalf("client 2: LockCtx() = %v", err)
	}
	checkFenced(t, l1, l2)
}

// Scenario (b): C's clock jumps and its copy of client 1's hold expires
// early (PEXPIRE to 1ms). Client 2 takes C, D and E: two holders at once
// until client 1's next renewal, which loses the hold. C kept its counter,
// which client 1's grant raised: client 2's token is higher.
func TestEarlyExpiry(t *testing.T) {
	ss := servers(t, nodeCount)
	name := "scenario-b"
	l1, e1 := splitHold(t, ss, name)
	c := goredis.NewClient(&goredis.Options{Addr: ss[2].Addr()})
	defer c.Close()
	if err := c.PExpire(context.Background(), e1.LockKey(name), time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	l2 := secondClient(t, ss, name)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTTL)
	defer cancel()
	if err := l2.LockCtx(ctx); err != nil {
		t.Fatalf("client 2: LockCtx() = %v (C expired early, D and E are free)", err)
	}
	if lost(l1) {
		t.Logf("client 1 had already renewed and lost its hold")
	}
	checkFenced(t, l1, l2)
	awaitLost(t, l1, 2*scenarioTTL, "client 1")
}

// awaitGone waits until no node has key.
func awaitGone(t *testing.T, ss []*testserver.Server, key string) {
	t.Helper()
	for _, s := range ss {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
		deadline := time.Now().Add(5 * time.Second)
		for c.Exists(context.Background(), key).Val() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s still has %s 5s after Unlock", s, key)
			}
			time.Sleep(time.Millisecond) // polling a server's state
		}
		_ = c.Close()
	}
}
