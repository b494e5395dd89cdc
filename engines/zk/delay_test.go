package zk_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// An operator's ForceUnlock deletes the hold's node but not its delay
// marker: the name stays barred for the delay, counted from when the next
// in line found it, which is at once for a waiter.
func TestLockDelayForceUnlock(t *testing.T) {
	const delay = 2 * time.Second
	a, b := newEngine(t, []string{zkAddr}), newEngine(t, []string{zkAddr})
	defer a.Close()
	defer b.Close()
	name := t.Name() + "/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	holder, err := a.NewLocker(name, locker.WithLockDelay(delay))
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := b.NewLocker(name, locker.WithLockDelay(delay))
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := b.ForceUnlock(ctx, name); err != nil {
		t.Fatalf("ForceUnlock() = %v", err)
	}
	forced := time.Now()
	lockertest.WantLost(t, holder, "the forced hold")
	if err := waiter.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() = %v; want granted after the delay", err)
	}
	got := time.Since(forced)
	defer func() { _ = waiter.Unlock() }()
	t.Logf("delay %v: granted %v after the force unlock", delay, got)
	if got < delay || got > delay+time.Second {
		t.Errorf("granted %v after the force unlock; want delay (%v) to delay + 1s", got, delay)
	}
}

func TestLockDelay(t *testing.T) {
	c := admin(t)
	lockertest.RunLockDelay(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}
