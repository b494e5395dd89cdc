package zk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
)

// The read-write locks and the semaphores live in namespaces of their own,
// beside the mutexes' parents: <prefix>/%rw/<escaped name> and
// <prefix>/%sem/<escaped name>. zkconn.EscapeName writes every '%' of a name as
// "%25", so no mutex name maps to "%rw" or "%sem".
const (
	rwSpace  = "%rw"
	semSpace = "%sem"
	// permitsNode is the persistent child of a semaphore's parent that
	// stores its permit count, in decimal.
	permitsNode = "permits"
)

// The nodes of the family are protected ephemeral sequential nodes, like
// the mutex's, "_c_<guid><marker><sequence>", whose marker says what they
// hold, so that one listing is enough to decide every grant:
//
//	-r-       a reader
//	-w-       a writer
//	-d<tok>-  a reader created while its owner held the write side (a
//	          downgrade), tok being that write hold's token
//	-p<n>-    n permits of a semaphore
const (
	markRead   = 'r'
	markWrite  = 'w'
	markDown   = 'd'
	markPermit = 'p'
)

// Supports implements locker.KindSupporter: the engine grants every kind.
func (e *Engine) Supports(k locker.Kind) bool {
	switch k {
	case locker.KindMutex, locker.KindRead, locker.KindWrite, locker.KindPermit:
		return true
	}
	return false
}

// familyPath is the parent node of a read-write lock's or a semaphore's
// nodes.
func (e *Engine) familyPath(k locker.Kind, name string) string {
	space := rwSpace
	if k == locker.KindPermit {
		space = semSpace
	}
	return e.root + "/" + space + "/" + zkconn.EscapeName(name)
}

// entry is one node of a read-write lock or a semaphore, as its name
// tells.
type entry struct {
	name string
	seq  int64
	mark byte
	arg  int64 // -d: the write hold's token; -p: the permits
}

// parseEntry reads a family node's name; ok is false for other children
// (a semaphore's permits node).
func parseEntry(name string) (entry, bool) {
	const head = len(protectedPrefix) + zkconn.GUIDLen
	seq, ok := sequence(name)
	if !ok || !strings.HasPrefix(name, protectedPrefix) || len(name) < head+3+zkconn.SeqDigits {
		return entry{}, false
	}
	body := name[head : len(name)-zkconn.SeqDigits]
	if body[0] != '-' || body[len(body)-1] != '-' {
		return entry{}, false
	}
	en := entry{name: name, seq: seq, mark: body[1]}
	if arg := body[2 : len(body)-1]; arg != "" {
		n, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || n < 0 {
			return entry{}, false
		}
		en.arg = n
	}
	switch en.mark {
	case markRead, markWrite:
		return en, en.arg == 0
	case markDown:
		return en, true
	case markPermit:
		return en, en.arg > 0
	}
	return entry{}, false
}

// entries parses children and sorts them as the queue orders them: by
// sequence, then by name.
func entries(children []string) []entry {
	out := make([]entry, 0, len(children))
	for _, c := range children {
		if en, ok := parseEntry(c); ok {
			out = append(out, en)
		}
	}
	slices.SortFunc(out, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), strings.Compare(a.name, b.name))
	})
	return out
}

// marker is the node marker of a hold of kind k.
func marker(h *locker.Hold) string {
	switch h.Kind {
	case locker.KindWrite:
		return "-w-"
	case locker.KindPermit:
		return "-p" + strconv.Itoa(h.Permits) + "-"
	}
	return "-r-"
}

// view is what an acquisition knows of its queue after one look: the
// nodes, and for a semaphore the stored permit count (0: none stored).
type view struct {
	queue []entry
	count int
}

// verdict is the decision on one node after a look: whether it is
// granted, and if not, the nodes whose change may grant it.
type verdict struct {
	found, granted bool
	block          []string // names of siblings, or permitsNode
	poke           bool     // a semaphore grant whose successor must look again
}

