package driver

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// rwLock is one owner's read-write lock: two mutexes of the same owner whose
// holds are of inspect.KindRead and inspect.KindWrite.
type rwLock struct {
	read, write *mutex
}

func (l *rwLock) ReadLock() locker.Handle  { return l.read.h }
func (l *rwLock) WriteLock() locker.Handle { return l.write.h }

// NewRWLock returns a new owner's read-write lock on name.
func (c *Core) NewRWLock(name string, opts ...locker.Option) (locker.RWLock, error) {
	s, err := c.family(inspect.KindRead, name, opts)
	if err != nil {
		return nil, err
	}
	l := &rwLock{}
	l.read = initMutex(&mutex{core: c, name: name, settings: s, kind: inspect.KindRead, rw: l})
	l.write = initMutex(&mutex{core: c, name: name, settings: s, kind: inspect.KindWrite, rw: l})
	return l, nil
}

// semaphore is the permits of one name as one process sees them.
type semaphore struct {
	core    *Core
	name    string
	permits int
	opts    []locker.Option
	checked atomic.Bool // an acquisition has compared permits with the stored count
}

// NewSemaphore returns a semaphore of permits permits on name.
func (c *Core) NewSemaphore(name string, permits int, opts ...locker.Option) (locker.Semaphore, error) {
	if _, err := c.family(inspect.KindPermit, name, opts); err != nil {
		return nil, err
	}
	sem := &semaphore{core: c, name: name, permits: permits, opts: opts}
	return NewSemaphoreOf(name, permits, sem.newPermit)
}

func (s *semaphore) newPermit(n int) (locker.Handle, error) {
	st, err := s.core.resolve(s.opts)
	if err != nil {
		return nil, err
	}
	if err := s.core.checkOpen(); err != nil {
		return nil, err
	}
	return initMutex(&mutex{core: s.core, name: s.name, settings: st, kind: inspect.KindPermit, permits: n, sem: s}).h, nil
}

// family validates what NewRWLock and NewSemaphore share.
func (c *Core) family(k inspect.Kind, name string, opts []locker.Option) (locker.Settings, error) {
	if err := ValidateName(name); err != nil {
		return locker.Settings{}, err
	}
	s, err := c.resolve(opts)
	if err != nil {
		return locker.Settings{}, err
	}
	if err := familyFits(s, k); err != nil {
		return locker.Settings{}, err
	}
	return s, c.checkOpen()
}

// familyFits refuses the options a mutex has and the rest of the family
// does not: the lock delay, whose bar on a name is kept by one holder's
// key or node, where read-write locks and semaphores have many.
func familyFits(s locker.Settings, k inspect.Kind) error {
	if s.Delay > 0 {
		return fmt.Errorf("%w: WithLockDelay: only a mutex has a lock delay, not a read-write lock or a semaphore (%s)", locker.ErrInvalidArgument, k)
	}
	return nil
}

// CheckFamilyOptions refuses opts for a lock of kind k as NewRWLock and
// NewSemaphore do, for wrappers (the switcher) that make the engines'
// locks only when first acquired.
func CheckFamilyOptions(k inspect.Kind, opts ...locker.Option) error {
	s, err := Resolve(opts...)
	if err != nil {
		return err
	}
	return familyFits(s, k)
}

// NewSemaphoreOf returns a locker.Semaphore of permits over newPermit, which makes
// the locker.Handle of n permits (n already checked against permits); a count
// below 1 is locker.ErrInvalidArgument. Engines get theirs from Core; the
// switcher and the fault wrapper use it over their own permit handles.
func NewSemaphoreOf(name string, permits int, newPermit func(n int) (locker.Handle, error)) (locker.Semaphore, error) {
	if permits < 1 {
		return nil, fmt.Errorf("%w: NewSemaphore(%q, %d): permits must be at least 1", locker.ErrInvalidArgument, name, permits)
	}
	return &permitSet{name: name, permits: permits, newPermit: newPermit}, nil
}

type permitSet struct {
	name      string
	permits   int
	newPermit func(n int) (locker.Handle, error)
}

func (s *permitSet) Name() string { return s.name }

func (s *permitSet) NewPermit(n int) (locker.Handle, error) {
	if n < 1 || n > s.permits {
		return nil, fmt.Errorf("%w: semaphore %q: n = %d, want 1 to %d", locker.ErrInvalidArgument, s.name, n, s.permits)
	}
	return s.newPermit(n)
}

func (s *permitSet) Acquire(ctx context.Context, n int) (locker.Handle, error) {
	p, err := s.NewPermit(n)
	if err != nil {
		return nil, err
	}
	if err := p.LockCtx(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (s *permitSet) TryAcquire(n int) (locker.Handle, bool, error) {
	p, err := s.NewPermit(n)
	if err != nil {
		return nil, false, err
	}
	if ok, err := p.TryLock(); !ok {
		return nil, false, err
	}
	return p, true, nil
}
