package zk

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	gozk "github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

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
	if err := e.checkFamily("inspect", kind, name); err != nil {
		return locker.FamilyInspection{}, err
	}
	nodes, count, err := e.familyQueue(ctx, kind, e.familyPath(kind, name))
	if err != nil {
		return locker.FamilyInspection{}, e.fail("inspect", name, err)
	}
	in := locker.FamilyInspection{Permits: count}
	for _, n := range nodes {
		if n.granted {
			in.Holders = append(in.Holders, n.fh)
		} else {
			in.Waiters = append(in.Waiters, n.fh)
		}
	}
	return in, nil
}

// ForceUnlockFamily ends, whoever owns them, the holds of the read-write
// lock (kind KindRead or KindWrite: both sides) or the semaphore
// (KindPermit) name whose token is token, or every hold when token is 0,
// and returns them in line order; ErrNotHeld when none matched. A
// downgraded reader's token is its write hold's, so that token ends both.
// It looks as InspectFamily does and deletes each matching hold's node
// only if it still has the version read (a semaphore hold changes its
// data once, to wake its successor: then it reads the node again), so
// that it never ends a hold granted after the look: waiters stay queued
// and take their turn as after a release. When every hold it found went
// before its delete, it looks again. The forced-out owners' engines learn
// of it as ForceUnlock's owner does: Lost closes and Unlock returns
// ErrLockLost. On an error, the holds it ended before come with it.
func (e *Engine) ForceUnlockFamily(ctx context.Context, kind locker.Kind, name string, token uint64) ([]locker.FamilyHolder, error) {
	if err := e.checkFamily("force unlock", kind, name); err != nil {
		return nil, err
	}
	parent := e.familyPath(kind, name)
	for range forceAttempts {
		nodes, _, err := e.familyQueue(ctx, kind, parent)
		if err != nil {
			return nil, e.fail("force unlock", name, err)
		}
		var targets []familyNode
		for _, n := range nodes {
			if n.granted && (token == 0 || n.fh.Token == token) {
				targets = append(targets, n)
			}
		}
		if len(targets) == 0 {
			return nil, fmt.Errorf("zk: force unlock %s %q: %w", kind, name, locker.ErrNotHeld)
		}
		ended, err := e.forceNodes(ctx, parent, targets)
		if err != nil {
			return ended, e.fail("force unlock", name, err)
		}
		if len(ended) > 0 {
			return ended, nil
		}
	}
	return nil, changedHands(name)
}

// changedHands is ForceUnlock's and ForceUnlockFamily's error when the holds
// of name changed under each of their forceAttempts looks.
func changedHands(name string) error {
	return fmt.Errorf("zk: force unlock %q: the lock changed hands %d times meanwhile: it is not stuck; look again", name, forceAttempts)
}

// forceNodes deletes the nodes of targets, at most maxNodeReads at a time,
// and returns the holds of those it deleted, in their order; those deleted
// by someone else meanwhile are left out.
func (e *Engine) forceNodes(ctx context.Context, parent string, targets []familyNode) ([]locker.FamilyHolder, error) {
	done := make([]bool, len(targets))
	var g errgroup.Group
	g.SetLimit(maxNodeReads)
	for i, t := range targets {
		g.Go(func() error {
			var err error
			done[i], err = e.forceNode(ctx, parent, t.queued)
			return err
		})
	}
	err := g.Wait()
	var ended []locker.FamilyHolder
	for i, t := range targets {
		if done[i] {
			ended = append(ended, t.fh)
		}
	}
	return ended, err
}

// forceNode deletes q if it still has the version read, reading it again
// when its version changed; false when it is gone.
func (e *Engine) forceNode(ctx context.Context, parent string, q queued) (bool, error) {
	for range forceAttempts {
		_, err := e.zc.Delete(ctx, q.path, q.version)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, gozk.ErrNoNode):
			return false, nil
		case !errors.Is(err, gozk.ErrBadVersion):
			return false, fmt.Errorf("node %s: %w", q.path, err)
		}
		again, err := e.readNodes(ctx, parent, []string{q.path[len(parent)+1:]})
		if err != nil || len(again) == 0 {
			return false, err
		}
		q = again[0]
	}
	return false, fmt.Errorf("node %s changed %d times while it was deleted", q.path, forceAttempts)
}

// checkFamily checks the arguments of an operation on a read-write lock or
// a semaphore, and that the engine is open.
func (e *Engine) checkFamily(op string, kind locker.Kind, name string) error {
	if err := locker.ValidateName(name); err != nil {
		return fmt.Errorf("zk: %s: %w", op, err)
	}
	if kind != locker.KindRead && kind != locker.KindWrite && kind != locker.KindPermit {
		return fmt.Errorf("zk: %s %q: %w: kind %v, want read, write or permit", op, name, locker.ErrInvalidArgument, kind)
	}
	if e.closed() {
		return e.fail(op, name, errClosed)
	}
	return nil
}

// familyNode is one node of a read-write lock or a semaphore as
// InspectFamily and ForceUnlockFamily see it.
type familyNode struct {
	queued
	fh      locker.FamilyHolder
	granted bool
}

// familyQueue reads the nodes under parent, a read-write lock's or a
// semaphore's of kind, in line order, and a semaphore's stored count: one
// listing, one read of each node, in parallel. A node deleted between the
// listing and its read is left out.
func (e *Engine) familyQueue(ctx context.Context, kind locker.Kind, parent string) ([]familyNode, int, error) {
	v, err := do(e, ctx, func() (*view, error) {
		v, err := e.look(parent, kind == locker.KindPermit)
		if errors.Is(err, gozk.ErrNoNode) {
			return &view{}, nil
		}
		return v, err
	})
	if err != nil {
		return nil, 0, err
	}
	names := make([]string, len(v.queue))
	for i, en := range v.queue {
		names[i] = en.name
	}
	read, err := e.readNodes(ctx, parent, names)
	if err != nil {
		return nil, 0, err
	}
	byPath := make(map[string]queued, len(read))
	for _, q := range read {
		byPath[q.path] = q
	}
	granted := grantedIn(v.queue, v.count)
	// A writer that downgraded holds still, though decideRW, which decides
	// for a writer yet to be granted, has it wait for its own reader.
	downFrom := make(map[int64]bool)
	for _, en := range v.queue {
		if en.mark == markDown {
			downFrom[en.arg] = true
		}
	}
	var nodes []familyNode
	for i, en := range v.queue {
		q, ok := byPath[parent+"/"+en.name]
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
		held := granted[i] || (en.mark == markWrite && downFrom[q.czxid])
		nodes = append(nodes, familyNode{queued: q, fh: fh, granted: held})
	}
	return nodes, max(v.count, 0), nil
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
