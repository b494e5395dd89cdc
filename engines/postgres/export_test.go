package postgres

import "time"

// WithReap runs the reaper every every, deleting rows expired for after.
func WithReap(every, after time.Duration) Option {
	return func(s *settings) error {
		s.reapEach, s.reapPast = every, after
		return nil
	}
}

// WithBeforeSettle runs f before each try of a heavy arrival's transaction.
func WithBeforeSettle(f func()) Option {
	return func(s *settings) error {
		s.beforeSettle = f
		return nil
	}
}
