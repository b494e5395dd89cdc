package redis

// Keys exposes the key names of a lock to the tests.
func (e *Engine) Keys(name string) (lock, fence, channel string) {
	k := e.keysFor(name)
	return k.lock, k.fence, k.channel
}
