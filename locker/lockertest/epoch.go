package lockertest

import (
	"context"
	"testing"
)

// epochRecord is switcher.EpochRecord, which an engine implements for the
// switcher's epochs to survive restarts (the suite does not import the
// switcher).
type epochRecord interface {
	RecordedEpoch(ctx context.Context, fleet string) (uint64, error)
	CompareAndSwapEpoch(ctx context.Context, fleet string, old, epoch uint64) (bool, error)
}

// An engine's epoch record is a compare-and-swap register per fleet name,
// 0 before the first write, that no lock's keys touch.
func testEpochRecord(t *testing.T, f Factory) {
	e := open(t, f).Engine
	rec, ok := e.(epochRecord)
	if !ok {
		t.Skip("the engine keeps no epoch record")
	}
	ctx := context.Background()
	fleet := lockName(t, "fleet/with:odd%chars")
	mustLock(t, newLocker(t, e, fleet)) // a lock of the same name is another thing
	steps := []struct {
		old, epoch uint64
		swapped    bool
	}{{1, 5, false}, {0, 2, true}, {0, 3, false}, {2, 7, true}, {2, 9, false}}
	for _, s := range steps {
		got, err := rec.CompareAndSwapEpoch(ctx, fleet, s.old, s.epoch)
		if err != nil || got != s.swapped {
			t.Fatalf("CompareAndSwapEpoch(%d, %d) = %v, %v; want %v, nil", s.old, s.epoch, got, err, s.swapped)
		}
	}
	if got, err := rec.RecordedEpoch(ctx, fleet); got != 7 || err != nil {
		t.Errorf("RecordedEpoch() = %d, %v; want 7, nil", got, err)
	}
	if got, err := rec.RecordedEpoch(ctx, fleet+"-other"); got != 0 || err != nil {
		t.Errorf("RecordedEpoch() of a fleet never recorded = %d, %v; want 0, nil", got, err)
	}
}
