package etcd

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

var (
	_ inspect.Inspector       = (*Engine)(nil)
	_ inspect.FamilyInspector = (*Engine)(nil)
)

// maxLeaseLookups bounds the TimeToLive calls Inspect has in flight.
const maxLeaseLookups = 8

// forceAttempts bounds the tries of ForceUnlock on a lock changing hands.
const forceAttempts = 5

// Inspect reports who holds name and who waits for it, first in line
// first (heaviest, then oldest): one range read, then one TimeToLive per
// distinct lease. Token is a key's create revision, TTL its lease's time
// left (0 when it ended).
func (e *Engine) Inspect(ctx context.Context, name string) (inspect.Inspection, error) {
	if err := driver.ValidateName(name); err != nil {
		return inspect.Inspection{}, fmt.Errorf("etcd: inspect: %w", err)
	}
	prefix := e.lockPrefix(name)
	kvs, ttls, err := e.inspectRange(ctx, "inspect", name, prefix)
	if err != nil {
		return inspect.Inspection{}, err
	}
	in := inspect.Inspection{}
	holder, waiters := mutexHolder(prefix, kvs)
	for _, k := range waiters {
		in.Waiters = append(in.Waiters, inspect.Holder{Owner: k.owner, Token: uint64(k.kv.CreateRevision), TTL: ttls[clientv3.LeaseID(k.kv.Lease)]})
	}
	if holder != nil {
		in.Holder = &inspect.Holder{Owner: holder.owner, Token: uint64(holder.kv.CreateRevision), TTL: ttls[clientv3.LeaseID(holder.kv.Lease)]}
	}
	return in, nil
}

// mutexHolder tells, from the keys of a mutex's range read oldest first,
// the one holding it (nil: none) and the waiters in their rank.
func mutexHolder(prefix string, kvs []*mvccpb.KeyValue) (*queueKey, []queueKey) {
	keys, q, held := readQueue(prefix, kvs, true)
	var holder *queueKey
	var waiters []queueKey
	for i, g := range lockrule.Grants(q, held, 0) {
		if g && holder == nil {
			holder = &keys[i]
			continue
		}
		waiters = append(waiters, keys[i])
	}
	slices.SortStableFunc(waiters, func(a, b queueKey) int { return max(b.entry.Weight, 1) - max(a.entry.Weight, 1) })
	return holder, waiters
}

