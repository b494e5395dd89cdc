package postgres

import "time"

// WithReap runs the reaper every every, deleting rows expired for after.
func WithReap(every, after time.Duration) Option {
	return func(s *settings) error {
		s.reapEach, s.reapPast = every, after
		return nil
	}
}

// MutexLockKey is the advisory lock key text of name's mutex queue.
func MutexLockKey(e *Engine, name string) string { return e.lockKey(famMutex, name) }
