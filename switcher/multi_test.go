package switcher_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestMultiConformance runs the multi-lock suite over switchers: each part
// is pinned to the engine that granted it.
func TestMultiConformance(t *testing.T) { lockertest.RunMulti(t, harness) }

// TestMultiPartsStayPinned: a multi-lock taken on the primary keeps its
// parts there across a switch; the next acquisition goes to the secondary.
func TestMultiPartsStayPinned(t *testing.T) {
	sw, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr})
	names := []string{t.Name() + "/a", t.Name() + "/b"}
	newMulti := func() *locker.MultiLock {
		parts := make([]locker.Handle, len(names))
		for i, n := range names {
			l, err := sw.NewLocker(n)
			if err != nil {
				t.Fatalf("NewLocker(%q) = %v", n, err)
			}
			parts[i] = l
		}
		m, err := locker.NewMultiLock(parts...)
		if err != nil {
			t.Fatalf("NewMultiLock() = %v", err)
		}
		return m
	}
	m, other := newMulti(), newMulti()
	if err := m.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	if got := m.Engine(); got != "primary" {
		t.Errorf("Engine() = %q; want primary", got)
	}
	if to, err := sw.SwitchEngine(); to != "secondary" || err != nil {
		t.Fatalf("SwitchEngine() = %q, %v; want secondary, nil", to, err)
	}
	// Re-entry and Unlock go to the primary, where the parts are.
	if ok, err := m.TryLock(); !ok || err != nil {
		t.Errorf("re-entry TryLock() after the switch = %v, %v; want true, nil", ok, err)
	}
	if err := m.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
	if got := m.Engine(); got != "primary" {
		t.Errorf("Engine() after the switch = %q; want primary (pinned)", got)
	}
	if err := m.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
	if ok, err := other.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock() after the switch = %v, %v; want true, nil", ok, err)
	}
	if got := other.Engine(); got != "secondary" {
		t.Errorf("Engine() of a new hold = %q; want secondary", got)
	}
	if err := other.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}
