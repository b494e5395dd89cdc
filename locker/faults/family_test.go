package faults_test

import (
	"errors"
	"testing"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// A healthy wrapper keeps the contract of the read-write lock and the
// semaphore of the engine it wraps.
func TestRWConformance(t *testing.T) {
	st := newStore(t)
	lockertest.RunRW(t, func(t *testing.T) lockertest.Harness { return lockertest.Harness{Engine: wrap(t, st)} })
}

func TestSemaphoreConformance(t *testing.T) {
	st := newStore(t)
	lockertest.RunSemaphore(t, func(t *testing.T) lockertest.Harness { return lockertest.Harness{Engine: wrap(t, st)} })
}

// TestFamilyFails: a failing engine fails the family's acquisitions too.
func TestFamilyFails(t *testing.T) {
	w := wrap(t, newStore(t))
	defer w.Close()
	rw, err := w.NewRWLock("rw")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := w.NewSemaphore("sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	w.Fail()
	if ok, err := rw.ReadLock().TryLock(); ok || !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("read TryLock() on a failing engine = %v, %v; want false, ErrUnavailable", ok, err)
	}
	if _, ok, err := sem.TryAcquire(1); ok || !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("TryAcquire(1) on a failing engine = %v, %v; want false, ErrUnavailable", ok, err)
	}
	w.Heal()
	if ok, err := rw.WriteLock().TryLock(); !ok || err != nil {
		t.Errorf("write TryLock() after Heal = %v, %v; want true, nil", ok, err)
	}
	if err := rw.WriteLock().Unlock(); err != nil {
		t.Error(err)
	}
}
