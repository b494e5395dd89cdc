package idem

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
)

// ZKStore keeps records as ZooKeeper nodes, through a go-zookeeper
// connection the caller owns. ZooKeeper has no per-node expiry that can be
// extended, so the store builds one:
//
//   - A record is the node <prefix>/<id> whose data is the record's TTL in
//     milliseconds (8 bytes) followed by its value. It expires at its mtime
//     plus that TTL: both are the server's clock, never the client's.
//   - Expiry is lazy. Begin creates the node; when it exists, Begin reads it
//     and learns the server's time by writing the (empty) data of the prefix
//     node, whose new mtime is "now". A live record is a duplicate; an
//     expired one is taken over with a write conditional on the version
//     read, so two attempts never both take it over. Lookups treat an
//     expired record as absent.
//   - Done writes or deletes the node conditionally on the version its
//     Begin created: a newer attempt's takeover changed the version, so a
//     late Done never touches it. A late Done of an attempt that nobody has
//     taken over yet still records its outcome: no other attempt ran.
//   - Garbage: nodes are TTL nodes (ZooKeeper 3.5.3 or later, with the
//     server's zookeeper.extendedTypesEnabled=true, which a zoo.cfg line
//     extendedTypesEnabled=true also sets), created with the gate's
//     retention as TTL, so the server deletes a record once no write has
//     touched it for the retention: never before its logical expiry. The
//     server checks every znode.container.checkIntervalMs (60s by default).
//     WithoutTTLNodes makes persistent nodes instead, for servers without
//     TTL nodes: correctness is the same, but the node of an operation that
//     never begins again stays until an operator deletes it.
//
// A Begin costs one create; a duplicate three requests (create, read,
// clock write); Done one conditional write or delete. go-zookeeper calls
// take no context: each runs on a goroutine the store owns, and the caller
// stops waiting when its context ends; Close waits for those still
// running.
type ZKStore struct {
	conn       *gozk.Conn
	name       string
	prefix     string
	acl        []gozk.ACL
	noTTLNodes bool

	mu      sync.Mutex
	closed  bool
	pending sync.WaitGroup
}

var _ Store = (*ZKStore)(nil)

// WithoutTTLNodes makes the ZooKeeper store create persistent nodes, for
// servers without TTL nodes (extendedTypesEnabled). Default: TTL nodes.
func WithoutTTLNodes() StoreOption {
	return func(s *storeSettings) error {
		s.noTTLNodes = true
		return nil
	}
}

// zkCloseWait bounds how long Close waits for requests still running.
const zkCloseWait = 10 * time.Second

// NewZKStore returns a store over conn, which it never closes. Nodes get
// the ACL acl (nil: open to all, gozk.WorldACL(gozk.PermAll)); with a
// digest-authenticated connection pass gozk.AuthACL(gozk.PermAll).
func NewZKStore(conn *gozk.Conn, acl []gozk.ACL, opts ...StoreOption) (*ZKStore, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: NewZKStore: conn is nil", locker.ErrInvalidArgument)
	}
	s, err := resolveStore(opts, "zk", "/orthrus/idem")
	if err != nil {
		return nil, err
	}
	p := strings.TrimSuffix(s.prefix, "/")
	if err := zkconn.CheckPath(p); err != nil {
		return nil, fmt.Errorf("%w: WithPrefix(%q): %v", locker.ErrInvalidArgument, s.prefix, err)
	}
	if acl == nil {
		acl = gozk.WorldACL(gozk.PermAll)
	}
	return &ZKStore{conn: conn, name: s.name, prefix: p, acl: acl, noTTLNodes: s.noTTLNodes}, nil
}

// Name implements Store.
func (z *ZKStore) Name() string { return z.name }

// Path returns the node of the record with the given ID.
func (z *ZKStore) Path(id ID) string { return z.prefix + "/" + id.String() }

// Close waits, at most 10s, for the requests whose callers stopped waiting
// to end (they end when the server answers or the connection drops), and
// makes later calls fail with locker.ErrClosed. It does not close the
// connection: close the store first, since go-zookeeper races with a
// request still in flight when its connection is closed under it (the
// call reads its response while the connection's loop may still write it).
// It is idempotent.
func (z *ZKStore) Close() error {
	z.mu.Lock()
	z.closed = true
	z.mu.Unlock()
	done := make(chan struct{})
	go func() {
		z.pending.Wait()
		close(done)
	}()
	t := time.NewTimer(zkCloseWait)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("zk: close: requests still running after %v", zkCloseWait)
	}
}

