package etcd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

var _ inspect.Inspector = (*Engine)(nil)

// maxLeaseLookups bounds the TimeToLive calls Inspect has in flight.
const maxLeaseLookups = 8

// forceAttempts bounds how often ForceUnlock tries again when the hold it
// read was released (and the lock granted to the next waiter) before it
// could remove it.
const forceAttempts = 5

// Inspect reports who holds name and who waits for it, first in line
// first: one range read of the lock's keys, sorted by create revision, then
// one TimeToLive per distinct lease among them (waiters of one process
// share a lease), in parallel. Owner is a key's value, Token its create
// revision (a waiter's is the token it holds with once granted), TTL the
// time its lease has left, in whole seconds as etcd counts them: 0 when the
// lease ended meanwhile.
func (e *Engine) Inspect(ctx context.Context, name string) (inspect.Inspection, error) {
	if err := driver.ValidateName(name); err != nil {
		return inspect.Inspection{}, fmt.Errorf("etcd: inspect: %w", err)
	}
	kvs, ttls, err := e.inspectRange(ctx, "inspect", name, e.lockPrefix(name))
	if err != nil {
		return inspect.Inspection{}, err
	}
	in := inspect.Inspection{}
	for i, kv := range kvs {
		h := inspect.Holder{Owner: string(kv.Value), Token: uint64(kv.CreateRevision), TTL: ttls[clientv3.LeaseID(kv.Lease)]}
		if i == 0 {
			in.Holder = &h
			continue
		}
		in.Waiters = append(in.Waiters, h)
	}
	return in, nil
}

// inspectRange reads the keys of rng, oldest first, and the time their
// leases have left (see leaseTTLs), for the operation op on name.
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

// leaseTTLs asks etcd once for each distinct lease of the keys read how
// long it has left.
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
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		sem      = make(chan struct{}, maxLeaseLookups)
	)
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rctx, cancel := e.bound(ctx)
			defer cancel()
			r, err := e.client.TimeToLive(rctx, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && firstErr == nil:
				firstErr = fmt.Errorf("lease %x: %w", int64(id), err)
			case err == nil:
				// TTL is -1 for a lease that ended after the read.
				ttls[id] = time.Duration(max(r.TTL, 0)) * time.Second
			}
		})
	}
	wg.Wait()
	return ttls, firstErr
}

// ForceUnlock removes the current hold of name, whoever owns it, and
// returns the hold it removed (its TTL is not read); ErrNotHeld when the
// name is free. It deletes the key with the lowest create revision only if
// that key still has the create revision read (one transaction, which reads
// the new lowest key when the hold changed meanwhile, to try again). The
// next waiter, watching that key, takes the lock; the forced-out owner's
// engine learns of it at once from its deletion watch: Lost closes and
// Unlock returns ErrLockLost. For operators clearing a stuck hold.
func (e *Engine) ForceUnlock(ctx context.Context, name string) (inspect.Holder, error) {
	if err := driver.ValidateName(name); err != nil {
		return inspect.Holder{}, fmt.Errorf("etcd: force unlock: %w", err)
	}
	if e.isClosed() {
		return inspect.Holder{}, e.fail("force unlock", name, locker.ErrClosed)
	}
	prefix := e.lockPrefix(name)
	first := clientv3.OpGet(prefix, clientv3.WithFirstCreate()...)
	rctx, cancel := e.bound(ctx)
	resp, err := e.client.Do(rctx, first)
	cancel()
	if err != nil {
		return inspect.Holder{}, e.fail("force unlock", name, err)
	}
	kvs := resp.Get().Kvs
	for range forceAttempts {
		if len(kvs) == 0 {
			return inspect.Holder{}, fmt.Errorf("etcd: force unlock %q: %w", name, locker.ErrNotHeld)
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
			return inspect.Holder{}, e.fail("force unlock", name, err)
		}
		if tresp.Succeeded {
			return inspect.Holder{Owner: string(kv.Value), Token: uint64(kv.CreateRevision)}, nil
		}
		kvs = tresp.Responses[0].GetResponseRange().Kvs
	}
	return inspect.Holder{}, fmt.Errorf("etcd: force unlock %q: the lock changed hands %d times meanwhile: it is not stuck; look again", name, forceAttempts)
}
