package etcd

// LockPrefix exposes the key range of a lock name to the tests.
func (e *Engine) LockPrefix(name string) string { return e.lockPrefix(name) }
