package faults

import (
	"errors"
	"fmt"

	"github.com/orthrus-go/orthrus/locker"
)

// NewRWLock is not wrapped yet.
func (e *Engine) NewRWLock(name string, opts ...locker.Option) (locker.RWLock, error) {
	return nil, fmt.Errorf("%s: read-write locks: %w", e.name, errors.ErrUnsupported)
}

// NewSemaphore is not wrapped yet.
func (e *Engine) NewSemaphore(name string, permits int, opts ...locker.Option) (locker.Semaphore, error) {
	return nil, fmt.Errorf("%s: semaphores: %w", e.name, errors.ErrUnsupported)
}