// decideRW decides a reader's or a writer's node own. A reader is granted
// when no writer is before it, and waits for the last writer before it. A
// writer is granted when no node is before it and no downgraded reader
// exists, whatever its place in line; it waits for the node just before
// it, or else for a downgraded reader.
func decideRW(q []entry, own string, write bool) verdict {
	var v verdict
	var prev, lastWrite, down string
	for _, en := range q {
		if en.name == own {
			v.found = true
			continue
		}
		if en.mark == markDown && down == "" {
			down = en.name
		}
		if v.found {
			continue
		}
		prev = en.name
		if en.mark == markWrite {
			lastWrite = en.name
		}
	}
	switch {
	case !write && lastWrite == "":
		v.granted = true
	case !write:
		v.block = []string{lastWrite}
	case prev == "" && down == "":
		v.granted = true
	case prev != "":
		v.block = []string{prev}
	default:
		v.block = []string{down}
	}
	return v
}

// decideSem decides a semaphore node own of permits: it is granted when
// the permits of the nodes before it and its own fit the stored count,
// so that grants go in the order of the queue. The first node that does
// not fit, the head, waits for any node before it, and for the count;
// the others wait for the node just before them, which tells them, by a
// change of its data, when it is granted (poke).
func decideSem(q []entry, own string, permits, count int) verdict {
	var v verdict
	sum, allFit := int64(0), true
	var before []string
	for i, en := range q {
		if en.name != own {
			sum += en.arg
			allFit = allFit && sum <= int64(count)
			before = append(before, en.name)
			continue
		}
		v.found = true
		if sum+int64(permits) > int64(count) {
			if allFit {
				v.block = append(before, permitsNode)
			} else {
				v.block = before[len(before)-1:]
			}
			return v
		}
		v.granted = true
		// The successor waits for this node: it must look again if it
		// fits now, or if, the new head, it must wait for the nodes
		// before this one.
		if i+1 < len(q) {
			v.poke = len(before) > 0 || sum+int64(permits)+q[i+1].arg <= int64(count)
		}
		return v
	}
	return v
}

// familyAttempt is attempt for the read-write locks and the semaphores:
// it queues one node and waits, if asked, until the rules of its kind
// grant it.
func (e *Engine) familyAttempt(ctx context.Context, h *locker.Hold, parent string, wait bool) (bool, error) {
	if ok, err, done := e.downgrade(ctx, h, parent); done {
		return ok, err
	}
	n, czxid, v, err := e.familyEnqueue(ctx, h, parent)
	if err != nil {
		return false, e.fail("acquire", h.Name, err)
	}
	watches := make(map[string]<-chan gozk.Event)
	for {
		if v == nil {
			h.Asking()
			if v, err = do(e, ctx, func() (*view, error) { return e.look(parent, h.Kind == locker.KindPermit) }); err != nil {
				return false, e.abandon(ctx, h, n, err)
			}
		}
		vd, err := e.decide(ctx, h, parent, n, v)
		v = nil
		switch {
		case err != nil:
			return false, err
		case !vd.found:
			e.untrack(n)
			return false, errRestart
		case vd.granted:
			var poke func()
			if vd.poke {
				poke = func() { e.poke(n, h.Owner) }
			}
			if !e.grant(h, n, czxid, poke) {
				e.discard(n, true)
				return false, errRestart
			}
			return true, nil
		case !wait:
			e.discard(n, true)
			return false, nil
		}
		if err := e.awaitBlockers(ctx, h, n, parent, vd.block, watches); err != nil {
			return false, err
		}
	}
}

// familyEnqueue creates and tracks the attempt's node, and returns its
// token and the look sent right behind the create (nil when it missed the
// node).
func (e *Engine) familyEnqueue(ctx context.Context, h *locker.Hold, parent string) (*node, int64, *view, error) {
	sem := h.Kind == locker.KindPermit
	guid := zkconn.NewGUID()
	sent, unexpect := e.zc.Sent(guid)
	var early *pending[*view]
	c, err := e.create(ctx, zkconn.Protected{Parent: parent, GUID: guid, Suffix: marker(h), Data: []byte(h.Owner), Sent: sent, OnSent: func() {
		early = start(e, func() (*view, error) { return e.look(parent, sem) }, nil)
	}})
	unexpect()
	if err != nil {
		return nil, 0, nil, err
	}
	pversion := c.PVersion
	if sem {
		// Its permits node keeps a semaphore's parent: not worth a
		// delete that would fail.
		pversion = -1
	}
	n := e.track(c.Path, parent, pversion)
	if early == nil {
		return n, c.Czxid, nil, nil
	}
	v, err := early.WaitUntil(ctx, time.Now().Add(e.connectTimeout))
	if err != nil || !slices.ContainsFunc(v.queue, func(en entry) bool { return en.name == n.name }) {
		v = nil
	}
	return n, c.Czxid, v, nil
}

