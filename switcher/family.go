package switcher

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// NewRWLock returns a new owner's read-write lock on name. Each side's
// outermost acquisition goes to the engine current at that moment and stays
// pinned there, as a mutex's does; a read taken while the write side is
// held (a downgrade) goes to the writer's engine, whatever is current.
func (s *Switcher) NewRWLock(name string, opts ...locker.Option) (locker.RWLock, error) {
	owner, opts, err := s.prepareOwner(name, opts)
	if err != nil {
		return nil, err
	}
	if err := driver.CheckFamilyOptions(inspect.KindWrite, opts...); err != nil {
		return nil, err
	}
	rw := &switchRW{inner: newPerEngine[locker.RWLock](len(s.members))}
	side := func(pick func(locker.RWLock) locker.Handle) func(int, locker.Engine) (locker.Handle, error) {
		return func(i int, e locker.Engine) (locker.Handle, error) {
			in, err := rw.inner.get(i, func() (locker.RWLock, error) { return e.NewRWLock(name, opts...) })
			if err != nil {
				return nil, err
			}
			return pick(in), nil
		}
	}
	rw.read = s.newSwitchLocker(name, owner, side(locker.RWLock.ReadLock))
	rw.write = s.newSwitchLocker(name, owner, side(locker.RWLock.WriteLock))
	rw.read.follow = rw.write.held
	rw.write.check = func() error {
		if _, _, reading := rw.read.held(); reading {
			return fmt.Errorf("switcher: write lock %q: %w", name, locker.ErrUpgrade)
		}
		return nil
	}
	return rw, nil
}

// switchRW is one owner's read-write lock across the engines: one engine
// RWLock per engine, so that both sides meet there (a downgrade).
type switchRW struct {
	read, write *switchLocker
	inner       *perEngine[locker.RWLock]
}

func (rw *switchRW) ReadLock() locker.Handle  { return rw.read.h }
func (rw *switchRW) WriteLock() locker.Handle { return rw.write.h }

// NewSemaphore returns a semaphore of permits permits on name. Each
// acquisition goes to the engine current at that moment and its permits
// stay there until released: the engines' semaphores of one name are
// separate sets of permits, so just after a switch up to twice the count
// may be out across the two engines (see the package doc).
func (s *Switcher) NewSemaphore(name string, permits int, opts ...locker.Option) (locker.Semaphore, error) {
	if _, _, err := s.prepareOwner(name, opts); err != nil {
		return nil, err
	}
	if err := driver.CheckFamilyOptions(inspect.KindPermit, opts...); err != nil {
		return nil, err
	}
	sems := newPerEngine[locker.Semaphore](len(s.members))
	return driver.NewSemaphoreOf(name, permits, func(n int) (locker.Handle, error) {
		owner, opts, err := s.prepareOwner(name, opts)
		if err != nil {
			return nil, err
		}
		return s.newSwitchLocker(name, owner, func(i int, e locker.Engine) (locker.Handle, error) {
			sem, err := sems.get(i, func() (locker.Semaphore, error) { return e.NewSemaphore(name, permits, opts...) })
			if err != nil {
				return nil, err
			}
			return sem.NewPermit(n)
		}).h, nil
	})
}

// perEngine holds one value per engine of the switcher, made on first use.
type perEngine[T any] struct {
	mu   sync.Mutex
	made []T
	ok   []bool
}

func newPerEngine[T any](n int) *perEngine[T] {
	return &perEngine[T]{made: make([]T, n), ok: make([]bool, n)}
}

// get returns the value of engine i, made by mk the first time.
func (p *perEngine[T]) get(i int, mk func() (T, error)) (T, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ok[i] {
		v, err := mk()
		if err != nil {
			return v, err
		}
		p.made[i], p.ok[i] = v, true
	}
	return p.made[i], nil
}

// InspectFamily reports the read-write lock or semaphore name as the
// current engine knows it.
func (s *Switcher) InspectFamily(ctx context.Context, kind inspect.Kind, name string) (inspect.FamilyInspection, error) {
	op, err := s.familyInspector(s.Current())
	if err != nil {
		return inspect.FamilyInspection{}, err
	}
	return op.InspectFamily(ctx, kind, name)
}

// SetPermits stores n as the permit count of semaphore name on every
// engine, so that the count holds whichever engine is current; it returns
// the errors of the engines that failed.
func (s *Switcher) SetPermits(ctx context.Context, name string, n int) error {
	var errs []error
	for _, m := range s.members {
		op, err := s.familyInspector(m.engine.Name())
		if err == nil {
			err = op.SetPermits(ctx, name, n)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ForceUnlockFamily ends holds of the read-write lock or semaphore name on
// the current engine, as InspectFamily shows them: the hold of token (a
// switcher token's epoch aside), or all of them when token is 0. Holds
// granted before a switch stay on their engine: clear them there.
func (s *Switcher) ForceUnlockFamily(ctx context.Context, kind inspect.Kind, name string, token uint64) ([]inspect.FamilyHolder, error) {
	if token != 0 && token&engineTokenMask == 0 {
		// An epoch with no engine token names no hold (0 would mean all).
		return nil, fmt.Errorf("switcher: force unlock %s %q: token %d: %w", kind, name, token, locker.ErrNotHeld)
	}
	op, err := s.familyInspector(s.Current())
	if err != nil {
		return nil, err
	}
	return op.ForceUnlockFamily(ctx, kind, name, token&engineTokenMask)
}

func (s *Switcher) familyInspector(engine string) (inspect.FamilyInspector, error) {
	i, err := s.index(engine)
	if err != nil {
		return nil, err
	}
	op, ok := s.members[i].engine.(inspect.FamilyInspector)
	if !ok {
		return nil, fmt.Errorf("switcher: engine %q does not inspect read-write locks and semaphores: %w", engine, errors.ErrUnsupported)
	}
	return op, nil
}
