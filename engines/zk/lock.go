package zk

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/async"
	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// errRestart means the engine lost its node while queueing (deleted, or its
// session ended): the acquisition starts over with a new node.
var errRestart = errors.New("zk: lock node vanished while queueing")

// maxTryRestarts bounds the restarts of a TryLock.
const maxTryRestarts = 2

// cleanupTimeout bounds the delete of a node of an unsuccessful attempt
// that the ensemble has just answered; past it the reaper goes on.
const cleanupTimeout = 250 * time.Millisecond

// Acquire implements driver.Backend: it queues an ephemeral sequential node
// under the lock's parent, and the rules of the lock family
// (internal/lockrule) decide from one listing of the queue whether it holds
// and, if not, which nodes it watches: a mutex's or a writer's only the
// node just before its own, so that a release wakes one waiter.
func (e *Engine) Acquire(ctx context.Context, h *driver.Hold, wait bool) (bool, error) {
	if e.zc.Refused() {
		// Not worth waiting the connect timeout for a reconnection.
		return false, e.fail("acquire", h.Name, zkconn.ErrNoServer)
	}
	if h.Weight > 1 && h.Kind == inspect.KindPermit {
		return false, fmt.Errorf("zk: acquire semaphore %q: WithWeight(%d): a semaphore's waiters are not ranked by weight on ZooKeeper (a grant there is not derived from the queue alone: SetPermits keeps holds the count no longer covers): %w", h.Name, h.Weight, errors.ErrUnsupported)
	}
	parent := e.path(h.Kind, h.Name)
	for restarts := 0; ; restarts++ {
		ok, err := e.attempt(ctx, h, parent, wait)
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
		h.Asking()
	}
}

// attempt queues one node and waits, if asked, until the rules grant it.
//
// Uncontended, a mutex makes the requests go-zookeeper's own lock recipe
// makes, a create and a listing, then a delete to release, but the listing
// does not wait for the create's reply: it is sent as soon as the create is
// on the wire. ZooKeeper answers a session's requests in order, so the
// listing sees the new node. Should it not (the connection changed in
// between), the engine lists again.
func (e *Engine) attempt(ctx context.Context, h *driver.Hold, parent string, wait bool) (bool, error) {
	if ok, err, done := e.downgrade(ctx, h, parent); done {
		return ok, err
	}
	var n *node
	var v *view
	var err error
	if heavy(h, wait) {
		n, v, err = e.enqueueHeavy(ctx, h, parent)
	} else {
		n, _, v, err = e.enqueue(ctx, h, zkconn.Protected{Parent: parent, Data: []byte(h.Owner), Suffix: marker(h)})
	}
	if err != nil {
		return false, e.fail("acquire", h.Name, err)
	}
	watches := make(map[string]<-chan gozk.Event)
	var held *sync.Map // semaphore nodes seen granted, by name; only a semaphore's
	if h.Kind == inspect.KindPermit {
		held = new(sync.Map)
	}
	for arrival := true; ; arrival = false {
		if v, err = e.see(ctx, h, n, v); errors.Is(err, errLookAgain) {
			continue
		} else if err != nil {
			return false, e.abandon(ctx, h, n, err)
		}
		vd, err := e.decide(ctx, h, n, v, arrival, held)
		token := v.token(h, n)
		v = nil
		switch {
		case errors.Is(err, errLookAgain):
			continue
		case err != nil:
			return false, err
		case !vd.found:
			e.untrack(n)
			return false, errRestart
		case vd.granted:
			return e.take(ctx, h, n, token, vd.poke, wait)
		case !wait:
			e.discard(n, true)
			return false, nil
		}
		if err := e.awaitBlockers(ctx, h, n, vd, watches); err != nil {
			return false, err
		}
	}
}

