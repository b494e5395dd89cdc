package zk

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/locker"
)

var _ locker.FamilyInspector = (*Engine)(nil)

// InspectFamily reports the holds and the waiters of the read-write lock
// (kind KindRead or KindWrite) or the semaphore (KindPermit) name, in the
// order of their queue: one listing, one read of each node, in parallel,
// and for a semaphore one read of its count. Which nodes hold follows from
// the queue as the engine's acquisitions decide it; a downgraded reader's
// token is its write hold's. TTL is 0: the owner's session keeps a hold.
func (e *Engine) InspectFamily(ctx context.Context, kind locker.Kind, name string) (locker.FamilyInspection, error) {
	if err := locker.ValidateName(name); err != nil {
		return locker.FamilyInspection{}, fmt.Errorf("zk: inspect: %w", err)
	}
	if kind != locker.KindRead && kind != locker.KindWrite && kind != locker.KindPermit {
		return locker.FamilyInspection{}, fmt.Errorf("zk: inspect %q: %w: kind %v, want read, write or permit", name, locker.ErrInvalidArgument, kind)
	}
	if e.closed() {
		return locker.FamilyInspection{}, e.fail("inspect", name, errClosed)
	}
	parent := e.familyPath(kind, name)
	v, err := do(e, ctx, func() (*view, error) {
		v, err := e.look(parent, kind == locker.KindPermit)
		if errors.Is(err, gozk.ErrNoNode) {
			return &view{}, nil
		}
		return v, err
	})
	if err != nil {
		return locker.FamilyInspection{}, e.fail("inspect", name, err)
	}
	names := make([]string, len(v.queue))
	for i, en := range v.queue {
		names[i] = en.name
	}
	nodes, err := e.readNodes(ctx, parent, names)
	if err != nil {
		return locker.FamilyInspection{}, e.fail("inspect", name, err)
	}
	read := make(map[string]queued, len(nodes))
	for _, q := range nodes {
		read[q.path] = q
	}
	in := locker.FamilyInspection{Permits: max(v.count, 0)}
	granted := grantedIn(v.queue, v.count)
	for i, en := range v.queue {
		q, ok := read[parent+"/"+en.name]
		if !ok {
			continue // gone since the listing
		}
		fh := locker.FamilyHolder{Holder: q.holder(), Kind: locker.KindRead, Permits: 1}
		switch en.mark {
		case markWrite:
			fh.Kind = locker.KindWrite
		case markDown:
			fh.Token = uint64(en.arg)
		case markPermit:
			fh.Kind, fh.Permits = locker.KindPermit, int(en.arg)
		}
		if granted[i] {
			in.Holders = append(in.Holders, fh)
		} else {
			in.Waiters = append(in.Waiters, fh)
		}
	}
	return in, nil
}

// grantedIn tells which nodes of a queue hold, by the rules of
// decideRW and decideSem (count is a semaphore's stored count).
func grantedIn(q []entry, count int) []bool {
	granted := make([]bool, len(q))
	for i, en := range q {
		switch en.mark {
		case markPermit:
			granted[i] = decideSem(q, en.name, int(en.arg), count).granted
		case markDown:
			granted[i] = true
		default:
			granted[i] = decideRW(q, en.name, en.mark == markWrite).granted
		}
	}
	return granted
}

// SetPermits stores n as the permit count of semaphore name, creating the
// semaphore's nodes when missing. Holds already granted stay; the waiter
// first in line, which watches the count, looks again at once.
func (e *Engine) SetPermits(ctx context.Context, name string, n int) error {
	if err := locker.ValidateName(name); err != nil {
		return fmt.Errorf("zk: set permits: %w", err)
	}
	if n < 1 {
		return fmt.Errorf("zk: set permits %q: %w: n = %d, want at least 1", name, locker.ErrInvalidArgument, n)
	}
	if e.closed() {
		return e.fail("set permits", name, errClosed)
	}
	parent := e.familyPath(locker.KindPermit, name)
	path, data := parent+"/"+permitsNode, []byte(strconv.Itoa(n))
	set := func() (struct{}, error) {
		_, err := e.conn.Set(path, data, -1)
		if errors.Is(err, gozk.ErrNoNode) {
			_, err = e.conn.Create(path, data, gozk.FlagPersistent, e.acl)
		}
		return struct{}{}, err
	}
	// A create may race with another one, or find no parent: a few times.
	var err error
	for range 3 {
		_, err = do(e, ctx, set)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, gozk.ErrNodeExists):
		case errors.Is(err, gozk.ErrNoNode):
			if err = e.zc.EnsureContainer(ctx, parent, e.acl); err != nil {
				return e.fail("set permits", name, err)
			}
		default:
			return e.fail("set permits", name, err)
		}
	}
	return e.fail("set permits", name, err)
}
