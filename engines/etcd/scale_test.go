package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker"
)

// Holds shard over leases by count: one lease that ends loses only the
// holds on it.
func TestLostLeaseLosesOnlyItsShard(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, endpoint)
	e := newEngine(t, c, etcd.WithKeysPerLease(2))
	base := fmt.Sprintf("%s/%d/", t.Name(), time.Now().UnixNano())
	const n, ttl = 5, 3 * time.Second
	ls := make([]locker.Locker, n)
	byLease := map[clientv3.LeaseID][]int{}
	for i := range ls {
		ls[i] = newLocker(t, e, fmt.Sprint(base, i), locker.WithTTL(ttl))
		if err := ls[i].Lock(); err != nil {
			t.Fatal(err)
		}
		id := keys(t, c, e, fmt.Sprint(base, i))[0].lease
		byLease[id] = append(byLease[id], i)
	}
	if len(byLease) != 3 {
		t.Fatalf("%d holds with 2 keys per lease are on %d leases (%v); want 3", n, len(byLease), byLease)
	}
	first := keys(t, c, e, fmt.Sprint(base, 0))[0].lease
	if _, err := c.Revoke(ctx, first); err != nil {
		t.Fatal(err)
	}
	for _, i := range byLease[first] {
		select {
		case <-lease(ls[i]).Lost():
		case <-time.After(ttl):
			t.Fatalf("Lost() of hold %d not closed %v after its lease was revoked", i, ttl)
		}
	}
	// A keep-alive and a renewal later, the other shards still hold.
	time.Sleep(ttl / 2)
	for id, idx := range byLease {
		for _, i := range idx {
			err := ls[i].Unlock()
			switch {
			case id == first && !errors.Is(err, locker.ErrLockLost):
				t.Errorf("Unlock() of hold %d on the revoked lease = %v; want ErrLockLost", i, err)
			case id != first && err != nil:
				t.Errorf("Unlock() of hold %d on lease %x = %v; want nil: only the revoked lease's holds are lost", i, id, err)
			}
		}
	}
}

// keepAlives counts the LeaseKeepAlive streams a client opens: one per
// KeepAliveOnce.
func keepAlives(n *atomic.Int64) grpc.DialOption {
	return grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == "/etcdserverpb.Lease/LeaseKeepAlive" {
			n.Add(1)
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
}

// Waiters ride on the shared lease that the keeper keeps alive: W waiters
// cost one keep-alive per period, not W.
func TestWaitersShareKeepAlive(t *testing.T) {
	var count atomic.Int64
	cfg := clientConfig(endpoint)
	cfg.DialOptions = append(cfg.DialOptions, keepAlives(&count))
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e := newEngine(t, c)
	holderEngine := newEngine(t, newClient(t, endpoint))
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	const w, ttl = 50, 3 * time.Second
	holder := newLocker(t, holderEngine, name, locker.WithTTL(ttl))
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, w)
	for range w {
		l := newLocker(t, e, name, locker.WithTTL(ttl))
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := l.LockCtx(ctx); err != nil {
				errs <- err
				return
			}
			errs <- l.Unlock()
		}()
	}
	waitKeys(t, c, e, name, w+1)
	before := count.Load()
	const window = 3 * ttl / 3 // three keep-alive periods
	time.Sleep(window)
	if got := count.Load() - before; got > 5 {
		t.Errorf("%d waiters sent %d keep-alives in %v (a period is %v); want at most 5, one per period", w, got, window, ttl/3)
	}
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
	}
}

// unaryCalls counts the unary requests a client sends, by gRPC method.
type unaryCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (u *unaryCalls) option() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		u.mu.Lock()
		u.n[method]++
		u.mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

func (u *unaryCalls) snapshot() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.n)
}

// Checking that held keys still exist costs one LeaseTimeToLive per lease
// per TTL, whatever the number of holds on it, and no transaction while
// every key is in place; a key deleted by hand among them is lost within
// about a TTL, and only it.
func TestHeldKeysCheckedPerLease(t *testing.T) {
	calls := &unaryCalls{n: map[string]int{}}
	cfg := clientConfig(endpoint)
	cfg.DialOptions = append(cfg.DialOptions, calls.option())
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e := newEngine(t, c, etcd.WithKeysPerLease(150))
	base := fmt.Sprintf("%s/%d/", t.Name(), time.Now().UnixNano())
	const n, ttl = 300, 3 * time.Second // two leases
	ls := make([]locker.Handle, n)
	for i := range ls {
		ls[i] = newLocker(t, e, fmt.Sprint(base, i), locker.WithTTL(ttl))
		if err := ls[i].Lock(); err != nil {
			t.Fatal(err)
		}
	}
	before := calls.snapshot()
	const window = 2 * ttl
	time.Sleep(window)
	after := calls.snapshot()
	const ttlMethod, txnMethod = "/etcdserverpb.Lease/LeaseTimeToLive", "/etcdserverpb.KV/Txn"
	// Two leases, checked once per TTL each: 4 in the window, 6 with slack.
	if got := after[ttlMethod] - before[ttlMethod]; got < 2 || got > 6 {
		t.Errorf("%d holds on 2 leases: %d LeaseTimeToLive in %v (TTL %v); want 2 to 6, one per lease per TTL", n, got, window, ttl)
	}
	if got := after[txnMethod] - before[txnMethod]; got != 0 {
		t.Errorf("%d holds, every key in place: %d transactions in %v; want 0", n, got, window)
	}

	victim := ls[n/2]
	gone := keys(t, c, e, fmt.Sprint(base, n/2))
	if len(gone) != 1 {
		t.Fatalf("hold %d has keys %v; want one", n/2, gone)
	}
	if _, err := c.Delete(context.Background(), gone[0].key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-victim.Lost():
	case <-time.After(2 * ttl):
		t.Fatalf("Lost() not closed %v after the key was deleted by hand; want within about the TTL %v", 2*ttl, ttl)
	}
	if err := victim.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() after the key was deleted = %v; want ErrLockLost", err)
	}
	// The name is free again, and the freed slot is reused without harm.
	again := newLocker(t, e, fmt.Sprint(base, n/2), locker.WithTTL(ttl))
	if ok, err := again.TryLock(); !ok || err != nil {
		t.Errorf("TryLock() of the force-unlocked name = %v, %v; want true, nil", ok, err)
	}
	ls[n/2] = again
	for i, l := range ls {
		if err := l.Unlock(); err != nil {
			t.Errorf("Unlock() of hold %d = %v; want nil: only the deleted key's hold is lost", i, err)
		}
	}
}
