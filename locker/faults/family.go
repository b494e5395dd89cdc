package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// NewRWLock returns a new owner's read-write lock through the wrapper. Each
// outermost write acquisition uses a fresh inner RWLock of the owner; a
// read taken while the write side is held uses the writer's, so that the
// inner engine sees the downgrade.
func (e *Engine) NewRWLock(name string, opts ...locker.Option) (locker.RWLock, error) {
	st, opts, err := e.prepareOwner(name, opts)
	if err != nil {
		return nil, err
	}
	rw := &faultRW{}
	rw.write = e.newFaultLocker(name, st, func() (locker.Handle, error) {
		in, err := e.inner.NewRWLock(name, opts...)
		if err != nil {
			return nil, err
		}
		rw.mu.Lock()
		rw.writer = in
		rw.mu.Unlock()
		return in.WriteLock(), nil
	})
	rw.read = e.newFaultLocker(name, st, func() (locker.Handle, error) {
		if rw.write.held() != nil {
			rw.mu.Lock()
			defer rw.mu.Unlock()
			return rw.writer.ReadLock(), nil
		}
		in, err := e.inner.NewRWLock(name, opts...)
		if err != nil {
			return nil, err
		}
		return in.ReadLock(), nil
	})
	rw.write.check = func() error {
		if rw.read.held() != nil {
			return fmt.Errorf("%s: write lock %q: %w", e.name, name, locker.ErrUpgrade)
		}
		return nil
	}
	return rw, nil
}

// faultRW is one owner's read-write lock through the wrapper.
type faultRW struct {
	read, write *faultLocker

	mu     sync.Mutex
	writer locker.RWLock // the inner RWLock of the latest write acquisition
}

func (rw *faultRW) ReadLock() locker.Handle  { return rw.read.h }
func (rw *faultRW) WriteLock() locker.Handle { return rw.write.h }

// NewSemaphore returns a semaphore through the wrapper: each acquisition
// is a fresh permit Handle of the inner semaphore.
func (e *Engine) NewSemaphore(name string, permits int, opts ...locker.Option) (locker.Semaphore, error) {
	if _, _, err := e.prepareOwner(name, opts); err != nil {
		return nil, err
	}
	inner, err := e.inner.NewSemaphore(name, permits, opts...)
	if err != nil {
		return nil, err
	}
	return driver.NewSemaphoreOf(name, permits, func(n int) (locker.Handle, error) {
		st, _, err := e.prepareOwner(name, opts)
		if err != nil {
			return nil, err
		}
		return e.newFaultLocker(name, st, func() (locker.Handle, error) { return inner.NewPermit(n) }).h, nil
	})
}

// InspectFamily passes through to the inner engine, faults aside.
func (e *Engine) InspectFamily(ctx context.Context, kind inspect.Kind, name string) (inspect.FamilyInspection, error) {
	op, err := e.familyInspector()
	if err != nil {
		return inspect.FamilyInspection{}, err
	}
	return op.InspectFamily(ctx, kind, name)
}

// SetPermits passes through to the inner engine, faults aside.
func (e *Engine) SetPermits(ctx context.Context, name string, n int) error {
	op, err := e.familyInspector()
	if err != nil {
		return err
	}
	return op.SetPermits(ctx, name, n)
}

// ForceUnlockFamily passes through to the inner engine, faults aside.
func (e *Engine) ForceUnlockFamily(ctx context.Context, kind inspect.Kind, name string, token uint64) ([]inspect.FamilyHolder, error) {
	op, err := e.familyInspector()
	if err != nil {
		return nil, err
	}
	return op.ForceUnlockFamily(ctx, kind, name, token)
}

func (e *Engine) familyInspector() (inspect.FamilyInspector, error) {
	op, ok := e.inner.(inspect.FamilyInspector)
	if !ok {
		return nil, fmt.Errorf("%s: %T does not inspect read-write locks and semaphores: %w", e.name, e.inner, errors.ErrUnsupported)
	}
	return op, nil
}
