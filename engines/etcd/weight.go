package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

var _ driver.Weigher = (*Engine)(nil)

// Weighs implements driver.Weigher: mutexes and read-write locks grant
// their waiters heaviest first (locker.WithWeight), FIFO within a weight.
// A semaphore refuses a weight above 1 at its acquisition
// (errSemaphoreWeights), as Core refuses an engine that does not weigh.
func (e *Engine) Weighs() error { return nil }

// errSemaphoreWeights is why a semaphore refuses a weight above 1.
var errSemaphoreWeights = errors.New("this engine ranks the waiters of mutexes and read-write locks by weight, not yet a semaphore's, whose near waiters count permits from watch events with no read to see a heavier request by")

// heavySub is the sub-range, within its kind's, of a key of weight > 1:
// one count of it in a waiter's check tells whether the queue is still
// plain FIFO.
const heavySub = "h/"

// heavyValue is a heavy key's value: "<weight> <grants> <owner>", grants
// being the create revisions, comma separated, of the keys granted when
// it arrived.
func heavyValue(weight int, grants []int64, owner string) string {
	revs := make([]string, len(grants))
	for i, g := range grants {
		revs[i] = strconv.FormatInt(g, 10)
	}
	return strconv.Itoa(weight) + " " + strings.Join(revs, ",") + " " + owner
}

// parseHeavy reads a heavy key's value; what it cannot read counts as
// weight 1 and no grant.
func parseHeavy(v []byte) (weight int, grants []int64, owner string) {
	w, rest, _ := strings.Cut(string(v), " ")
	revs, owner, _ := strings.Cut(rest, " ")
	weight, err := strconv.Atoi(w)
	if err != nil || weight < 1 {
		weight = 1
	}
	for r := range strings.SplitSeq(revs, ",") {
		if g, err := strconv.ParseInt(r, 10, 64); err == nil {
			grants = append(grants, g)
		}
	}
	return weight, grants, owner
}

// queueKey is one key of a mutex's or read-write lock's queue, as the
// rule sees it.
type queueKey struct {
	kv     *mvccpb.KeyValue
	entry  lockrule.Entry
	owner  string
	grants []int64 // a heavy key's record
}

// readQueueKey reads a key of the queue range rng: a mutex's (mutex) or a
// read-write lock's; false for a key of neither.
func readQueueKey(rng string, kv *mvccpb.KeyValue, mutex bool) (queueKey, bool) {
	k := queueKey{kv: kv, owner: string(kv.Value), entry: lockrule.Entry{Kind: inspect.KindMutex}}
	sub := strings.TrimPrefix(string(kv.Key), rng)
	if !mutex {
		var found bool
		for _, s := range rwSubs {
			if rest, ok := strings.CutPrefix(sub, s.sub); ok {
				k.entry, sub, found = s.entry, rest, true
			}
		}
		if !found {
			return k, false
		}
	}
	if strings.HasPrefix(sub, heavySub) && !k.entry.Downgrade {
		k.entry.Weight, k.grants, k.owner = parseHeavy(kv.Value)
	}
	return k, true
}

// readQueue reads the keys of a queue range, in create revision order,
// and tells which are granted already: those a heavy key recorded, a
// writer with a downgraded read of its own, and a key rewritten since its
// create (a mark or a fixed lease's move: both only once granted).
func readQueue(rng string, kvs []*mvccpb.KeyValue, mutex bool) (keys []queueKey, q []lockrule.Entry, held []bool) {
	recorded := make(map[int64]bool)
	for _, kv := range kvs {
		k, ok := readQueueKey(rng, kv, mutex)
		if !ok {
			continue
		}
		for _, g := range k.grants {
			recorded[g] = true
		}
		if k.entry.Downgrade {
			recorded[int64(downgradeToken(rng, kv))] = true // its writer
		}
		keys, q = append(keys, k), append(q, k.entry)
	}
	held = make([]bool, len(keys))
	for i, k := range keys {
		held[i] = recorded[k.kv.CreateRevision] || k.kv.ModRevision > k.kv.CreateRevision
	}
	return keys, q, held
}

