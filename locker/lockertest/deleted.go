package lockertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// testDeleted returns the case that deletes a hold of each kind behind its
// holder's back (Harness.Delete) and wants it reported lost within
// Harness.NoticeDeleted, as gone; and a hold released by Unlock never
// reported lost.
func testDeleted(kinds ...inspect.Kind) func(t *testing.T, f Factory) {
	return func(t *testing.T, f Factory) {
		h := open(t, f)
		switch {
		case h.Delete == nil:
			t.Skip("the factory offers no Delete hook")
		case h.NoticeDeleted <= 0:
			t.Fatalf("Harness.NoticeDeleted = %v with a Delete hook; want the engine's bound", h.NoticeDeleted)
		}
		for _, kind := range kinds {
			t.Run(kind.String(), func(t *testing.T) { deleted(t, h, kind) })
		}
	}
}

// deleted holds two names of kind with the default TTL, releases one and
// deletes the other's key or node. The release comes first: once the
// deletion is reported, the engine has seen the release too (a server
// reports changes in order), and must not have reported it as a loss.
func deleted(t *testing.T, h Harness, kind inspect.Kind) {
	name := lockName(t, kind.String())
	released := newHandle(t, h.Engine, kind, name+"/released")
	held := newHandle(t, h.Engine, kind, name+"/held")
	mustLock(t, released)
	mustLock(t, held)
	releasedLost, releasedToken := released.Lost(), released.Token()
	mustUnlock(t, released)

	token := held.Token()
	start := time.Now()
	if err := h.Delete(context.Background(), kind, held.Name(), token); err != nil {
		t.Fatalf("%v: Delete(%q, %d) = %v", kind, held.Name(), token, err)
	}
	select {
	case <-held.Lost():
	case <-time.After(h.NoticeDeleted):
		t.Fatalf("%v: Lost() not closed %v after the held key or node was deleted", kind, h.NoticeDeleted)
	}
	// From the start of Delete, which may find the key first.
	t.Logf("%v: deletion noticed after %v", kind, time.Since(start))
	select {
	case <-releasedLost:
		t.Errorf("%v: the Lost() of a hold released by Unlock closed", kind)
	default:
	}
	if h.Causes != nil {
		if got, _ := h.Causes.Of(token); got != observe.LostGone {
			t.Errorf("%v: the deleted hold ended with cause %q; want %q", kind, got, observe.LostGone)
		}
		if got, ok := h.Causes.Of(releasedToken); !ok || got != observe.LostNone {
			t.Errorf("%v: the released hold ended with cause %q (ended: %v); want %q, true", kind, got, ok, observe.LostNone)
		}
	}
	if err := held.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("%v: Unlock() of the deleted hold = %v; want ErrLockLost", kind, err)
	}
}
