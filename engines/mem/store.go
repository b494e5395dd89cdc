package mem

import (
	"fmt"
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
	s := &Store{clock: clockwork.NewRealClock(), locks: make(map[lockKey]*lock)}
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

// lockKey is a lock name inside an engine's namespace.
type lockKey struct{ prefix, name string }

// lock is one name: its holder and the waiters queued behind it. A lock is
// in the store only while it has a holder or a waiter.
type lock struct {
	holder *entry
	queue  []*entry // first in line first
}

// entry is a hold or a queued waiter.
type entry struct {
	key   lockKey
	hold  *locker.Hold
	token uint64 // given when queued, so grants follow the queue's order

	// Holder only.
	deadline time.Time
	timer    clockwork.Timer

	// Waiter only: closed when the waiter becomes the holder.
	granted chan struct{}
}

// now is the store's time.
func (s *Store) now() time.Time { return s.clock.Now() }

// lookup returns the lock of k after ending a hold whose time ran out, so
// that every operation sees expiries at once, whenever the expiry timer
// fires. Called with s.mu held; nil when k has no lock.
func (s *Store) lookup(k lockKey) *lock {
	l := s.locks[k]
	if l == nil {
		return nil
	}
	if h := l.holder; h != nil && !s.now().Before(h.deadline) {
		s.endHolder(l)
		h.hold.MarkLost()
	}
	return s.cleanup(k, l)
}

// cleanup drops l from the store when nobody holds or waits for it.
func (s *Store) cleanup(k lockKey, l *lock) *lock {
	if l.holder == nil && len(l.queue) == 0 {
		delete(s.locks, k)
		return nil
	}
	return l
}

// grant makes e the holder of l until its TTL runs out.
func (s *Store) grant(l *lock, e *entry) {
	l.holder = e
	e.deadline = s.now().Add(e.hold.TTL)
	e.timer = s.clock.AfterFunc(e.hold.TTL, func() { s.expire(e.key) })
}

// endHolder removes the holder of l and hands the lock to the first
// waiter, whose Acquire returns.
func (s *Store) endHolder(l *lock) {
	l.holder.timer.Stop()
	l.holder = nil
	if len(l.queue) == 0 {
		return
	}
	next := l.queue[0]
	l.queue[0] = nil
	l.queue = l.queue[1:]
	s.grant(l, next)
	close(next.granted)
}

// expire runs when a holder's timer fires: lookup ends the hold if its
// deadline has passed (a renewal may have moved it since).
func (s *Store) expire(k lockKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookup(k)
}

// tryAcquire grants e at once if nobody holds or waits for its name.
func (s *Store) tryAcquire(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lookup(e.key) != nil {
		return false
	}
	l := &lock{}
	s.locks[e.key] = l
	s.revision++
	e.token = s.revision
	s.grant(l, e)
	return true
}

// enqueue grants e at once if it can, and queues it otherwise. It reports
// whether e was granted.
func (s *Store) enqueue(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revision++
	e.token = s.revision
	l := s.lookup(e.key)
	if l == nil {
		l = &lock{}
		s.locks[e.key] = l
		s.grant(l, e)
		return true
	}
	e.granted = make(chan struct{})
	l.queue = append(l.queue, e)
	return false
}

// abandon takes a waiter that gave up out of the queue, or, if the lock was
// handed to it meanwhile, releases it to the next waiter.
func (s *Store) abandon(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(e.key)
	if l == nil {
		return
	}
	if l.holder == e {
		s.endHolder(l)
	} else {
		for i, w := range l.queue {
			if w == e {
				l.queue = append(l.queue[:i], l.queue[i+1:]...)
				break
			}
		}
	}
	s.cleanup(e.key, l)
}

// release ends e if it still holds its lock.
func (s *Store) release(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(e.key)
	if l == nil || l.holder != e {
		return false
	}
	s.endHolder(l)
	s.cleanup(e.key, l)
	return true
}

// renew extends e by its TTL if it still holds its lock.
func (s *Store) renew(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(e.key)
	if l == nil || l.holder != e {
		return false
	}
	e.deadline = s.now().Add(e.hold.TTL)
	e.timer.Reset(e.hold.TTL)
	return true
}

// inspect reports the holder and the waiters of k.
func (s *Store) inspect(k lockKey) locker.Inspection {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(k)
	if l == nil {
		return locker.Inspection{}
	}
	in := locker.Inspection{Holder: &locker.Holder{
		Owner: l.holder.hold.Owner,
		Token: l.holder.token,
		TTL:   max(l.holder.deadline.Sub(s.now()), 0),
	}}
	for _, w := range l.queue {
		in.Waiters = append(in.Waiters, locker.Holder{Owner: w.hold.Owner, Token: w.token})
	}
	return in
}

// forceRelease ends the hold of k whoever owns it; its owner sees Lost at
// once.
func (s *Store) forceRelease(k lockKey) (locker.Holder, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(k)
	if l == nil {
		return locker.Holder{}, false
	}
	h := l.holder
	s.endHolder(l)
	s.cleanup(k, l)
	h.hold.MarkLost()
	return locker.Holder{Owner: h.hold.Owner, Token: h.token}, true
}