// heavyRanges are the ranges of the heavy keys of a queue.
func (w *lockWaiter) heavyRanges() []string {
	if w.mutex {
		return []string{w.queue + heavySub}
	}
	return []string{w.queue + rwReaders + heavySub, w.queue + rwWriters + heavySub}
}

// heavyCounts counts the heavy keys of the queue, to add to a check.
func (w *lockWaiter) heavyCounts() []clientv3.Op {
	var ops []clientv3.Op
	for _, r := range w.heavyRanges() {
		ops = append(ops, clientv3.OpGet(r, clientv3.WithPrefix(), clientv3.WithCountOnly()))
	}
	return ops
}

// anyHeavy tells from the answers to heavyCounts whether a heavy key
// stands in the queue.
func anyHeavy(rs []*etcdserverpb.ResponseOp) bool {
	for _, r := range rs {
		if r.GetResponseRange().Count > 0 {
			return true
		}
	}
	return false
}

// confirm ends a wait without reading the queue when no heavy key stands
// in it, putting ops (a mark) if so; otherwise it decides from the whole
// queue (checkFull). errKeyGone when the waiter's key is gone.
func (w *lockWaiter) confirm(ctx context.Context, h *driver.Hold, ops ...clientv3.Op) (watchSpec, int64, error) {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.st.key), "=", w.st.rev)}
	for _, r := range w.heavyRanges() {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(r).WithPrefix(), "=", 0))
	}
	resp, err := w.e.client.Txn(ctx).If(cmps...).Then(append(ops, w.floorOp())...).Else(clientv3.OpGet(w.st.key, clientv3.WithCountOnly())).Commit()
	switch {
	case err != nil:
		return watchSpec{}, 0, err
	case resp.Succeeded:
		w.sawFloor(resp.Responses[len(ops)])
		return w.granted(h, resp.Header.Revision)
	case resp.Responses[0].GetResponseRange().Count == 0:
		return watchSpec{}, 0, errKeyGone
	}
	return w.checkFull(ctx, h)
}

