package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/internal/logtest"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// The server shared by the package's tests and examples. Fault tests start
// servers of their own.
var (
	shared   *testserver.Server
	endpoint string // host:port of shared
)

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		var err error
		if shared, err = testserver.NewEtcd(); err != nil {
			return nil, err
		}
		endpoint = shared.Addr()
		return func() { _ = shared.Stop() }, nil
	})
}

// clientConfig reconnects quickly after a server restart (gRPC's default
// backoff grows to two minutes) and keeps the client quiet.
func clientConfig(endpoints ...string) clientv3.Config {
	return clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	}
}

func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	return newClientOf(t, clientConfig(endpoints...))
}

// interceptedClient is newClient with every unary call through intercept,
// for tests that change what the server sees or answers.
func interceptedClient(t testing.TB, intercept grpc.UnaryClientInterceptor, endpoints ...string) *clientv3.Client {
	t.Helper()
	cfg := clientConfig(endpoints...)
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithUnaryInterceptor(intercept))
	return newClientOf(t, cfg)
}

// newClientOf dials cfg and closes the client when the test ends, after
// the engines over it (cleanups run last registered first).
func newClientOf(t testing.TB, cfg clientv3.Config) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("clientv3.New(%v) = %v", cfg.Endpoints, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// putOf returns the create a request is: a transaction whose first
// operation on success is a put (every acquisition's).
func putOf(req any) (*pb.PutRequest, bool) {
	txn, ok := req.(*pb.TxnRequest)
	if !ok || len(txn.Success) == 0 || txn.Success[0].GetRequestPut() == nil {
		return nil, false
	}
	return txn.Success[0].GetRequestPut(), true
}

func newEngine(t testing.TB, c *clientv3.Client, opts ...etcd.Option) *etcd.Engine {
	t.Helper()
	e, err := etcd.New(c, opts...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func newLocker(t testing.TB, e locker.Engine, name string, opts ...locker.Option) locker.Handle {
	t.Helper()
	l, err := e.NewLocker(name, opts...)
	if err != nil {
		t.Fatalf("NewLocker(%q) = %v", name, err)
	}
	return l
}

func lease(l locker.Locker) locker.Lease { return l.(locker.Lease) }

// keys returns the keys under a lock's prefix, oldest first.
func keys(t testing.TB, c *clientv3.Client, e *etcd.Engine, name string) []keyInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, e.LockPrefix(name), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("Get(%q) = %v", e.LockPrefix(name), err)
	}
	var out []keyInfo
	for _, kv := range resp.Kvs {
		out = append(out, keyInfo{key: string(kv.Key), rev: kv.CreateRevision, lease: clientv3.LeaseID(kv.Lease)})
	}
	return out
}

type keyInfo struct {
	key   string
	rev   int64
	lease clientv3.LeaseID
}

// waitKeys polls until the lock has n keys: a holder and n-1 waiters.
func waitKeys(t testing.TB, c *clientv3.Client, e *etcd.Engine, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := len(keys(t, c, e, name))
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock %q has %d keys after 10s; want %d", name, got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func lockAsync(l locker.Locker, d time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		done <- l.LockCtx(ctx)
	}()
	return done
}

func harness(t *testing.T) lockertest.Harness { return harnessFor(t, newClient(t, endpoint)) }

