package switcher

import (
	"errors"
	"fmt"

	"github.com/orthrus-go/orthrus/locker"
)

// NewRWLock is not wrapped yet.
func (s *Switcher) NewRWLock(name string, opts ...locker.Option) (locker.RWLock, error) {
	return nil, fmt.Errorf("%s: read-write locks: %w", "switcher", errors.ErrUnsupported)
}

// NewSemaphore is not wrapped yet.
func (s *Switcher) NewSemaphore(name string, permits int, opts ...locker.Option) (locker.Semaphore, error) {
	return nil, fmt.Errorf("%s: semaphores: %w", "switcher", errors.ErrUnsupported)
}