// inspectRange reads the keys of rng, oldest first, and their leases' TTLs.
func (e *Engine) inspectRange(ctx context.Context, op, name, rng string) ([]*mvccpb.KeyValue, map[clientv3.LeaseID]time.Duration, error) {
	if e.isClosed() {
		return nil, nil, e.fail(op, name, locker.ErrClosed)
	}
	rctx, cancel := e.bound(ctx)
	resp, err := e.client.Get(rctx, rng, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	cancel()
	if err != nil {
		return nil, nil, e.fail(op, name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil, nil
	}
	ttls, err := e.leaseTTLs(ctx, resp)
	if err != nil {
		return nil, nil, e.fail(op, name, err)
	}
	return resp.Kvs, ttls, nil
}

// leaseTTLs asks etcd for the time left of each distinct lease of resp.
func (e *Engine) leaseTTLs(ctx context.Context, resp *clientv3.GetResponse) (map[clientv3.LeaseID]time.Duration, error) {
	ttls := make(map[clientv3.LeaseID]time.Duration)
	var ids []clientv3.LeaseID
	for _, kv := range resp.Kvs {
		id := clientv3.LeaseID(kv.Lease)
		if _, seen := ttls[id]; seen || id == clientv3.NoLease {
			continue
		}
		ttls[id] = 0
		ids = append(ids, id)
	}
	var (
		mu sync.Mutex
		g  errgroup.Group
	)
	g.SetLimit(maxLeaseLookups)
	for _, id := range ids {
		g.Go(func() error {
			rctx, cancel := e.bound(ctx)
			defer cancel()
			r, err := e.client.TimeToLive(rctx, id)
			if err != nil {
				return fmt.Errorf("lease %x: %w", int64(id), err)
			}
			mu.Lock()
			defer mu.Unlock()
			ttls[id] = time.Duration(max(r.TTL, 0)) * time.Second // -1: ended after the read
			return nil
		})
	}
	return ttls, g.Wait()
}

// ForceUnlock removes the current hold of name, whoever owns it, and
// returns it (its TTL is not read); ErrNotHeld when the name is free. It
// reads the name's keys and deletes the holder's if it still has the
// create revision read, else reads again. The owner's engine sees it at
// once (Lost closes, Unlock returns ErrLockLost); the next waiter takes
// the lock.
func (e *Engine) ForceUnlock(ctx context.Context, name string) (inspect.Holder, error) {
	if err := driver.ValidateName(name); err != nil {
		return inspect.Holder{}, fmt.Errorf("etcd: force unlock: %w", err)
	}
	if e.isClosed() {
		return inspect.Holder{}, e.fail("force unlock", name, locker.ErrClosed)
	}
	prefix := e.lockPrefix(name)
	all := clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	rctx, cancel := e.bound(ctx)
	resp, err := e.client.Do(rctx, all)
	cancel()
	if err != nil {
		return inspect.Holder{}, e.fail("force unlock", name, err)
	}
	kvs := resp.Get().Kvs
	for range forceAttempts {
		holder, _ := mutexHolder(prefix, kvs)
		if holder == nil {
			return inspect.Holder{}, fmt.Errorf("etcd: force unlock %q: %w", name, locker.ErrNotHeld)
		}
		kv := holder.kv
		rctx, cancel := e.bound(ctx)
		tresp, err := e.client.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
			Then(clientv3.OpDelete(string(kv.Key))).
			Else(all).
			Commit()
		cancel()
		if err != nil {
			return inspect.Holder{}, e.fail("force unlock", name, err)
		}
		if tresp.Succeeded {
			return inspect.Holder{Owner: holder.owner, Token: uint64(kv.CreateRevision)}, nil
		}
		kvs = tresp.Responses[0].GetResponseRange().Kvs
	}
	return inspect.Holder{}, fmt.Errorf("etcd: force unlock %q: the lock changed hands %d times meanwhile: it is not stuck; look again", name, forceAttempts)
}

// InspectFamily reports the holds and waiters of the read-write lock
// (KindRead or KindWrite) or the semaphore (KindPermit) named name, oldest
// first, as Inspect does; a downgraded read has its writer's token, as its
// Handle has.
func (e *Engine) InspectFamily(ctx context.Context, kind inspect.Kind, name string) (inspect.FamilyInspection, error) {
	count, keys, err := e.familyHolds(ctx, "inspect", kind, name)
	if err != nil {
		return inspect.FamilyInspection{}, err
	}
	in := inspect.FamilyInspection{Permits: count}
	for _, k := range keys {
		if k.held {
			in.Holders = append(in.Holders, k.h)
		} else {
			in.Waiters = append(in.Waiters, k.h)
		}
	}
	return in, nil
}

// familyHolds reads the keys of a family lock, with their leases' TTLs.
func (e *Engine) familyHolds(ctx context.Context, op string, kind inspect.Kind, name string) (int, []familyKey, error) {
	if err := familyArgs(op, kind, name); err != nil {
		return 0, nil, err
	}
	rng := e.familyRange(kind, name)
	kvs, ttls, err := e.inspectRange(ctx, op, name, rng)
	if err != nil {
		return 0, nil, err
	}
	count, keys := familyKeys(rng, kvs)
	for i, k := range keys {
		keys[i].h.TTL = ttls[clientv3.LeaseID(k.kv.Lease)]
	}
	return count, keys, nil
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

// familyKey is one key of a read-write lock or a semaphore.
type familyKey struct {
	kv     *mvccpb.KeyValue
	h      inspect.FamilyHolder // its TTL is not set
	held   bool
	marked bool // a permit key marked granted
}

// familyKeys tells the holds among the keys of a family lock's range rng,
// read in create revision order, by lockrule: a permit key marked granted
// holds, and so does a writer with a downgraded read of its own. count is
// a semaphore's stored count.
func familyKeys(rng string, kvs []*mvccpb.KeyValue) (count int, keys []familyKey) {
	var q []lockrule.Entry
	var held []bool
	var side []*mvccpb.KeyValue // a read-write lock's keys
	for _, kv := range kvs {
		sub := strings.TrimPrefix(string(kv.Key), rng)
		switch {
		case sub == semCount:
			count, _ = strconv.Atoi(string(kv.Value))
		case strings.HasPrefix(sub, semQueue):
			k := familyKey{kv: kv, h: inspect.FamilyHolder{Holder: inspect.Holder{Token: uint64(kv.CreateRevision)}, Kind: inspect.KindPermit}}
			k.h.Permits, k.marked, k.h.Owner = parseSemValue(kv.Value)
			q, held, keys = append(q, lockrule.Entry{Kind: inspect.KindPermit, Permits: k.h.Permits}), append(held, k.marked), append(keys, k)
		default:
			side = append(side, kv)
		}
	}
	rw, rq, rheld := readQueue(rng, side, false)
	for _, k := range rw {
		h := inspect.FamilyHolder{Holder: inspect.Holder{Owner: k.owner, Token: uint64(k.kv.CreateRevision)}, Kind: k.entry.Kind, Permits: 1}
		if k.entry.Downgrade {
			h.Token = downgradeToken(rng, k.kv)
		}
		keys = append(keys, familyKey{kv: k.kv, h: h})
	}
	q, held = append(q, rq...), append(held, rheld...)
	for i, g := range lockrule.Grants(q, held, count) {
		keys[i].held = g
	}
	return count, keys
}

// downgradeToken is the token of a downgraded read: its writer's, in its
// key.
func downgradeToken(rng string, kv *mvccpb.KeyValue) uint64 {
	tok, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), rng+rwDowngrades), "/")
	t, _ := strconv.ParseUint(tok, 10, 64)
	return t
}