// decide applies the rules of h's kind to a look at the queue; its error
// is Acquire's.
func (e *Engine) decide(ctx context.Context, h *locker.Hold, parent string, n *node, v *view) (verdict, error) {
	if h.Kind != locker.KindPermit {
		return decideRW(v.queue, n.name, h.Kind == locker.KindWrite), nil
	}
	count, err := e.storedCount(ctx, h, parent, v.count)
	if errors.Is(err, locker.ErrPermitsMismatch) {
		e.discard(n, true)
		return verdict{}, err
	}
	if err != nil {
		return verdict{}, e.abandon(ctx, h, n, err)
	}
	return decideSem(v.queue, n.name, h.Permits, count), nil
}

// awaitBlockers watches the nodes that block n and waits for a change of
// one of them. It returns nil when it is time to look again, errRestart
// when n is lost, or the error Acquire returns.
func (e *Engine) awaitBlockers(ctx context.Context, h *locker.Hold, n *node, parent string, block []string, watches map[string]<-chan gozk.Event) error {
	h.Asking()
	chans, err := e.watchAll(ctx, parent, block, watches)
	switch {
	case errors.Is(err, gozk.ErrNoNode):
		return nil // one of them went already: look again
	case err != nil:
		return e.abandon(ctx, h, n, err)
	}
	ev, which := e.waitAny(ctx, n, chans)
	switch which {
	case waitEvent:
		delete(watches, strings.TrimPrefix(ev.Path, parent+"/"))
		if ev.Type != gozk.EventNotWatching {
			return nil
		}
		// The session expired, or the engine is closing: the node went
		// with the session.
		e.discard(n, false)
		if e.zc.Closing() {
			return e.fail("acquire", h.Name, errClosed)
		}
		return errRestart
	case waitGone:
		return errRestart
	case waitCtx:
		e.drop(n)
		return ctx.Err() // answered: the name was held
	}
	return e.fail("acquire", h.Name, errClosed)
}

