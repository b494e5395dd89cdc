package mem

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
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
	class        inspect.Kind // KindMutex, KindWrite (both sides) or KindPermit
}

// keyClass is the lock a hold of kind k belongs to.
func keyClass(k inspect.Kind) inspect.Kind {
	if k == inspect.KindRead {
		return inspect.KindWrite
	}
	return k
}

// lock is one name: its holds and waiters in one queue, oldest first, to
// which lockrule's rule is applied after every change. A lock is in the
// store only while it has a hold or a waiter.
type lock struct {
	queue []*entry
	last  uint64 // the highest token granted: a grant's token must pass it
}

// entry is a hold or a queued waiter.
type entry struct {
	key  lockKey
	hold *driver.Hold
	// held: granted; downgrade: a read taken by the write holder.
	held, downgrade bool
	weight          uint8 // its rank among waiters; 1 for a TryLock, which never waits

	// token is given when queued; a waiter granted ahead of an older one
	// (a heavier one) takes a new one then, so tokens grow grant by grant.
	token uint64

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
	// From the back: a removal grants only fresh holds and shifts only
	// the entries after it.
	now := s.now()
	for i := len(l.queue) - 1; i >= 0; i-- {
		if e := l.queue[i]; e.held && !now.Before(e.deadline) {
			s.remove(l, e)
			e.hold.MarkLost()
		}
	}
	return s.drop(k, l)
}

// drop forgets l when nobody holds or waits for it; nil then.
func (s *Store) drop(k lockKey, l *lock) *lock {
	if len(l.queue) == 0 {
		delete(s.locks, k)
		return nil
	}
	return l
}

// rules is l's queue as lockrule sees it, and which of it is granted,
// appended to q and held (on the caller's stack for short queues).
func (l *lock) rules(q []lockrule.Entry, held []bool) ([]lockrule.Entry, []bool) {
	for _, e := range l.queue {
		q = append(q, lockrule.Entry{Kind: e.hold.Kind, Permits: e.hold.Permits, Downgrade: e.downgrade, Weight: int(e.weight)})
		held = append(held, e.held)
	}
	return q, held
}

// grant makes e, the i-th of l's queue, a holder until its life (TTL and
// lock delay) runs out.
func (s *Store) grant(l *lock, e *entry, held []bool, i int) {
	if e.token < l.last && !e.downgrade {
		s.revision++
		e.token = s.revision
	}
	l.last = max(l.last, e.token)
	life := e.hold.Life()
	e.held, held[i] = true, true
	e.deadline = s.now().Add(life)
	e.timer = s.clock.AfterFunc(life, func() { s.expire(e.key) })
}

// remove takes e, a hold or a waiter, out of l, grants the waiters the
// rule grants then, and drops l if left empty.
func (s *Store) remove(l *lock, e *entry) {
	if e.held {
		e.timer.Stop()
		e.held = false
	}
	l.queue = slices.DeleteFunc(l.queue, func(x *entry) bool { return x == e })
	s.promote(e.key, l)
	s.drop(e.key, l)
}

// promote grants the waiters of l the rule grants, first in rank first.
// A waiter the rule keeps waiting keeps every waiter ranked after it
// waiting too, so the look stops there.
func (s *Store) promote(k lockKey, l *lock) {
	var qbuf [8]lockrule.Entry
	var hbuf [8]bool
	q, held := l.rules(qbuf[:0], hbuf[:0])
	for {
		i := firstWaiter(q, held)
		if i < 0 || !lockrule.Granted(q, held, i, s.permits[k]) {
			return
		}
		e := l.queue[i]
		s.grant(l, e, held, i)
		close(e.granted)
	}
}

// firstWaiter is the index of the waiter ranked first, the heaviest and
// oldest of its weight; -1 when none waits.
func firstWaiter(q []lockrule.Entry, held []bool) int {
	first := -1
	for i := range q {
		if !held[i] && (first < 0 || q[i].Weight > q[first].Weight) {
			first = i
		}
	}
	return first
}

// expire runs when a holder's timer fires: lookup ends the hold if its
// deadline has passed (a renewal may have moved it since).
func (s *Store) expire(k lockKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookup(k)
}

