package lockertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// testInspect has an operator, a stuck holder and a waiter, each on an
// engine of its own as if in three processes.
func testInspect(t *testing.T, f Factory) {
	op, ok := open(t, f).Engine.(inspect.Inspector)
	if !ok {
		t.Skip("the engine is no inspect.Inspector")
	}
	stuckEngine, nextEngine := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "i")
	inspectFree(t, op, name)
	forceOut(t, op, name, stuckEngine, nextEngine)
	inspectClosed(t, f(t).Engine, name)
}

// inspectFree checks Inspect and ForceUnlock on a free name and on
// invalid ones.
func inspectFree(t *testing.T, op inspect.Inspector, name string) {
	t.Helper()
	ctx := context.Background()
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
}

// forceOut has the operator see a stuck holder and its waiter, then force
// the holder out: the waiter gets the name, the holder learns it lost it.
func forceOut(t *testing.T, op inspect.Inspector, name string, stuckEngine, nextEngine locker.Engine) {
	t.Helper()
	ctx := context.Background()
	stuck := newLocker(t, stuckEngine, name, locker.WithOwner("stuck-job"), locker.WithTTL(shortTTL(forcedTTL, stuckEngine)))
	next := newLocker(t, nextEngine, name, locker.WithOwner("next-job"))
	mustLock(t, stuck)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- next.LockCtx(ctx)
	}()
	h := inspectHeld(t, op, name, stuck.Token())

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
}

// inspectHeld waits until Inspect sees the waiter on name, checks that it
// names stuck-job, holding with token, and next-job waiting, and returns
// the holder it saw.
func inspectHeld(t *testing.T, op inspect.Inspector, name string, token uint64) *inspect.Holder {
	t.Helper()
	var in inspect.Inspection
	eventually(t, 10*time.Second, "the waiter visible to Inspect", func() bool {
		var err error
		in, err = op.Inspect(context.Background(), name)
		return err == nil && len(in.Waiters)+in.Subscribers == 1
	})
	h := in.Holder
	if h == nil || h.Owner != "stuck-job" || h.Token != token || h.TTL < 0 {
		t.Fatalf("Inspect(held).Holder = %+v; want stuck-job with token %d", h, token)
	}
	if len(in.Waiters) == 1 && (in.Waiters[0].Owner != "next-job" || in.Waiters[0].Token <= h.Token) {
		t.Errorf("Inspect(held).Waiters = %+v; want next-job with a token above %d", in.Waiters, h.Token)
	}
	return h
}

// inspectClosed checks that a closed engine refuses Inspect and
// ForceUnlock.
func inspectClosed(t *testing.T, closed locker.Engine, name string) {
	t.Helper()
	ctx := context.Background()
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := closed.(inspect.Inspector).Inspect(ctx, name); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("Inspect() after Close = %v; want ErrClosed", err)
	}
	if _, err := closed.(inspect.Inspector).ForceUnlock(ctx, name); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("ForceUnlock() after Close = %v; want ErrClosed", err)
	}
}