// see returns v, or a new look at n's queue when v is nil, weighed
// (weight.go).
func (e *Engine) see(ctx context.Context, h *driver.Hold, n *node, v *view) (*view, error) {
	if v == nil {
		h.Asking()
		var err error
		if v, err = zkconn.Do(ctx, e.zc, func() (*view, error) { return e.look(h.Kind, n.parent) }); err != nil {
			return nil, err
		}
	}
	if err := e.weigh(ctx, n.parent, v, n); err != nil {
		return nil, err
	}
	return v, nil
}

// enqueue creates and tracks the attempt's node p (its parent, data,
// name's suffix, the nodes it requires, its mark), and returns it, the
// create's reply and the look sent right behind the create (nil when it
// missed the node).
func (e *Engine) enqueue(ctx context.Context, h *driver.Hold, p zkconn.Protected) (*node, zkconn.Created, *view, error) {
	var early *async.Pending[*view]
	parent := p.Parent
	p.GUID, p.OnSent = zkconn.NewGUID(), func() {
		early = zkconn.Start(e.zc, func() (*view, error) { return e.look(h.Kind, parent) }, nil)
	}
	c, err := e.create(ctx, p)
	if err != nil {
		return nil, c, nil, err
	}
	pversion := c.PVersion
	if h.Kind == inspect.KindPermit {
		// Its permits node keeps a semaphore's parent: not worth a
		// delete that would fail.
		pversion = -1
	}
	n := e.track(c.Path, parent, pversion)
	n.czxid = c.Czxid
	if early == nil {
		return n, c, nil, nil
	}
	v, err := early.WaitUntil(ctx, time.Now().Add(e.connectTimeout))
	if err != nil || !slices.ContainsFunc(v.nodes, func(en entry) bool { return en.name == n.name }) {
		v = nil
	}
	return n, c, v, nil
}

// take makes n, granted by the rules, h's hold: with a lock delay, once the
// bar a hold that ended without Unlock left has run out (delay.go), with
// token; with poke, its successor is woken first.
func (e *Engine) take(ctx context.Context, h *driver.Hold, n *node, token int64, poke, wait bool) (bool, error) {
	if h.Delay > 0 {
		switch err := e.waitBar(ctx, h, n, wait); {
		case errors.Is(err, errBarred):
			e.discard(n, true)
			return false, nil
		case err != nil:
			return false, err
		}
	}
	var first func()
	if poke {
		first = func() { e.poke(n, h.Owner) }
	}
	if !e.grant(h, n, token, first) {
		e.dropBar(ctx, h, n) // never held: a claim that bars nothing
		e.discard(n, true)
		return false, errRestart
	}
	return true, nil
}

// awaitBlockers watches the nodes that block n and waits for a change of
// one of them. It returns nil when it is time to look again, errRestart
// when n is lost, or the error Acquire returns.
func (e *Engine) awaitBlockers(ctx context.Context, h *driver.Hold, n *node, vd verdict, watches map[string]<-chan gozk.Event) error {
	h.Asking()
	chans, err := e.watchAll(ctx, n.parent, vd.block, watches, vd.stale)
	switch {
	case errors.Is(err, gozk.ErrNoNode), errors.Is(err, errStale):
		return nil // one of them went, or changed, already: look again
	case err != nil:
		return e.abandon(ctx, h, n, err)
	}
	ev, err := e.awaitAny(ctx, h, n, chans)
	if err != nil {
		return err
	}
	delete(watches, strings.TrimPrefix(ev.Path, n.parent+"/"))
	if ev.Type != gozk.EventNotWatching {
		return nil
	}
	// The session expired, or the engine is closing: the node went with
	// the session.
	e.discard(n, false)
	if e.zc.Closing() {
		return e.fail("acquire", h.Name, zkconn.ErrClosed)
	}
	return errRestart
}

// get reads a node: its data and its Stat.
func (e *Engine) get(ctx context.Context, path string) ([]byte, *gozk.Stat, error) {
	type got struct {
		data []byte
		st   *gozk.Stat
	}
	g, err := zkconn.Do(ctx, e.zc, func() (got, error) {
		data, st, err := e.conn.Get(path)
		return got{data, st}, err
	})
	return g.data, g.st, err
}