// zkCall runs f with zkconn.Call, the one cancellable call for a
// connection the caller owns, and counts it until f returns, so that Close
// can wait for it.
func zkCall[T any](z *ZKStore, ctx context.Context, f func() (T, error)) (T, error) {
	z.mu.Lock()
	if z.closed {
		z.mu.Unlock()
		var zero T
		return zero, locker.ErrClosed
	}
	z.pending.Add(1)
	z.mu.Unlock()
	return zkconn.Call(ctx, func() (T, error) {
		defer z.pending.Done()
		return f()
	})
}

// errTTLNodes: the server refused a TTL node.
var errTTLNodes = fmt.Errorf("%w: the ZooKeeper server does not allow TTL nodes: set zookeeper.extendedTypesEnabled=true on the servers (3.5.3 or later), or use WithoutTTLNodes", errors.ErrUnsupported)

// fail classes err: an answer of the server (no permission, a bad ACL: see
// zkconn.Answered) or a server without TTL nodes is not an outage.
func (z *ZKStore) fail(op, p string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, locker.ErrClosed),
		zkconn.Answered(err), errors.Is(err, errors.ErrUnsupported):
		return fmt.Errorf("zk: %s %s: %w", op, p, err)
	}
	return fmt.Errorf("zk: %s %s: %w: %w", op, p, locker.ErrUnavailable, err)
}

// zkHeader is the record's TTL in milliseconds, before its value.
const zkHeader = 8

func zkData(val []byte, ttl time.Duration) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, zkHeader+len(val)), uint64(max(ttl.Milliseconds(), 1)))
	return append(b, val...)
}

func zkSplit(data []byte) (time.Duration, []byte, error) {
	if len(data) < zkHeader {
		return 0, nil, fmt.Errorf("zk: node data of %d bytes is not a record", len(data))
	}
	return time.Duration(binary.BigEndian.Uint64(data)) * time.Millisecond, data[zkHeader:], nil
}

type zkNode struct {
	data []byte
	stat *gozk.Stat
}

func (z *ZKStore) create(ctx context.Context, p string, data []byte, retention time.Duration) error {
	_, err := zkCall(z, ctx, func() (string, error) {
		if z.noTTLNodes {
			return z.conn.Create(p, data, gozk.FlagPersistent, z.acl)
		}
		return z.conn.CreateTTL(p, data, gozk.FlagTTL, z.acl, retention)
	})
	if err != nil && strings.Contains(err.Error(), "unknown error: -6") { // Unimplemented
		return errTTLNodes
	}
	return err
}

func (z *ZKStore) get(ctx context.Context, p string) (zkNode, error) {
	return zkCall(z, ctx, func() (zkNode, error) {
		data, stat, err := z.conn.Get(p)
		return zkNode{data, stat}, err
	})
}

// now returns the server's clock, as the mtime of a write to the prefix
// node (its data is empty and nothing reads it).
func (z *ZKStore) now(ctx context.Context) (int64, error) {
	stat, err := zkCall(z, ctx, func() (*gozk.Stat, error) { return z.conn.Set(z.prefix, nil, -1) })
	if errors.Is(err, gozk.ErrNoNode) {
		if err = z.ensurePrefix(ctx); err == nil {
			stat, err = zkCall(z, ctx, func() (*gozk.Stat, error) { return z.conn.Set(z.prefix, nil, -1) })
		}
	}
	if err != nil {
		return 0, err
	}
	return stat.Mtime, nil
}

