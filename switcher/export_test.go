package switcher

// Waiting counts the acquisitions parked on an engine.
func Waiting(s *Switcher) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waits)
}

// Alone reports whether s switched without its shared source's agreement
// and will propose the switch again.
func Alone(s *Switcher) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alone
}