// errStale: a node watched changed between the look and its watch, which
// will not fire for that change.
var errStale = errors.New("zk: changed since the look")

// watchAll sets a watch on each of the nodes names under parent that has
// none in watches yet, all requests at once, and returns the channels of
// all of them. It returns ErrNoNode when one of them is gone, errStale
// (the watches set) when stale, if not nil, says one of those it set
// changed since the look.
func (e *Engine) watchAll(ctx context.Context, parent string, names []string, watches map[string]<-chan gozk.Event, stale func(string, []byte, *gozk.Stat) bool) ([]<-chan gozk.Event, error) {
	var changed atomic.Bool
	getW := func(name string) func() (<-chan gozk.Event, error) {
		return func() (<-chan gozk.Event, error) {
			data, st, ch, err := e.conn.GetW(parent + "/" + name)
			if err == nil && stale != nil && stale(name, data, st) {
				changed.Store(true)
			}
			return ch, err
		}
	}
	var missing []string
	var set []*async.Pending[<-chan gozk.Event]
	for _, name := range names {
		if _, ok := watches[name]; !ok {
			missing = append(missing, name)
			set = append(set, zkconn.Start(e.zc, getW(name), nil))
		}
	}
	deadline := time.Now().Add(e.connectTimeout)
	var first error
	for i, p := range set {
		ch, err := p.WaitUntil(ctx, deadline)
		if err != nil && zkconn.Retryable(err) {
			ch, err = zkconn.Do(ctx, e.zc, getW(missing[i]))
		}
		if err == nil {
			watches[missing[i]] = ch
		} else if first == nil || errors.Is(first, gozk.ErrNoNode) {
			first = err
		}
	}
	switch {
	case first != nil:
		return nil, first
	case changed.Load():
		return nil, errStale
	}
	chans := make([]<-chan gozk.Event, len(names))
	for i, name := range names {
		chans[i] = watches[name]
	}
	return chans, nil
}

// await waits for ch while n, h's node, waits in line: it returns
// errRestart when n is lost, ctx.Err() (n deleted) when ctx ends, and the
// error Acquire returns when the engine closes.
func await[T any](e *Engine, ctx context.Context, h *driver.Hold, n *node, ch <-chan T) (T, error) {
	var zero T
	select {
	case v := <-ch:
		return v, nil
	case <-n.gone:
		return zero, errRestart
	case <-ctx.Done():
		e.drop(n)
		return zero, ctx.Err() // answered: the name was held
	case <-e.zc.Done():
		return zero, e.fail("acquire", h.Name, zkconn.ErrClosed)
	}
}

// awaitAny is await for an event on one of chans.
func (e *Engine) awaitAny(ctx context.Context, h *driver.Hold, n *node, chans []<-chan gozk.Event) (gozk.Event, error) {
	if len(chans) == 1 {
		return await(e, ctx, h, n, chans[0])
	}
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n.gone)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(e.zc.Done())},
	}
	for _, ch := range chans {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	switch chosen, v, _ := reflect.Select(cases); chosen {
	case 0:
		return gozk.Event{}, errRestart
	case 1:
		e.drop(n)
		return gozk.Event{}, ctx.Err()
	case 2:
		return gozk.Event{}, e.fail("acquire", h.Name, zkconn.ErrClosed)
	default:
		return v.Interface().(gozk.Event), nil
	}
}

