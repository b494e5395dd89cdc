package zk_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker"
)

func TestInspectAndForceUnlock(t *testing.T) {
	ctx := context.Background()
	// The operator, the stuck holder and the waiter are three processes:
	// an engine and a session each.
	op := newEngine(t, []string{zkAddr})
	defer op.Close()
	stuck := newEngine(t, []string{zkAddr})
	defer stuck.Close()
	next := newEngine(t, []string{zkAddr})
	defer next.Close()
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())

	if in, err := op.Inspect(ctx, name); err != nil || in.Holder != nil || len(in.Waiters) != 0 {
		t.Fatalf("Inspect(free) = %+v, %v; want no holder, no waiters", in, err)
	}
	if _, err := op.ForceUnlock(ctx, name); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("ForceUnlock(free) = %v; want ErrNotHeld", err)
	}

	// A 3s TTL: the holder watches its node from a second on, and learns
	// of a deletion before that as it sets the watch.
	const ttl = 3 * time.Second
	a := must(stuck.NewLocker(name, locker.WithOwner("stuck-job"), locker.WithTTL(ttl)))
	if err := a.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	b := must(next.NewLocker(name, locker.WithOwner("next-job")))
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- b.LockCtx(ctx)
	}()
	var in locker.Inspection
	waitFor(t, 10*time.Second, "the waiter queued", func() bool {
		var err error
		in, err = op.Inspect(ctx, name)
		return err == nil && len(in.Waiters) == 1
	})

	h := in.Holder
	if h == nil || h.Owner != "stuck-job" || h.Token != lease(a).Token() || h.TTL != 0 {
		t.Fatalf("Inspect(held).Holder = %+v; want stuck-job, token %d, TTL 0", h, lease(a).Token())
	}
	w := in.Waiters[0]
	if w.Owner != "next-job" || w.Token <= h.Token || w.TTL != 0 {
		t.Errorf("Inspect(held).Waiters[0] = %+v; want next-job, token > %d, TTL 0", w, h.Token)
	}
	if in.Subscribers != 0 {
		t.Errorf("Inspect(held).Subscribers = %d; want 0 (ZooKeeper queues its waiters)", in.Subscribers)
	}

	removed, err := op.ForceUnlock(ctx, name)
	if err != nil || removed.Owner != "stuck-job" || removed.Token != h.Token {
		t.Fatalf("ForceUnlock() = %+v, %v; want the stuck-job hold with token %d", removed, err, h.Token)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter LockCtx() after ForceUnlock = %v", err)
	}
	if got := lease(b).Token(); got != w.Token {
		t.Errorf("waiter's token = %d; want %d, as Inspect showed", got, w.Token)
	}
	in, err = op.Inspect(ctx, name)
	if err != nil || in.Holder == nil || in.Holder.Owner != "next-job" || len(in.Waiters) != 0 {
		t.Errorf("Inspect(after ForceUnlock) = %+v (holder %+v), %v; want next-job holding, no waiters", in, in.Holder, err)
	}
	select {
	case <-lease(a).Lost():
	case <-time.After(ttl):
		t.Fatalf("the forced-out owner's Lost() not closed within %v", ttl)
	}
	if err := a.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("forced-out owner's Unlock() = %v; want ErrLockLost", err)
	}
	if err := b.Unlock(); err != nil {
		t.Errorf("new holder's Unlock() = %v", err)
	}
	if _, err := op.ForceUnlock(ctx, name); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("ForceUnlock(released) = %v; want ErrNotHeld", err)
	}
}

func TestInspectRejects(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, []string{zkAddr})
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

// An ensemble that stops answering fails the calls within the connect
// timeout, as ErrUnavailable.
func TestInspectUnreachable(t *testing.T) {
	p := newProxy(t, zkAddr)
	const timeout = 500 * time.Millisecond
	e := newEngine(t, []string{p.l.Addr().String()}, zk.WithConnectTimeout(timeout))
	defer e.Close()
	p.silent.Store(true)
	p.drop()
	ctx := context.Background()
	start := time.Now()
	if _, err := e.Inspect(ctx, "x"); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Inspect() = %v; want ErrUnavailable", err)
	}
	if _, err := e.ForceUnlock(ctx, "x"); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("ForceUnlock() = %v; want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*timeout+time.Second {
		t.Errorf("failing took %v; want about two connect timeouts (%v)", d, 2*timeout)
	}
}