// ensurePrefix creates the prefix node and its parents, as persistent
// nodes.
func (z *ZKStore) ensurePrefix(ctx context.Context) error {
	for _, p := range append(zkconn.Ancestors(z.prefix), z.prefix) {
		_, err := zkCall(z, ctx, func() (string, error) { return z.conn.Create(p, nil, gozk.FlagPersistent, z.acl) })
		if err != nil && !errors.Is(err, gozk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// expired reports whether node's record has expired by the server's clock.
func (z *ZKStore) expired(ctx context.Context, n zkNode) (bool, time.Duration, error) {
	ttl, _, err := zkSplit(n.data)
	if err != nil {
		return false, 0, err
	}
	now, err := z.now(ctx)
	if err != nil {
		return false, 0, err
	}
	// Both clocks are whole milliseconds: only a difference over the TTL
	// proves that the TTL has passed.
	left := time.Duration(n.stat.Mtime-now)*time.Millisecond + ttl
	return left < 0, left, nil
}

// zkAttempts bounds the retries of a Begin that races other attempts
// through a takeover or a deletion.
const zkAttempts = 4

// Create implements Store; the stamp is the node's version.
func (z *ZKStore) Create(ctx context.Context, key string, val []byte, ttl, retention time.Duration) (Entry, bool, error) {
	p := z.prefix + "/" + key
	data := zkData(val, ttl)
	for range zkAttempts {
		err := z.create(ctx, p, data, max(ttl, retention))
		switch {
		case err == nil:
			return Entry{Value: val}, true, nil
		case errors.Is(err, gozk.ErrNoNode):
			if err := z.ensurePrefix(ctx); err != nil {
				return Entry{}, false, z.fail("create", z.prefix, err)
			}
			continue
		case !errors.Is(err, gozk.ErrNodeExists):
			return Entry{}, false, z.fail("create", p, err)
		}
		n, err := z.get(ctx, p)
		if errors.Is(err, gozk.ErrNoNode) {
			continue // deleted meanwhile: create again
		}
		if err != nil {
			return Entry{}, false, z.fail("read", p, err)
		}
		gone, _, err := z.expired(ctx, n)
		if err != nil {
			return Entry{}, false, z.fail("read", p, err)
		}
		if !gone {
			_, v, _ := zkSplit(n.data)
			return Entry{Value: v, Stamp: int64(n.stat.Version)}, false, nil
		}
		stat, err := zkCall(z, ctx, func() (*gozk.Stat, error) { return z.conn.Set(p, data, n.stat.Version) })
		switch {
		case err == nil:
			return Entry{Value: val, Stamp: int64(stat.Version)}, true, nil
		case errors.Is(err, gozk.ErrBadVersion), errors.Is(err, gozk.ErrNoNode):
			continue // another attempt took it over or deleted it: look again
		default:
			return Entry{}, false, z.fail("take over", p, err)
		}
	}
	return Entry{}, false, z.fail("create", p, fmt.Errorf("still racing other attempts after %d tries", zkAttempts))
}

// Replace implements Store with a write conditional on the version.
func (z *ZKStore) Replace(ctx context.Context, key string, old Entry, val []byte, ttl time.Duration) (bool, error) {
	p := z.prefix + "/" + key
	_, err := zkCall(z, ctx, func() (*gozk.Stat, error) { return z.conn.Set(p, zkData(val, ttl), int32(old.Stamp)) })
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, gozk.ErrBadVersion), errors.Is(err, gozk.ErrNoNode):
		return false, nil
	}
	return false, z.fail("replace", p, err)
}

// Remove implements Store with a delete conditional on the version.
func (z *ZKStore) Remove(ctx context.Context, key string, old Entry) (bool, error) {
	p := z.prefix + "/" + key
	_, err := zkCall(z, ctx, func() (struct{}, error) { return struct{}{}, z.conn.Delete(p, int32(old.Stamp)) })
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, gozk.ErrBadVersion), errors.Is(err, gozk.ErrNoNode):
		return false, nil
	}
	return false, z.fail("remove", p, err)
}

// Get implements Store: an expired record is absent.
func (z *ZKStore) Get(ctx context.Context, key string) (Entry, bool, error) {
	p := z.prefix + "/" + key
	n, err := z.get(ctx, p)
	if errors.Is(err, gozk.ErrNoNode) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, z.fail("get", p, err)
	}
	gone, left, err := z.expired(ctx, n)
	if err != nil {
		return Entry{}, false, z.fail("get", p, err)
	}
	if gone {
		return Entry{}, false, nil
	}
	_, v, _ := zkSplit(n.data)
	return Entry{Value: v, Stamp: int64(n.stat.Version), TTL: left}, true, nil
}

// Delete implements Store.
func (z *ZKStore) Delete(ctx context.Context, key string) (bool, error) {
	p := z.prefix + "/" + key
	_, err := zkCall(z, ctx, func() (struct{}, error) { return struct{}{}, z.conn.Delete(p, -1) })
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, gozk.ErrNoNode):
		return false, nil
	}
	return false, z.fail("delete", p, err)
}
