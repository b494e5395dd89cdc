package locker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
)

func memEngine(t *testing.T, name string) *mem.Engine {
	t.Helper()
	e, err := mem.New(mem.WithName(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// Parts on two independent engines: Engine names both, in acquisition
// order, and losing the part on one engine closes Lost.
func TestMultiLockAcrossEngines(t *testing.T) {
	a, b := memEngine(t, "mem-a"), memEngine(t, "mem-b")
	pb, _ := b.NewLocker("x")
	pa, _ := a.NewLocker("y")
	m, err := locker.NewMultiLock(pa, pb)
	if err != nil {
		t.Fatalf("NewMultiLock() = %v", err)
	}
	if err := m.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	if got, want := m.Engine(), "mem-b,mem-a"; got != want {
		t.Errorf("Engine() = %q; want %q", got, want)
	}
	// Lost asked for, then released: the goroutine that merges the parts'
	// Lost channels ends with the hold. (The baseline comes after Lock,
	// which starts the engines' renewal loops; the engines' idle workers,
	// which releases start, are theirs until Close.)
	before := goleak.IgnoreCurrent()
	_ = m.Lost()
	if err := m.Unlock(); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	if err := goleak.Find(before, goleak.IgnoreTopFunction("github.com/orthrus-go/orthrus/locker.(*Core).worker")); err != nil {
		t.Errorf("goroutine left after Unlock: %v", err)
	}

	if err := m.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	lost := m.Lost()
	if _, err := a.ForceUnlock(context.Background(), "y"); err != nil {
		t.Fatalf("ForceUnlock() = %v", err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatalf("Lost() not closed 10s after a part was force-unlocked")
	}
	if err := m.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() after a part was lost = %v; want ErrLockLost", err)
	}
	if ok, err := pb.TryLock(); !ok || err != nil {
		t.Errorf("TryLock() of the other part after Unlock = %v, %v; want true, nil", ok, err)
	}
	_ = pb.Unlock()
}
