package zk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	gozk "github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// Weights (see the package documentation's "Weights"). A waiter of weight
// 1 queues as it always has. A heavy one, of weight 2 to 10, may rank
// ahead of nodes that came before it, and so could contradict a grant
// already made: on arrival it records, in its node's data, the nodes
// granted at that instant, and every look at a queue counts those as
// granted. Its node's name ends its marker with "h<weight>-", so that a
// listing tells which nodes to read.

// weightMark starts the weight of a heavy node's name: "-lock-h5-".
const weightMark = "h"

// weightSuffix is what a hold's node name adds to its marker for weight
// w: nothing for weight 1.
func weightSuffix(w int) string {
	if w <= 1 {
		return ""
	}
	return weightMark + strconv.Itoa(w) + "-"
}

// splitWeight splits the weight off the marker of a node name: "-w-h5-"
// is "-w-" of weight 5; a marker without one has weight 0 (that is, 1).
func splitWeight(body string) (string, int) {
	if len(body) < 2 || body[len(body)-1] != '-' {
		return body, 0
	}
	i := strings.LastIndex(body[:len(body)-1], "-"+weightMark)
	if i < 0 {
		return body, 0
	}
	w, err := strconv.Atoi(body[i+1+len(weightMark) : len(body)-1])
	if err != nil || w < 2 || w > 10 {
		return body, 0
	}
	return body[:i+1], w
}

// recordTag starts a heavy node's data, and says which format follows.
const recordTag = "orthrus-w1"

// record is what a heavy node's data says: the sequence the next child's
// create would get and the parent's czxid, at the look before its create,
// whether a node granted then excludes every other (a mutex's holder, a
// writer), and the sequences of the nodes granted then; then the owner ID.
type record struct {
	next      int64
	pczxid    int64
	exclusive bool
	granted   []int64
	owner     string
}

// exclusiveField is the record's field for exclusive, "x", and for not.
var exclusiveField = map[bool]string{true: "x", false: "-"}

// encode writes r as a heavy node's data: "orthrus-w1 <next> <pczxid>
// <x or -> <sequence>...", a newline, and the owner ID.
func (r record) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %d %d %s", recordTag, r.next, r.pczxid, exclusiveField[r.exclusive])
	for _, s := range r.granted {
		fmt.Fprintf(&b, " %d", s)
	}
	b.WriteByte('\n')
	b.WriteString(r.owner)
	return b.Bytes()
}

// parseRecord reads a heavy node's data; ok is false when it is not a
// record, and the node is then invalid.
func parseRecord(data []byte) (r record, ok bool) {
	line, owner, found := bytes.Cut(data, []byte{'\n'})
	f := strings.Fields(string(line))
	if !found || len(f) < 4 || f[0] != recordTag || (f[3] != exclusiveField[true] && f[3] != exclusiveField[false]) {
		return record{}, false
	}
	next, err1 := strconv.ParseInt(f[1], 10, 64)
	p, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return record{}, false
	}
	r = record{next: next, pczxid: p, exclusive: f[3] == exclusiveField[true], owner: string(owner)}
	for _, s := range f[4:] {
		seq, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return record{}, false
		}
		r.granted = append(r.granted, seq)
	}
	return r, true
}

// validFor reports whether a heavy node of sequence seq with record r is
// valid under a parent of czxid pczxid: whether its record holds every
// node granted at its create. When a node granted at the look excludes
// every other, the create's transaction checks that it still exists, so
// nothing else was granted in between: valid. Otherwise the transaction
// checks that every node of the look still exists, so none went, and
// ZooKeeper numbers a parent's sequential children by the creates under
// it, so the sequence is the one the look predicted exactly when no child
// was created in between. The czxid tells a parent deleted and made
// again.
func (r record) validFor(seq, pczxid int64) bool {
	return r.pczxid != 0 && r.pczxid == pczxid && (r.exclusive || seq == r.next)
}

// nextSequence is the sequence the next sequential child of a parent
// gets: the number of children ever created under it. A create and a
// delete each bump the cversion, so the creates are (cversion +
// children) / 2 (TestSequenceCountsCreates holds the server to it).
func nextSequence(st *gozk.Stat) int64 { return (int64(st.Cversion) + int64(st.NumChildren)) / 2 }

// ownerOf is the owner ID in the data of the node en.
func ownerOf(en entry, data []byte) string {
	if en.Weight > 1 {
		if r, ok := parseRecord(data); ok {
			return r.owner
		}
	}
	return string(data)
}

// maxRecordParents bounds the parents whose heavy nodes' records the
// engine keeps.
const maxRecordParents = 1024

// records keeps the heavy nodes' records the engine read, by parent and
// node name: a node's data never changes, so each is read once. A look at
// a parent keeps only the records of the nodes it found.
type records struct {
	mu       sync.Mutex
	byParent map[string]map[string]record
}

// lookup returns the records known of v's heavy nodes under parent.
func (rs *records) lookup(parent string, v *view) map[string]record {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	old := rs.byParent[parent]
	out := make(map[string]record)
	for _, en := range v.nodes {
		if r, ok := old[en.name]; ok && en.Weight > 1 {
			out[en.name] = r
		}
	}
	return out
}

