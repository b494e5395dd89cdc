package zk

import (
	"context"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// LockPath exposes the parent node of a lock to the tests.
func (e *Engine) LockPath(name string) string { return e.path(inspect.KindMutex, name) }

// EscapeName exposes the name escaping to the tests.
func EscapeName(name string) string { return zkconn.EscapeName(name) }

// LegalRune is ZooKeeper's path character rule, as the engine applies it.
func LegalRune(r rune) bool { return zkconn.LegalRune(r) }

// FindOwn exposes the lookup of a protected node by its guid.
func (e *Engine) FindOwn(ctx context.Context, parent, guid string) (string, error) {
	return e.zc.FindProtected(ctx, parent, guid)
}

// SetAfterCreate installs a fault after every successful create; call it
// before the engine is used.
func (e *Engine) SetAfterCreate(f func(path string) error) { e.afterCreate = f }

// SessionID is the engine's current session.
func (e *Engine) SessionID() int64 { return e.conn.SessionID() }

// ProtectedPrefix is the start of every lock node name.
const ProtectedPrefix = zkconn.ProtectedPrefix
