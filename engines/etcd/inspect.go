package etcd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/orthrus-go/orthrus/locker"
)

var _ locker.Inspector = (*Engine)(nil)

// maxLeaseLookups bounds the TimeToLive calls Inspect has in flight.
const maxLeaseLookups = 8

// forceAttempts bounds the tries of ForceUnlock on a lock changing hands.
const forceAttempts = 5

// Inspect reports who holds name and who waits for it, first in line
// first: one range read, then one TimeToLive per distinct lease. Token is
// a key's create revision, TTL its lease's time left (0 when it ended).
func (e *Engine) Inspect(ctx context.Context, name string) (locker.Inspection, error) {
	if err := locker.ValidateName(name); err != nil {
		return locker.Inspection{}, fmt.Errorf("etcd: inspect: %w", err)
	}
	kvs, ttls, err := e.inspectRange(ctx, "inspect", name, e.lockPrefix(name))
	if err != nil {
		return locker.Inspection{}, err
	}
	in := locker.Inspection{}
	for i, kv := range kvs {
		h := locker.Holder{Owner: string(kv.Value), Token: uint64(kv.CreateRevision), TTL: ttls[clientv3.LeaseID(kv.Lease)]}
		if i == 0 {
			in.Holder = &h
			continue
		}
		in.Waiters = append(in.Waiters, h)
	}
	return in, nil
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
// deletes the oldest key if it still has the create revision read, else
// tries the new oldest. The owner's engine sees it at once (Lost closes,
// Unlock returns ErrLockLost); the next waiter takes the lock.
func (e *Engine) ForceUnlock(ctx context.Context, name string) (locker.Holder, error) {
	if err := locker.ValidateName(name); err != nil {
		return locker.Holder{}, fmt.Errorf("etcd: force unlock: %w", err)
	}
	if e.isClosed() {
		return locker.Holder{}, e.fail("force unlock", name, locker.ErrClosed)
	}
	prefix := e.lockPrefix(name)
	first := clientv3.OpGet(prefix, clientv3.WithFirstCreate()...)
	rctx, cancel := e.bound(ctx)
	resp, err := e.client.Do(rctx, first)
	cancel()
	if err != nil {
		return locker.Holder{}, e.fail("force unlock", name, err)
	}
	kvs := resp.Get().Kvs
	for range forceAttempts {
		if len(kvs) == 0 {
			return locker.Holder{}, fmt.Errorf("etcd: force unlock %q: %w", name, locker.ErrNotHeld)
		}
		kv := kvs[0]
		rctx, cancel := e.bound(ctx)
		tresp, err := e.client.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
			Then(clientv3.OpDelete(string(kv.Key))).
			Else(first).
			Commit()
		cancel()
		if err != nil {
			return locker.Holder{}, e.fail("force unlock", name, err)
		}
		if tresp.Succeeded {
			return locker.Holder{Owner: string(kv.Value), Token: uint64(kv.CreateRevision)}, nil
		}
		kvs = tresp.Responses[0].GetResponseRange().Kvs
	}
	return locker.Holder{}, fmt.Errorf("etcd: force unlock %q: the lock changed hands %d times meanwhile: it is not stuck; look again", name, forceAttempts)
}
