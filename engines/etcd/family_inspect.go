package etcd

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

var _ inspect.FamilyInspector = (*Engine)(nil)

// InspectFamily reports the holds and waiters of the read-write lock
// (KindRead or KindWrite) or the semaphore (KindPermit) named name, oldest
// first, as Inspect does for a mutex: one range read, one TimeToLive per
// distinct lease. A holder's token is its key's create revision, but a
// downgraded read's is its writer's, as its Handle's Token is (its key's
// name carries it).
func (e *Engine) InspectFamily(ctx context.Context, kind inspect.Kind, name string) (inspect.FamilyInspection, error) {
	if err := familyArgs("inspect", kind, name); err != nil {
		return inspect.FamilyInspection{}, err
	}
	rng := e.familyRange(kind, name)
	kvs, ttls, err := e.inspectRange(ctx, "inspect", name, rng)
	if err != nil {
		return inspect.FamilyInspection{}, err
	}
	var in inspect.FamilyInspection
	count, keys := familyKeys(kind, rng, kvs)
	if kind == inspect.KindPermit {
		in.Permits = count
	}
	for _, k := range keys {
		h := k.h
		h.TTL = ttls[clientv3.LeaseID(k.kv.Lease)]
		if k.held {
			in.Holders = append(in.Holders, h)
		} else {
			in.Waiters = append(in.Waiters, h)
		}
	}
	return in, nil
}

// familyArgs checks the arguments of an operation on a family lock.
func familyArgs(op string, kind inspect.Kind, name string) error {
	if err := driver.ValidateName(name); err != nil {
		return fmt.Errorf("etcd: %s: %w", op, err)
	}
	if kind != inspect.KindRead && kind != inspect.KindWrite && kind != inspect.KindPermit {
		return fmt.Errorf("etcd: %s %q: %w: kind %v (want read, write or permit)", op, name, locker.ErrInvalidArgument, kind)
	}
	return nil
}

// familyKey is one key of a read-write lock or a semaphore, as an operator
// sees it.
type familyKey struct {
	kv     *mvccpb.KeyValue
	h      inspect.FamilyHolder // its TTL is not set
	held   bool
	marked bool // a permit key marked granted
}

// familyKeys splits the keys of the range rng of a family lock of kind,
// read in create revision order, into holds and waiters, by the rules the
// waiters follow; count is a semaphore's stored count (0 when none).
func familyKeys(kind inspect.Kind, rng string, kvs []*mvccpb.KeyValue) (count int, keys []familyKey) {
	if kind == inspect.KindPermit {
		return semCounted(rng, kvs)
	}
	return 0, rwKeys(rng, kvs)
}

// rwKeys tells a read-write lock's holds from its waiters by lockrule: a
// writer with a downgraded read of its own holds (it downgraded while it
// held).
func rwKeys(rng string, kvs []*mvccpb.KeyValue) []familyKey {
	keys := make([]familyKey, len(kvs))
	q := make([]lockrule.Entry, len(kvs))
	downgrades := make(map[uint64]bool) // their writers' tokens
	for i, kv := range kvs {
		k := familyKey{kv: kv, h: inspect.FamilyHolder{
			Holder: inspect.Holder{Owner: string(kv.Value), Token: uint64(kv.CreateRevision)},
			Kind:   inspect.KindRead, Permits: 1,
		}}
		switch sub := strings.TrimPrefix(string(kv.Key), rng); {
		case strings.HasPrefix(sub, rwWriters):
			k.h.Kind = inspect.KindWrite
		case strings.HasPrefix(sub, rwDowngrades):
			q[i].Downgrade = true
			if tok, _, ok := strings.Cut(strings.TrimPrefix(sub, rwDowngrades), "/"); ok {
				if t, err := strconv.ParseUint(tok, 10, 64); err == nil {
					k.h.Token = t
				}
			}
			downgrades[k.h.Token] = true
		}
		q[i].Kind, keys[i] = k.h.Kind, k
	}
	held := make([]bool, len(keys))
	for i, k := range keys {
		held[i] = k.h.Kind == inspect.KindWrite && downgrades[k.h.Token]
	}
	for i, g := range lockrule.Grants(q, held, 0) {
		keys[i].held = g
	}
	return keys
}

