package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// A server frozen past a hold's TTL: the holder learns of the loss through
// Lost while the server is still frozen, and the next holder, granted once
// the lease has ended on the server, has a higher token.
func TestServerPausedPastTTL(t *testing.T) {
	s := testserver.Etcd(t)
	ca := newClient(t, s.Addr())
	ea := newEngine(t, ca, etcd.WithRequestTimeout(time.Second))
	// The waiter must be queued when the server stops: its key on the
	// server is not enough, the answer to its create must have reached it
	// (beside a CPU hog, the pause once caught that answer on its way).
	created := make(chan struct{})
	var once sync.Once
	cb := interceptedClient(t, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if _, ok := putOf(req); ok && err == nil {
			once.Do(func() { close(created) })
		}
		return err
	}, s.Addr())
	eb := newEngine(t, cb, etcd.WithRequestTimeout(time.Second))
	name := t.Name()
	const ttl = 2 * time.Second // the server's minimum lease
	a := newLocker(t, ea, name, locker.WithTTL(ttl))
	b := newLocker(t, eb, name)
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	tokA := lease(a).Token()
	done := lockAsync(b, 30*time.Second)
	waitKeys(t, ca, ea, name, 2)
	select {
	case <-created:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter's create not answered 10s after its key was on the server")
	}

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease(a).Lost():
	case <-time.After(3 * ttl):
		_ = s.Resume()
		t.Fatalf("Lost() not closed %v into a pause of the server", 3*ttl)
	}
	select {
	case err := <-done:
		_ = s.Resume()
		t.Fatalf("waiter's LockCtx() returned %v while the server was paused", err)
	default:
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter's LockCtx() after the pause = %v; want nil", err)
	}
	if tokB := lease(b).Token(); tokB <= tokA {
		t.Errorf("next holder's token %d; want > %d, the lost holder's", tokB, tokA)
	}
	if err := a.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() by the lost holder = %v; want ErrLockLost", err)
	}
	if err := b.Unlock(); err != nil {
		t.Errorf("Unlock() by the next holder = %v", err)
	}
}

// A hold that the Core gives up on while its lease lives on (the server
// paused longer than the hold's TTL, shorter than the lease's) must not keep
// the lock through its key: the engine deletes the key before it renews the
// shared lease again.
func TestLostHoldLeavesNoKeyOnSharedLease(t *testing.T) {
	s := testserver.Etcd(t)
	c := newClient(t, s.Addr())
	// A request bound that a loaded machine's release still meets (300ms
	// did not, beside a CPU hog); the pause outlasts it either way.
	e := newEngine(t, c, etcd.WithRequestTimeout(time.Second))
	ew := newEngine(t, newClient(t, s.Addr()))
	name := t.Name()
	const ttl = etcd.MinTTL // its lease gets the server's minimum, 2s
	a := newLocker(t, e, name, locker.WithTTL(ttl))
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	w := newLocker(t, ew, name)
	done := lockAsync(w, 30*time.Second)
	waitKeys(t, c, e, name, 2)

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease(a).Lost():
	case <-time.After(5 * time.Second):
		_ = s.Resume()
		t.Fatal("Lost() not closed 5s into a pause of the server")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	// Another hold on the same lease keeps the lease alive from now on.
	keep := newLocker(t, e, name+"/keep", locker.WithTTL(ttl))
	if err := keep.Lock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter's LockCtx() = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("waiter still blocked 5s after the hold was lost; keys: %v", keys(t, c, e, name))
	}
	if err := w.Unlock(); err != nil {
		t.Error(err)
	}
	if err := keep.Unlock(); err != nil {
		t.Error(err)
	}
}

// A server killed while a hold and waiters exist, then restarted: etcd keeps
// keys and leases, the hold survives within its TTL and the queue moves on
// in order.
func TestServerKilledAndRestarted(t *testing.T) {
	s := testserver.Etcd(t)
	c := newClient(t, s.Addr())
	e := newEngine(t, c, etcd.WithRequestTimeout(time.Second))
	e2 := newEngine(t, newClient(t, s.Addr()), etcd.WithRequestTimeout(time.Second))
	name := t.Name()
	holder := newLocker(t, e, name, locker.WithTTL(10*time.Second))
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	w1, w2 := newLocker(t, e2, name), newLocker(t, e, name)
	d1 := lockAsync(w1, 60*time.Second)
	waitKeys(t, c, e, name, 2)
	d2 := lockAsync(w2, 60*time.Second)
	waitKeys(t, c, e, name, 3)

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	waitKeys(t, c, e, name, 3)
	// e2's client may still be waiting out its reconnection backoff: until
	// it reconnects, new acquisitions fail at once with ErrRefused.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := e2.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ping() of the second engine 10s after the restart = %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	probe := newLocker(t, e2, name)
	if ok, err := probe.TryLock(); ok || err != nil {
		t.Fatalf("TryLock() by another owner after the restart = %v, %v; want false, nil", ok, err)
	}
	select {
	case <-lease(holder).Lost():
		t.Fatal("hold lost across a restart shorter than its TTL")
	case err := <-d1:
		t.Fatalf("waiter got the lock (%v) while it was held", err)
	default:
	}
	tok := lease(holder).Token()
	if err := holder.Unlock(); err != nil {
		t.Fatalf("Unlock() after the restart = %v", err)
	}
	for i, w := range []struct {
		l    locker.Locker
		done <-chan error
	}{{w1, d1}, {w2, d2}} {
		if err := <-w.done; err != nil {
			t.Fatalf("waiter %d: LockCtx() = %v", i+1, err)
		}
		if got := lease(w.l).Token(); got <= tok {
			t.Errorf("waiter %d: token %d; want > %d", i+1, got, tok)
		}
		tok = lease(w.l).Token()
		if err := w.l.Unlock(); err != nil {
			t.Errorf("waiter %d: Unlock() = %v", i+1, err)
		}
	}
}

