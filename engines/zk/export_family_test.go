package zk

import "github.com/orthrus-go/orthrus/locker"

// FamilyPath exposes the parent node of a read-write lock (KindRead,
// KindWrite) or a semaphore (KindPermit) to the tests.
func (e *Engine) FamilyPath(k locker.Kind, name string) string { return e.familyPath(k, name) }

// PermitsNode is the child of a semaphore's parent that stores its count.
const PermitsNode = permitsNode
