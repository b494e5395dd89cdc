package zkconn

import (
	"context"
	"errors"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"
)

// Deleting empty parents: at most sweepBatch taken at once, deleted by
// sweepWorkers requests in flight.
const (
	sweepBatch   = 256
	sweepWorkers = 16
)

// parentState is what the engine knows of one lock's parent. Guarded by
// Conn.pmu.
type parentState struct {
	live    int   // the engine's nodes under it
	version int32 // its data version after the engine's latest create; -1 unknown
	gen     uint64
}

// idleParent is a parent whose last node of the engine went: it is
// deleted at due unless the engine used it again (gen changed).
type idleParent struct {
	path string
	gen  uint64
	due  time.Time
}

// ParentUsed counts a new node of the caller's under parent, created with
// the parent at version (-1 when not known). Once the caller's last node
// under a parent has been gone for Config.ParentLinger, the sweeper
// deletes the parent if it still has that version: the delete fails,
// harmlessly, when any process used the parent since or when it has
// children, so it cannot race with a waiter. The server's container
// reaper (about 10k a minute) stays the backstop.
func (c *Conn) ParentUsed(parent string, version int32) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	p := c.parents[parent]
	if p == nil {
		p = &parentState{version: -1}
		c.parents[parent] = p
	}
	p.live++
	p.version = max(p.version, version)
}

// ParentWrote records a write of the caller's to parent, which left it at
// version, so that the sweeper's delete does not take the write for
// someone else's use. A parent the caller has no node under is left
// alone.
func (c *Conn) ParentWrote(parent string, version int32) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if p := c.parents[parent]; p != nil {
		p.version = max(p.version, version)
	}
}

// ParentLeft counts a node of the caller's under parent gone, and queues
// the parent for deletion when it was the last.
func (c *Conn) ParentLeft(parent string) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	p := c.parents[parent]
	if p == nil {
		return
	}
	if p.live--; p.live > 0 {
		return
	}
	if c.cfg.ParentLinger <= 0 {
		delete(c.parents, parent)
		return
	}
	p.gen++
	c.idle = append(c.idle, idleParent{path: parent, gen: p.gen, due: time.Now().Add(c.cfg.ParentLinger)})
	if len(c.idle) == 1 {
		poke(c.idleWake)
	}
}

// parentDelete is one conditional delete of an empty parent.
type parentDelete struct {
	path    string
	version int32
}

// dueParents pops the idle parents due by now, at most sweepBatch, and
// says when the next one is due.
func (c *Conn) dueParents(now time.Time) (due []parentDelete, next time.Time) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for len(c.idle) > 0 && len(due) < sweepBatch {
		q := c.idle[0]
		if q.due.After(now) {
			return due, q.due
		}
		c.idle[0] = idleParent{}
		c.idle = c.idle[1:]
		p := c.parents[q.path]
		if p == nil || p.gen != q.gen || p.live > 0 {
			continue // used again meanwhile
		}
		delete(c.parents, q.path)
		if p.version >= 0 {
			due = append(due, parentDelete{q.path, p.version})
		}
	}
	if len(c.idle) == 0 {
		c.idle = nil // let the backing array go
	}
	return due, now.Add(time.Hour)
}

// sweeper deletes idle parents until Close.
func (c *Conn) sweeper() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := c.dueParents(time.Now())
		if len(due) > 0 {
			c.sweep(due)
			continue
		}
		timer.Reset(time.Until(next))
		select {
		case <-c.done:
			return
		case <-c.idleWake:
		case <-timer.C:
		}
	}
}

// sweep deletes parents, sweepWorkers at a time. A parent in use again, or
// already gone, stays as it is; one that cannot be deleted now is left to
// the server's container reaper.
func (c *Conn) sweep(due []parentDelete) {
	var g errgroup.Group
	g.SetLimit(sweepWorkers)
	for _, d := range due {
		g.Go(func() error {
			// Do is bounded by the connect timeout and Close.
			_, err := Do(context.Background(), c, func() (struct{}, error) { return struct{}{}, c.client.Delete(d.path, d.version) })
			switch {
			case err == nil, errors.Is(err, gozk.ErrNotEmpty), errors.Is(err, gozk.ErrBadVersion), errors.Is(err, gozk.ErrNoNode):
			case !c.Closing():
				c.log.Debug("zk: deleting an empty parent failed, left to the server", "node", d.path, "err", err)
			}
			return nil
		})
	}
	_ = g.Wait()
}