// Killing the leader of a 3-member cluster while locks are held and waiters
// queue: the holds survive (or are reported lost, never silently
// duplicated), and the queue moves on in order.
func TestClusterLeaderKilled(t *testing.T) {
	cl := testserver.EtcdCluster(t, 3)
	c := newClient(t, cl.Addrs()...)
	e := newEngine(t, c, etcd.WithRequestTimeout(2*time.Second))
	e2 := newEngine(t, newClient(t, cl.Addrs()...), etcd.WithRequestTimeout(2*time.Second))
	name := t.Name()
	const ttl = 6 * time.Second
	holder := newLocker(t, e, name, locker.WithTTL(ttl))
	other := newLocker(t, e2, name+"/other", locker.WithTTL(ttl))
	for _, l := range []locker.Locker{holder, other} {
		if err := l.Lock(); err != nil {
			t.Fatal(err)
		}
	}
	w1, w2 := newLocker(t, e2, name), newLocker(t, e, name)
	d1 := lockAsync(w1, 60*time.Second)
	waitKeys(t, c, e, name, 2)
	d2 := lockAsync(w2, 60*time.Second)
	waitKeys(t, c, e, name, 3)

	leader, err := cl.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.WaitLeader(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Past one TTL after the election, a hold that could not be renewed
	// would have been given up. A waiter may get the lock only if the
	// holder was told.
	lost := false
	select {
	case err := <-d1:
		if err != nil {
			t.Fatalf("waiter 1: LockCtx() = %v", err)
		}
		select {
		case <-lease(holder).Lost():
			lost = true
			t.Logf("hold reported lost during the election; the queue moved on")
		default:
			t.Fatal("waiter got the lock while the holder's Lost() was open: two holders")
		}
		d1 = nil
	case <-time.After(ttl + time.Second):
	}
	if !lost {
		select {
		case <-lease(holder).Lost():
			t.Fatalf("hold lost across the election, and the waiter did not get the lock")
		default:
		}
		if err := holder.Unlock(); err != nil {
			t.Fatalf("Unlock() after the election = %v", err)
		}
		if err := <-d1; err != nil {
			t.Fatalf("waiter 1: LockCtx() = %v", err)
		}
	}
	select {
	case err := <-d2:
		t.Fatalf("waiter 2 got the lock (%v) while waiter 1 held it", err)
	default:
	}
	if err := w1.Unlock(); err != nil {
		t.Errorf("waiter 1: Unlock() = %v", err)
	}
	if err := <-d2; err != nil {
		t.Fatalf("waiter 2: LockCtx() = %v", err)
	}
	if lease(w2).Token() <= lease(w1).Token() {
		t.Errorf("tokens %d then %d; want increasing", lease(w1).Token(), lease(w2).Token())
	}
	if err := w2.Unlock(); err != nil {
		t.Errorf("waiter 2: Unlock() = %v", err)
	}
	select {
	case <-lease(other).Lost():
		t.Logf("the other hold was reported lost")
	default:
		if err := other.Unlock(); err != nil {
			t.Errorf("Unlock() of the other hold = %v", err)
		}
	}
}

// pauseServer freezes s and waits until it no longer answers: SIGSTOP
// takes effect asynchronously.
func pauseServer(s *testserver.Server) error {
	if err := s.Pause(); err != nil {
		return err
	}
	client := &http.Client{Timeout: 100 * time.Millisecond}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := client.Get("http://" + s.Addr() + "/health")
		if err != nil {
			client.CloseIdleConnections()
			return nil // no answer: frozen
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still answers 5s after SIGSTOP", s)
		}
	}
}

// The fault suite: a server of its own per case, frozen or killed.
func TestFaults(t *testing.T) {
	lockertest.RunFaults(t, func(t *testing.T) lockertest.FaultHarness {
		s := testserver.Etcd(t)
		c := newClient(t, s.Addr())
		const timeout = time.Second
		e, err := etcd.New(c, etcd.WithRequestTimeout(timeout))
		if err != nil {
			t.Fatalf("New() = %v", err)
		}
		return lockertest.FaultHarness{
			Harness: lockertest.Harness{
				Engine: e,
				Residue: func(ctx context.Context, name string) (int, error) {
					ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					defer cancel()
					resp, err := c.Get(ctx, e.LockPrefix(name), clientv3.WithPrefix(), clientv3.WithCountOnly())
					if err != nil {
						return 0, err
					}
					return max(int(resp.Count)-1, 0), nil
				},
			},
			Pause:          func() error { return pauseServer(s) },
			Resume:         s.Resume,
			Kill:           s.Kill,
			RequestTimeout: timeout,
		}
	})
}

// TryLock on a frozen server, at the engine's defaults, returns
// ErrUnavailable within driver.DefaultRequestTimeout (it took the old
// default request timeout, 5s).
func TestTryLockFrozenWithinRequestTimeout(t *testing.T) {
	s := testserver.Etcd(t)
	e := newEngine(t, newClient(t, s.Addr()))
	lockertest.TryLockFrozen(t, e, s.Pause, s.Resume, driver.DefaultRequestTimeout)
}