// semCounted splits a semaphore's keys, read in create revision order,
// into its stored count (0 when none) and its queue, telling holds from
// waiters by lockrule: a key marked granted holds.
func semCounted(rng string, kvs []*mvccpb.KeyValue) (int, []familyKey) {
	count := 0
	var queue []familyKey
	var q []lockrule.Entry
	var held []bool
	for _, kv := range kvs {
		if string(kv.Key) == rng+semCount {
			count, _ = strconv.Atoi(string(kv.Value))
			continue
		}
		p, marked, owner := parseSemValue(kv.Value)
		queue = append(queue, familyKey{kv: kv, marked: marked, h: inspect.FamilyHolder{
			Holder: inspect.Holder{Owner: owner, Token: uint64(kv.CreateRevision)},
			Kind:   inspect.KindPermit, Permits: p,
		}})
		q = append(q, lockrule.Entry{Kind: inspect.KindPermit, Permits: p})
		held = append(held, marked)
	}
	for i, g := range lockrule.Grants(q, held, count) {
		queue[i].held = g
	}
	return count, queue
}

// ForceUnlockFamily ends the holds of the read-write lock (KindRead or
// KindWrite: both sides) or the semaphore (KindPermit) named name whose
// token is token, or every hold when token is 0, whoever owns them, and
// returns what it ended; ErrNotHeld when none matched. A downgraded read
// has its writer's token: forcing that token ends both. It reads the holds
// as InspectFamily does, then deletes their keys, in transactions of at
// most maxTxnOps keys, each only if every key still has the mod revision
// read, so that it never ends a newer hold, nor a waiter granted meanwhile.
// A key that was only rewritten meanwhile (a permit marked granted, a key
// moved to a fixed lease) is the same hold: the transaction returns it, and
// it is deleted again with its new mod revision; one released by its owner
// meanwhile is not reported. Waiters stay queued and take their turn:
// every deletion wakes those it let in. The forced-out owners' engines
// learn of it at once from their deletion watches: Lost closes and Unlock
// returns ErrLockLost. When holds kept changing it
// returns those it ended with an error.
func (e *Engine) ForceUnlockFamily(ctx context.Context, kind inspect.Kind, name string, token uint64) ([]inspect.FamilyHolder, error) {
	const op = "force unlock"
	if err := familyArgs(op, kind, name); err != nil {
		return nil, err
	}
	rng := e.familyRange(kind, name)
	kvs, ttls, err := e.inspectRange(ctx, op, name, rng)
	if err != nil {
		return nil, err
	}
	_, keys := familyKeys(kind, rng, kvs)
	var targets []familyKey
	for _, k := range keys {
		if k.held && (token == 0 || k.h.Token == token) {
			k.h.TTL = ttls[clientv3.LeaseID(k.kv.Lease)]
			targets = append(targets, k)
		}
	}
	var ended []inspect.FamilyHolder
	for range forceAttempts {
		var changed []familyKey
		for chunk := range slices.Chunk(targets, maxTxnOps) {
			done, again, err := e.deleteHolds(ctx, chunk)
			if err != nil {
				return ended, e.fail(op, name, err)
			}
			ended = append(ended, done...)
			changed = append(changed, again...)
		}
		if targets = changed; len(targets) == 0 {
			break
		}
	}
	switch {
	case len(targets) > 0:
		return ended, fmt.Errorf("etcd: force unlock %s %q: %d holds changed %d times meanwhile: they are not stuck; look again", kind, name, len(targets), forceAttempts)
	case len(ended) == 0 && token != 0:
		return nil, fmt.Errorf("etcd: force unlock %s %q: no hold has token %d: %w", kind, name, token, locker.ErrNotHeld)
	case len(ended) == 0:
		return nil, fmt.Errorf("etcd: force unlock %s %q: %w", kind, name, locker.ErrNotHeld)
	}
	return ended, nil
}

