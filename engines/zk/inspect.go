package zk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	gozk "github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

var (
	_ inspect.Inspector       = (*Engine)(nil)
	_ inspect.FamilyInspector = (*Engine)(nil)
)

// maxNodeReads bounds the reads, or deletes, of lock nodes in flight.
const maxNodeReads = 8

// forceAttempts bounds how often a force unlock looks again when the nodes
// it read were deleted (released, or gone with their session) before it
// could delete them.
const forceAttempts = 5

// queued is one node of a queue as read by the inspection: the hold it
// stands for, whether the rules grant it, and its version; gone when it was
// deleted between the listing and its read.
type queued struct {
	path          string
	version       int32
	fh            inspect.FamilyHolder
	granted, gone bool
	rec           *record // a heavy node's record; nil when not one
}

// Inspect reports who holds the mutex name and who waits for it, first in
// line first: one listing of the lock's nodes, then one read of each node,
// in parallel; a node deleted in between is left out. Owner is a node's
// data, Token its czxid (a waiter's is the token it holds with once
// granted). TTL is 0: the owner's session keeps a hold.
func (e *Engine) Inspect(ctx context.Context, name string) (inspect.Inspection, error) {
	if err := e.check("inspect", name); err != nil {
		return inspect.Inspection{}, err
	}
	nodes, _, err := e.queue(ctx, inspect.KindMutex, e.path(inspect.KindMutex, name))
	if err != nil {
		return inspect.Inspection{}, e.fail("inspect", name, err)
	}
	// The holder is the node the rule grants; when it went between the
	// listing and its read, the first node left.
	holder := slices.IndexFunc(nodes, func(q queued) bool { return q.granted && !q.gone })
	if holder < 0 {
		holder = slices.IndexFunc(nodes, func(q queued) bool { return !q.gone })
	}
	in := inspect.Inspection{}
	for i, q := range nodes {
		switch {
		case q.gone:
		case i == holder:
			in.Holder = &q.fh.Holder
		default:
			in.Waiters = append(in.Waiters, q.fh.Holder)
		}
	}
	return in, nil
}

// ForceUnlock removes the current hold of the mutex name, whoever owns it,
// as ForceUnlockFamily does, and returns it; ErrNotHeld when the name is
// free. The next waiter takes the lock. For operators clearing a stuck
// hold.
func (e *Engine) ForceUnlock(ctx context.Context, name string) (inspect.Holder, error) {
	if err := e.check("force unlock", name); err != nil {
		return inspect.Holder{}, err
	}
	ended, err := e.force(ctx, inspect.KindMutex, name, 0)
	if err != nil {
		return inspect.Holder{}, err
	}
	return ended[0].Holder, nil
}