// store keeps recs as the records of the heavy nodes under parent, and
// forgets those of nodes that recs leaves out, gone from the queue.
func (rs *records) store(parent string, recs map[string]record) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byParent == nil || len(rs.byParent) >= maxRecordParents {
		rs.byParent = make(map[string]map[string]record)
	}
	rs.byParent[parent] = recs
}

// errLookAgain: a node of a look went before it was read, and the look no
// longer tells a queue that was.
var errLookAgain = errors.New("zk: the queue changed while it was read")

// weigh applies the records of v's heavy nodes to v: an invalid one is
// dropped, as if it were not there (its owner deletes it), and the nodes
// a valid one records are granted (v.held). A queue without a heavy node
// costs nothing. errLookAgain when a heavy node went before it was read:
// without its record the look is no queue that was.
//
// own, when not nil, is the caller's node, which the look decides for:
// the records of heavy nodes that came after it are not read. Such a node
// counts as valid, which can only make own wait (for it, whose owner
// deletes it if invalid), and its record marks nothing own does not know:
// it marks what was granted at its arrival, and while own waited nothing
// ranked behind own and conflicting with it was granted, but what own's
// record (or, for weight 1, its place in line) has already.
//
// Before own waits, weighRest reads the records left unread, so that an
// invalid node does not hold it up when its owner is slow to delete it.
func (e *Engine) weigh(ctx context.Context, parent string, v *view, own *node) error {
	if !v.heavy {
		return nil
	}
	after := int64(math.MaxInt64) // the heavy nodes after it go unread
	recs := e.recs.lookup(parent, v)
	if own != nil {
		if own.rec != nil {
			recs[own.name] = *own.rec
		}
		if !v.whole {
			after, _ = zkconn.Sequence(own.name)
		}
	}
	var missing []string
	for _, en := range v.nodes {
		if _, ok := recs[en.name]; en.Weight > 1 && !ok && en.seq < after {
			missing = append(missing, en.name)
		}
	}
	got := make([]record, len(missing))
	var g errgroup.Group
	g.SetLimit(maxNodeReads)
	for i, name := range missing {
		g.Go(func() error {
			data, _, err := e.get(ctx, parent+"/"+name)
			got[i], _ = parseRecord(data) // not a record: invalid
			return err
		})
	}
	if err := g.Wait(); errors.Is(err, gozk.ErrNoNode) {
		return errLookAgain
	} else if err != nil {
		return err
	}
	for i, name := range missing {
		recs[name] = got[i]
	}
	e.recs.store(parent, recs)
	if slices.ContainsFunc(v.nodes, func(en entry) bool { _, ok := recs[en.name]; return en.Weight > 1 && !ok }) {
		v.listed = v.nodes
	}
	v.apply(recs, after)
	return nil
}

// weighRest weighs v again, as listed, with every record read, when weigh
// left some unread for own.
func (e *Engine) weighRest(ctx context.Context, v *view, own *node) (bool, error) {
	if v.listed == nil {
		return false, nil
	}
	v.nodes, v.listed, v.whole = v.listed, nil, true
	return true, e.weigh(ctx, own.parent, v, own)
}

// apply drops v's invalid heavy nodes and marks the nodes the valid ones
// record as granted; a heavy node after the sequence after whose record
// is not known counts as valid, and marks nothing.
func (v *view) apply(recs map[string]record, after int64) {
	granted := make(map[int64]bool)
	nodes := make([]entry, 0, len(v.nodes))
	for _, en := range v.nodes {
		r, known := recs[en.name]
		switch {
		case en.Weight <= 1, !known && en.seq > after:
		case !r.validFor(en.seq, v.pczxid):
			continue
		default:
			for _, s := range r.granted {
				granted[s] = true
			}
		}
		nodes = append(nodes, en)
	}
	v.nodes, v.rule, v.held = nodes, make([]lockrule.Entry, len(nodes)), make([]bool, len(nodes))
	for i, en := range nodes {
		v.rule[i], v.held[i] = en.Entry, granted[en.seq]
	}
}

// grantsAt returns the sequences of the nodes the rule grants in v, a
// weighed look: what a heavy node arriving right after it records; and
// the names of those that exclude every other. A
// writer whose owner downgraded holds though the rule, which decides for
// a writer yet to be granted, has it wait for its own reader: the czxids
// of the writers tell which one it is, when v has a downgrade.
func (e *Engine) grantsAt(ctx context.Context, parent string, v *view) (seqs []int64, exclusive []string, err error) {
	held := make([]bool, len(v.nodes))
	copy(held, v.held)
	if err := e.downgradedWriters(ctx, parent, v, held); err != nil {
		return nil, nil, err
	}
	for i, g := range lockrule.Grants(v.rule, held, v.count) {
		if !g {
			continue
		}
		seqs = append(seqs, v.nodes[i].seq)
		if lockrule.Exclusive(v.nodes[i].Kind) {
			exclusive = append(exclusive, v.nodes[i].name)
		}
	}
	return seqs, exclusive, nil
}

