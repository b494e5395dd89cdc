package lockertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// MaxLostToCancel is how soon after Lost closes the context of
// locker.WithLock (and locker.HoldContext) must be done.
const MaxLostToCancel = 100 * time.Millisecond

// testWithLock checks locker.WithLock: fn runs under the hold, the lock
// is free once it returns, its error comes back, a wait that ends first
// never runs fn, and the context ends soon after the hold is lost.
func testWithLock(t *testing.T, f Factory) {
	h := open(t, f)
	name := lockName(t, "w")
	a, b := newLocker(t, h.Engine, name), newLocker(t, h.Engine, name)

	errWork := errors.New("work failed")
	err := locker.WithLock(context.Background(), a, func(ctx context.Context) error {
		if a.Token() == 0 {
			t.Errorf("Token() inside WithLock = 0; want the hold's token")
		}
		if ok, err := b.TryLock(); ok || err != nil {
			t.Errorf("other owner's TryLock() inside WithLock = %v, %v; want false, nil", ok, err)
		}
		return errWork
	})
	if !errors.Is(err, errWork) {
		t.Errorf("WithLock() = %v; want fn's error", err)
	}
	wantTry(t, b, true) // released when fn returned

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	ran := false
	err = locker.WithLock(ctx, a, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Errorf("WithLock() on a held name = %v, fn ran: %v; want DeadlineExceeded, false", err, ran)
	}
	mustUnlock(t, b)

	if h.Expire == nil {
		t.Skip("the factory offers no Expire hook: the loss is not checked")
	}
	lostName := lockName(t, "lost")
	c := newLocker(t, h.Engine, lostName, locker.WithTTL(shortTTL(900*time.Millisecond, h.Engine)))
	err = locker.WithLock(context.Background(), c, func(ctx context.Context) error {
		lost := c.Lost()
		if err := h.Expire(context.Background(), lostName); err != nil {
			t.Errorf("Expire(%q) = %v", lostName, err)
			return err
		}
		select {
		case <-lost:
		case <-time.After(10 * time.Second):
			t.Errorf("Lost() not closed 10s after the hold vanished")
			return nil
		}
		seen := time.Now()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		if d := time.Since(seen); d > MaxLostToCancel || ctx.Err() == nil {
			t.Errorf("WithLock's context done %v after Lost() closed (err %v); want within %v", d, ctx.Err(), MaxLostToCancel)
		} else {
			t.Logf("context done %v after Lost() closed", d)
		}
		if cause := context.Cause(ctx); !errors.Is(cause, locker.ErrLockLost) {
			t.Errorf("context.Cause() = %v; want ErrLockLost", cause)
		}
		return ctx.Err()
	})
	if !errors.Is(err, locker.ErrLockLost) || !errors.Is(err, context.Canceled) {
		t.Errorf("WithLock() after a loss = %v; want ErrLockLost joined with context.Canceled", err)
	}
}
