package redis

// Channel exposes the wake-up channel of a lock to the tests.
func (e *Engine) Channel(name string) string { return e.keysFor(name).channel }
