package zk

import (
	"errors"
	"strings"
	"time"

	gozk "github.com/go-zookeeper/zk"
)

// reapTask is a node the engine gave up but could not delete on the spot:
// a release or a cancelled wait that met a dropped connection, a create
// abandoned in flight, the nodes of an epoch that ended while the session
// may live on. Like Curator's guaranteed delete, the reaper retries until
// the node is gone; the end of the session deletes it too.
type reapTask struct {
	path         string // the node to delete, or:
	parent, guid string // delete the node of guid under parent, if any
}

// reap queues t. It may be called with e.mu held.
func (e *Engine) reap(t reapTask) {
	e.reapMu.Lock()
	e.reapQ = append(e.reapQ, t)
	e.reapMu.Unlock()
	poke(e.reapWake)
}

// reaper runs the reap tasks until Close.
func (e *Engine) reaper() {
	defer e.wg.Done()
	backoff := minBackoff
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		e.reapMu.Lock()
		tasks := e.reapQ
		e.reapQ = nil
		e.reapMu.Unlock()
		var again []reapTask
		for i, t := range tasks {
			err := e.reapOne(t)
			switch {
			case err == nil:
				continue
			case errors.Is(err, errClosed) || e.ctx.Err() != nil:
				return // the end of the session deletes the nodes
			case retryable(err):
				// The ensemble is away: all of them later.
				again = tasks[i:]
			default:
				e.log.Warn("zk: cannot delete an abandoned lock node", "node", t.String(), "err", err)
				continue
			}
			break
		}
		if len(again) == 0 {
			backoff = minBackoff
			select {
			case <-e.ctx.Done():
				return
			case <-e.reapWake:
			}
			continue
		}
		e.reapMu.Lock()
		e.reapQ = append(again, e.reapQ...)
		e.reapMu.Unlock()
		e.log.Debug("zk: lock nodes left to delete", "count", len(again))
		// Again after the backoff, or as soon as a lost connection is back.
		var back <-chan struct{}
		if up := e.upChan(); !isClosed(up) {
			back = up
		}
		timer.Reset(backoff)
		backoff = min(backoff*2, time.Second)
		select {
		case <-e.ctx.Done():
			return
		case <-timer.C:
		case <-back:
		}
	}
}

// reapOne deletes the node of t; a node already gone is a success.
func (e *Engine) reapOne(t reapTask) error {
	path := t.path
	if path == "" {
		var err error
		if path, err = e.findOwn(e.ctx, t.parent, t.guid); err != nil || path == "" {
			return err
		}
	}
	_, err := e.remove(e.ctx, path)
	if err == nil || errors.Is(err, gozk.ErrNoNode) {
		return nil
	}
	if e.ctx.Err() != nil || isCtx(err) {
		return e.stepErr(e.ctx, err)
	}
	return err
}

// String names the task's node in logs.
func (t reapTask) String() string {
	if t.path != "" {
		return t.path
	}
	return strings.Join([]string{t.parent, protectedPrefix + t.guid}, "/")
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
