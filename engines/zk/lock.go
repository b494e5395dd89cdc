package zk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
)

// Lock nodes are named like Curator's protected ephemeral sequential nodes:
// "_c_<guid>-lock-<sequence>". The guid, new for every node, lets the
// engine find its node after a create whose reply was lost.
const (
	protectedPrefix = zkconn.ProtectedPrefix
	lockMarker      = "-lock-"
)

// errRestart means the engine lost its node while queueing (deleted, or its
// session ended): the acquisition starts over with a new node.
var errRestart = errors.New("zk: lock node vanished while queueing")

// maxTryRestarts bounds the restarts of a TryLock.
const maxTryRestarts = 2

// lockPath is the parent node of a lock's nodes.
func (e *Engine) lockPath(name string) string { return e.root + "/" + zkconn.EscapeName(name) }

// Acquire implements locker.Backend: it queues an ephemeral sequential node
// under the lock's parent; the lowest node holds, every other watches only
// the node just before its own.
func (e *Engine) Acquire(ctx context.Context, h *locker.Hold, wait bool) (bool, error) {
	if e.refused() {
		// Not worth waiting the connect timeout for a reconnection.
		return false, e.fail("acquire", h.Name, zkconn.ErrNoServer)
	}
	parent, attempt := e.lockPath(h.Name), e.attempt
	if h.Kind != locker.KindMutex {
		parent, attempt = e.familyPath(h.Kind, h.Name), e.familyAttempt
	}
	for restarts := 0; ; restarts++ {
		ok, err := attempt(ctx, h, parent, wait)
		if !errors.Is(err, errRestart) {
			return ok, err
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if !wait && restarts >= maxTryRestarts {
			return false, e.fail("acquire", h.Name, err)
		}
		e.log.Debug("zk: queueing again", "name", h.Name, "err", err)
		h.Asking()
	}
}

// attempt queues one node and waits, if asked, until it is the lowest.
//
// Uncontended, it makes the requests go-zookeeper's own lock recipe makes,
// a create and a listing, then a delete to release, but the listing does
// not wait for the create's reply: it is sent as soon as the create is on
// the wire. ZooKeeper answers a session's requests in order, so the
// listing sees the new node. Should it not (the connection changed in
// between), the engine lists again.
func (e *Engine) attempt(ctx context.Context, h *locker.Hold, parent string, wait bool) (bool, error) {
	n, czxid, children, err := e.enqueue(ctx, h, parent)
	if err != nil {
		return false, e.fail("acquire", h.Name, err)
	}
	for {
		if children == nil {
			h.Asking()
			if children, err = e.children(ctx, parent); err != nil {
				return false, e.abandon(ctx, h, n, err)
			}
		}
		pred, first, found := position(children, n.name)
		children = nil
		switch {
		case !found:
			e.untrack(n)
			return false, errRestart
		case first:
			if h.Delay > 0 {
				switch err := e.waitBar(ctx, h, n, wait); {
				case errors.Is(err, errBarred):
					e.discard(n, true)
					return false, nil
				case err != nil:
					return false, err
				}
			}
			if !e.grant(h, n, czxid, nil) {
				e.dropBar(ctx, h, n) // never held: a claim that bars nothing
				e.discard(n, true)
				return false, errRestart
			}
			return true, nil
		case !wait:
			e.discard(n, true)
			return false, nil
		}
		if err := e.awaitPred(ctx, h, n, parent+"/"+pred); err != nil {
			return false, err
		}
	}
}

// enqueue creates and tracks the attempt's node, and returns its token and
// the listing sent right behind the create (nil when it missed the node).
func (e *Engine) enqueue(ctx context.Context, h *locker.Hold, parent string) (*node, int64, []string, error) {
	guid := zkconn.NewGUID()
	sent, unexpect := e.zc.Sent(guid)
	var early *pending[[]string]
	c, err := e.create(ctx, zkconn.Protected{Parent: parent, GUID: guid, Suffix: lockMarker, Data: []byte(h.Owner), Sent: sent, OnSent: func() {
		early = start(e, func() ([]string, error) {
			children, _, err := e.conn.Children(parent)
			return children, err
		}, nil)
	}})
	unexpect()
	if err != nil {
		return nil, 0, nil, err
	}
	n := e.track(c.Path, parent, c.PVersion)
	if early == nil {
		return n, c.Czxid, nil, nil
	}
	children, err := early.WaitUntil(ctx, time.Now().Add(e.connectTimeout))
	if err != nil || !slices.Contains(children, n.name) {
		children = nil
	}
	return n, c.Czxid, children, nil
}

// awaitPred waits for the deletion of pred, the node just before n. It
// returns nil when it is time to look again, errRestart when n is lost,
// or the error Acquire returns.
func (e *Engine) awaitPred(ctx context.Context, h *locker.Hold, n *node, pred string) error {
	h.Asking()
	ch, err := e.watch(ctx, pred)
	switch {
	case errors.Is(err, gozk.ErrNoNode):
		return nil // gone already
	case err != nil:
		return e.abandon(ctx, h, n, err)
	}
	ev, err := await(e, ctx, h, n, ch)
	if err != nil || ev.Type != gozk.EventNotWatching {
		return err
	}
	// The session expired, or the engine is closing: the node went with
	// the session.
	e.discard(n, false)
	if e.zc.Closing() {
		return e.fail("acquire", h.Name, errClosed)
	}
	return errRestart
}

// await waits for ch while n, h's node, waits in line: it returns
// errRestart when n is lost, ctx.Err() (n deleted) when ctx ends, and the
// error Acquire returns when the engine closes.
func await[T any](e *Engine, ctx context.Context, h *locker.Hold, n *node, ch <-chan T) (T, error) {
	var zero T
	select {
	case v := <-ch:
		return v, nil
	case <-n.gone:
		return zero, errRestart
	case <-ctx.Done():
		e.drop(n)
		return zero, ctx.Err() // answered: the name was held
	case <-e.zc.Done():
		return zero, e.fail("acquire", h.Name, errClosed)
	}
}

// armSoon sets a watch on the held node n in the background, so that its
// deletion by someone else is reported at once (nodeDeleted): first, when
// not nil, runs before, on the same worker. A node deleted before the watch
// is set is found by the watch's read. The grant does not wait for it; it
// costs every hold one read, a short one too. Called with e.mu held.
func (e *Engine) armSoon(n *node, first func()) {
	e.spawn(func() {
		if first != nil {
			first()
		}
		// do is bounded by the connect timeout and Close.
		if errors.Is(e.arm(context.Background(), n), locker.ErrLockLost) {
			e.lostNode(n, "node deleted")
		}
	})
}

// arm sets a watch on a held node. It returns ErrLockLost when the node is
// gone; a failure to reach the ensemble is left to the session monitor.
func (e *Engine) arm(ctx context.Context, n *node) error {
	_, err := do(e, ctx, func() (struct{}, error) {
		_, _, _, err := e.conn.GetW(n.path)
		return struct{}{}, err
	})
	switch {
	case err == nil:
		n.watched.Store(true)
	case errors.Is(err, gozk.ErrNoNode):
		return locker.ErrLockLost
	}
	return nil
}

// abandon gives up a queued node after err and returns what Acquire
// returns.
func (e *Engine) abandon(ctx context.Context, h *locker.Hold, n *node, err error) error {
	if errors.Is(err, gozk.ErrNoNode) {
		// The node, or its parent and so the node, is gone.
		e.untrack(n)
		return errRestart
	}
	// Deleted at once when the caller gave up, by the reaper when the
	// ensemble is in trouble.
	if ctx.Err() != nil {
		e.drop(n)
	} else {
		e.discard(n, false)
	}
	return e.fail("acquire", h.Name, err)
}

// cleanupTimeout bounds the delete of a node of an unsuccessful attempt
// that the ensemble has just answered; past it the reaper goes on.
const cleanupTimeout = 250 * time.Millisecond

// drop deletes the node of a caller who gave up, unless the engine already
// stopped tracking it, in the background: the caller returns at once even
// when the ensemble does not answer.
func (e *Engine) drop(n *node) {
	if e.untrack(n) {
		e.zc.DeleteLater(n.path)
	}
}

// discard deletes a node the engine no longer wants, unless it already
// stopped tracking it (gone, or given to the reaper): with now, within
// cleanupTimeout, for an attempt the ensemble has just answered; otherwise,
// and when that fails, the reaper does.
func (e *Engine) discard(n *node, now bool) {
	switch {
	case !e.untrack(n):
	case now:
		e.zc.DeleteNow(n.path, cleanupTimeout)
	default:
		e.reap(reapTask{path: n.path})
	}
}

// position finds own among the lock nodes in children: whether it is
// there, whether it is the first, and the node just before it.
func position(children []string, own string) (pred string, first, found bool) {
	seq, ok := sequence(own)
	if !ok {
		return "", false, false
	}
	predSeq := int64(-1)
	for _, c := range children {
		if c == own {
			found = true
			continue
		}
		s, ok := sequence(c)
		if !ok || s > seq || (s == seq && c > own) {
			continue
		}
		if s > predSeq || (s == predSeq && c > pred) {
			pred, predSeq = c, s
		}
	}
	return pred, found && pred == "", found
}

// HonoursDeadlines implements locker.DeadlineHonourer: a release returns
// when its context ends.
func (e *Engine) HonoursDeadlines() bool { return true }

// Release implements locker.Backend: it deletes the hold's node, which is
// the hold's own (its name carries a guid of its own), whatever its version;
// with a lock delay, its delay marker first (delay.go).
func (e *Engine) Release(ctx context.Context, h *locker.Hold) error {
	if n, ok := h.State.(*node); ok && h.Kind == locker.KindMutex {
		e.dropBar(ctx, h, n)
	}
	return e.releaseNode(ctx, h)
}

// releaseNode deletes the hold's node.
func (e *Engine) releaseNode(ctx context.Context, h *locker.Hold) error {
	n, ok := h.State.(*node)
	if !ok {
		return fmt.Errorf("zk: release %q: %w", h.Name, locker.ErrLockLost)
	}
	e.untrack(n)
	unsure, err := e.remove(ctx, n.path)
	switch {
	case err == nil && unsure && n.ep.IsLost():
		// A reply was lost and the session ended: the node may have gone
		// with the session before the delete.
		return fmt.Errorf("zk: release %q: %w", h.Name, locker.ErrLockLost)
	case err == nil:
		return nil
	case errors.Is(err, gozk.ErrNoNode):
		return fmt.Errorf("zk: release %q: %w", h.Name, locker.ErrLockLost)
	case errors.Is(err, errClosed):
		return e.fail("release", h.Name, err)
	}
	// The node is deleted in the background once the ensemble answers,
	// unless the session ends first and takes it along.
	e.reap(reapTask{path: n.path})
	return e.fail("release", h.Name, e.zc.GiveUp(ctx, err))
}

// created is a node the engine created: its path and czxid, and its
// parent's data version right after (-1 when not known).
type created = zkconn.Created

// create makes the engine's node for one attempt, "_c_<guid><suffix><seq>"
// under parent, with the parent and the namespace when they are missing
// (zkconn.CreateProtected: the token comes in the reply; a create whose
// reply was lost is found by its guid; one the caller abandoned is undone).
func (e *Engine) create(ctx context.Context, p zkconn.Protected) (created, error) {
	p.ACL, p.Check = e.acl, e.afterCreate
	return e.zc.CreateProtected(ctx, p)
}