func harnessFor(t *testing.T, c *clientv3.Client) lockertest.Harness {
	causes := &lockertest.Causes{}
	e, err := etcd.New(c, etcd.WithPrefix("conformance"), etcd.WithObserver(causes))
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return lockertest.Harness{
		Engine: e,
		Causes: causes,
		// A hold's key is the one created at its token.
		Delete: func(ctx context.Context, kind inspect.Kind, name string, token uint64) error {
			rng := e.LockPrefix(name)
			if kind != inspect.KindMutex {
				rng = e.FamilyRange(kind, name)
			}
			resp, err := c.Get(ctx, rng, clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				return err
			}
			for _, kv := range resp.Kvs {
				if uint64(kv.CreateRevision) == token {
					_, err = c.Delete(ctx, string(kv.Key))
					return err
				}
			}
			return fmt.Errorf("no key under %q created at %d", rng, token)
		},
		NoticeDeleted: 2 * time.Second,
		// The holder is the key with the lowest create revision.
		Expire: func(ctx context.Context, name string) error {
			resp, err := c.Get(ctx, e.LockPrefix(name), clientv3.WithFirstCreate()...)
			if err != nil {
				return err
			}
			if len(resp.Kvs) == 0 {
				return fmt.Errorf("no key under %q", e.LockPrefix(name))
			}
			_, err = c.Delete(ctx, string(resp.Kvs[0].Key))
			return err
		},
		// Every key but the holder's is a waiter's.
		Residue: func(ctx context.Context, name string) (int, error) {
			resp, err := c.Get(ctx, e.LockPrefix(name), clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			return max(int(resp.Count)-1, 0), nil
		},
	}
}

func TestConformance(t *testing.T) {
	lockertest.Run(t, harness)
}

func TestNewRejectsBadInput(t *testing.T) {
	c := newClient(t, endpoint)
	for _, tc := range []struct {
		desc string
		c    *clientv3.Client
		opt  etcd.Option
		want string
	}{
		{"nil client", nil, etcd.WithName("x"), "client is nil"},
		{"empty name", c, etcd.WithName(""), "WithName"},
		{"empty prefix", c, etcd.WithPrefix(""), "WithPrefix"},
		{"prefix with a trailing slash", c, etcd.WithPrefix("app/"), "WithPrefix"},
		{"zero request timeout", c, etcd.WithRequestTimeout(0), "WithRequestTimeout"},
		{"nil logger", c, etcd.WithLogger(nil), "WithLogger"},
		{"zero keys per lease", c, etcd.WithKeysPerLease(0), "WithKeysPerLease"},
		{"nil option", c, nil, "nil Option"},
	} {
		e, err := etcd.New(tc.c, tc.opt)
		if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s) = %v; want ErrInvalidArgument naming %s", tc.desc, err, tc.want)
		}
		if e != nil {
			_ = e.Close()
		}
	}
}

// Escaped names never share a key range: the range of "a" ends with '/', so
// it holds neither "a/b" nor "ab", and "a/b" is not "a%2Fb".
func TestNameRanges(t *testing.T) {
	c := newClient(t, endpoint)
	e := newEngine(t, c, etcd.WithPrefix("ranges"))
	base := fmt.Sprintf("%s-%d-", t.Name(), time.Now().UnixNano())
	names := []string{"a", "a/b", "a%2Fb", "ab", "a/", "a%", "%", "/"}
	held := make([]locker.Locker, len(names))
	for i, n := range names {
		held[i] = newLocker(t, e, base+n)
		if ok, err := held[i].TryLock(); !ok || err != nil {
			t.Fatalf("TryLock(%q) = %v, %v; want true, nil", base+n, ok, err)
		}
	}
	for i, n := range names {
		if p := e.LockPrefix(base + n); strings.Contains(strings.TrimSuffix(strings.TrimPrefix(p, "ranges/"), "/"), "/") {
			t.Errorf("LockPrefix(%q) = %q; want one segment between the prefix and the final '/'", base+n, p)
		}
		if got := len(keys(t, c, e, base+n)); got != 1 {
			t.Errorf("lock %q sees %d keys in its range; want 1 (its own)", base+n, got)
		}
		if err := held[i].Unlock(); err != nil {
			t.Errorf("Unlock(%q) = %v", base+n, err)
		}
	}
}

