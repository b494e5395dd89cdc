package switcher

// Waiting counts the acquisitions parked on an engine.
func Waiting(s *Switcher) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waits)
}
