package lockertest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// slowRelease is a locker whose engine answers releases only after the
// release bound: Unlock gets the late-release outcome, and the name is
// free again after a few refused TryLocks.
type slowRelease struct {
	wait    time.Duration
	pending atomic.Int32 // TryLocks still refused while the release goes on
	held    atomic.Bool
}

func (l *slowRelease) Lock() error                   { return l.LockCtx(context.Background()) }
func (l *slowRelease) LockCtx(context.Context) error { l.held.Store(true); return nil }
func (l *slowRelease) TryLockTimeout(time.Duration) (bool, error) {
	return l.TryLock()
}

func (l *slowRelease) TryLock() (bool, error) {
	if l.pending.Add(-1) >= 0 {
		return false, nil
	}
	l.held.Store(true)
	return true, nil
}

func (l *slowRelease) Unlock() error {
	if !l.held.Swap(false) {
		return locker.ErrNotHeld
	}
	if l.wait == 0 {
		return nil
	}
	time.Sleep(l.wait) // the engine's answer not yet there
	l.wait = 0         // the background release answers the next time
	l.pending.Store(3)
	return fmt.Errorf("%w: no answer yet; the release goes on in the background", locker.ErrUnavailable)
}

func TestMustUnlockAcceptsALateRelease(t *testing.T) {
	l := &slowRelease{wait: driver.DefaultReleaseWait}
	mustLock(t, l)
	mustUnlock(t, l)
	if l.held.Load() {
		t.Fatal("mustUnlock returned with the name held by its own wait")
	}
	if n := l.pending.Load(); n > 0 {
		t.Fatalf("mustUnlock returned before the release finished (%d refusals left)", n)
	}
}

func TestUnlockReportsAQuickRefusal(t *testing.T) {
	l := &slowRelease{wait: time.Millisecond}
	mustLock(t, l)
	late, err := unlock(l)
	if late || !errors.Is(err, locker.ErrUnavailable) {
		t.Fatalf("unlock() of an engine refusing at once = %v, %v; want false, ErrUnavailable", late, err)
	}
}