// Holds with the same TTL share one lease, holds with another TTL another
// one, and fixed leases get one each.
func TestHoldsShareLeasePerTTL(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, endpoint)
	before, err := c.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, c)
	var held []locker.Locker
	lockN := func(n int, opt locker.Option) []clientv3.LeaseID {
		var ids []clientv3.LeaseID
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("%s/%d/%d", t.Name(), len(held), time.Now().UnixNano())
			l := newLocker(t, e, name, opt)
			if err := l.Lock(); err != nil {
				t.Fatalf("Lock(%q) = %v", name, err)
			}
			held = append(held, l)
			ks := keys(t, c, e, name)
			if len(ks) != 1 {
				t.Fatalf("lock %q has %d keys; want 1", name, len(ks))
			}
			ids = append(ids, ks[0].lease)
		}
		return ids
	}
	five := lockN(6, locker.WithTTL(5*time.Second))
	fiveish := lockN(2, locker.WithTTL(4500*time.Millisecond)) // rounds up to 5s
	ten := lockN(3, locker.WithTTL(10*time.Second))
	fixed := lockN(2, locker.WithLease(3*time.Second))

	for _, ids := range [][]clientv3.LeaseID{append(five, fiveish...), ten} {
		for _, id := range ids {
			if id != ids[0] {
				t.Errorf("holds with the same TTL are on leases %x and %x; want one lease", ids[0], id)
			}
		}
	}
	if five[0] == ten[0] {
		t.Errorf("holds with TTL 5s and 10s share lease %x; want one lease per TTL", five[0])
	}
	if fixed[0] == fixed[1] || fixed[0] == five[0] {
		t.Errorf("fixed leases %x, %x (5s lease %x); want one lease per fixed hold", fixed[0], fixed[1], five[0])
	}
	for _, tc := range []struct {
		id   clientv3.LeaseID
		want int64
	}{{five[0], 5}, {ten[0], 10}} {
		ttl, err := c.TimeToLive(ctx, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.GrantedTTL != tc.want {
			t.Errorf("lease %x granted TTL = %ds; want %ds", tc.id, ttl.GrantedTTL, tc.want)
		}
	}

	after, err := c.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := make(map[clientv3.LeaseID]bool)
	for _, l := range before.Leases {
		old[l.ID] = true
	}
	var added []clientv3.LeaseID
	for _, l := range after.Leases {
		if !old[l.ID] {
			added = append(added, l.ID)
		}
	}
	// 5s, 10s, and one per fixed hold; the engine took a waiter's lease for
	// the fixed holds too (3s), which they left when granted.
	if len(added) != 5 {
		t.Errorf("%d new leases for %d holds (%v); want 5: 5s, 10s, 3s for queueing, and 2 fixed", len(added), len(held), added)
	}
	for _, l := range held {
		if err := l.Unlock(); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
	}
}

// Waiters get the lock in the order they queued, one at a time. In a long
// queue, each waiter's key is marked held by the time its Lock returns, so
// that the next one holds without reading the range.
func TestFIFO(t *testing.T) {
	for _, waiters := range []int{5, etcd.MarkDepth + 16} {
		t.Run(fmt.Sprint(waiters), func(t *testing.T) { testFIFO(t, waiters) })
	}
}

func testFIFO(t *testing.T, waiters int) {
	c := newClient(t, endpoint)
	e := newEngine(t, c)
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	holder := newLocker(t, e, name)
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		order    []int
		unmarked []int // waiters past the mark depth whose key was not marked while held
		holding  atomic.Bool
		wg       sync.WaitGroup
	)
	errs := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		l := newLocker(t, e, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := l.LockCtx(ctx); err != nil {
				errs <- fmt.Errorf("waiter %d: LockCtx() = %w", i, err)
				return
			}
			if !holding.CompareAndSwap(false, true) {
				errs <- fmt.Errorf("waiter %d holds while another does", i)
			}
			resp, err := c.Get(ctx, e.LockPrefix(name), clientv3.WithFirstCreate()...)
			if err != nil || len(resp.Kvs) == 0 {
				errs <- fmt.Errorf("waiter %d: reading its key: %v, %d keys", i, err, len(resp.Kvs))
			}
			mu.Lock()
			order = append(order, i)
			if i >= etcd.MarkDepth+2 && err == nil && len(resp.Kvs) > 0 && resp.Kvs[0].ModRevision == resp.Kvs[0].CreateRevision {
				unmarked = append(unmarked, i)
			}
			mu.Unlock()
			holding.Store(false)
			if err := l.Unlock(); err != nil {
				errs <- fmt.Errorf("waiter %d: Unlock() = %w", i, err)
			}
		}()
		waitKeys(t, c, e, name, i+2) // queued before the next one starts
	}
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, got := range order {
		if got != i {
			t.Fatalf("waiters got the lock in order %v; want 0 to %d in turn", order, waiters-1)
		}
	}
	if len(unmarked) > 0 {
		t.Errorf("waiters %v held unmarked keys; want every key past the mark depth %d marked", unmarked, etcd.MarkDepth)
	}
}

// A release by an owner whose key was deleted and whose name was granted
// again must not touch the new hold.
func TestStaleOwnerCannotTouchNewHold(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, endpoint)
	e := newEngine(t, c)
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	old := newLocker(t, e, name, locker.WithTTL(30*time.Second))
	next := newLocker(t, e, name)
	if err := old.Lock(); err != nil {
		t.Fatal(err)
	}
	ks := keys(t, c, e, name)
	if _, err := c.Delete(ctx, ks[0].key); err != nil {
		t.Fatal(err)
	}
	if ok, err := next.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock() after the old key was deleted = %v, %v; want true, nil", ok, err)
	}
	if err := old.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("stale Unlock() = %v; want ErrLockLost", err)
	}
	if got := keys(t, c, e, name); len(got) != 1 || uint64(got[0].rev) != lease(next).Token() {
		t.Errorf("keys after the stale Unlock = %v; want the new holder's, token %d", got, lease(next).Token())
	}
	if err := next.Unlock(); err != nil {
		t.Errorf("Unlock() by the new holder = %v", err)
	}
}

