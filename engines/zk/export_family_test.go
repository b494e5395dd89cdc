package zk

import (
	"context"
	"strings"

	"github.com/orthrus-go/orthrus/locker/inspect"
)

// FamilyPath exposes the parent node of a read-write lock (KindRead,
// KindWrite) or a semaphore (KindPermit) to the tests.
func (e *Engine) FamilyPath(k inspect.Kind, name string) string { return e.path(k, name) }

// PermitsNode is the child of a semaphore's parent that stores its count.
const PermitsNode = permitsNode

// ForceNode exposes forceNode: it deletes the family node at path if it
// still has version, reading it again when its version changed.
func (e *Engine) ForceNode(ctx context.Context, path string, version int32) (bool, error) {
	parent := path[:strings.LastIndexByte(path, '/')]
	return e.forceNode(ctx, parent, path, version)
}
