package zk

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
)

// The engine tracks its nodes, waiting or holding, by the epoch of the
// session they were created in (zkconn.Epoch): when the epoch ends, or a
// watched node is deleted, the holds among them are lost.

// node is one of the engine's lock nodes, waiting or holding.
type node struct {
	path    string
	parent  string
	name    string        // last path element
	ep      *zkconn.Epoch // the epoch it was created in
	gone    chan struct{} // closed when the engine stops tracking it
	hold    *driver.Hold  // set when granted; guarded by Engine.mu
	watched atomic.Bool   // a watch on the node reports its deletion
	arm     *time.Timer   // sets the watch on a held node; guarded by Engine.mu
	// marker is the version of the hold's delay marker (delay.go), -1
	// without one; set before the grant.
	marker int32
	// rec is a heavy node's record (weight.go); nil for weight 1.
	rec *record
	// czxid is its create's zxid: a downgrade's name carries its
	// writer's, which may hold with another token (weight.go).
	czxid int64
}

// forgetLocked stops tracking n, and reports whether it was still
// tracked. Called with e.mu held.
func (e *Engine) forgetLocked(n *node) bool {
	if e.nodes[n.path] != n {
		return false
	}
	delete(e.nodes, n.path)
	if n.arm != nil {
		n.arm.Stop()
	}
	e.zc.ParentLeft(n.parent)
	close(n.gone)
	return true
}

// epochLost gives up every node of ep, which ended (zkconn.Config's
// OnEpochLost): every hold among them is lost. With reap, the nodes may
// still exist (the session may yet come back) and are deleted in the
// background.
func (e *Engine) epochLost(ep *zkconn.Epoch, why string, reap bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var lost []*driver.Hold
	for path, n := range e.nodes {
		if n.ep != ep {
			continue
		}
		e.forgetLocked(n)
		if n.hold != nil {
			n.hold.MarkLost()
			lost = append(lost, n.hold)
		}
		if reap {
			e.zc.Reap(path)
		}
	}
	driver.WarnLost(e.log, "zk", lost, errors.New(why))
}

// errDisconnected is why the holds of a session whose connection dropped
// are at risk.
var errDisconnected = fmt.Errorf("zk: %w: connection to the ensemble lost; the session may still come back", locker.ErrUnavailable)

// epochAtRisk reports the holds of ep at risk: its connection dropped
// (zkconn.Config's OnDisconnected), and they are lost unless the session
// comes back within left, the session timeout at most.
func (e *Engine) epochAtRisk(ep *zkconn.Epoch, left time.Duration) {
	e.mu.Lock()
	var holds []*driver.Hold
	for _, n := range e.nodes {
		if n.ep == ep && n.hold != nil {
			holds = append(holds, n.hold)
		}
	}
	e.mu.Unlock()
	for _, h := range holds {
		h.MarkAtRisk(left, errDisconnected)
	}
}

// nodeDeleted handles the deletion of a watched node: when it is one of
// ours and held, the hold is lost.
func (e *Engine) nodeDeleted(path string) {
	e.mu.Lock()
	n := e.nodes[path]
	e.mu.Unlock()
	if n != nil {
		e.lostNode(n, "node deleted")
	}
}

// nodeChanged sets the watch on a held node again after a change of its
// data (by hand, say), which used the watch up: a deletion after it would
// go unseen.
func (e *Engine) nodeChanged(path string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := e.nodes[path]; n != nil && n.hold != nil && n.watched.Swap(false) {
		e.armSoon(n, nil)
	}
}

// lostNode stops tracking n, which is gone; its hold, if any, is lost.
func (e *Engine) lostNode(n *node, why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.forgetLocked(n) && n.hold != nil {
		n.hold.MarkGone()
		driver.WarnLost(e.log, "zk", []*driver.Hold{n.hold}, errors.New(why))
	}
}

// track starts watching for the loss of a node the engine just created.
// It must be called before the watch on the node is set, so that no
// deletion event is missed.
func (e *Engine) track(path, parent string, version int32) *node {
	n := &node{path: path, parent: parent, name: path[len(parent)+1:], gone: make(chan struct{}), marker: -1}
	e.mu.Lock()
	defer e.mu.Unlock()
	n.ep = e.zc.Epoch()
	if n.ep == nil || n.ep.IsLost() {
		close(n.gone)
		e.zc.Reap(path)
		return n
	}
	e.nodes[path] = n
	e.zc.ParentUsed(parent, version)
	return n
}

// untrack stops tracking n; it reports whether n was still tracked.
func (e *Engine) untrack(n *node) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.forgetLocked(n)
}

// grant makes n the node of hold h, with token, unless n is no longer
// trustworthy: gone, or of an epoch that ended. A watch on n is set in the
// background, unless it has one, driver.WatchHeldAfter from now; or at once after
// first, when not nil: a change of n's data that must not use the watch
// up, and that a waiter waits for.
func (e *Engine) grant(h *driver.Hold, n *node, czxid int64, first func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.nodes[n.path] != n || n.ep != e.zc.Epoch() || n.ep.IsLost() {
		return false
	}
	n.hold = h
	h.Token = uint64(czxid)
	h.State = n
	switch {
	case n.watched.Load():
	case first != nil:
		e.armSoon(n, first)
	default:
		n.arm = time.AfterFunc(driver.WatchHeldAfter, func() { e.armHeld(n) })
	}
	return true
}

// armHeld sets the watch on n, unless the engine stopped tracking it
// meanwhile.
func (e *Engine) armHeld(n *node) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.nodes[n.path] == n && !n.watched.Load() {
		e.armSoon(n, nil)
	}
}
