package zk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/async"
	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// The markers of the node names and the parents of each kind: see the
// package documentation's "Nodes". zkconn.EscapeName writes every '%' of a
// name as "%25", so no mutex name maps to "%rw" or "%sem".
const (
	lockMarker = "-lock-"
	markRead   = 'r'
	markWrite  = 'w'
	markDown   = 'd'
	markPermit = 'p'

	rwSpace     = "%rw"
	semSpace    = "%sem"
	permitsNode = "permits" // a semaphore's stored count
)

// path is the parent node of the nodes of a lock of kind k.
func (e *Engine) path(k inspect.Kind, name string) string {
	switch k {
	case inspect.KindMutex:
		return e.root + "/" + zkconn.EscapeName(name)
	case inspect.KindPermit:
		return e.root + "/" + semSpace + "/" + zkconn.EscapeName(name)
	}
	return e.root + "/" + rwSpace + "/" + zkconn.EscapeName(name)
}

// marker is the node marker of a hold.
func marker(h *driver.Hold) string {
	switch h.Kind {
	case inspect.KindMutex:
		return lockMarker
	case inspect.KindWrite:
		return "-" + string(markWrite) + "-"
	case inspect.KindPermit:
		return "-" + string(markPermit) + strconv.Itoa(h.Permits) + "-"
	}
	return "-" + string(markRead) + "-"
}

// entry is one node of a queue, as its name tells.
type entry struct {
	name string
	seq  int64
	down int64 // a downgrade's write hold's token
	lockrule.Entry
}

// parseEntry reads the name of a child of a parent of kind k; ok is false
// for what does not queue (a semaphore's permits node, a mutex's delay
// marker). Every sequential child of a mutex's parent queues, as it always
// has, whatever made it; a heavy one (weight.go) with its weight.
func parseEntry(k inspect.Kind, name string) (entry, bool) {
	seq, ok := zkconn.Sequence(name)
	en := entry{name: name, seq: seq, Entry: lockrule.Entry{Kind: inspect.KindMutex}}
	if !ok {
		return en, false
	}
	const head = len(zkconn.ProtectedPrefix) + zkconn.GUIDLen
	if !strings.HasPrefix(name, zkconn.ProtectedPrefix) || len(name) < head+3+zkconn.SeqDigits {
		return en, k == inspect.KindMutex
	}
	body, weight := splitWeight(name[head : len(name)-zkconn.SeqDigits])
	if k == inspect.KindMutex {
		if body == lockMarker {
			en.Weight = weight
		}
		return en, true
	}
	if len(body) < 3 || body[0] != '-' || body[len(body)-1] != '-' {
		return entry{}, false
	}
	en.Weight = weight
	var arg int64
	if s := body[2 : len(body)-1]; s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return entry{}, false
		}
		arg = n
	}
	switch body[1] {
	case markRead, markWrite:
		en.Kind = inspect.KindRead
		if body[1] == markWrite {
			en.Kind = inspect.KindWrite
		}
		return en, arg == 0
	case markDown:
		en.Kind, en.Downgrade, en.down, en.Weight = inspect.KindRead, true, arg, 0
		return en, true
	case markPermit:
		en.Kind, en.Permits = inspect.KindPermit, int(arg)
		return en, arg > 0
	}
	return entry{}, false
}

// view is what an acquisition knows of its queue after one look: the
// nodes in line order, as lockrule sees them, and for a semaphore the
// stored permit count (0: none stored).
type view struct {
	nodes []entry
	rule  []lockrule.Entry
	count int
	// held marks the nodes the heavy nodes' records say were granted
	// (weight.go); nil when the queue has no heavy node.
	held []bool
	// The parent's cversion, next sequence (nextSequence) and czxid at
	// the look, which a heavy node's record is checked against; heavy:
	// the queue has a heavy node.
	cversion int32
	next     int64
	pczxid   int64
	heavy    bool
	// marked: the parent had writes beyond its creates' at the look
	// (zkconn.ExtraWrites), a heavy node's mark; pzxid is the zxid of its
	// children's last change (weight.go's token).
	marked bool
	pzxid  int64
	// listed is the nodes as listed when weigh left records unread (then
	// nodes is without the invalid ones); whole: every record is read.
	listed []entry
	whole  bool
	// The storage of nodes and rule for a queue of one, an uncontended
	// lock's: its view is then one allocation, not three.
	node1 [1]entry
	rule1 [1]lockrule.Entry
}