// A held key deleted by hand is noticed by the engine's deletion watch
// within about 100ms of the grant (the watch starts after 10 to 20 ms,
// from the key's creation, and etcd replays for it every 100 ms), with
// the default TTL (the keeper checks a lease's keys only once per TTL),
// for a renewed hold and a fixed lease's alike, and the hold ends as
// gone, not as a lease lost.
func TestDeletedKeyReportsGone(t *testing.T) {
	c := newClient(t, endpoint)
	causes := &lockertest.Causes{}
	e := newEngine(t, c, etcd.WithObserver(causes))
	for _, tc := range []struct {
		desc string
		opts []locker.Option
	}{
		{"renewed", nil},
		{"fixed lease", []locker.Option{locker.WithLease(time.Hour)}},
	} {
		name := fmt.Sprintf("%s/%d/%s", t.Name(), time.Now().UnixNano(), tc.desc)
		l := newLocker(t, e, name, tc.opts...)
		if err := l.Lock(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := c.Delete(context.Background(), keys(t, c, e, name)[0].key); err != nil {
			t.Fatal(err)
		}
		select {
		case <-lease(l).Lost():
			t.Logf("%s: Lost() closed %v after the deletion", tc.desc, time.Since(start))
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: Lost() not closed 2s after the held key was deleted", tc.desc)
		}
		if got, _ := causes.Of(lease(l).Token()); got != observe.LostGone {
			t.Errorf("%s: the hold ended with cause %q; want %q", tc.desc, got, observe.LostGone)
		}
		if err := l.Unlock(); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("%s: Unlock() = %v; want ErrLockLost", tc.desc, err)
		}
		// The slot is free again: the name is granted at once.
		if ok, err := l.TryLock(); !ok || err != nil {
			t.Fatalf("%s: TryLock() after the loss = %v, %v; want true, nil", tc.desc, ok, err)
		}
		if err := l.Unlock(); err != nil {
			t.Errorf("%s: Unlock() = %v", tc.desc, err)
		}
	}
}

