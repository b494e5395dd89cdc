package mem

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/orthrus-go/orthrus/locker"
)

// Store is the state the engines of one simulated lock server share: the
// holds, the queues of waiters, the fencing counter and the clock. Give
// one Store to several engines (WithStore) to model several hosts talking
// to one server; engines with stores of their own model separate servers.
// A Store needs no closing: it starts nothing.
type Store struct {
	clock clockwork.Clock

	mu       sync.Mutex
	revision uint64 // last token issued, for every name: tokens never repeat
	locks    map[lockKey]*lock
	permits  map[lockKey]int      // stored count of each semaphore ever acquired
	epochs   map[[2]string]uint64 // switcher epoch records, by prefix and fleet
}

// StoreOption configures a Store.
type StoreOption func(*Store) error

// WithClock sets the clock that holds expire by, typically a
// clockwork.FakeClock that the test advances: advancing it by a hold's TTL
// or more expires the hold as a renewal that did not come in time would, and
// ends fixed leases. Default: the real clock.
func WithClock(c clockwork.Clock) StoreOption {
	return func(s *Store) error {
		if c == nil {
			return fmt.Errorf("mem: WithClock: %w: clock is nil", locker.ErrInvalidArgument)
		}
		s.clock = c
		return nil
	}
}

// NewStore returns an empty store.
func NewStore(opts ...StoreOption) (*Store, error) {
	s := &Store{clock: clockwork.NewRealClock(), locks: make(map[lockKey]*lock), permits: make(map[lockKey]int)}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("mem: NewStore: %w: nil StoreOption", locker.ErrInvalidArgument)
		}
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// lockKey is a lock name inside an engine's namespace; the mutex, the
// read-write lock and the semaphore of one name are three locks.
type lockKey struct {
	prefix, name string
	class        locker.Kind // KindMutex, KindWrite (both sides) or KindPermit
}

// keyClass is the lock a hold of kind k belongs to.
func keyClass(k locker.Kind) locker.Kind {
	if k == locker.KindRead {
		return locker.KindWrite
	}
	return k
}

// lock is one name: its holds and the waiters queued behind them. A lock is
// in the store only while it has a hold or a waiter.
type lock struct {
	holders []*entry // oldest grant first
	queue   []*entry // first in line first
}

// entry is a hold or a queued waiter.
type entry struct {
	key  lockKey
	hold *locker.Hold

	token uint64 // given when queued, so grants follow the queue's order

	// Holder only.
	deadline time.Time
	timer    clockwork.Timer

	// Waiter only: closed when the waiter becomes a holder.
	granted chan struct{}
}

// now is the store's time.
func (s *Store) now() time.Time { return s.clock.Now() }

// lookup returns the lock of k after ending the holds whose time ran out,
// so that every operation sees expiries at once, whenever the expiry timer
// fires. Called with s.mu held; nil when k has no lock.
func (s *Store) lookup(k lockKey) *lock {
	l := s.locks[k]
	if l == nil {
		return nil
	}
	now := s.now()
	for _, h := range slices.Clone(l.holders) {
		if !now.Before(h.deadline) {
			s.endHold(l, h)
			h.hold.MarkLost()
		}
	}
	return s.cleanup(k, l)
}

// cleanup drops l from the store when nobody holds or waits for it.
func (s *Store) cleanup(k lockKey, l *lock) *lock {
	if len(l.holders) == 0 && len(l.queue) == 0 {
		delete(s.locks, k)
		return nil
	}
	return l
}

// fits reports whether e may be granted next to the holds of l, ignoring
// the queue.
func (s *Store) fits(l *lock, e *entry) bool {
	switch e.hold.Kind {
	case locker.KindRead:
		return !slices.ContainsFunc(l.holders, func(h *entry) bool { return h.hold.Kind == locker.KindWrite })
	case locker.KindPermit:
		used := 0
		for _, h := range l.holders {
			used += h.hold.Permits
		}
		return used+e.hold.Permits <= s.permits[e.key]
	}
	return len(l.holders) == 0
}

// grant makes e a holder of l until its life (TTL and lock delay) runs out.
func (s *Store) grant(l *lock, e *entry) {
	l.holders = append(l.holders, e)
	e.deadline = s.now().Add(e.hold.Life())
	e.timer = s.clock.AfterFunc(e.hold.Life(), func() { s.expire(e.key) })
}

// endHold removes h from the holders of l and grants the waiters that fit
// now, first in line first: strict FIFO, so a reader behind a waiting
// writer waits and writers never starve.
func (s *Store) endHold(l *lock, h *entry) {
	h.timer.Stop()
	l.holders = slices.DeleteFunc(l.holders, func(x *entry) bool { return x == h })
	s.promote(l)
}

// promote grants the waiters at the head of l's queue while they fit.
func (s *Store) promote(l *lock) {
	for len(l.queue) > 0 && s.fits(l, l.queue[0]) {
		next := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		s.grant(l, next)
		close(next.granted)
	}
}

// expire runs when a holder's timer fires: lookup ends the hold if its
// deadline has passed (a renewal may have moved it since).
func (s *Store) expire(k lockKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookup(k)
}

