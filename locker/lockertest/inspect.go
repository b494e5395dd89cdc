package lockertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// testInspect has an operator, a stuck holder and a waiter, each on an
// engine of its own as if in three processes.
func testInspect(t *testing.T, f Factory) {
	op, ok := open(t, f).Engine.(locker.Inspector)
	if !ok {
		t.Skip("the engine is no locker.Inspector")
	}
	stuckEngine, nextEngine := open(t, f).Engine, open(t, f).Engine
	ctx := context.Background()
	name := lockName(t, "i")

	if in, err := op.Inspect(ctx, name); err != nil || in.Holder != nil || len(in.Waiters) != 0 || in.Subscribers != 0 {
		t.Fatalf("Inspect(free) = %+v, %v; want nothing", in, err)
	}
	if _, err := op.ForceUnlock(ctx, name); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("ForceUnlock(free) = %v; want ErrNotHeld", err)
	}
	for _, bad := range []string{"", "a\x00b"} {
		if _, err := op.Inspect(ctx, bad); !errors.Is(err, locker.ErrInvalidName) {
			t.Errorf("Inspect(%q) = %v; want ErrInvalidName", bad, err)
		}
		if _, err := op.ForceUnlock(ctx, bad); !errors.Is(err, locker.ErrInvalidName) {
			t.Errorf("ForceUnlock(%q) = %v; want ErrInvalidName", bad, err)
		}
	}

	stuck := newLocker(t, stuckEngine, name, locker.WithOwner("stuck-job"), locker.WithTTL(900*time.Millisecond))
	next := newLocker(t, nextEngine, name, locker.WithOwner("next-job"))
	mustLock(t, stuck)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- next.LockCtx(ctx)
	}()
	var in locker.Inspection
	eventually(t, 10*time.Second, "the waiter visible to Inspect", func() bool {
		var err error
		in, err = op.Inspect(ctx, name)
		return err == nil && len(in.Waiters)+in.Subscribers == 1
	})
	h := in.Holder
	if h == nil || h.Owner != "stuck-job" || h.Token != stuck.Token() || h.TTL < 0 {
		t.Fatalf("Inspect(held).Holder = %+v; want stuck-job with token %d", h, stuck.Token())
	}
	if len(in.Waiters) == 1 && (in.Waiters[0].Owner != "next-job" || in.Waiters[0].Token <= h.Token) {
		t.Errorf("Inspect(held).Waiters = %+v; want next-job with a token above %d", in.Waiters, h.Token)
	}

	removed, err := op.ForceUnlock(ctx, name)
	if err != nil || removed.Owner != "stuck-job" || removed.Token != h.Token {
		t.Fatalf("ForceUnlock() = %+v, %v; want the stuck-job hold with token %d", removed, err, h.Token)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiter's LockCtx() after ForceUnlock = %v", err)
	}
	if in, err := op.Inspect(ctx, name); err != nil || in.Holder == nil || in.Holder.Owner != "next-job" {
		t.Errorf("Inspect(after ForceUnlock) = %+v, %v; want next-job holding", in, err)
	}
	select {
	case <-stuck.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the forced-out owner's Lost() not closed within 10s")
	}
	if err := stuck.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("the forced-out owner's Unlock() = %v; want ErrLockLost", err)
	}
	mustUnlock(t, next)

	closed := f(t).Engine
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := closed.(locker.Inspector).Inspect(ctx, name); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("Inspect() after Close = %v; want ErrClosed", err)
	}
	if _, err := closed.(locker.Inspector).ForceUnlock(ctx, name); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("ForceUnlock() after Close = %v; want ErrClosed", err)
	}
}