// A held key deleted while the deletion watch is down is found when it
// resumes: by the resumed watch, or, when etcd compacted the revisions it
// missed, by checking the held keys; a key that is still there is kept.
func TestDeletedWhileWatchDownReportsGone(t *testing.T) {
	s := testserver.Etcd(t) // compacted: a server of its own
	ctx := context.Background()
	c := newClient(t, s.Addr())
	causes := &lockertest.Causes{}
	e := newEngine(t, c, etcd.WithObserver(causes))
	for _, compact := range []bool{false, true} {
		base := fmt.Sprintf("%s/%d/compact=%v/", t.Name(), time.Now().UnixNano(), compact)
		deleted, kept := newLocker(t, e, base+"deleted"), newLocker(t, e, base+"kept")
		for _, l := range []locker.Locker{deleted, kept} {
			if err := l.Lock(); err != nil {
				t.Fatal(err)
			}
		}
		awaitGoneWatch(t, e, true, "holds that live")
		resume := e.InterruptGoneWatch()
		if _, err := c.Delete(ctx, keys(t, c, e, base+"deleted")[0].key); err != nil {
			t.Fatal(err)
		}
		if compact {
			resp, err := c.Put(ctx, base+"later", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Compact(ctx, resp.Header.Revision); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		resume()
		select {
		case <-lease(deleted).Lost():
			t.Logf("compact=%v: Lost() closed %v after the watch resumed", compact, time.Since(start))
		case <-time.After(2 * time.Second):
			t.Fatalf("compact=%v: Lost() not closed 2s after the watch resumed", compact)
		}
		if got, _ := causes.Of(lease(deleted).Token()); got != observe.LostGone {
			t.Errorf("compact=%v: the hold ended with cause %q; want %q", compact, got, observe.LostGone)
		}
		if err := deleted.Unlock(); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("compact=%v: Unlock() of the deleted hold = %v; want ErrLockLost", compact, err)
		}
		if err := kept.Unlock(); err != nil {
			t.Errorf("compact=%v: Unlock() of the kept hold = %v; want nil", compact, err)
		}
	}
}

// The deletion watch runs only while a hold has lived a period
// (SetGoneAfter, long here so that a loaded machine keeps short holds
// short): holds released sooner start none (each would cost an event per
// deletion in the namespace); a longer one starts it, it stops once
// nothing is held, and a key deleted by hand before the watch started
// is still found.
func TestDeletionWatchFollowsHolds(t *testing.T) {
	const period = 300 * time.Millisecond
	c := newClient(t, endpoint)
	e := newEngine(t, c)
	e.SetGoneAfter(period)
	base := fmt.Sprintf("%s/%d/", t.Name(), time.Now().UnixNano())
	short := newLocker(t, e, base+"short")
	for range 30 {
		if err := lockUnlock(short); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing held: a watch would start within two periods, if ever.
	time.Sleep(3 * period)
	if opened, _ := e.GoneWatch(); opened != 0 {
		t.Fatalf("%d deletion watches started by holds of less than %v; want 0", opened, period)
	}

	long := newLocker(t, e, base+"long")
	if err := long.Lock(); err != nil {
		t.Fatal(err)
	}
	awaitGoneWatch(t, e, true, "a hold that lives")
	if err := long.Unlock(); err != nil {
		t.Fatal(err)
	}
	awaitGoneWatch(t, e, false, "nothing held")

	if err := long.Lock(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(context.Background(), keys(t, c, e, base+"long")[0].key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease(long).Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() not closed 5s after the key of a hold younger than the watch was deleted")
	}
	if opened, _ := e.GoneWatch(); opened != 2 {
		t.Errorf("%d deletion watches started; want 2 (one per hold that lived)", opened)
	}
}

func lockUnlock(l locker.Locker) error {
	if err := l.Lock(); err != nil {
		return err
	}
	return l.Unlock()
}

// awaitGoneWatch waits until the deletion watch runs (or not).
func awaitGoneWatch(t *testing.T, e *etcd.Engine, want bool, why string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, watching := e.GoneWatch(); watching == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: deletion watch running = %v 5s on; want %v", why, !want, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Revoking a lease loses every hold on it; new acquisitions get a new lease.
func TestLeaseRevokedLosesItsHolds(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, endpoint)
	e := newEngine(t, c)
	other := newEngine(t, newClient(t, endpoint))
	base := fmt.Sprintf("%s/%d/", t.Name(), time.Now().UnixNano())
	const ttl = 3 * time.Second
	a := newLocker(t, e, base+"a", locker.WithTTL(ttl))
	b := newLocker(t, e, base+"b", locker.WithTTL(ttl))
	for _, l := range []locker.Handle{a, b} {
		if err := l.Lock(); err != nil {
			t.Fatal(err)
		}
	}
	id := keys(t, c, e, base+"a")[0].lease
	tokA := lease(a).Token()
	waiter := newLocker(t, other, base+"a")
	done := lockAsync(waiter, 20*time.Second)
	waitKeys(t, c, e, base+"a", 2)

	if _, err := c.Revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, l := range []locker.Handle{a, b} {
		select {
		case <-l.Lost():
		case <-time.After(ttl):
			t.Fatalf("Lost() of %q not closed %v after its lease was revoked", l.Name(), ttl)
		}
		if err := l.Unlock(); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("Unlock() after the lease was revoked = %v; want ErrLockLost", err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter LockCtx() = %v", err)
	}
	if got := lease(waiter).Token(); got <= tokA {
		t.Errorf("waiter's token %d; want > %d, the lost holder's", got, tokA)
	}
	if err := waiter.Unlock(); err != nil {
		t.Error(err)
	}
	again := newLocker(t, e, base+"c", locker.WithTTL(ttl))
	if err := again.Lock(); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, c, e, base+"c")[0].lease; got == id {
		t.Errorf("new hold on the revoked lease %x; want a new lease", id)
	}
	if err := again.Unlock(); err != nil {
		t.Error(err)
	}
}

func TestUnreachable(t *testing.T) {
	s := testserver.Etcd(t)
	addr := s.Addr()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, addr) // clientv3.New does not dial
	e := newEngine(t, c, etcd.WithRequestTimeout(500*time.Millisecond))
	l := newLocker(t, e, "x")
	start := time.Now()
	if err := l.Lock(); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Lock() = %v; want ErrUnavailable", err)
	}
	if ok, err := l.TryLock(); ok || !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("TryLock() = %v, %v; want false, ErrUnavailable", ok, err)
	}
	if err := e.Ping(context.Background()); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Ping() = %v; want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("failing took %v; want about three request timeouts (1.5s)", d)
	}
	// Close does not hang either.
	start = time.Now()
	if err := e.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if d := time.Since(start); d > driver.DefaultReleaseTimeout+time.Second {
		t.Errorf("Close() took %v", d)
	}
}