// ForceUnlockFamily ends the holds of the read-write lock (KindRead or
// KindWrite: both sides) or the semaphore (KindPermit) named name whose
// token is token, or every hold when token is 0, and returns what it
// ended; ErrNotHeld when none matched. A downgraded read has its writer's
// token: forcing that token ends both. Each key is deleted only if it
// still has the mod revision read, so that no newer hold nor waiter
// granted meanwhile is ended; a key only rewritten meanwhile (a mark, a
// fixed lease's move) is deleted again. The owners' engines see it at once
// (Lost closes, Unlock returns ErrLockLost); waiters take their turn.
func (e *Engine) ForceUnlockFamily(ctx context.Context, kind inspect.Kind, name string, token uint64) ([]inspect.FamilyHolder, error) {
	const op = "force unlock"
	_, keys, err := e.familyHolds(ctx, op, kind, name)
	if err != nil {
		return nil, err
	}
	targets := slices.DeleteFunc(keys, func(k familyKey) bool {
		return !k.held || (token != 0 && k.h.Token != token)
	})
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
// has the mod revision read; otherwise it returns, as they are now, those
// still of the create revision read, to try again.
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

// SetPermits stores n as the permit count of semaphore name. Holds
// granted stay; waiters and later acquisitions honour n. Before lowering
// the count it marks the holds granted, so that the rule still tells them
// from waiters.
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
		count, queue := familyKeys(rng, resp.Kvs)
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
			// A key come since was granted on the old count, unmarked.
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

// markHeld marks holds granted if the count is unchanged and the keys
// are those read; false when one changed.
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
