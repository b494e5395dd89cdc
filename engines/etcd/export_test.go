package etcd

import "github.com/orthrus-go/orthrus/locker"

// LockPrefix exposes the key range of a lock name to the tests.
func (e *Engine) LockPrefix(name string) string { return e.lockPrefix(name) }

// FamilyRange exposes the key range of a read-write lock or semaphore name
// to the tests.
func (e *Engine) FamilyRange(k locker.Kind, name string) string { return e.familyRange(k, name) }

// MarkDepth exposes the queue length from which waiters mark their keys.
const MarkDepth = markDepth