// checkFull reads the whole queue with the waiter's key and the floor,
// and decides by lockrule.DecideHeld, from then on: a queue that held a
// heavy key. It writes nothing: a grant's token is the read's revision
// (see granted).
func (w *lockWaiter) checkFull(ctx context.Context, h *driver.Hold) (watchSpec, int64, error) {
	w.full, w.marks, w.sole, w.gone = true, false, false, false
	all := clientv3.OpGet(w.queue, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	resp, err := w.e.client.Txn(ctx).Then(all, w.floorOp()).Commit()
	if err != nil {
		return watchSpec{}, 0, err
	}
	spec, err := w.decide(resp.Responses[0].GetResponseRange().Kvs) // errKeyGone without the key
	if err != nil || spec.key != "" {
		return spec, resp.Header.Revision, err
	}
	w.sawFloor(resp.Responses[1])
	return w.granted(h, resp.Header.Revision)
}

// floorKey is the floor of the queue range rng: outside every queue (an
// escaped name never starts with "%f"), on no lease.
func (e *Engine) floorKey(rng string) string {
	return e.prefix + "/%floor/" + strings.TrimPrefix(rng, e.prefix+"/")
}

func (w *lockWaiter) floorOp() clientv3.Op {
	return clientv3.OpGet(w.floor, clientv3.WithKeysOnly(), clientv3.WithCountOnly())
}

// sawFloor notes, from a read of floorOp, whether the floor exists; it is
// never deleted.
func (w *lockWaiter) sawFloor(r *etcdserverpb.ResponseOp) {
	w.floored = w.floored || r.GetResponseRange().Count > 0
}

// granted ends a wait that the state of etcd at revision rev decided:
// the header of the read that found nothing blocking the key, or the
// deletion that a sole reader saw. Fencing tokens must grow with every
// grant, and create revisions stop doing so once a heavy key has passed
// an older one: such an arrival creates the floor. So where the floor
// exists, a waited grant's token is rev. The holder before it had a token
// no newer than its own grant, and was deleted at or before rev (the read
// no longer shows it), so rev exceeds that token, with no write. Before
// the floor, grants go in create order and the token stays the create
// revision (acquireWait set it), as in a name with no weights.
func (w *lockWaiter) granted(h *driver.Hold, rev int64) (watchSpec, int64, error) {
	if w.floored {
		h.Token = uint64(rev)
	}
	return watchSpec{}, 0, nil
}

// soleSpec is what a sole reader (rng: the writers' range) watches: the
// writer it waits for, and heavy keys. A heavy writer may rank ahead of
// it; a heavy reader may pass that writer and create the floor, which
// changes the reader's token (see granted). The range runs from the heavy
// readers' (r/h/, after every weight-1 reader's key, whose lease in hex
// sorts below 'h') to the end of the writers': no event of a weight-1
// reader reaches it.
func (w *lockWaiter) soleSpec() watchSpec {
	return watchSpec{key: w.queue + rwReaders + heavySub, end: clientv3.GetPrefixRangeEnd(w.rng), puts: true}
}

// soleWakes: a sole waiter (a reader, or a mutex's waiter deciding from
// the whole queue) checks when the key it waits for is deleted (no
// request if nothing else came), and reads its place when a key that may
// pass it came after it.
func (w *lockWaiter) soleWakes(resp clientv3.WatchResponse) bool {
	for _, ev := range resp.Events {
		k := string(ev.Kv.Key)
		switch {
		case ev.Type == mvccpb.DELETE && k == w.st.key: // a mutex's waiter sees its own
			w.sole, w.gone = false, true
		case ev.Type == mvccpb.DELETE && k == w.blocked:
			w.gone, w.goneRev = true, ev.Kv.ModRevision
		case ev.Type == mvccpb.PUT && ev.Kv.CreateRevision > w.st.rev && w.mayPass(ev.Kv):
			w.sole, w.gone = false, true
		}
	}
	return w.gone
}

// mayPass tells whether a sole waiter must read its place again for a key
// put after it: a heavy key, which may rank ahead of it or create the
// floor (which changes its token); in a mutex whose floor it has seen,
// only one heavier than itself.
func (w *lockWaiter) mayPass(kv *mvccpb.KeyValue) bool {
	key := string(kv.Key)
	if !slices.ContainsFunc(w.heavyRanges(), func(r string) bool { return strings.HasPrefix(key, r) }) {
		return false
	}
	if weight, _, _ := parseHeavy(kv.Value); w.mutex && w.floored {
		return weight > w.weight
	}
	return true
}

// decide applies the rule to the waiter's key in the queue kvs: nothing
// to wait for, or the key its verdict names.
func (w *lockWaiter) decide(kvs []*mvccpb.KeyValue) (watchSpec, error) {
	keys, q, held := readQueue(w.queue, kvs, w.mutex)
	own := slices.IndexFunc(keys, func(k queueKey) bool { return k.kv.CreateRevision == w.st.rev })
	if own < 0 {
		return watchSpec{}, errKeyGone
	}
	v := lockrule.DecideHeld(q, held, own, 0)
	if v.Granted {
		return watchSpec{}, nil
	}
	b := v.Blockers[0]
	if w.mutex && aloneBehind(q, held, own, b) {
		// Its going grants this one, unless a key that may rank ahead
		// came meanwhile: watched in the same range (soleWakes), so that
		// the grant needs no read, as a sole reader's.
		w.sole, w.gone, w.blocked = true, false, string(keys[b].kv.Key)
		return watchSpec{key: w.queue, prefix: true, puts: true}, nil
	}
	return watchSpec{key: string(keys[b].kv.Key)}, nil
}

// aloneBehind tells whether q[own] is granted once q[b] goes.
func aloneBehind(q []lockrule.Entry, held []bool, own, b int) bool {
	q, held = slices.Delete(slices.Clone(q), b, b+1), slices.Delete(slices.Clone(held), b, b+1)
	if own > b {
		own--
	}
	return lockrule.DecideHeld(q, held, own, 0).Granted
}

// enqueueHeavy queues a key of weight > 1, which may rank ahead of keys
// older than it, so it records in its value the keys granted when it
// arrives: it reads the queue at a revision R and creates its key only if
// no key of the queue was created or deleted since R; else that
// transaction reads the queue again, for the next try, until ctx ends.
// Its place follows from the read it created on.
func (w *lockWaiter) enqueueHeavy(ctx context.Context, h *driver.Hold) (watchSpec, int64, error) {
	w.st.prefix, w.marks, w.sole, w.full, w.gone = w.heavy, false, false, true, false
	read, err := w.look(ctx)
	for err == nil {
		look, floored := lookOf(read)
		if w.e.afterLook != nil {
			w.e.afterLook()
		}
		if len(look.Kvs) >= maxTxnOps {
			return watchSpec{}, 0, fmt.Errorf("WithWeight(%d): %d keys queued, more than one etcd transaction compares (%d) to record the grants a heavier waiter must keep: %w",
				h.Weight, len(look.Kvs), maxTxnOps, errors.ErrUnsupported)
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.queue).WithPrefix(), "<", look.Header.Revision+1)}
		for _, kv := range look.Kvs {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision))
		}
		grants, passes := grantedRevs(w.queue, look.Kvs, w.mutex, h.Weight)
		w.st.value = heavyValue(h.Weight, grants, h.Owner)
		s, resp, err := w.e.create(ctx, h, w.st, func(t clientv3.Txn, put clientv3.Op) clientv3.Txn {
			then := []clientv3.Op{put}
			if passes {
				then = append(then, clientv3.OpPut(w.floor, ""))
			}
			// Failed, it reads the queue for the next try: no request more.
			return t.If(cmps...).Then(then...).Else(w.lookOps()...)
		})
		if err != nil {
			return watchSpec{}, 0, err
		}
		w.e.heavyTries.Add(1)
		if !resp.Succeeded {
			w.e.free(s)
			read = resp
			continue
		}
		w.e.heavyArrivals.Add(1)
		rev := resp.Header.Revision
		w.st.set(s, rev)
		w.floored = floored || passes
		kvs := append(look.Kvs, &mvccpb.KeyValue{Key: []byte(s.key), Value: []byte(w.st.value), CreateRevision: rev, ModRevision: rev})
		spec, err := w.decide(kvs)
		return spec, rev, err
	}
	return watchSpec{}, 0, err
}