// admit checks a semaphore's count, storing it on first use, and grants a
// downgrade. It reports (granted, error); (false, nil) means go on.
func (s *Store) admit(l *lock, e *entry) (bool, error) {
	h := e.hold
	switch h.Kind {
	case locker.KindPermit:
		stored, ok := s.permits[e.key]
		if !ok {
			s.permits[e.key], stored = h.Limit, h.Limit
		}
		if h.CheckLimit && stored != h.Limit {
			return false, fmt.Errorf("%w: opened with %d, stored %d", locker.ErrPermitsMismatch, h.Limit, stored)
		}
	case locker.KindRead:
		if h.Writer != nil && l != nil && slices.Contains(l.holders, h.Writer.State.(*entry)) {
			l.holders = append(l.holders, e)
			e.token = h.Writer.Token
			e.deadline = s.now().Add(h.TTL)
			e.timer = s.clock.AfterFunc(h.TTL, func() { s.expire(e.key) })
			return true, nil
		}
	}
	return false, nil
}

// acquire grants e at once if it fits and nobody waits before it. With
// wait, it queues e otherwise; without, it leaves nothing.
func (s *Store) acquire(e *entry, wait bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(e.key)
	if ok, err := s.admit(l, e); ok || err != nil {
		return ok, err
	}
	if l == nil {
		l = &lock{}
		s.locks[e.key] = l
	}
	s.revision++
	e.token = s.revision
	if len(l.queue) == 0 && s.fits(l, e) {
		s.grant(l, e)
		return true, nil
	}
	if wait {
		e.granted = make(chan struct{})
		l.queue = append(l.queue, e)
	}
	s.cleanup(e.key, l)
	return false, nil
}

// abandon takes a waiter that gave up out of the queue, or, if it was
// granted meanwhile, releases it.
func (s *Store) abandon(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(e.key)
	if l == nil {
		return
	}
	if slices.Contains(l.holders, e) {
		s.endHold(l, e)
	} else if i := slices.Index(l.queue, e); i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
		s.promote(l) // a permit waiter may have blocked smaller ones
	}
	s.cleanup(e.key, l)
}

// release ends e if it still holds its lock.
func (s *Store) release(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(e.key)
	if l == nil || !slices.Contains(l.holders, e) {
		return false
	}
	s.endHold(l, e)
	s.cleanup(e.key, l)
	return true
}

// renew extends e by its life (TTL and lock delay) if it still holds its lock.
func (s *Store) renew(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(e.key)
	if l == nil || !slices.Contains(l.holders, e) {
		return false
	}
	e.deadline = s.now().Add(e.hold.Life())
	e.timer.Reset(e.hold.Life())
	return true
}

func (s *Store) holder(e *entry) locker.Holder {
	return locker.Holder{Owner: e.hold.Owner, Token: e.token, TTL: max(e.deadline.Sub(s.now()), 0)}
}

// inspect reports the holder and the waiters of the mutex k.
func (s *Store) inspect(k lockKey) locker.Inspection {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(k)
	if l == nil {
		return locker.Inspection{}
	}
	h := s.holder(l.holders[0])
	in := locker.Inspection{Holder: &h}
	for _, w := range l.queue {
		in.Waiters = append(in.Waiters, locker.Holder{Owner: w.hold.Owner, Token: w.token})
	}
	return in
}

// inspectFamily reports the holds and waiters of the read-write lock or
// semaphore k.
func (s *Store) inspectFamily(k lockKey) locker.FamilyInspection {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := locker.FamilyInspection{Permits: s.permits[k]}
	l := s.lookup(k)
	if l == nil {
		return in
	}
	for _, h := range l.holders {
		in.Holders = append(in.Holders, locker.FamilyHolder{Holder: s.holder(h), Kind: h.hold.Kind, Permits: h.hold.Permits})
	}
	for _, w := range l.queue {
		in.Waiters = append(in.Waiters, locker.FamilyHolder{Holder: locker.Holder{Owner: w.hold.Owner, Token: w.token}, Kind: w.hold.Kind, Permits: w.hold.Permits})
	}
	return in
}

// setPermits stores n as the count of semaphore k and grants the waiters
// that fit it now.
func (s *Store) setPermits(k lockKey, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.permits[k] = n
	if l := s.lookup(k); l != nil {
		s.promote(l)
	}
}

// forceRelease ends, whoever owns them, the holds of k whose token is
// token, or all of them when token is 0, and returns them; their owners see
// Lost at once.
func (s *Store) forceRelease(k lockKey, token uint64) []locker.FamilyHolder {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(k)
	if l == nil {
		return nil
	}
	var ended []locker.FamilyHolder
	for _, h := range slices.Clone(l.holders) {
		if token != 0 && h.token != token {
			continue
		}
		ended = append(ended, locker.FamilyHolder{Holder: s.holder(h), Kind: h.hold.Kind, Permits: h.hold.Permits})
		s.endHold(l, h)
		h.hold.MarkLost()
	}
	s.cleanup(k, l)
	return ended
}