// newView parses the children of a parent of kind k and orders them as the
// queue does: by sequence, then by name.
func newView(k inspect.Kind, children []string, st *gozk.Stat) *view {
	v := &view{}
	if st != nil {
		v.cversion, v.next, v.pczxid, v.marked, v.pzxid = st.Cversion, nextSequence(st), st.Czxid, zkconn.ExtraWrites(st) > 0, st.Pzxid
	}
	v.nodes, v.rule = v.node1[:0], v.rule1[:]
	if len(children) > len(v.node1) {
		v.nodes = make([]entry, 0, len(children))
	}
	for _, c := range children {
		if en, ok := parseEntry(k, c); ok {
			v.nodes = append(v.nodes, en)
		}
	}
	slices.SortFunc(v.nodes, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), strings.Compare(a.name, b.name))
	})
	if len(v.nodes) != len(v.rule) {
		v.rule = make([]lockrule.Entry, len(v.nodes))
	}
	for i, en := range v.nodes {
		v.rule[i] = en.Entry
		v.heavy = v.heavy || en.Weight > 1
	}
	return v
}

// verdict is lockrule's decision on one node after a look, in node names.
type verdict struct {
	found, granted bool
	block          []string // names of siblings, or permitsNode
	poke           bool     // a semaphore grant whose successor must look again
	// stale says a blocker changed since the look (its watch will not
	// fire for that): a semaphore's count, or the waiter it waits behind
	// granted (poked).
	stale func(name string, data []byte, st *gozk.Stat) bool
}

// decide applies lockrule to the node own of v; held names the semaphore
// nodes seen granted (their data written) by this acquisition (nil for
// the other kinds).
func (v *view) decide(own string, held *sync.Map) verdict {
	i := slices.IndexFunc(v.nodes, func(en entry) bool { return en.name == own })
	if i < 0 {
		return verdict{}
	}
	d := lockrule.DecideHeld(v.rule, v.held, i, v.count)
	if i > 0 && !d.Granted && !d.Count && v.rule[i].Kind == inspect.KindPermit && wasGranted(held, v.nodes[i-1].name) {
		// The node before holds already (granted under a higher count)
		// and will not tell this one when it may go: the nodes before
		// it will, by going, as for the head.
		d = lockrule.Verdict{Count: true}
		for j := range i {
			d.Blockers = append(d.Blockers, j)
		}
	}
	vd := verdict{found: true, granted: d.Granted}
	for _, b := range d.Blockers {
		vd.block = append(vd.block, v.nodes[b].name)
	}
	// Every semaphore waiter watches the count too: after SetPermits
	// lowered it, holds granted under the old count look like waiters
	// from the listing, and the first real waiter may stand behind them.
	if d.Count || (!d.Granted && v.rule[i].Kind == inspect.KindPermit) {
		vd.block = append(vd.block, permitsNode)
	}
	// A semaphore's waiter that is not the head waits for the node just
	// before it, which changes its data once granted: the successor must
	// look again, as it may fit now or be the new head.
	vd.poke = d.Granted && v.rule[i].Kind == inspect.KindPermit && i+1 < len(v.rule)
	if !d.Granted && v.rule[i].Kind == inspect.KindPermit {
		vd.stale = func(name string, data []byte, st *gozk.Stat) bool {
			if name == permitsNode {
				return parseCount(data) != v.count
			}
			if st.Version == 0 {
				return false
			}
			held.Store(name, true)
			return !d.Count
		}
	}
	return vd
}

// wasGranted reports whether the semaphore node name was seen granted.
func wasGranted(held *sync.Map, name string) bool {
	_, ok := held.Load(name)
	return ok
}

