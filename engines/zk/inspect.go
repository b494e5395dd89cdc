package zk

import (
	"context"
	"errors"
	"fmt"

	gozk "github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
)

var _ locker.Inspector = (*Engine)(nil)

// maxNodeReads bounds the reads of lock nodes Inspect has in flight.
const maxNodeReads = 8

// forceAttempts bounds how often ForceUnlock tries again when the node it
// read was deleted (released, or gone with its session) before it could
// delete it.
const forceAttempts = 5

// queued is one lock node as read by Inspect and ForceUnlock.
type queued struct {
	path    string
	owner   string
	czxid   int64
	version int32
}

func (q queued) holder() locker.Holder {
	return locker.Holder{Owner: q.owner, Token: uint64(q.czxid)}
}

// Inspect reports who holds name and who waits for it, first in line
// first: one listing of the lock's nodes, sorted by sequence as the
// engine's acquisitions sort them, then one read of each node, in
// parallel. Owner is a node's data, Token its czxid (a waiter's is the
// token it holds with once granted). TTL is 0: the owner's session, not a
// per-hold TTL, keeps a hold. A node deleted between the listing and its
// read is left out.
func (e *Engine) Inspect(ctx context.Context, name string) (locker.Inspection, error) {
	if err := locker.ValidateName(name); err != nil {
		return locker.Inspection{}, fmt.Errorf("zk: inspect: %w", err)
	}
	if e.closed() {
		return locker.Inspection{}, e.fail("inspect", name, errClosed)
	}
	names, err := e.queue(ctx, e.lockPath(name))
	if err != nil {
		return locker.Inspection{}, e.fail("inspect", name, err)
	}
	nodes, err := e.readNodes(ctx, e.lockPath(name), names)
	if err != nil {
		return locker.Inspection{}, e.fail("inspect", name, err)
	}
	in := locker.Inspection{}
	for i, q := range nodes {
		h := q.holder()
		if i == 0 {
			in.Holder = &h
			continue
		}
		in.Waiters = append(in.Waiters, h)
	}
	return in, nil
}

// ForceUnlock removes the current hold of name, whoever owns it, and
// returns the hold it removed; ErrNotHeld when the name is free. It
// deletes the lowest lock node only if it still has the version read,
// and reads the new lowest node, to try again, when the hold changed
// meanwhile. The next waiter, watching that node, takes the lock; the
// forced-out owner's engine learns of it at once from its watch on the
// node, set at the grant: Lost closes and Unlock returns ErrLockLost. For operators
// clearing a stuck hold.
func (e *Engine) ForceUnlock(ctx context.Context, name string) (locker.Holder, error) {
	if err := locker.ValidateName(name); err != nil {
		return locker.Holder{}, fmt.Errorf("zk: force unlock: %w", err)
	}
	if e.closed() {
		return locker.Holder{}, e.fail("force unlock", name, errClosed)
	}
	parent := e.lockPath(name)
	for range forceAttempts {
		names, err := e.queue(ctx, parent)
		if err != nil {
			return locker.Holder{}, e.fail("force unlock", name, err)
		}
		if len(names) == 0 {
			return locker.Holder{}, fmt.Errorf("zk: force unlock %q: %w", name, locker.ErrNotHeld)
		}
		first, err := e.readNodes(ctx, parent, names[:1])
		if err != nil {
			return locker.Holder{}, e.fail("force unlock", name, err)
		}
		if len(first) == 0 {
			continue // deleted since the listing
		}
		_, err = e.zc.Delete(ctx, first[0].path, first[0].version)
		switch {
		case err == nil:
			return first[0].holder(), nil
		case errors.Is(err, gozk.ErrNoNode), errors.Is(err, gozk.ErrBadVersion):
			continue
		}
		return locker.Holder{}, e.fail("force unlock", name, err)
	}
	return locker.Holder{}, changedHands(name)
}

// queue lists the lock nodes under parent, the holder first, then the
// waiters in line; none when parent does not exist.
func (e *Engine) queue(ctx context.Context, parent string) ([]string, error) {
	children, err := e.children(ctx, parent)
	if errors.Is(err, gozk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// Ordered as position orders them: by sequence, then by name.
	return zkconn.Queue(children), nil
}

// readNodes reads the nodes names under parent, at most maxNodeReads at a
// time, in their order; those deleted meanwhile are left out.
func (e *Engine) readNodes(ctx context.Context, parent string, names []string) ([]queued, error) {
	nodes := make([]*queued, len(names))
	var g errgroup.Group
	g.SetLimit(maxNodeReads)
	for i, n := range names {
		g.Go(func() error {
			path := parent + "/" + n
			q, err := do(e, ctx, func() (*queued, error) {
				data, st, err := e.conn.Get(path)
				if err != nil {
					return nil, err
				}
				return &queued{path: path, owner: string(data), czxid: st.Czxid, version: st.Version}, nil
			})
			switch {
			case err == nil:
				nodes[i] = q
			case !errors.Is(err, gozk.ErrNoNode):
				return fmt.Errorf("node %s: %w", n, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []queued
	for _, q := range nodes {
		if q != nil {
			out = append(out, *q)
		}
	}
	return out, nil
}