// armSoon sets a watch on the held node n in the background, so that its
// deletion by someone else is reported at once (nodeDeleted): first, when
// not nil, runs before, on the same worker. A node deleted before the watch
// is set is found by the watch's read. The grant does not wait for it; it
// costs one read (grant calls it only for holds that outlive driver.WatchHeldAfter,
// or with first). Called with e.mu held.
func (e *Engine) armSoon(n *node, first func()) {
	e.zc.Go(func(ctx context.Context) {
		if first != nil {
			first()
		}
		// On a worker already, the first try needs no other: only a
		// retry goes through Do, bounded by the connect timeout and
		// Close; a failure to reach the ensemble is left to the session
		// monitor. ErrNoNode: no watch set, the node is gone.
		_, _, _, err := e.conn.GetW(n.path)
		if err != nil && zkconn.Retryable(err) {
			_, err = zkconn.Do(ctx, e.zc, func() (<-chan gozk.Event, error) {
				_, _, ch, err := e.conn.GetW(n.path)
				return ch, err
			})
		}
		switch {
		case err == nil:
			n.watched.Store(true)
		case errors.Is(err, gozk.ErrNoNode):
			e.lostNode(n, "node deleted")
		}
	})
}

// abandon gives up a queued node after err and returns what Acquire
// returns.
func (e *Engine) abandon(ctx context.Context, h *driver.Hold, n *node, err error) error {
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

// drop deletes the node of a caller who gave up, unless the engine already
// stopped tracking it, in the background: the caller returns at once even
// when the ensemble does not answer.
func (e *Engine) drop(n *node) {
	if e.untrack(n) {
		e.zc.DeleteLater(n.path)
	}
}

// discard deletes a node the engine no longer wants, unless it already
// stopped tracking it (gone, or given to the reaper): with now, within
// cleanupTimeout, for an attempt the ensemble has just answered; otherwise,
// and when that fails, the reaper does.
func (e *Engine) discard(n *node, now bool) {
	switch {
	case !e.untrack(n):
	case now:
		e.zc.DeleteNow(n.path, cleanupTimeout)
	default:
		e.zc.Reap(n.path)
	}
}

// HonoursDeadlines implements driver.DeadlineHonourer: a release returns
// when its context ends.
func (e *Engine) HonoursDeadlines() bool { return true }

// Release implements driver.Backend: it deletes the hold's node, which is
// the hold's own (its name carries a guid of its own), whatever its version;
// with a lock delay, its delay marker first (delay.go).
func (e *Engine) Release(ctx context.Context, h *driver.Hold) error {
	if n, ok := h.State.(*node); ok && h.Kind == inspect.KindMutex {
		e.dropBar(ctx, h, n)
	}
	return e.releaseNode(ctx, h)
}

// releaseNode deletes the hold's node.
func (e *Engine) releaseNode(ctx context.Context, h *driver.Hold) error {
	n, ok := h.State.(*node)
	if !ok {
		return fmt.Errorf("zk: release %q: %w", h.Name, locker.ErrLockLost)
	}
	e.untrack(n)
	unsure, err := e.zc.Delete(ctx, n.path, -1)
	switch {
	case err == nil && unsure && n.ep.IsLost():
		// A reply was lost and the session ended: the node may have gone
		// with the session before the delete.
		return fmt.Errorf("zk: release %q: %w", h.Name, locker.ErrLockLost)
	case err == nil:
		return nil
	case errors.Is(err, gozk.ErrNoNode):
		return fmt.Errorf("zk: release %q: %w", h.Name, locker.ErrLockLost)
	case errors.Is(err, zkconn.ErrClosed):
		return e.fail("release", h.Name, err)
	}
	// The node is deleted in the background once the ensemble answers,
	// unless the session ends first and takes it along.
	e.zc.Reap(n.path)
	return e.fail("release", h.Name, e.zc.GiveUp(ctx, err))
}

// create makes the engine's node for one attempt, "_c_<guid><suffix><seq>"
// under parent, with the parent and the namespace when they are missing
// (zkconn.CreateProtected: the token comes in the reply; a create whose
// reply was lost is found by its guid; one the caller abandoned is undone).
func (e *Engine) create(ctx context.Context, p zkconn.Protected) (zkconn.Created, error) {
	p.ACL, p.Check = e.acl, e.afterCreate
	return e.zc.CreateProtected(ctx, p)
}