// look lists the queue under parent, and for a semaphore reads its
// stored count, both requests sent at once.
func (e *Engine) look(k inspect.Kind, parent string) (*view, error) {
	var count *async.Pending[int]
	if k == inspect.KindPermit {
		count = zkconn.Start(e.zc, func() (int, error) { return e.readCount(parent) }, nil)
	}
	children, st, err := e.conn.Children(parent)
	if err != nil {
		if count != nil {
			_, _ = count.Wait(context.Background())
		}
		return nil, err
	}
	v := newView(k, children, st)
	if count != nil {
		if v.count, err = count.Wait(context.Background()); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// decide applies the rules to a look at the queue; on arrival, a
// semaphore's stored count is checked against h first. Its error is
// Acquire's.
func (e *Engine) decide(ctx context.Context, h *driver.Hold, n *node, v *view, arrival bool, held *sync.Map) (verdict, error) {
	if h.Kind == inspect.KindPermit {
		count, err := e.storedCount(ctx, h, n.parent, v.count, arrival)
		if errors.Is(err, locker.ErrPermitsMismatch) {
			e.discard(n, true)
			return verdict{}, err
		}
		if err != nil {
			return verdict{}, e.abandon(ctx, h, n, err)
		}
		v.count = count
	}
	vd := v.decide(n.name, held)
	if vd.granted {
		return vd, nil
	}
	switch again, err := e.weighRest(ctx, v, n); {
	case err != nil && !errors.Is(err, errLookAgain):
		return verdict{}, e.abandon(ctx, h, n, err)
	case err != nil:
		return verdict{}, err
	case again:
		vd = v.decide(n.name, held)
	}
	return vd, nil
}

// downgrade grants a read hold at once when its owner's write hold
// h.Writer still has its node: the reader's node is created in one
// transaction that checks the write node exists, and holds with the write
// hold's token. done is false when there is no write hold, or it is gone,
// and the read hold queues as any other.
func (e *Engine) downgrade(ctx context.Context, h *driver.Hold, parent string) (ok bool, err error, done bool) {
	if h.Kind != inspect.KindRead || h.Writer == nil {
		return false, nil, false
	}
	w, _ := h.Writer.State.(*node)
	if w == nil {
		return false, nil, false
	}
	select {
	case <-w.gone:
		return false, nil, false
	default:
	}
	c, err := e.create(ctx, zkconn.Protected{
		Parent: parent, GUID: zkconn.NewGUID(), Requires: []string{w.path}, Data: []byte(h.Owner),
		Suffix: "-" + string(markDown) + strconv.FormatInt(w.czxid, 10) + "-",
	})
	switch {
	case errors.Is(err, zkconn.ErrRequiredGone):
		return false, nil, false
	case err != nil:
		return false, e.fail("acquire", h.Name, err), true
	}
	n := e.track(c.Path, parent, c.PVersion)
	if !e.grant(h, n, int64(h.Writer.Token), nil) {
		e.discard(n, true)
		return false, errRestart, true
	}
	return true, nil, true
}

// readCount reads the permit count stored under a semaphore's parent; 0
// when none is stored, -1 when what is stored is not a count.
func (e *Engine) readCount(parent string) (int, error) {
	data, _, err := e.conn.Get(parent + "/" + permitsNode)
	if errors.Is(err, gozk.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return parseCount(data), nil
}

// parseCount reads a stored permit count; -1 when it is not one.
func parseCount(data []byte) int {
	n, err := strconv.Atoi(string(data))
	if err != nil || n < 1 {
		return -1
	}
	return n
}

// storedCount checks the count a look found against h: it stores h.Limit
// when none is stored and, on arrival only, as mem does, fails with
// ErrPermitsMismatch when what is stored is not a count, or when h is the
// semaphore's first acquisition and was opened with another count. A
// request larger than the count waits for SetPermits to raise it.
func (e *Engine) storedCount(ctx context.Context, h *driver.Hold, parent string, count int, arrival bool) (int, error) {
	if count == 0 {
		var err error
		count, err = zkconn.Do(ctx, e.zc, func() (int, error) {
			_, err := e.conn.Create(parent+"/"+permitsNode, []byte(strconv.Itoa(h.Limit)), gozk.FlagPersistent, e.acl)
			if errors.Is(err, gozk.ErrNodeExists) {
				return e.readCount(parent)
			}
			return h.Limit, err
		})
		if err != nil {
			return 0, err
		}
	}
	var why error
	switch {
	case !arrival:
		return count, nil
	case count < 0:
		why = errors.New("the stored permit count is not a number: store one with SetPermits")
	case h.CheckLimit && count != h.Limit:
		why = fmt.Errorf("stored %d permits, opened with %d", count, h.Limit)
	default:
		return count, nil
	}
	return 0, &locker.EngineError{Engine: "zk", Op: "acquire", Name: h.Name, Classes: []error{locker.ErrPermitsMismatch}, Err: why}
}

// poke changes the data of a semaphore node just granted, which fires the
// watch its successor set on it. It runs on the worker that sets the
// hold's own watch next (grant): before it, so that the change does not use
// that watch up. A failure only delays the successor until this hold ends.
func (e *Engine) poke(n *node, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), e.connectTimeout)
	defer cancel()
	_, err := zkconn.Do(ctx, e.zc, func() (*gozk.Stat, error) { return e.conn.Set(n.path, []byte(owner), -1) })
	if err != nil && !errors.Is(err, gozk.ErrNoNode) {
		e.log.Debug("zk: waking the next semaphore waiter failed", "node", n.path, "err", err)
	}
}