// downgrade grants a read hold at once when its owner's write hold
// h.Writer still has its node: the reader's node is created in one
// transaction that checks the write node exists, and holds with the write
// hold's token. done is false when there is no write hold, or it is gone,
// and the read hold queues as any other.
func (e *Engine) downgrade(ctx context.Context, h *locker.Hold, parent string) (ok bool, err error, done bool) {
	if h.Kind != locker.KindRead || h.Writer == nil {
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
		Parent: parent, GUID: zkconn.NewGUID(), Requires: w.path, Data: []byte(h.Owner),
		Suffix: "-" + string(markDown) + strconv.FormatUint(h.Writer.Token, 10) + "-",
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

// look lists the queue under parent, and for a semaphore reads its
// stored count, both requests sent at once.
func (e *Engine) look(parent string, sem bool) (*view, error) {
	var count *pending[int]
	if sem {
		count = start(e, func() (int, error) { return e.readCount(parent) }, nil)
	}
	children, _, err := e.conn.Children(parent)
	if err != nil {
		if count != nil {
			_, _ = count.Wait(context.Background())
		}
		return nil, err
	}
	v := &view{queue: entries(children)}
	if count != nil {
		if v.count, err = count.Wait(context.Background()); err != nil {
			return nil, err
		}
	}
	return v, nil
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
	n, perr := strconv.Atoi(string(data))
	if perr != nil || n < 1 {
		return -1, nil
	}
	return n, nil
}

// storedCount checks the count a look found against h: it stores h.Limit
// when none is stored, and fails with ErrPermitsMismatch when h is the
// semaphore's first acquisition and was opened with another count, or
// wants more permits than the count.
func (e *Engine) storedCount(ctx context.Context, h *locker.Hold, parent string, count int) (int, error) {
	if count == 0 {
		var err error
		count, err = do(e, ctx, func() (int, error) {
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
	switch {
	case count < 0:
		return 0, e.mismatch(h.Name, fmt.Errorf("the stored permit count is not a number: store one with SetPermits"))
	case h.CheckLimit && count != h.Limit:
		return 0, e.mismatch(h.Name, fmt.Errorf("stored %d permits, opened with %d", count, h.Limit))
	case h.Permits > count:
		return 0, e.mismatch(h.Name, fmt.Errorf("stored %d permits, %d wanted", count, h.Permits))
	}
	return count, nil
}

func (e *Engine) mismatch(name string, err error) error {
	return &locker.EngineError{Engine: "zk", Op: "acquire", Name: name, Classes: []error{locker.ErrPermitsMismatch}, Err: err}
}

// poke changes the data of a semaphore node just granted, which fires the
// watch its successor set on it. It runs on the worker that sets the
// hold's own watch next (grant): before it, so that the change does not use
// that watch up. A failure only delays the successor until this hold ends.
func (e *Engine) poke(n *node, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), e.connectTimeout)
	defer cancel()
	_, err := do(e, ctx, func() (*gozk.Stat, error) { return e.conn.Set(n.path, []byte(owner), -1) })
	if err != nil && !errors.Is(err, gozk.ErrNoNode) {
		e.log.Debug("zk: waking the next semaphore waiter failed", "node", n.path, "err", err)
	}
}

// watchAll sets a watch on each of the nodes names under parent that has
// none in watches yet, all requests at once, and returns the channels of
// all of them. It returns ErrNoNode when one of them is gone.
func (e *Engine) watchAll(ctx context.Context, parent string, names []string, watches map[string]<-chan gozk.Event) ([]<-chan gozk.Event, error) {
	var missing []string
	for _, name := range names {
		if _, ok := watches[name]; !ok {
			missing = append(missing, name)
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		ch, err := e.watch(ctx, parent+"/"+missing[0])
		if err != nil {
			return nil, err
		}
		watches[missing[0]] = ch
	default:
		set := make([]*pending[<-chan gozk.Event], len(missing))
		for i, name := range missing {
			set[i] = start(e, func() (<-chan gozk.Event, error) {
				_, _, ch, err := e.conn.GetW(parent + "/" + name)
				return ch, err
			}, nil)
		}
		deadline := time.Now().Add(e.connectTimeout)
		var first error
		for i, p := range set {
			ch, err := p.WaitUntil(ctx, deadline)
			if err != nil && zkconn.Retryable(err) && !zkconn.IsCtx(err) {
				ch, err = e.watch(ctx, parent+"/"+missing[i])
			}
			if err == nil {
				watches[missing[i]] = ch
			} else if first == nil || errors.Is(first, gozk.ErrNoNode) {
				first = err
			}
		}
		if first != nil {
			return nil, first
		}
	}
	chans := make([]<-chan gozk.Event, len(names))
	for i, name := range names {
		chans[i] = watches[name]
	}
	return chans, nil
}

// What ended a wait of waitAny.
const (
	waitEvent = iota
	waitGone
	waitCtx
	waitClosed
)

// waitAny waits for an event on one of chans, the loss of n, the end of
// ctx or Close.
func (e *Engine) waitAny(ctx context.Context, n *node, chans []<-chan gozk.Event) (gozk.Event, int) {
	if len(chans) == 1 {
		select {
		case ev := <-chans[0]:
			return ev, waitEvent
		case <-n.gone:
			return gozk.Event{}, waitGone
		case <-ctx.Done():
			return gozk.Event{}, waitCtx
		case <-e.zc.Done():
			return gozk.Event{}, waitClosed
		}
	}
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n.gone)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(e.zc.Done())},
	}
	for _, ch := range chans {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	chosen, v, _ := reflect.Select(cases)
	switch chosen {
	case 0:
		return gozk.Event{}, waitGone
	case 1:
		return gozk.Event{}, waitCtx
	case 2:
		return gozk.Event{}, waitClosed
	}
	return v.Interface().(gozk.Event), waitEvent
}
