package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/locker"
)

var _ locker.FamilyInspector = (*Engine)(nil)

// InspectFamily reports the holds and waiters of the read-write lock
// (KindRead or KindWrite) or the semaphore (KindPermit) named name, oldest
// first, as Inspect does for a mutex: one range read, one TimeToLive per
// distinct lease. A holder's token is its key's create revision (a
// downgraded read shows its own, not its writer's).
func (e *Engine) InspectFamily(ctx context.Context, kind locker.Kind, name string) (locker.FamilyInspection, error) {
	if err := locker.ValidateName(name); err != nil {
		return locker.FamilyInspection{}, fmt.Errorf("etcd: inspect: %w", err)
	}
	if kind != locker.KindRead && kind != locker.KindWrite && kind != locker.KindPermit {
		return locker.FamilyInspection{}, fmt.Errorf("etcd: inspect %q: %w: kind %v (want read, write or permit)", name, locker.ErrInvalidArgument, kind)
	}
	rng := e.familyRange(kind, name)
	kvs, ttls, err := e.inspectRange(ctx, name, rng)
	if err != nil {
		return locker.FamilyInspection{}, err
	}
	var in locker.FamilyInspection
	add := func(kv *mvccpb.KeyValue, k locker.Kind, permits int, owner string, held bool) {
		h := locker.FamilyHolder{Holder: locker.Holder{Owner: owner, Token: uint64(kv.CreateRevision), TTL: ttls[clientv3.LeaseID(kv.Lease)]}, Kind: k, Permits: permits}
		if held {
			in.Holders = append(in.Holders, h)
		} else {
			in.Waiters = append(in.Waiters, h)
		}
	}
	if kind == locker.KindPermit {
		count, queue := semCounted(rng, kvs)
		in.Permits = count
		for _, k := range queue {
			add(k.kv, locker.KindPermit, k.permits, k.owner, k.held)
		}
		return in, nil
	}
	// A writer at the front holds unless a downgraded reader of another
	// owner holds it out; a reader holds when no writer is older.
	downgrades := make(map[string]bool) // owners
	for _, kv := range kvs {
		if strings.HasPrefix(string(kv.Key), rng+rwDowngrades) {
			downgrades[string(kv.Value)] = true
		}
	}
	writer := false
	for i, kv := range kvs {
		owner := string(kv.Value)
		switch sub := strings.TrimPrefix(string(kv.Key), rng); {
		case strings.HasPrefix(sub, rwWriters):
			others := len(downgrades) > 1 || (len(downgrades) == 1 && !downgrades[owner])
			add(kv, locker.KindWrite, 1, owner, i == 0 && !others)
			writer = true
		case strings.HasPrefix(sub, rwDowngrades):
			add(kv, locker.KindRead, 1, owner, true)
		default:
			add(kv, locker.KindRead, 1, owner, !writer)
		}
	}
	return in, nil
}

// semKey is one key of a semaphore's queue, as an operator sees it.
type semKey struct {
	kv      *mvccpb.KeyValue
	permits int
	owner   string
	held    bool
	marked  bool
}

// semCounted splits a semaphore's keys, read in create revision order,
// into its stored count (0 when none) and its queue, telling holds from
// waiters by the rule the waiters follow.
func semCounted(rng string, kvs []*mvccpb.KeyValue) (int, []semKey) {
	count := 0
	var queue []semKey
	for _, kv := range kvs {
		if string(kv.Key) == rng+semCount {
			count, _ = strconv.Atoi(string(kv.Value))
			continue
		}
		p, marked, owner := parseSemValue(kv.Value)
		queue = append(queue, semKey{kv: kv, permits: p, owner: owner, marked: marked})
	}
	sum, waiting := 0, false
	for i := range queue {
		sum += queue[i].permits
		waiting = waiting || (!queue[i].marked && sum > count)
		queue[i].held = !waiting
	}
	return count, queue
}

// SetPermits stores n as the permit count of semaphore name. Holds already
// granted stay; waiters, and later acquisitions, honour n. Before lowering
// the count it marks the current holds granted, so that the waiters' rule
// (the permits before a key and its own fit the count) still tells them
// from waiters. It tries again when the semaphore changed meanwhile.
func (e *Engine) SetPermits(ctx context.Context, name string, n int) error {
	if err := locker.ValidateName(name); err != nil {
		return fmt.Errorf("etcd: set permits: %w", err)
	}
	if n < 1 {
		return fmt.Errorf("etcd: set permits %q: %w: n = %d, want at least 1", name, locker.ErrInvalidArgument, n)
	}
	if e.isClosed() {
		return e.fail("set permits", name, locker.ErrClosed)
	}
	rng := e.familyRange(locker.KindPermit, name)
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
		var marks []semKey
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
func (e *Engine) markHeld(ctx context.Context, unchanged clientv3.Cmp, marks []semKey) (bool, error) {
	for len(marks) > 0 {
		chunk := marks[:min(len(marks), maxTxnOps-1)]
		marks = marks[len(chunk):]
		cmps := []clientv3.Cmp{unchanged}
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(string(k.kv.Key)), "=", k.kv.CreateRevision))
			ops[i] = clientv3.OpPut(string(k.kv.Key), semValue(k.permits, true, k.owner), clientv3.WithIgnoreLease())
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
