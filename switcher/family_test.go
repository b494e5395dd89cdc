package switcher_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
	"github.com/orthrus-go/orthrus/switcher"
)

// memSwitcher returns a switcher over two mem engines whose stores are st.
func memSwitcher(t testing.TB, st [2]*mem.Store) *switcher.Switcher {
	t.Helper()
	p, err := mem.New(mem.WithName("primary"), mem.WithStore(st[0]))
	if err != nil {
		t.Fatal(err)
	}
	s, err := mem.New(mem.WithName("secondary"), mem.WithStore(st[1]))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := switcher.New([]locker.Engine{p, s})
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

func memStores(t testing.TB) [2]*mem.Store {
	var st [2]*mem.Store
	for i := range st {
		var err error
		if st[i], err = mem.NewStore(); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// The read-write lock and semaphore suites over switchers of two Redis
// servers.
func TestRWConformance(t *testing.T) { lockertest.RunRW(t, harness) }

func TestSemaphoreConformance(t *testing.T) { lockertest.RunSemaphore(t, harness) }

// TestFamilyStaysPinned: holds of the family stay on the engine that
// granted them across a switch; a downgrade goes to the writer's engine;
// new acquisitions go to the engine current by then.
func TestFamilyStaysPinned(t *testing.T) {
	sw := memSwitcher(t, memStores(t))
	defer sw.Close()
	name := t.Name()
	rw, err := sw.NewRWLock(name)
	if err != nil {
		t.Fatal(err)
	}
	sem, err := sw.NewSemaphore(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.WriteLock().Lock(); err != nil {
		t.Fatal(err)
	}
	permit, ok, err := sem.TryAcquire(1)
	if err != nil || !ok {
		t.Fatalf("TryAcquire(1) = %v, %v", ok, err)
	}
	wtok := rw.WriteLock().Token()
	if _, err := sw.SwitchEngineTo("secondary"); err != nil {
		t.Fatal(err)
	}
	if ok, err := rw.ReadLock().TryLock(); !ok || err != nil {
		t.Fatalf("downgrade after a switch: TryLock() = %v, %v; want true, nil", ok, err)
	}
	if got, tok := rw.ReadLock().Engine(), rw.ReadLock().Token(); got != "primary" || tok != wtok {
		t.Errorf("downgraded read on %q with token %d; want primary, the writer's %d", got, tok, wtok)
	}
	// Another owner's acquisitions go to the secondary, where nothing is held.
	other, err := sw.NewRWLock(name)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := other.WriteLock().TryLock(); !ok || err != nil || other.WriteLock().Engine() != "secondary" {
		t.Fatalf("new writer after the switch: %v, %v on %q; want granted on secondary", ok, err, other.WriteLock().Engine())
	}
	if tok := other.WriteLock().Token(); tok <= wtok {
		t.Errorf("writer after the switch has token %d; want above %d (the switch epoch)", tok, wtok)
	}
	next, ok, err := sem.TryAcquire(1)
	if err != nil || !ok || next.Engine() != "secondary" || permit.Engine() != "primary" {
		t.Fatalf("permits: old on %q, new %v, %v; want old on primary, new granted on secondary", permit.Engine(), ok, err)
	}
	for _, l := range []locker.Locker{rw.WriteLock(), rw.ReadLock(), other.WriteLock(), permit, next} {
		if err := l.Unlock(); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
	}
}
