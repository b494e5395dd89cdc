package redis_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// quietLog keeps the expected lost-hold warnings out of the output.
var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// The master of a Sentinel group dies (SIGKILL) and a replica takes over.
// Holds the replica had received are kept; holds it had not (the async
// replication window, forced here by freezing the replica) are reported
// lost to their holders, and the next owner's token is higher. No name
// ends up with two holders that both believe they hold it, and new
// acquisitions resume on the new master.
func TestSentinelFailover(t *testing.T) {
	s := testserver.RedisSentinel(t, 1, 3)
	client := func() *goredis.Client {
		c := goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName:            testserver.SentinelMaster,
			SentinelAddrs:         s.SentinelAddrs(),
			DialTimeout:           300 * time.Millisecond,
			ContextTimeoutEnabled: true,
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holderClient := client()
	holders := newEngine(t, holderClient, redis.WithPrefix("sentinel"), redis.WithLogger(quietLog))
	defer holders.Close()
	// A TTL longer than the failover, so replicated holds survive it.
	const ttl = 10 * time.Second
	hold := func(name string) locker.Locker {
		t.Helper()
		l, _ := holders.NewLocker(name, locker.WithTTL(ttl))
		if ok, err := l.TryLock(); !ok || err != nil {
			t.Fatalf("TryLock(%q) = %v, %v; want true, nil", name, ok, err)
		}
		return l
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const n = 5
	var replicated, unreplicated [n]locker.Locker
	for i := range replicated {
		replicated[i] = hold(fmt.Sprintf("replicated/%d", i))
	}
	if got, err := holderClient.Do(ctx, "WAIT", 1, 5000).Int(); got != 1 || err != nil {
		t.Fatalf("WAIT 1 = %v, %v; want the replica's acknowledgement", got, err)
	}
	// Frozen and cut off, the replica misses what the master grants next
	// (frozen alone, it would still read the replication stream its
	// socket buffered).
	if err := s.Replicas[0].Pause(); err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(&goredis.Options{Addr: s.Master.Addr()})
	defer admin.Close()
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE replica: %v", err)
	}
	for i := range unreplicated {
		unreplicated[i] = hold(fmt.Sprintf("unreplicated/%d", i))
	}
	if err := s.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Replicas[0].Resume(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	newMaster, err := s.WaitFailover(s.Master.Addr(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover to %s took %v", newMaster, time.Since(start))

	// The holds the new master never saw are reported lost at their next
	// renewal, within the TTL.
	for i, l := range unreplicated {
		select {
		case <-lease(l).Lost():
		case <-ctx.Done():
			t.Fatalf("unreplicated/%d: Lost() not closed after the failover", i)
		}
	}
	contenders := newEngine(t, client(), redis.WithPrefix("sentinel"), redis.WithName("contender"))
	defer contenders.Close()
	for i, l := range unreplicated {
		c, _ := contenders.NewLocker(fmt.Sprintf("unreplicated/%d", i))
		if ok, err := c.TryLock(); !ok || err != nil {
			t.Errorf("unreplicated/%d: contender TryLock() = %v, %v; want true, nil", i, ok, err)
			continue
		}
		// Fencing: the new owner's token is higher than the lost one's,
		// although the counter the old master bumped was lost too.
		if got, old := lease(c).Token(), lease(l).Token(); got <= old {
			t.Errorf("unreplicated/%d: token after failover %d <= lost token %d", i, got, old)
		}
		if err := l.Unlock(); err == nil {
			t.Errorf("unreplicated/%d: Unlock() of the lost hold = nil; want ErrLockLost", i)
		}
	}
	// The replicated holds are kept: still theirs, not lost, exclusive.
	for i, l := range replicated {
		name := fmt.Sprintf("replicated/%d", i)
		select {
		case <-lease(l).Lost():
			t.Errorf("%s: Lost() closed; want the hold kept", name)
			continue
		default:
		}
		in, err := holders.Inspect(ctx, name)
		if err != nil || in.Holder == nil || in.Holder.Token != lease(l).Token() {
			t.Errorf("%s: Inspect() = %+v, %v; want the hold with token %d", name, in, err, lease(l).Token())
		}
		c, _ := contenders.NewLocker(name)
		if ok, err := c.TryLock(); ok || err != nil {
			t.Errorf("%s: contender TryLock() = %v, %v; want false, nil", name, ok, err)
		}
		if err := l.Unlock(); err != nil {
			t.Errorf("%s: Unlock() = %v", name, err)
		}
	}
	// New acquisitions go to the new master.
	fresh := hold("fresh")
	if err := fresh.Unlock(); err != nil {
		t.Errorf("fresh Unlock() = %v", err)
	}
}
