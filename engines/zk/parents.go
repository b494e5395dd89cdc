package zk

import (
	"context"
	"errors"
	"sync"
	"time"

	gozk "github.com/go-zookeeper/zk"
)

// The parent node of a lock, <prefix>/<escaped name>, is created by the
// first acquisition that finds it missing, as a container node. The
// engine deletes it itself once it is empty, not long after its own last
// node under it went (WithParentLinger): the server's container reaper
// alone is slow, about 10k containers a minute by default
// (znode.container.maxPerMinute), so that a process that locked 100k
// names leaves most of their parents for minutes.
//
// The delete is conditional on the parent's data version that the
// engine's latest create under it returned (every create writes the
// parent's data in the same transaction): it fails when any process
// acquired the name since, and when the parent has children (ZooKeeper
// never deletes a node with children), so it cannot race with a waiter.
// A waiter whose create comes just after the delete finds no parent and
// creates it again. The container reaper remains for parents left by a
// process that died, or whose delete failed.

// DefaultParentLinger is how long a lock's parent node stays after the
// engine's last node under it went, unless WithParentLinger says
// otherwise.
const DefaultParentLinger = 5 * time.Second

// Deleting empty parents: at most sweepBatch taken at once, deleted by
// sweepWorkers requests in flight.
const (
	sweepBatch   = 256
	sweepWorkers = 16
)

// parentState is what the engine knows of one lock's parent. Guarded by
// Engine.mu.
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

// parentUsedLocked counts a new node under parent, created with the
// parent at version (-1 when not known). Called with e.mu held.
func (e *Engine) parentUsedLocked(parent string, version int32) {
	p := e.parents[parent]
	if p == nil {
		p = &parentState{version: -1}
		e.parents[parent] = p
	}
	p.live++
	p.version = max(p.version, version)
}

// parentLeftLocked counts a node under parent gone, and queues the parent
// for deletion when it was the engine's last. Called with e.mu held.
func (e *Engine) parentLeftLocked(parent string) {
	p := e.parents[parent]
	if p == nil {
		return
	}
	if p.live--; p.live > 0 {
		return
	}
	if e.linger <= 0 {
		delete(e.parents, parent)
		return
	}
	p.gen++
	e.idle = append(e.idle, idleParent{path: parent, gen: p.gen, due: time.Now().Add(e.linger)})
	if len(e.idle) == 1 {
		poke(e.idleWake)
	}
}

// parentDelete is one conditional delete of an empty parent.
type parentDelete struct {
	path    string
	version int32
}

// dueParents pops the idle parents due by now, at most sweepBatch, and
// says when the next one is due.
func (e *Engine) dueParents(now time.Time) (due []parentDelete, next time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.idle) > 0 && len(due) < sweepBatch {
		q := e.idle[0]
		if q.due.After(now) {
			return due, q.due
		}
		e.idle[0] = idleParent{}
		e.idle = e.idle[1:]
		p := e.parents[q.path]
		if p == nil || p.gen != q.gen || p.live > 0 {
			continue // used again meanwhile
		}
		delete(e.parents, q.path)
		if p.version >= 0 {
			due = append(due, parentDelete{q.path, p.version})
		}
	}
	if len(e.idle) == 0 {
		e.idle = nil // let the backing array go
	}
	return due, now.Add(time.Hour)
}

// sweeper deletes idle parents until Close.
func (e *Engine) sweeper() {
	defer e.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := e.dueParents(time.Now())
		if len(due) > 0 {
			e.sweep(due)
			continue
		}
		timer.Reset(time.Until(next))
		select {
		case <-e.ctx.Done():
			return
		case <-e.idleWake:
		case <-timer.C:
		}
	}
}

// sweep deletes parents, sweepWorkers at a time. A parent in use again, or
// already gone, stays as it is; one that cannot be deleted now is left to
// the server's container reaper.
func (e *Engine) sweep(due []parentDelete) {
	var wg sync.WaitGroup
	work := make(chan parentDelete)
	for range min(sweepWorkers, len(due)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				ctx, cancel := context.WithTimeout(e.ctx, e.connectTimeout)
				_, err := do(e, ctx, func() (struct{}, error) { return struct{}{}, e.conn.Delete(d.path, d.version) })
				cancel()
				switch {
				case err == nil, errors.Is(err, gozk.ErrNotEmpty), errors.Is(err, gozk.ErrBadVersion), errors.Is(err, gozk.ErrNoNode):
				case e.ctx.Err() == nil:
					e.log.Debug("zk: deleting an empty lock parent failed, left to the server", "node", d.path, "err", err)
				}
			}
		}()
	}
	for _, d := range due {
		work <- d
	}
	close(work)
	wg.Wait()
}
