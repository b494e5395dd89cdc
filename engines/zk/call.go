package zk

import (
	"context"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/zkconn"
)

// The engine's requests run on its zkconn.Conn (internal/zkconn: workers,
// retries, the reaper); these keep the lock algorithm's vocabulary short.

// errClosed is returned inside the engine once Close has begun; fail turns
// it into locker.ErrClosed.
var errClosed = zkconn.ErrClosed

// pending is one request in flight on a worker.
type pending[T any] = zkconn.Pending[T]

// start runs f on a worker; orphan, if not nil, gets the result of a
// request whose caller stopped waiting, to undo it.
func start[T any](e *Engine, f func() (T, error), orphan func(T, error)) *pending[T] {
	return zkconn.Start(e.zc, f, orphan)
}

// do runs the request f, again after a transient failure, within ctx and
// the connect timeout. f must be safe to repeat.
func do[T any](e *Engine, ctx context.Context, f func() (T, error)) (T, error) {
	return zkconn.Do(ctx, e.zc, f)
}

// spawn runs f on a worker goroutine that Close waits for; false once the
// engine is closing.
func (e *Engine) spawn(f func()) bool { return e.zc.Spawn(f) }

// refused tells that no server of the ensemble accepts a connection.
func (e *Engine) refused() bool { return e.zc.Refused() }

// closed reports whether Close has begun.
func (e *Engine) closed() bool { return e.core.Closed() || e.zc.Closing() }

// reapTask is a node the engine gave up but could not delete on the spot:
// by path, or the protected node of guid under parent. The connection's
// reaper deletes it once the ensemble answers (Curator's guaranteed
// delete); the end of the session deletes it too.
type reapTask struct {
	path         string
	parent, guid string
}

// reap queues t. It may be called with e.mu held.
func (e *Engine) reap(t reapTask) {
	if t.path != "" {
		e.zc.Reap(t.path)
		return
	}
	e.zc.ReapProtected(t.parent, t.guid)
}

// remove deletes a node, whatever its version; unsure when a retry found it
// gone after an attempt whose reply was lost.
func (e *Engine) remove(ctx context.Context, path string) (unsure bool, err error) {
	return e.zc.Delete(ctx, path, -1)
}

func (e *Engine) children(ctx context.Context, parent string) ([]string, error) {
	return do(e, ctx, func() ([]string, error) {
		children, _, err := e.conn.Children(parent)
		return children, err
	})
}

// watch sets a watch on a node that exists: the channel gets its deletion
// (or a change). It returns ErrNoNode, and sets no watch, when it is gone.
func (e *Engine) watch(ctx context.Context, path string) (<-chan gozk.Event, error) {
	return do(e, ctx, func() (<-chan gozk.Event, error) {
		_, _, ch, err := e.conn.GetW(path)
		return ch, err
	})
}

// sequence parses the sequence number ZooKeeper appended to a node name.
func sequence(name string) (int64, bool) { return zkconn.Sequence(name) }