// lookOps read the whole queue, oldest first, and whether the floor
// exists.
func (w *lockWaiter) lookOps() []clientv3.Op {
	return []clientv3.Op{clientv3.OpGet(w.queue, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)), w.floorOp()}
}

// look reads lookOps at one revision.
func (w *lockWaiter) look(ctx context.Context) (*clientv3.TxnResponse, error) {
	rctx, cancel := w.e.bound(ctx)
	defer cancel()
	return w.e.client.Txn(rctx).Then(w.lookOps()...).Commit()
}

// lookOf is the queue, with the revision it was read at, and whether the
// floor exists, from the answers to lookOps.
func lookOf(resp *clientv3.TxnResponse) (*etcdserverpb.RangeResponse, bool) {
	look := resp.Responses[0].GetResponseRange()
	look.Header = resp.Header
	return look, resp.Responses[1].GetResponseRange().Count > 0
}

// grantedRevs is the create revisions of the keys of a queue that the
// rule grants, downgrades aside (they are granted wherever they stand),
// and whether a waiting key is lighter than weight: one it may pass.
func grantedRevs(rng string, kvs []*mvccpb.KeyValue, mutex bool, weight int) (revs []int64, passes bool) {
	keys, q, held := readQueue(rng, kvs, mutex)
	for i, g := range lockrule.Grants(q, held, 0) {
		switch {
		case g && !keys[i].entry.Downgrade:
			revs = append(revs, keys[i].kv.CreateRevision)
		case !g && max(keys[i].entry.Weight, 1) < weight:
			passes = true
		}
	}
	return revs, passes
}
