package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

func TestInspectAndForceUnlock(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, endpoint)
	e := newEngine(t, c)
	// The waiter is another process: an engine, a client and a lease of
	// its own.
	other := newEngine(t, newClient(t, endpoint))
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())

	if in, err := e.Inspect(ctx, name); err != nil || in.Holder != nil || len(in.Waiters) != 0 {
		t.Fatalf("Inspect(free) = %+v, %v; want no holder, no waiters", in, err)
	}
	if _, err := e.ForceUnlock(ctx, name); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("ForceUnlock(free) = %v; want ErrNotHeld", err)
	}

	// A 3s TTL renews every second: the forced-out owner learns of it soon.
	const holderTTL, waiterTTL = 3 * time.Second, 20 * time.Second
	a := newLocker(t, e, name, locker.WithOwner("stuck-job"), locker.WithTTL(holderTTL))
	if err := a.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	b := newLocker(t, other, name, locker.WithOwner("next-job"), locker.WithTTL(waiterTTL))
	done := lockAsync(b, 20*time.Second)
	waitKeys(t, c, e, name, 2)

	in, err := e.Inspect(ctx, name)
	if err != nil {
		t.Fatalf("Inspect(held) = %v", err)
	}
	h := in.Holder
	if h == nil || h.Owner != "stuck-job" || h.Token != lease(a).Token() || h.TTL <= 0 || h.TTL > holderTTL {
		t.Fatalf("Inspect(held).Holder = %+v; want stuck-job, token %d, TTL in (0, %v]", h, lease(a).Token(), holderTTL)
	}
	if len(in.Waiters) != 1 {
		t.Fatalf("Inspect(held).Waiters = %+v; want 1 waiter", in.Waiters)
	}
	w := in.Waiters[0]
	if w.Owner != "next-job" || w.Token <= h.Token || w.TTL <= holderTTL || w.TTL > waiterTTL {
		t.Errorf("Inspect(held).Waiters[0] = %+v; want next-job, token > %d, TTL in (%v, %v]", w, h.Token, holderTTL, waiterTTL)
	}
	if in.Subscribers != 0 {
		t.Errorf("Inspect(held).Subscribers = %d; want 0 (etcd queues its waiters)", in.Subscribers)
	}

	removed, err := e.ForceUnlock(ctx, name)
	if err != nil || removed.Owner != "stuck-job" || removed.Token != h.Token {
		t.Fatalf("ForceUnlock() = %+v, %v; want the stuck-job hold with token %d", removed, err, h.Token)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter LockCtx() after ForceUnlock = %v", err)
	}
	if got := lease(b).Token(); got != w.Token {
		t.Errorf("waiter's token = %d; want %d, as Inspect showed", got, w.Token)
	}
	in, err = e.Inspect(ctx, name)
	if err != nil || in.Holder == nil || in.Holder.Owner != "next-job" || len(in.Waiters) != 0 {
		t.Errorf("Inspect(after ForceUnlock) = %+v (holder %+v), %v; want next-job holding, no waiters", in, in.Holder, err)
	}
	select {
	case <-lease(a).Lost():
	case <-time.After(2 * holderTTL):
		t.Fatalf("the forced-out owner's Lost() not closed within %v", 2*holderTTL)
	}
	if err := a.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("forced-out owner's Unlock() = %v; want ErrLockLost", err)
	}
	if err := b.Unlock(); err != nil {
		t.Errorf("new holder's Unlock() = %v", err)
	}
	if _, err := e.ForceUnlock(ctx, name); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("ForceUnlock(released) = %v; want ErrNotHeld", err)
	}
}

func TestInspectRejects(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, newClient(t, endpoint))
	if _, err := e.Inspect(ctx, ""); !errors.Is(err, locker.ErrInvalidName) {
		t.Errorf("Inspect(\"\") = %v; want ErrInvalidName", err)
	}
	if _, err := e.ForceUnlock(ctx, "a\x00b"); !errors.Is(err, locker.ErrInvalidName) {
		t.Errorf("ForceUnlock(NUL) = %v; want ErrInvalidName", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Inspect(ctx, "x"); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("Inspect() after Close = %v; want ErrClosed", err)
	}
	if _, err := e.ForceUnlock(ctx, "x"); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("ForceUnlock() after Close = %v; want ErrClosed", err)
	}
}

// An unreachable cluster fails within the request timeout, as
// ErrUnavailable.
func TestInspectUnreachable(t *testing.T) {
	s := testserver.Etcd(t)
	addr := s.Addr()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	const timeout = 300 * time.Millisecond
	e := newEngine(t, newClient(t, addr), etcd.WithRequestTimeout(timeout))
	ctx := context.Background()
	start := time.Now()
	if _, err := e.Inspect(ctx, "x"); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Inspect() = %v; want ErrUnavailable", err)
	}
	if _, err := e.ForceUnlock(ctx, "x"); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("ForceUnlock() = %v; want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*timeout+time.Second {
		t.Errorf("failing took %v; want about two request timeouts (%v)", d, 2*timeout)
	}
}
