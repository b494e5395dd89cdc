package zk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/locker"
)

// Lock nodes are named like Curator's protected ephemeral sequential nodes:
// "_c_<guid>-lock-<sequence>". The guid, new for every node, lets the
// engine find its node after a create whose reply was lost.
const (
	protectedPrefix = "_c_"
	lockMarker      = "-lock-"
	seqDigits       = 10 // ZooKeeper appends a %010d sequence number
)

// errRestart means the engine lost its node while queueing (deleted, or its
// session ended): the acquisition starts over with a new node.
var errRestart = errors.New("zk: lock node vanished while queueing")

// maxTryRestarts bounds the restarts of a TryLock.
const maxTryRestarts = 2

// lockPath is the parent node of a lock's nodes.
func (e *Engine) lockPath(name string) string { return e.root + "/" + escapeName(name) }

// Acquire implements locker.Backend: it queues an ephemeral sequential node
// under the lock's parent; the lowest node holds, every other watches only
// the node just before its own.
func (e *Engine) Acquire(ctx context.Context, h *locker.Hold, wait bool) (bool, error) {
	if e.refused() {
		// Not worth waiting the connect timeout for a reconnection.
		return false, e.fail("acquire", h.Name, errNoServer)
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
	guid := newGUID()
	sent, unexpect := e.wire.expect(guid)
	var early *pending[[]string]
	c, err := e.create(ctx, newNode{parent: parent, guid: guid, marker: lockMarker, data: []byte(h.Owner)}, sent, func() {
		early = start(e, func() ([]string, error) {
			children, _, err := e.conn.Children(parent)
			return children, err
		}, nil)
	})
	unexpect()
	if err != nil {
		return false, e.fail("acquire", h.Name, err)
	}
	n := e.track(c.path, parent, c.pversion)
	var children []string
	if early != nil {
		children, err = early.waitUntil(ctx, time.Now().Add(e.connectTimeout))
		if err != nil || !slices.Contains(children, n.name) {
			children = nil
		}
	}
	for {
		if children == nil {
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
			if !e.grant(h, n, c.czxid, e.armDelay(h)) {
				e.discard(n, true)
				return false, errRestart
			}
			return true, nil
		case !wait:
			e.discard(n, true)
			return false, nil
		}
		ch, err := e.watch(ctx, parent+"/"+pred)
		switch {
		case err == nil:
			select {
			case ev := <-ch:
				if ev.Type == gozk.EventNotWatching {
					// The session expired, or the engine is closing: the
					// node went with the session.
					e.discard(n, false)
					if e.ctx.Err() != nil {
						return false, e.fail("acquire", h.Name, errClosed)
					}
					return false, errRestart
				}
			case <-n.gone:
				return false, errRestart
			case <-ctx.Done():
				e.drop(n)
				return false, ctx.Err() // answered: the name was held
			case <-e.ctx.Done():
				return false, e.fail("acquire", h.Name, errClosed)
			}
		case !errors.Is(err, gozk.ErrNoNode): // NoNode: gone already, look again
			return false, e.abandon(ctx, h, n, err)
		}
	}
}

// armDelay is how long after the grant the engine sets a watch on a hold's
// node, so that a deletion by someone else is reported at once from then
// on: a third of the TTL (the renewal interval of the engines whose holds
// expire), and no time for a fixed lease, which has no renewals. Short
// holds so cost no watch, and no more than their create, listing and
// delete.
func (e *Engine) armDelay(h *locker.Hold) time.Duration {
	if !h.Renew {
		return 0
	}
	return h.TTL / 3
}

// armLater arms n's watch after d. Called with e.mu held.
func (e *Engine) armLater(n *node, d time.Duration) {
	run := func() {
		e.spawn(func() {
			ctx, cancel := context.WithTimeout(e.ctx, e.connectTimeout)
			defer cancel()
			if errors.Is(e.arm(ctx, n), locker.ErrLockLost) {
				e.lostNode(n, "node deleted")
			}
		})
	}
	if d <= 0 {
		run()
		return
	}
	n.armTimer = time.AfterFunc(d, run)
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
// stopped tracking it, on a goroutine of the engine: the caller returns at
// once even when the ensemble does not answer, and the node goes as soon as
// it answers, within the connect timeout; past that the reaper goes on.
func (e *Engine) drop(n *node) {
	if !e.untrack(n) {
		return
	}
	e.spawn(func() {
		ctx, cancel := context.WithTimeout(e.ctx, e.connectTimeout)
		_, err := e.remove(ctx, n.path)
		cancel()
		if err != nil && !errors.Is(err, gozk.ErrNoNode) && e.ctx.Err() == nil {
			e.reap(reapTask{path: n.path})
		}
	}) // when closing, the end of the session deletes it
}

// discard deletes a node the engine no longer wants, unless it already
// stopped tracking it (gone, or given to the reaper). With now it tries to
// delete it before returning, on a context of its own, for at most
// cleanupTimeout, for an attempt the ensemble has just answered; otherwise,
// and when that fails, the reaper does.
func (e *Engine) discard(n *node, now bool) {
	if !e.untrack(n) {
		return
	}
	if now {
		ctx, cancel := context.WithTimeout(context.Background(), min(cleanupTimeout, e.connectTimeout))
		_, err := e.remove(ctx, n.path)
		cancel()
		if err == nil || errors.Is(err, gozk.ErrNoNode) || errors.Is(err, errClosed) {
			return
		}
	}
	e.reap(reapTask{path: n.path})
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

// sequence parses the sequence number ZooKeeper appended to a node name.
func sequence(name string) (int64, bool) {
	if len(name) < seqDigits {
		return 0, false
	}
	s, err := strconv.ParseInt(name[len(name)-seqDigits:], 10, 64)
	return s, err == nil && s >= 0
}

// Release implements locker.Backend: it deletes the hold's node, which is
// the hold's own (its name carries a guid of its own), whatever its version.
func (e *Engine) Release(ctx context.Context, h *locker.Hold) error {
	n, ok := h.State.(*node)
	if !ok {
		return fmt.Errorf("zk: release %q: %w", h.Name, locker.ErrLockLost)
	}
	e.untrack(n)
	unsure, err := e.remove(ctx, n.path)
	switch {
	case err == nil && unsure && n.ep.isLost():
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
	return e.fail("release", h.Name, e.giveUp(ctx, err))
}

// remove deletes a node. When an attempt's reply was lost and a later one
// finds no node, the first one presumably deleted it: that is a success,
// but an unsure one.
func (e *Engine) remove(ctx context.Context, path string) (unsure bool, err error) {
	var lost atomic.Bool
	_, err = do(e, ctx, func() (struct{}, error) {
		err := e.conn.Delete(path, -1)
		if err != nil && retryable(err) {
			lost.Store(true)
		}
		return struct{}{}, err
	})
	if errors.Is(err, gozk.ErrNoNode) && lost.Load() {
		return true, nil
	}
	return false, err
}

func (e *Engine) children(ctx context.Context, parent string) ([]string, error) {
	return do(e, ctx, func() ([]string, error) {
		children, _, err := e.conn.Children(parent)
		return children, err
	})
}

// watch sets a watch on a node that exists: the channel gets its deletion
// (or a change). It returns ErrNoNode, and sets no watch, when it is gone.
func (e *Engine) watch(ctx context.Context, path string) (<-chan gozk.Event, error) {
	return do(e, ctx, func() (<-chan gozk.Event, error) {
		_, _, ch, err := e.conn.GetW(path)
		return ch, err
	})
}

// newNode is what create makes: a node marker+sequence of guid under
// parent, with data; with check, only if the node check exists (a
// downgrade's write node), failing with errCheckFailed otherwise.
type newNode struct {
	parent, guid, marker, check string
	data                        []byte
}

// errCheckFailed: the node a create was conditional on does not exist.
var errCheckFailed = errors.New("zk: the node the create depends on is gone")

// created is a node the engine created: its path and czxid, and its
// parent's data version right after (-1 when not known).
type created struct {
	path     string
	czxid    int64
	pversion int32
}

// create makes the engine's node for one attempt, and the lock's parent and
// the namespace when they are missing.
//
// The node is created in one transaction with an empty write to the
// parent: both get the transaction's zxid, and the parent's mzxid in the
// reply is so the node's czxid, the token, without another round trip.
//
// A create whose reply was lost with the connection may have made the
// node: the engine looks for the node of guid before trying again, so that
// no orphan stays in the queue. A create abandoned by the caller is undone
// in the background.
//
// onSent is called, once, on the caller's goroutine, if sent is closed
// while the first create is in flight.
func (e *Engine) create(ctx context.Context, nn newNode, sent <-chan struct{}, onSent func()) (created, error) {
	parent, guid := nn.parent, nn.guid
	ops := []any{
		&gozk.CreateRequest{Path: parent + "/" + protectedPrefix + guid + nn.marker, Data: nn.data, Acl: e.acl, Flags: gozk.FlagEphemeral | gozk.FlagSequence},
		&gozk.SetDataRequest{Path: parent, Data: nil, Version: -1},
	}
	if nn.check != "" {
		ops = append([]any{&gozk.CheckVersionRequest{Path: nn.check, Version: -1}}, ops...)
	}
	orphan := func(c created, err error) {
		switch {
		case err == nil:
			e.reap(reapTask{path: c.path})
		case retryable(err):
			e.reap(reapTask{parent: parent, guid: guid})
		}
	}
	step, cancel := context.WithTimeout(ctx, e.connectTimeout)
	defer cancel()
	backoff := minBackoff
	// The parent is made at most twice: an engine that saw it empty may
	// delete it again between our making it and our create (parents.go).
	madeParent := 0
	for {
		c, err := start(e, func() (created, error) {
			res, err := e.conn.Multi(ops...)
			if err != nil && nn.check != "" && len(res) > 0 && errors.Is(res[0].Error, gozk.ErrNoNode) {
				return created{}, errCheckFailed
			}
			if err != nil {
				return created{}, err
			}
			if len(res) != len(ops) || res[len(ops)-1].Stat == nil {
				return created{}, fmt.Errorf("unexpected reply to create: %+v", res)
			}
			last := res[len(ops)-1].Stat
			c := created{path: res[len(ops)-2].String, czxid: last.Mzxid, pversion: last.Version}
			if e.afterCreate != nil {
				if ierr := e.afterCreate(c.path); ierr != nil {
					return created{}, ierr
				}
			}
			return c, nil
		}, orphan).waitNotify(step, sent, onSent)
		sent = nil
		switch {
		case err == nil, errors.Is(err, errCheckFailed):
			return c, err
		case errors.Is(err, gozk.ErrNoNode) && madeParent < 2:
			madeParent++
			if err := e.ensureParent(step, parent); err != nil {
				return created{}, e.giveUp(ctx, err)
			}
			continue
		case !retryable(err):
			// An abandoned request (err is step's) is the orphan
			// handler's to undo.
			return created{}, e.giveUp(ctx, err)
		}
		// The connection dropped: the node may exist.
		path, lerr := e.findOwn(step, parent, guid)
		if lerr == nil && path != "" {
			// The token is still to be read.
			var st *gozk.Stat
			st, lerr = do(e, step, func() (*gozk.Stat, error) {
				_, st, err := e.conn.Get(path)
				return st, err
			})
			if lerr == nil {
				return created{path: path, czxid: st.Czxid, pversion: -1}, nil
			}
			if errors.Is(lerr, gozk.ErrNoNode) {
				path, lerr = "", nil // gone with its session meanwhile
			}
		}
		if lerr != nil {
			e.reap(reapTask{parent: parent, guid: guid})
			return created{}, e.giveUp(ctx, lerr)
		}
		if step.Err() != nil {
			return created{}, e.stepErr(ctx, err)
		}
		if perr := e.pause(step, time.Time{}, &backoff); perr != nil {
			return created{}, e.stepErr(ctx, err)
		}
	}
}

// giveUp is the error of a step that failed with err: the caller's own
// context error, errClosed, errNoAnswer when the step ran out of time, or
// err itself.
func (e *Engine) giveUp(ctx context.Context, err error) error {
	if ctx.Err() != nil || e.ctx.Err() != nil || isCtx(err) {
		return e.stepErr(ctx, err)
	}
	return err
}

func isCtx(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// findOwn returns the path of the node of guid under parent, or "" when
// there is none. Should there be more than one, it keeps the first and has
// the others deleted.
func (e *Engine) findOwn(ctx context.Context, parent, guid string) (string, error) {
	// Sync first, so that the read sees every write the leader committed,
	// the lost create included.
	if _, err := do(e, ctx, func() (string, error) { return e.conn.Sync(parent) }); err != nil && !errors.Is(err, gozk.ErrNoNode) {
		return "", err
	}
	children, err := e.children(ctx, parent)
	if errors.Is(err, gozk.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var mine []string
	for _, c := range children {
		if strings.HasPrefix(c, protectedPrefix+guid) {
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		return "", nil
	}
	sort.Slice(mine, func(i, j int) bool {
		si, _ := sequence(mine[i])
		sj, _ := sequence(mine[j])
		return si < sj
	})
	for _, extra := range mine[1:] {
		e.reap(reapTask{path: parent + "/" + extra})
	}
	return parent + "/" + mine[0], nil
}

// ensureParent creates the lock's parent as a container node, which the
// server deletes once its last child is gone, and the persistent nodes
// above it (the namespace, the family's) when missing.
func (e *Engine) ensureParent(ctx context.Context, parent string) error {
	mk := func() error {
		_, err := do(e, ctx, func() (string, error) {
			return e.conn.CreateContainer(parent, nil, gozk.FlagContainer, e.acl)
		})
		if errors.Is(err, gozk.ErrNodeExists) {
			return nil
		}
		return err
	}
	err := mk()
	if errors.Is(err, gozk.ErrNoNode) {
		if err = e.ensureDir(ctx, parent[:strings.LastIndexByte(parent, '/')]); err == nil {
			err = mk()
		}
	}
	return err
}

// ensureDir creates dir and the nodes above it, as persistent nodes.
func (e *Engine) ensureDir(ctx context.Context, dir string) error {
	for i := 1; i <= len(dir); i++ {
		if i < len(dir) && dir[i] != '/' {
			continue
		}
		p := dir[:i]
		_, err := do(e, ctx, func() (string, error) { return e.conn.Create(p, nil, gozk.FlagPersistent, e.acl) })
		if err != nil && !errors.Is(err, gozk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// guidLen is the length of a guid in a node name.
const guidLen = 32

func newGUID() string {
	var b [guidLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux since Go 1.24.
	return hex.EncodeToString(b[:])
}
