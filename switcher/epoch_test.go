package switcher_test

import (
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/switcher"
)

// Without a shared source, each process counts its own switches. The
// record on each engine still gives every process on an engine the
// highest epoch used there: a process started after two switches grants
// at that epoch from its first lock, and one that never switched learns
// it within a second.
func TestEpochRecordedOnEngine(t *testing.T) {
	a, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr})
	stayed, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr})
	lockOnce(t, stayed, "epoch-ready")
	for _, engine := range []string{"secondary", "primary"} {
		if _, err := a.SwitchEngineTo(engine); err != nil {
			t.Fatal(err)
		}
		lockOnce(t, a, "epoch-"+engine)
	}
	if got := a.Epoch(); got != 2 {
		t.Fatalf("Epoch() after two switches = %d; want 2", got)
	}

	late, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr})
	if tok := lockOnce(t, late, "epoch-late"); tok>>44 != 2 {
		t.Errorf("a process started after two switches grants at epoch %d; want the engine's, 2", tok>>44)
	}
	began := time.Now()
	waitFor(t, "the process that stayed to learn the epoch", func() bool { return stayed.Epoch() == 2 })
	if took := time.Since(began); took > time.Second {
		t.Errorf("the process that stayed learned the epoch after %v; want <= 1s", took)
	}
	if tok := lockOnce(t, stayed, "epoch-stayed"); tok>>44 != 2 {
		t.Errorf("the process that stayed grants at epoch %d; want 2", tok>>44)
	}
}

// The epoch never goes backwards on an engine when the fleet moves to a
// shared source whose versions start again at 1: the record outranks it.
func TestEpochSurvivesNewSource(t *testing.T) {
	a, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr})
	for range 3 {
		if _, err := a.SwitchEngine(); err != nil {
			t.Fatal(err)
		}
		lockOnce(t, a, "migrate")
	}
	old := a.Epoch() // 3, on the secondary
	es := sharedSources[0].start(t)(t, "migrated")
	es.set(t, "primary") // the new source's first version: 1
	b, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr}, switcher.WithSource(es.source(t)))
	if tok := lockOnce(t, b, "migrated"); tok>>44 < old {
		t.Errorf("after the move to a new source, the first grant is at epoch %d; want at least the fleet's %d", tok>>44, old)
	}
}
