package mem

import (
	"context"
	"fmt"

	"github.com/orthrus-go/orthrus/locker"
)

// RecordedEpoch implements switcher.EpochRecord: the store keeps one
// record per prefix and fleet.
func (e *Engine) RecordedEpoch(_ context.Context, fleet string) (uint64, error) {
	if e.core.Closed() {
		return 0, fmt.Errorf("mem: epoch of %q: %w", fleet, locker.ErrClosed)
	}
	s := e.store
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epochs[e.epochKey(fleet)], nil
}

// CompareAndSwapEpoch implements switcher.EpochRecord.
func (e *Engine) CompareAndSwapEpoch(_ context.Context, fleet string, old, epoch uint64) (bool, error) {
	if e.core.Closed() {
		return false, fmt.Errorf("mem: epoch of %q: %w", fleet, locker.ErrClosed)
	}
	s := e.store
	s.mu.Lock()
	defer s.mu.Unlock()
	k := e.epochKey(fleet)
	if s.epochs[k] != old {
		return false, nil
	}
	if s.epochs == nil {
		s.epochs = make(map[[2]string]uint64)
	}
	s.epochs[k] = epoch
	return true, nil
}

func (e *Engine) epochKey(fleet string) [2]string { return [2]string{e.prefix, fleet} }