func TestPing(t *testing.T) {
	e := newEngine(t, newClient(t, endpoint))
	if err := e.Ping(context.Background()); err != nil {
		t.Errorf("Ping() = %v; want nil", err)
	}
}

// Renewal keeps a hold past its lease's TTL (here the server's minimum,
// 2s), on the one lease, and Lost stays open.
func TestRenewalKeepsHold(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, endpoint)
	e := newEngine(t, c)
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	a := newLocker(t, e, name, locker.WithTTL(time.Second))
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	id := keys(t, c, e, name)[0].lease
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		select {
		case <-lease(a).Lost():
			t.Fatal("Lost() closed while the engine renews the hold")
		case <-time.After(250 * time.Millisecond):
		}
		ttl, err := c.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL < 1 {
			t.Fatalf("lease %x has %ds left; want it renewed", id, ttl.TTL)
		}
	}
	if ok, err := newLocker(t, e, name).TryLock(); ok || err != nil {
		t.Fatalf("TryLock() by another owner = %v, %v; want false, nil", ok, err)
	}
	if err := a.Unlock(); err != nil {
		t.Fatalf("Unlock() after %v of renewals = %v", 3*time.Second, err)
	}
}

// Close ends the waits of its engine with ErrClosed, and their keys go.
func TestCloseEndsWaits(t *testing.T) {
	c := newClient(t, endpoint)
	holderEngine := newEngine(t, c)
	e := newEngine(t, c)
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	holder := newLocker(t, holderEngine, name)
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	done := lockAsync(newLocker(t, e, name), 20*time.Second)
	waitKeys(t, c, e, name, 2)
	if err := e.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := <-done; !errors.Is(err, locker.ErrClosed) {
		t.Errorf("waiting LockCtx() after Close = %v; want ErrClosed", err)
	}
	waitKeys(t, c, e, name, 1)
	if err := holder.Unlock(); err != nil {
		t.Error(err)
	}
}

// Key names are reused once deleted (etcd's key index keeps every name until
// a compaction), and never shared by two live keys.
func TestKeyNamesReused(t *testing.T) {
	c := newClient(t, endpoint)
	e := newEngine(t, c)
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	a, b := newLocker(t, e, name), newLocker(t, e, name)
	seen := make(map[string]bool)
	for i := 0; i < 10; i++ {
		if err := a.Lock(); err != nil {
			t.Fatal(err)
		}
		seen[keys(t, c, e, name)[0].key] = true
		if err := a.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 1 {
		t.Errorf("10 holds in turn used %d key names; want 1", len(seen))
	}
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	done := lockAsync(b, 10*time.Second)
	waitKeys(t, c, e, name, 2)
	if ks := keys(t, c, e, name); ks[0].key == ks[1].key || ks[0].lease != ks[1].lease {
		t.Errorf("holder and waiter of one engine have keys %q and %q on leases %x and %x; want two keys on one lease", ks[0].key, ks[1].key, ks[0].lease, ks[1].lease)
	}
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A lease that ends with no hold on it (an idle engine's, revoked or
// expired) costs nothing: it is logged at DEBUG, not as a WARN that would
// greet every switch to an engine that had been idle.
func TestIdleLeaseLostIsDebug(t *testing.T) {
	c := newClient(t, endpoint)
	logs := &logtest.Buffer{}
	e := newEngine(t, c, etcd.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	l := newLocker(t, e, name, locker.WithTTL(3*time.Second))
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	id := keys(t, c, e, name)[0].lease
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if err := l.Lock(); err != nil { // finds the lease gone, takes another
		t.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
		t.Error(err)
	}
	out := logs.String()
	if !strings.Contains(out, "level=DEBUG msg=\"etcd: lease lost\"") || !strings.Contains(out, "holds=0") {
		t.Errorf("logs:\n%s\nwant a DEBUG \"etcd: lease lost\" with holds=0", out)
	}
	if strings.Contains(out, "level=WARN") {
		t.Errorf("logs:\n%s\nwant no WARN for a lease with no hold", out)
	}
}
