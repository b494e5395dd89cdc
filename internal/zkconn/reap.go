package zkconn

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"
)

// FindProtected returns the path of the protected node of guid under
// parent, or "" when there is none: after a create whose reply was lost.
// Should there be more than one, it keeps the lowest and reaps the others.
func (c *Conn) FindProtected(ctx context.Context, parent, guid string) (string, error) {
	// Sync first, so that the read sees every write the leader committed,
	// the lost create included.
	if _, err := Do(ctx, c, func() (string, error) { return c.client.Sync(parent) }); err != nil && !errors.Is(err, gozk.ErrNoNode) {
		return "", err
	}
	children, err := Do(ctx, c, func() ([]string, error) {
		children, _, err := c.client.Children(parent)
		return children, err
	})
	if errors.Is(err, gozk.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	mine := Queue(slices.DeleteFunc(children, func(n string) bool { return !strings.HasPrefix(n, ProtectedPrefix+guid) }))
	if len(mine) == 0 {
		return "", nil
	}
	for _, extra := range mine[1:] {
		c.Reap(parent + "/" + extra)
	}
	return parent + "/" + mine[0], nil
}

// FindProtectedStat is FindProtected, and the node's Stat when there is
// one: after a create whose reply was lost, the node it may have made.
// When it cannot tell, it returns the error and has the node, if any,
// reaped.
func (c *Conn) FindProtectedStat(ctx context.Context, parent, guid string) (string, *gozk.Stat, error) {
	path, err := c.FindProtected(ctx, parent, guid)
	if err == nil && path != "" {
		var st *gozk.Stat
		st, err = Do(ctx, c, func() (*gozk.Stat, error) {
			_, st, err := c.client.Get(path)
			return st, err
		})
		if err == nil {
			return path, st, nil
		}
		if errors.Is(err, gozk.ErrNoNode) {
			return "", nil, nil // gone with its session meanwhile
		}
	}
	if err != nil {
		c.ReapProtected(parent, guid)
	}
	return "", nil, err
}

// Delete deletes path if it has version (-1: any). When an attempt's reply
// was lost and a later one finds no node, the first one presumably deleted
// it: that is a success, but an unsure one.
func (c *Conn) Delete(ctx context.Context, path string, version int32) (unsure bool, err error) {
	var lost atomic.Bool
	_, err = Do(ctx, c, func() (struct{}, error) {
		err := c.client.Delete(path, version)
		if err != nil && Retryable(err) {
			lost.Store(true)
		}
		return struct{}{}, err
	})
	if errors.Is(err, gozk.ErrNoNode) && lost.Load() {
		return true, nil
	}
	return false, err
}

// DeleteLater deletes path on a worker: the caller returns at once, and the
// node goes as soon as the ensemble answers, within the connect timeout;
// past that the reaper goes on. Once closing, the end of the session
// deletes it.
func (c *Conn) DeleteLater(path string) {
	c.Go(func(context.Context) {
		_, err := c.Delete(context.Background(), path, -1) // bounded by Do
		if err != nil && !errors.Is(err, gozk.ErrNoNode) && !c.Closing() {
			c.Reap(path)
		}
	})
}

// DeleteNow deletes path within d (and the connect timeout), for a node
// the ensemble has just answered about; past d, or on failure, the reaper
// goes on.
func (c *Conn) DeleteNow(path string, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), min(d, c.cfg.ConnectTimeout))
	_, err := c.Delete(ctx, path, -1)
	cancel()
	if err != nil && !errors.Is(err, gozk.ErrNoNode) && !errors.Is(err, ErrClosed) {
		c.Reap(path)
	}
}

// orphan is a node given up but not deleted on the spot: a release or a
// cancelled wait that met a dropped connection, a create abandoned in
// flight, the nodes of an epoch that ended while the session may live on.
// Like Curator's guaranteed delete, the reaper retries until the node is
// gone; the end of the session deletes an ephemeral node too.
type orphan struct {
	path         string // the node to delete, or:
	parent, guid string // the protected node of guid under parent, if any
}

// String names the node in logs.
func (o orphan) String() string {
	if o.path != "" {
		return o.path
	}
	return o.parent + "/" + ProtectedPrefix + o.guid
}

// Reap has path deleted in the background, until it is gone.
func (c *Conn) Reap(path string) { c.reap(orphan{path: path}) }

// ReapProtected has the protected node of guid under parent, if any,
// deleted in the background, until it is gone.
func (c *Conn) ReapProtected(parent, guid string) { c.reap(orphan{parent: parent, guid: guid}) }

func (c *Conn) reap(o orphan) {
	c.reapMu.Lock()
	c.reapQ = append(c.reapQ, o)
	c.reapMu.Unlock()
	poke(c.reapWake)
}

// reaper deletes the orphans until Close.
func (c *Conn) reaper() {
	defer c.wg.Done()
	backoff := MinBackoff
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.reapMu.Lock()
		tasks := c.reapQ
		c.reapQ = nil
		c.reapMu.Unlock()
		again, closed := c.reapAll(tasks)
		if closed {
			return // the end of the session deletes the nodes
		}
		if len(again) == 0 {
			backoff = MinBackoff
			select {
			case <-c.done:
				return
			case <-c.reapWake:
			}
			continue
		}
		c.reapMu.Lock()
		c.reapQ = append(again, c.reapQ...)
		c.reapMu.Unlock()
		c.log.Debug("zk: nodes left to delete", "count", len(again))
		// Again after the backoff, or as soon as a lost connection is back.
		var back <-chan struct{}
		if up := c.Up(); !isClosed(up) {
			back = up
		}
		timer.Reset(backoff)
		backoff = min(backoff*2, time.Second)
		select {
		case <-c.done:
			return
		case <-timer.C:
		case <-back:
		}
	}
}

// reapAll deletes the nodes of tasks and returns those to try again: all
// from the first that met a dropped connection.
func (c *Conn) reapAll(tasks []orphan) (again []orphan, closed bool) {
	for i, o := range tasks {
		err := c.reapOne(o)
		switch {
		case err == nil:
		case errors.Is(err, ErrClosed) || c.Closing():
			return nil, true
		case Retryable(err):
			return tasks[i:], false // the ensemble is away: all of them later
		default:
			c.log.Warn("zk: cannot delete an abandoned node", "node", o.String(), "err", err)
		}
	}
	return nil, false
}

// reapOne deletes the node of o; a node already gone is a success.
func (c *Conn) reapOne(o orphan) error {
	ctx := context.Background() // Do is bounded by the connect timeout and Close
	path := o.path
	if path == "" {
		var err error
		if path, err = c.FindProtected(ctx, o.parent, o.guid); err != nil || path == "" {
			return err
		}
	}
	_, err := c.Delete(ctx, path, -1)
	if err == nil || errors.Is(err, gozk.ErrNoNode) {
		return nil
	}
	return c.GiveUp(ctx, err)
}