// deleteHolds deletes the keys of holds in one transaction if each still
// has the mod revision read, and returns them as ended. Otherwise it
// returns, with their keys as they are now, those that still have the
// create revision read: the same holds, to delete again.
func (e *Engine) deleteHolds(ctx context.Context, holds []familyKey) (ended []inspect.FamilyHolder, changed []familyKey, err error) {
	cmps := make([]clientv3.Cmp, len(holds))
	dels := make([]clientv3.Op, len(holds))
	gets := make([]clientv3.Op, len(holds))
	for i, k := range holds {
		key := string(k.kv.Key)
		cmps[i] = clientv3.Compare(clientv3.ModRevision(key), "=", k.kv.ModRevision)
		dels[i] = clientv3.OpDelete(key)
		gets[i] = clientv3.OpGet(key)
	}
	rctx, cancel := e.bound(ctx)
	resp, err := e.client.Txn(rctx).If(cmps...).Then(dels...).Else(gets...).Commit()
	cancel()
	if err != nil {
		return nil, nil, err
	}
	if resp.Succeeded {
		ended = make([]inspect.FamilyHolder, len(holds))
		for i, k := range holds {
			ended[i] = k.h
		}
		return ended, nil, nil
	}
	for i, r := range resp.Responses {
		if kvs := r.GetResponseRange().Kvs; len(kvs) == 1 && kvs[0].CreateRevision == holds[i].kv.CreateRevision {
			k := holds[i]
			k.kv = kvs[0]
			changed = append(changed, k)
		}
	}
	return nil, changed, nil
}

// SetPermits stores n as the permit count of semaphore name. Holds already
// granted stay; waiters, and later acquisitions, honour n. Before lowering
// the count it marks the current holds granted, so that the waiters' rule
// (the permits before a key and its own fit the count) still tells them
// from waiters. It tries again when the semaphore changed meanwhile.
func (e *Engine) SetPermits(ctx context.Context, name string, n int) error {
	if err := driver.ValidateName(name); err != nil {
		return fmt.Errorf("etcd: set permits: %w", err)
	}
	if n < 1 {
		return fmt.Errorf("etcd: set permits %q: %w: n = %d, want at least 1", name, locker.ErrInvalidArgument, n)
	}
	if e.isClosed() {
		return e.fail("set permits", name, locker.ErrClosed)
	}
	rng := e.familyRange(inspect.KindPermit, name)
	countKey := rng + semCount
	for range forceAttempts {
		rctx, cancel := e.bound(ctx)
		resp, err := e.client.Get(rctx, rng, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		cancel()
		if err != nil {
			return e.fail("set permits", name, err)
		}
		count, queue := semCounted(rng, resp.Kvs)
		var countRev int64
		for _, kv := range resp.Kvs {
			if string(kv.Key) == countKey {
				countRev = kv.ModRevision
			}
		}
		unchanged := clientv3.Compare(clientv3.ModRevision(countKey), "=", countRev)
		var marks []familyKey
		for _, k := range queue {
			if n < count && k.held && !k.marked {
				marks = append(marks, k)
			}
		}
		ok, err := e.markHeld(ctx, unchanged, marks)
		if err == nil && ok {
			rctx, cancel := e.bound(ctx)
			var tresp *clientv3.TxnResponse
			// No key came since the read: its own grant was decided on the
			// old count, and it is not marked.
			tresp, err = e.client.Txn(rctx).
				If(unchanged, clientv3.Compare(clientv3.CreateRevision(rng+semQueue).WithPrefix(), "<", resp.Header.Revision+1)).
				Then(clientv3.OpPut(countKey, strconv.Itoa(n))).
				Commit()
			cancel()
			ok = err == nil && tresp.Succeeded
		}
		if err != nil {
			return e.fail("set permits", name, err)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("etcd: set permits %q: the semaphore changed %d times meanwhile; try again", name, forceAttempts)
}

// markHeld marks the given holds granted, in transactions of at most
// maxTxnOps keys, each only if the count is unchanged and its keys are
// still those read. It reports false when one of these changed.
func (e *Engine) markHeld(ctx context.Context, unchanged clientv3.Cmp, marks []familyKey) (bool, error) {
	for chunk := range slices.Chunk(marks, maxTxnOps-1) {
		cmps := []clientv3.Cmp{unchanged}
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(string(k.kv.Key)), "=", k.kv.CreateRevision))
			ops[i] = clientv3.OpPut(string(k.kv.Key), semValue(k.h.Permits, true, k.h.Owner), clientv3.WithIgnoreLease())
		}
		rctx, cancel := e.bound(ctx)
		resp, err := e.client.Txn(rctx).If(cmps...).Then(ops...).Commit()
		cancel()
		if err != nil || !resp.Succeeded {
			return false, err
		}
	}
	return true, nil
}
