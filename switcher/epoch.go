package switcher

import (
	"context"
	"sync"
)

// EpochRecord is implemented by engines that keep a record of a fleet's
// switch epoch beside their locks (every engine of orthrus does). A
// switcher records on an engine the epoch it grants there at, before its
// first grant there, and adopts a higher one that another process
// recorded: every process on an engine grants at the highest epoch any
// process used there. A process started, restarted or added after
// switches therefore has its fleet's epoch, whatever the source (none, a
// file, an etcd key, a ZooKeeper node) and across a move from one source
// to another, and epochs never go backwards on an engine.
type EpochRecord interface {
	// RecordedEpoch returns the epoch recorded for the switcher named
	// fleet; 0 when none is.
	RecordedEpoch(ctx context.Context, fleet string) (uint64, error)
	// CompareAndSwapEpoch records epoch for fleet if the record still holds
	// old (0: none yet), and reports whether it did.
	CompareAndSwapEpoch(ctx context.Context, fleet string, old, epoch uint64) (bool, error)
}

// epochResync is how many health checks of the current engine pass
// between two reads of its record: a process learns within about half a
// second (at the default health check) that another process came to its
// engine with a higher epoch.
const epochResync = 5

// epochSync is the agreement, pending, of this process's epoch with the
// record of the engine it starts on or switched to: grants there wait for
// it (at most the health timeout).
type epochSync struct {
	engine int
	done   chan struct{}
}

// syncEpoch agrees this process's epoch with engine i's record while i is
// current: it adopts a higher record and raises a lower one to its epoch.
// It reports false when the engine did not answer.
func (s *Switcher) syncEpoch(ctx context.Context, i int) bool {
	rec, ok := s.members[i].engine.(EpochRecord)
	s.mu.Lock()
	current := s.current == i
	s.mu.Unlock()
	if !ok || !current {
		return true
	}
	ctx, cancel := s.untilOpenOr(ctx, s.members[i])
	defer cancel()
	for {
		recorded, err := rec.RecordedEpoch(ctx, s.name)
		if err != nil {
			return false
		}
		s.mu.Lock()
		if s.current != i { // switched meanwhile: the new engine's sync decides
			s.mu.Unlock()
			return true
		}
		own := s.epoch
		s.epoch = max(own, recorded)
		s.mu.Unlock()
		switch {
		case recorded > own:
			s.log.Info("switcher: epoch raised to the one recorded on the engine", "engine", s.members[i].engine.Name(), "epoch", recorded)
			s.changed()
			return true
		case recorded == own:
			return true
		}
		swapped, err := rec.CompareAndSwapEpoch(ctx, s.name, recorded, own)
		if err != nil {
			return false
		}
		if swapped {
			return true
		}
	}
}

// completeSync makes the pending epoch agreement, if any, and lets the
// grants waiting for it go. It reports whether the engine did not answer:
// the health checks agree later.
func (s *Switcher) completeSync(ctx context.Context) bool {
	s.mu.Lock()
	p := s.pending
	s.mu.Unlock()
	if p == nil {
		return false
	}
	ok := s.syncEpoch(ctx, p.engine)
	s.mu.Lock()
	if s.pending == p {
		s.pending = nil
		close(p.done)
	}
	s.mu.Unlock()
	return !ok
}

// pendSync makes grants on engine i wait for an epoch agreement with its
// record; the caller holds s.mu.
func (s *Switcher) pendSync(i int) {
	if _, ok := s.members[i].engine.(EpochRecord); !ok {
		return
	}
	if s.pending != nil {
		close(s.pending.done) // its grants go again, to engine i
	}
	s.pending = &epochSync{engine: i, done: make(chan struct{})}
}

// adoptRecords starts this process at the highest epoch recorded on any of
// its engines that answers within the health timeout: a process that
// starts (or restarts) must not grant below an epoch its fleet used, on
// whichever engine the fleet is now.
func (s *Switcher) adoptRecords(ctx context.Context) {
	var wg sync.WaitGroup
	for _, m := range s.members {
		rec, ok := m.engine.(EpochRecord)
		if !ok {
			continue
		}
		wg.Go(func() {
			ctx, cancel := s.untilOpenOr(ctx, m)
			defer cancel()
			recorded, err := rec.RecordedEpoch(ctx, s.name)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.epoch = max(s.epoch, recorded)
			s.mu.Unlock()
		})
	}
	wg.Wait()
}

// untilOpenOr bounds a request about the epoch record of m's engine by the
// health timeout and by m's breaker: the decider makes it, and must not sit
// on an engine that was killed meanwhile while its breaker has opened.
func (s *Switcher) untilOpenOr(ctx context.Context, m *member) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.healthTimeout)
	stop := context.AfterFunc(m.untilOpen.Load().ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}