// InspectFamily is Inspect for the read-write lock (kind KindRead or
// KindWrite) or the semaphore (KindPermit) name, with a semaphore's stored
// count; which nodes hold follows from the queue as the engine's
// acquisitions decide it. A downgraded reader's token is its write hold's.
func (e *Engine) InspectFamily(ctx context.Context, kind inspect.Kind, name string) (inspect.FamilyInspection, error) {
	if err := e.checkFamily("inspect", kind, name); err != nil {
		return inspect.FamilyInspection{}, err
	}
	nodes, count, err := e.queue(ctx, kind, e.path(kind, name))
	if err != nil {
		return inspect.FamilyInspection{}, e.fail("inspect", name, err)
	}
	in := inspect.FamilyInspection{Permits: count}
	for _, n := range nodes {
		switch {
		case n.gone:
		case n.granted:
			in.Holders = append(in.Holders, n.fh)
		default:
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
// It looks as InspectFamily does and deletes each matching node only if
// it still has the version read, so that it never ends a hold granted
// after the look. The forced-out owners' engines learn of it at once from
// their watch on the node: Lost closes and Unlock returns ErrLockLost. On
// an error, the holds it ended before come with it.
func (e *Engine) ForceUnlockFamily(ctx context.Context, kind inspect.Kind, name string, token uint64) ([]inspect.FamilyHolder, error) {
	if err := e.checkFamily("force unlock", kind, name); err != nil {
		return nil, err
	}
	return e.force(ctx, kind, name, token)
}

// force is ForceUnlock and ForceUnlockFamily.
func (e *Engine) force(ctx context.Context, kind inspect.Kind, name string, token uint64) ([]inspect.FamilyHolder, error) {
	parent := e.path(kind, name)
	for range forceAttempts {
		nodes, _, err := e.queue(ctx, kind, parent)
		if err != nil {
			return nil, e.fail("force unlock", name, err)
		}
		var targets []queued
		vanished := false // a hold went between the listing and its read
		for _, n := range nodes {
			vanished = vanished || n.granted && n.gone
			if n.granted && !n.gone && (token == 0 || n.fh.Token == token) {
				targets = append(targets, n)
			}
		}
		switch {
		case len(targets) == 0 && vanished:
			continue
		case len(targets) == 0:
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
	return nil, fmt.Errorf("zk: force unlock %q: the lock changed hands %d times meanwhile: it is not stuck; look again", name, forceAttempts)
}

// forceNodes deletes the nodes of targets, at most maxNodeReads at a time,
// and returns the holds of those it deleted, in their order; those deleted
// by someone else meanwhile are left out.
func (e *Engine) forceNodes(ctx context.Context, parent string, targets []queued) ([]inspect.FamilyHolder, error) {
	done := make([]bool, len(targets))
	var g errgroup.Group
	g.SetLimit(maxNodeReads)
	for i, t := range targets {
		g.Go(func() error {
			var err error
			done[i], err = e.forceNode(ctx, parent, t.path, t.version)
			return err
		})
	}
	err := g.Wait()
	var ended []inspect.FamilyHolder
	for i, t := range targets {
		if done[i] {
			ended = append(ended, t.fh)
		}
	}
	return ended, err
}

// forceNode deletes the node at path if it still has version, reading it
// again when its version changed; false when it is gone.
func (e *Engine) forceNode(ctx context.Context, parent, path string, version int32) (bool, error) {
	for range forceAttempts {
		_, err := e.zc.Delete(ctx, path, version)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, gozk.ErrNoNode):
			return false, nil
		case !errors.Is(err, gozk.ErrBadVersion):
			return false, fmt.Errorf("node %s: %w", path, err)
		}
		st, err := e.readNodes(ctx, parent, []entry{{name: path[len(parent)+1:]}})
		if err != nil || st[0].gone {
			return false, err
		}
		version = st[0].version
	}
	return false, fmt.Errorf("node %s changed %d times while it was deleted", path, forceAttempts)
}

// check checks the name of an operation, and that the engine is open.
func (e *Engine) check(op, name string) error {
	if err := driver.ValidateName(name); err != nil {
		return fmt.Errorf("zk: %s: %w", op, err)
	}
	if e.core.Closed() || e.zc.Closing() {
		return e.fail(op, name, zkconn.ErrClosed)
	}
	return nil
}

// checkFamily is check for a read-write lock or a semaphore: it checks the
// kind too.
func (e *Engine) checkFamily(op string, kind inspect.Kind, name string) error {
	if kind != inspect.KindRead && kind != inspect.KindWrite && kind != inspect.KindPermit {
		return fmt.Errorf("zk: %s %q: %w: kind %v, want read, write or permit", op, name, locker.ErrInvalidArgument, kind)
	}
	return e.check(op, name)
}

// queue reads the nodes under parent, a lock's of kind, in line order,
// whether the rules grant each, and a semaphore's stored count: one
// listing, one read of each node, in parallel. A node deleted between the
// listing and its read is left out (but a heavy one, whose record the
// rule needs, makes it look again); none when parent does not exist. An
// invalid heavy node (weight.go) is left out, as acquisitions ignore it.
func (e *Engine) queue(ctx context.Context, kind inspect.Kind, parent string) ([]queued, int, error) {
	for range forceAttempts {
		nodes, count, err := e.queueOnce(ctx, kind, parent)
		if !errors.Is(err, errLookAgain) {
			return nodes, count, err
		}
	}
	return nil, 0, fmt.Errorf("zk: the queue of %s changed %d times while it was read", parent, forceAttempts)
}

// queueOnce is one try of queue: errLookAgain when a heavy node went
// before it was read.
func (e *Engine) queueOnce(ctx context.Context, kind inspect.Kind, parent string) ([]queued, int, error) {
	v, err := zkconn.Do(ctx, e.zc, func() (*view, error) {
		v, err := e.look(kind, parent)
		if errors.Is(err, gozk.ErrNoNode) {
			return &view{}, nil
		}
		return v, err
	})
	if err != nil {
		return nil, 0, err
	}
	nodes, err := e.readNodes(ctx, parent, v.nodes)
	if err != nil {
		return nil, 0, err
	}
	held, err := queueHeld(v, nodes)
	if err != nil {
		return nil, 0, err
	}
	// Invalid heavy nodes are gone: out of the rule's queue too.
	var rule []lockrule.Entry
	var kept, keptHeld []bool
	for i, q := range nodes {
		kept = append(kept, !q.gone || q.rec == nil)
		if kept[i] {
			rule, keptHeld = append(rule, v.rule[i]), append(keptHeld, held[i])
		}
	}
	grants := lockrule.Grants(rule, keptHeld, v.count)
	for i := range nodes {
		if kept[i] {
			nodes[i].granted, grants = grants[0], grants[1:]
		}
	}
	return nodes, max(v.count, 0), nil
}

// queueHeld returns which of nodes, as read after the look v, hold though
// the rule, deciding for a node yet to be granted, might not say so: a
// writer that downgraded (the rule has it wait for its own reader), a
// semaphore node whose data was written (granted under a higher count),
// a node a valid heavy node records. An invalid heavy node is marked
// gone; errLookAgain when a heavy node went before it was read.
func queueHeld(v *view, nodes []queued) ([]bool, error) {
	downFrom := make(map[int64]bool)
	recorded := make(map[int64]bool)
	for i, en := range v.nodes {
		switch {
		case en.Downgrade:
			downFrom[en.down] = true
		case en.Weight <= 1:
		case nodes[i].gone:
			return nil, errLookAgain
		case nodes[i].rec == nil || !nodes[i].rec.validFor(en.seq, v.pczxid):
			nodes[i].gone, nodes[i].rec = true, &record{}
		default:
			for _, s := range nodes[i].rec.granted {
				recorded[s] = true
			}
		}
	}
	held := make([]bool, len(v.nodes))
	for i, en := range v.nodes {
		switch {
		case nodes[i].gone:
		case recorded[en.seq]:
			held[i] = true
		case en.Kind == inspect.KindWrite:
			held[i] = downFrom[int64(nodes[i].fh.Token)]
		case en.Kind == inspect.KindPermit:
			held[i] = nodes[i].version > 0
		}
	}
	return held, nil
}

// readNodes reads the nodes ens under parent, at most maxNodeReads at a
// time, in their order; those deleted meanwhile are gone.
func (e *Engine) readNodes(ctx context.Context, parent string, ens []entry) ([]queued, error) {
	nodes := make([]queued, len(ens))
	var g errgroup.Group
	g.SetLimit(maxNodeReads)
	for i, en := range ens {
		g.Go(func() error {
			path := parent + "/" + en.name
			data, st, err := e.get(ctx, path)
			switch {
			case err == nil:
				fh := inspect.FamilyHolder{Holder: inspect.Holder{Owner: ownerOf(en, data), Token: uint64(st.Czxid)}, Kind: en.Kind, Permits: max(en.Permits, 1)}
				if en.Downgrade {
					fh.Token = uint64(en.down)
				}
				nodes[i] = queued{path: path, version: st.Version, fh: fh}
				if r, ok := parseRecord(data); ok && en.Weight > 1 {
					nodes[i].rec = &r
				}
			case errors.Is(err, gozk.ErrNoNode):
				nodes[i].gone = true
			default:
				return fmt.Errorf("node %s: %w", en.name, err)
			}
			return nil
		})
	}
	return nodes, g.Wait()
}

// SetPermits stores n as the permit count of semaphore name, creating the
// semaphore's nodes when missing. Holds already granted stay: when n
// lowers the count, the holds granted are marked first (their data
// written, as a poke does), in the transaction that stores n, so that
// InspectFamily still tells them from waiters. The waiters, which watch
// the count, look again at once.
func (e *Engine) SetPermits(ctx context.Context, name string, n int) error {
	if n < 1 {
		return fmt.Errorf("zk: set permits %q: %w: n = %d, want at least 1", name, locker.ErrInvalidArgument, n)
	}
	if err := e.check("set permits", name); err != nil {
		return err
	}
	parent := e.path(inspect.KindPermit, name)
	for range forceAttempts {
		lower, done, err := e.lowerPermits(ctx, parent, n)
		if err == nil && !lower {
			done, err = e.raisePermits(ctx, parent, n)
		}
		switch {
		case err != nil:
			return e.fail("set permits", name, err)
		case done:
			return nil
		}
	}
	return fmt.Errorf("zk: set permits %q: the semaphore changed %d times meanwhile; try again", name, forceAttempts)
}

// lowerPermits stores n when it is below the stored count, marking the
// holds granted under that count in the same transaction, which checks
// that the count and the marked nodes did not change. lower is false when
// n is not below a stored count; done false, when something changed.
func (e *Engine) lowerPermits(ctx context.Context, parent string, n int) (lower, done bool, err error) {
	path := parent + "/" + permitsNode
	data, st, err := e.get(ctx, path)
	if errors.Is(err, gozk.ErrNoNode) {
		return false, false, nil
	}
	if err != nil {
		return true, false, err
	}
	old, perr := strconv.Atoi(string(data))
	if perr != nil || n >= old {
		return false, false, nil
	}
	nodes, count, err := e.queue(ctx, inspect.KindPermit, parent)
	if err != nil || count != old {
		return true, false, err
	}
	var ops []any
	for _, q := range nodes {
		if q.granted && !q.gone && q.version == 0 {
			ops = append(ops, &gozk.SetDataRequest{Path: q.path, Data: []byte(q.fh.Owner), Version: 0})
		}
	}
	ops = append(ops, &gozk.SetDataRequest{Path: path, Data: []byte(strconv.Itoa(n)), Version: st.Version})
	_, err = zkconn.Do(ctx, e.zc, func() ([]gozk.MultiResponse, error) {
		res, err := e.conn.Multi(ops...)
		for _, r := range res {
			if errors.Is(r.Error, gozk.ErrBadVersion) || errors.Is(r.Error, gozk.ErrNoNode) {
				return res, errChanged
			}
		}
		return res, err
	})
	if errors.Is(err, errChanged) {
		return true, false, nil
	}
	return true, err == nil, err
}

// errChanged: a node that a transaction checks changed since it was read.
var errChanged = errors.New("zk: changed since read")

// raisePermits stores n whatever the stored count, creating the
// semaphore's nodes when missing; false, nil: a create raced with another
// one (look again).
func (e *Engine) raisePermits(ctx context.Context, parent string, n int) (bool, error) {
	path, data := parent+"/"+permitsNode, []byte(strconv.Itoa(n))
	set := func() (struct{}, error) {
		_, err := e.conn.Set(path, data, -1)
		if errors.Is(err, gozk.ErrNoNode) {
			_, err = e.conn.Create(path, data, gozk.FlagPersistent, e.acl)
		}
		return struct{}{}, err
	}
	_, err := zkconn.Do(ctx, e.zc, set)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, gozk.ErrNodeExists):
		return false, nil
	case errors.Is(err, gozk.ErrNoNode):
		// No parent: made now, the next round creates the count.
		return false, e.zc.EnsureContainer(ctx, parent, e.acl)
	}
	return false, err
}
