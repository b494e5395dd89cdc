package idem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/locker"
)

// EtcdStore keeps records as etcd keys attached to leases, through
// clientv3. Each write is one transaction that compares the key's
// revision: Begin puts the key if it has no create revision, Done puts or
// deletes it if its mod revision is still the one Begin created.
//
// Expiry is a lease. Records that begin within the same stretch share one
// lease rather than granting one each: a lease is granted for the TTL in
// whole seconds plus a tenth (at least a second), and reused while it has
// at least the TTL left, so a record lives between its TTL and that much
// more. Nothing keeps those leases alive; they expire on the server.
type EtcdStore struct {
	client *clientv3.Client
	name   string
	prefix string

	mu     sync.Mutex
	leases map[int64]sharedLease // by TTL in whole seconds
}

type sharedLease struct {
	id    clientv3.LeaseID
	until time.Time // by the local clock, a lower bound of the lease's end on the server
}

var _ Store = (*EtcdStore)(nil)

// NewEtcdStore returns a store over client, which it never closes.
func NewEtcdStore(client *clientv3.Client, opts ...StoreOption) (*EtcdStore, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: NewEtcdStore: client is nil", locker.ErrInvalidArgument)
	}
	s, err := resolveStore(opts, "etcd", "orthrus/idem/")
	if err != nil {
		return nil, err
	}
	if s.noTTLNodes {
		return nil, fmt.Errorf("%w: WithoutTTLNodes applies to ZooKeeper only", locker.ErrInvalidArgument)
	}
	if !strings.HasSuffix(s.prefix, "/") {
		s.prefix += "/"
	}
	return &EtcdStore{client: client, name: s.name, prefix: s.prefix, leases: make(map[int64]sharedLease)}, nil
}

// Name implements Store.
func (e *EtcdStore) Name() string { return e.name }

// Key returns the etcd key of the record with the given ID.
func (e *EtcdStore) Key(id ID) string { return e.prefix + id.String() }

// closed fails a request at once when the owner closed the client:
// clientv3 would retry it until the caller's deadline, and report an
// outage.
func (e *EtcdStore) closed(op, key string) error {
	if e.client.Ctx().Err() == nil {
		return nil
	}
	return fmt.Errorf("etcd: %s %s: %w: the client is closed", op, key, locker.ErrClosed)
}

func (e *EtcdStore) fail(op, key string, err error) error {
	if cerr := e.closed(op, key); cerr != nil {
		return cerr // closed during the request
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("etcd: %s %s: %w: %w", op, key, locker.ErrUnavailable, err)
}

// lease returns a lease with at least ttl left on the server.
func (e *EtcdStore) lease(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	secs := max(int64((ttl+time.Second-1)/time.Second), 1)
	now := time.Now()
	e.mu.Lock()
	l, ok := e.leases[secs]
	e.mu.Unlock()
	if ok && l.until.Sub(now) >= time.Duration(secs)*time.Second {
		return l.id, nil
	}
	// Concurrent misses each grant a lease and the last one is kept: a
	// few spare grants once per stretch, but no caller ever waits on
	// another's grant.
	g, err := e.client.Grant(ctx, secs+max(secs/10, 1))
	if err != nil {
		return 0, err
	}
	e.mu.Lock()
	e.leases[secs] = sharedLease{id: g.ID, until: now.Add(time.Duration(g.TTL) * time.Second)}
	e.mu.Unlock()
	return g.ID, nil
}

// forget drops a cached lease the server no longer has.
func (e *EtcdStore) forget(ttl time.Duration, id clientv3.LeaseID) {
	secs := max(int64((ttl+time.Second-1)/time.Second), 1)
	e.mu.Lock()
	if e.leases[secs].id == id {
		delete(e.leases, secs)
	}
	e.mu.Unlock()
}

// withLease runs txn on a shared lease of ttl, and once more on a fresh
// one if the server no longer had the cached lease.
func (e *EtcdStore) withLease(ctx context.Context, ttl time.Duration, txn func(clientv3.LeaseID) (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
	for attempt := 0; ; attempt++ {
		id, err := e.lease(ctx, ttl)
		if err != nil {
			return nil, err
		}
		resp, err := txn(id)
		if err != nil && attempt == 0 && errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound) {
			e.forget(ttl, id)
			continue
		}
		return resp, err
	}
}

// Create implements Store; the stamp is the revision of the write (the
// key's mod revision).
func (e *EtcdStore) Create(ctx context.Context, key string, val []byte, ttl, _ time.Duration) (Entry, bool, error) {
	k := e.prefix + key
	if err := e.closed("create", k); err != nil {
		return Entry{}, false, err
	}
	resp, err := e.withLease(ctx, ttl, func(id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		return e.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, string(val), clientv3.WithLease(id))).
			Else(clientv3.OpGet(k)).
			Commit()
	})
	if err != nil {
		return Entry{}, false, e.fail("create", k, err)
	}
	if resp.Succeeded {
		return Entry{Value: val, Stamp: resp.Header.Revision}, true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 { // cannot happen: the compare saw the key in the same transaction
		return Entry{}, false, e.fail("create", k, errors.New("record vanished inside a transaction"))
	}
	return Entry{Value: kvs[0].Value, Stamp: kvs[0].ModRevision}, false, nil
}

// Replace implements Store: the put happens only if the key's mod
// revision is still old's stamp.
func (e *EtcdStore) Replace(ctx context.Context, key string, old Entry, val []byte, ttl time.Duration) (bool, error) {
	k := e.prefix + key
	if err := e.closed("replace", k); err != nil {
		return false, err
	}
	resp, err := e.withLease(ctx, ttl, func(id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		return e.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", old.Stamp)).
			Then(clientv3.OpPut(k, string(val), clientv3.WithLease(id))).
			Commit()
	})
	if err != nil {
		return false, e.fail("replace", k, err)
	}
	return resp.Succeeded, nil
}

// Remove implements Store.
func (e *EtcdStore) Remove(ctx context.Context, key string, old Entry) (bool, error) {
	k := e.prefix + key
	if err := e.closed("remove", k); err != nil {
		return false, err
	}
	resp, err := e.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", old.Stamp)).
		Then(clientv3.OpDelete(k)).
		Commit()
	if err != nil {
		return false, e.fail("remove", k, err)
	}
	return resp.Succeeded, nil
}

// Get implements Store; it does not report the TTL (that is another round
// trip, to the lease).
func (e *EtcdStore) Get(ctx context.Context, key string) (Entry, bool, error) {
	k := e.prefix + key
	if err := e.closed("get", k); err != nil {
		return Entry{}, false, err
	}
	resp, err := e.client.Get(ctx, k)
	if err != nil {
		return Entry{}, false, e.fail("get", k, err)
	}
	if len(resp.Kvs) == 0 {
		return Entry{}, false, nil
	}
	return Entry{Value: resp.Kvs[0].Value, Stamp: resp.Kvs[0].ModRevision}, true, nil
}

// Delete implements Store.
func (e *EtcdStore) Delete(ctx context.Context, key string) (bool, error) {
	k := e.prefix + key
	if err := e.closed("delete", k); err != nil {
		return false, err
	}
	resp, err := e.client.Delete(ctx, k)
	if err != nil {
		return false, e.fail("delete", k, err)
	}
	return resp.Deleted > 0, nil
}