// acquire queues e and grants it if the rule does. With wait, it leaves e
// queued otherwise; without, it leaves nothing.
func (s *Store) acquire(e *entry, wait bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := e.hold; h.Kind == inspect.KindPermit { // the count is stored by the first
		stored, ok := s.permits[e.key]
		if !ok {
			s.permits[e.key], stored = h.Limit, h.Limit
		}
		if h.CheckLimit && stored != h.Limit {
			return false, fmt.Errorf("%w: opened with %d, stored %d", locker.ErrPermitsMismatch, h.Limit, stored)
		}
	}
	l := s.lookup(e.key)
	if l == nil {
		l = &lock{}
		s.locks[e.key] = l
	}
	// A downgrade holds with the writer's token.
	if w := e.hold.Writer; w != nil && w.State.(*entry).held {
		e.downgrade, e.token = true, w.Token
	} else {
		s.revision++
		e.token = s.revision
	}
	e.weight = 1
	if wait {
		e.weight = uint8(max(e.hold.Weight, 1)) // 1 to 10: WithWeight checked it
	}
	l.queue = append(l.queue, e)
	var qbuf [8]lockrule.Entry
	var hbuf [8]bool
	q, held := l.rules(qbuf[:0], hbuf[:0])
	if lockrule.Granted(q, held, len(q)-1, s.permits[e.key]) {
		s.grant(l, e, held, len(q)-1)
		return true, nil
	}
	if !wait {
		l.queue = l.queue[:len(l.queue)-1]
		s.drop(e.key, l)
		return false, nil
	}
	e.granted = make(chan struct{})
	return false, nil
}

// release takes e out of its lock, a hold or a waiter that gave up, and
// reports whether it held.
func (s *Store) release(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, held := s.lookup(e.key), e.held
	if l != nil && slices.Contains(l.queue, e) {
		s.remove(l, e)
	}
	return held
}

// renew extends e by its life (TTL and lock delay) if it still holds its lock.
func (s *Store) renew(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookup(e.key)
	if !e.held {
		return false
	}
	e.deadline = s.now().Add(e.hold.Life())
	e.timer.Reset(e.hold.Life())
	return true
}

func (s *Store) holder(e *entry) inspect.Holder {
	return inspect.Holder{Owner: e.hold.Owner, Token: e.token, TTL: max(e.deadline.Sub(s.now()), 0)}
}

// list returns the holds and the waiters of k, oldest first. Called with
// s.mu held.
func (s *Store) list(k lockKey) (holds, waiters []inspect.FamilyHolder) {
	l := s.lookup(k)
	if l == nil {
		return nil, nil
	}
	for _, e := range l.queue {
		fh := inspect.FamilyHolder{Holder: inspect.Holder{Owner: e.hold.Owner, Token: e.token}, Kind: e.hold.Kind, Permits: e.hold.Permits}
		if !e.held {
			waiters = append(waiters, fh)
			continue
		}
		fh.Holder = s.holder(e)
		holds = append(holds, fh)
	}
	return holds, waiters
}

// inspect reports the holder and the waiters of the mutex k.
func (s *Store) inspect(k lockKey) inspect.Inspection {
	s.mu.Lock()
	defer s.mu.Unlock()
	holds, waiters := s.list(k)
	var in inspect.Inspection
	if len(holds) > 0 {
		in.Holder = &holds[0].Holder
	}
	for _, w := range waiters {
		in.Waiters = append(in.Waiters, w.Holder)
	}
	return in
}

// inspectFamily reports the holds and waiters of the read-write lock or
// semaphore k.
func (s *Store) inspectFamily(k lockKey) inspect.FamilyInspection {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := inspect.FamilyInspection{Permits: s.permits[k]}
	in.Holders, in.Waiters = s.list(k)
	return in
}

// setPermits stores n as the count of semaphore k and grants the waiters
// that fit it now.
func (s *Store) setPermits(k lockKey, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.permits[k] = n
	if l := s.lookup(k); l != nil {
		s.promote(k, l)
	}
}

// forceRelease ends, whoever owns them, the holds of k whose token is
// token, or all of them when token is 0, and returns them; their owners see
// Lost at once.
func (s *Store) forceRelease(k lockKey, token uint64) []inspect.FamilyHolder {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lookup(k)
	if l == nil {
		return nil
	}
	var gone []*entry
	var ended []inspect.FamilyHolder
	for _, e := range l.queue {
		if e.held && (token == 0 || e.token == token) {
			gone = append(gone, e)
			ended = append(ended, inspect.FamilyHolder{Holder: s.holder(e), Kind: e.hold.Kind, Permits: e.hold.Permits})
		}
	}
	for _, e := range gone {
		s.remove(l, e)
		e.hold.MarkLost()
	}
	return ended
}