// downgradedWriters marks in held the writers of v whose czxid is the
// token of a downgrade of v, reading the writers' nodes when there is
// one.
func (e *Engine) downgradedWriters(ctx context.Context, parent string, v *view, held []bool) error {
	tokens := make(map[int64]bool)
	for _, en := range v.nodes {
		if en.Downgrade {
			tokens[en.down] = true
		}
	}
	if len(tokens) == 0 {
		return nil
	}
	var g errgroup.Group
	g.SetLimit(maxNodeReads)
	for i, en := range v.nodes {
		if en.Kind != inspect.KindWrite {
			continue
		}
		g.Go(func() error {
			_, st, err := e.get(ctx, parent+"/"+en.name)
			if err == nil && tokens[st.Czxid] {
				held[i] = true
			}
			return err
		})
	}
	if err := g.Wait(); errors.Is(err, gozk.ErrNoNode) {
		return errLookAgain
	} else {
		return err
	}
}

// heavy reports whether an acquisition of h queues a heavy node: a wait
// of weight 2 or more. A TryLock ranks as weight 1.
func heavy(h *driver.Hold, wait bool) bool { return wait && h.Weight > 1 }

// enqueueHeavy is enqueue for a heavy node: a look, weighed, then the
// create of a node whose data records the nodes the look grants, in a
// transaction that checks that the nodes its validity rests on still
// exist (record.validFor). An invalid node its owner deletes, as everyone
// else ignores it, and tries again, within ctx.
func (e *Engine) enqueueHeavy(ctx context.Context, h *driver.Hold, parent string) (*node, *view, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		h.Asking()
		r, look, requires, err := e.heavyRecord(ctx, h, parent)
		if errors.Is(err, errLookAgain) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if e.beforeHeavyCreate != nil {
			e.beforeHeavyCreate()
		}
		e.heavyTries.Add(1)
		n, c, v, err := e.enqueue(ctx, h, zkconn.Protected{Parent: parent, Data: r.encode(), Suffix: marker(h) + weightSuffix(h.Weight), Requires: requires, Mark: true})
		switch {
		case errors.Is(err, zkconn.ErrRequiredGone):
			continue
		case err != nil:
			return nil, nil, err
		}
		seq, _ := zkconn.Sequence(n.name)
		if r.validFor(seq, c.PCzxid) {
			n.rec = &r
			return n, v, nil
		}
		e.discard(n, true)
		if c.PCzxid == r.pczxid && c.PCversion == look.cversion+1 {
			// Nothing else changed, and the sequence is not the one
			// predicted: this server numbers children otherwise.
			return nil, nil, fmt.Errorf("WithWeight(%d): the server numbers sequential nodes otherwise than by creates (sequence %d, want %d): %w", h.Weight, seq, r.next, errors.ErrUnsupported)
		}
	}
}

// heavyRecord looks at the queue under parent and returns the record a
// heavy node created right after it carries, the look, and the paths of
// the nodes its create requires (record.validFor): the exclusive holders
// when there are, else every node of the look.
func (e *Engine) heavyRecord(ctx context.Context, h *driver.Hold, parent string) (record, *view, []string, error) {
	v, err := zkconn.Do(ctx, e.zc, func() (*view, error) { return e.look(h.Kind, parent) })
	if errors.Is(err, gozk.ErrNoNode) {
		if err := e.zc.EnsureContainer(ctx, parent, e.acl); err != nil {
			return record{}, nil, nil, err
		}
		return record{}, nil, nil, errLookAgain
	}
	if err != nil {
		return record{}, nil, nil, err
	}
	if err := e.weigh(ctx, parent, v, nil); err != nil {
		return record{}, nil, nil, err
	}
	g, exclusive, err := e.grantsAt(ctx, parent, v)
	if err != nil {
		return record{}, nil, nil, err
	}
	requires := exclusive
	if len(requires) == 0 {
		requires = make([]string, len(v.nodes))
		for i, en := range v.nodes {
			requires[i] = en.name
		}
	}
	for i, name := range requires {
		requires[i] = parent + "/" + name
	}
	return record{next: v.next, pczxid: v.pczxid, exclusive: len(exclusive) > 0, granted: g, owner: h.Owner}, v, requires, nil
}

// token is the fencing token of h's node n, granted on the look v: its
// czxid, or, under a parent where a heavy node was ever created (v.marked),
// the zxid of the
// children's last change at v. There a node may be granted after a newer
// one, whose token its czxid is below; the look's pzxid is above every
// token granted before: the holder before n was granted on a look that
// listed its node, or at its create, so below that node's delete, which v,
// no longer listing it, follows. No write, so no request more. Readers
// granted on the same change share a token. A queue that never had a
// heavy node keeps czxids, as every version does. Semaphores refuse
// weights (and their parent's data is written by SetPermits).
func (v *view) token(h *driver.Hold, n *node) int64 {
	if h.Kind == inspect.KindPermit || !v.marked {
		return n.czxid
	}
	return v.pzxid
}
