package etcd_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// lateCreate delays the first create it sees while armed as a network
// would: the caller's request has left, the caller gives up, and etcd gets
// the put later — here, once the engine's delete of that key was answered,
// or after latency if none comes.
type lateCreate struct {
	armed   atomic.Bool
	latency time.Duration
	sent    chan struct{} // closed once the late put was answered

	mu      sync.Mutex
	key     string
	deleted chan struct{}
}

func (lc *lateCreate) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if d, ok := req.(*pb.DeleteRangeRequest); ok {
		err := invoker(ctx, method, req, reply, cc, opts...)
		lc.mu.Lock()
		if lc.deleted != nil && string(d.Key) == lc.key {
			close(lc.deleted)
			lc.deleted = nil
		}
		lc.mu.Unlock()
		return err
	}
	put, ok := putOf(req)
	if !ok || !lc.armed.CompareAndSwap(true, false) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	deleted := make(chan struct{})
	lc.mu.Lock()
	lc.key, lc.deleted = string(put.Key), deleted
	lc.mu.Unlock()
	// The late put has a reply and call options of its own: the caller's
	// are the caller's again once it has given up.
	late := new(pb.TxnResponse)
	answer := make(chan error, 1)
	go func() {
		defer close(lc.sent)
		select {
		case <-deleted:
		case <-time.After(lc.latency):
		}
		answer <- invoker(context.WithoutCancel(ctx), method, req, late, cc)
	}()
	select {
	case err := <-answer:
		proto.Merge(reply.(proto.Message), late)
		return err
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// A create whose caller gave up may still reach etcd after the caller left.
// A delete of its key sent at once can reach etcd first; the put then holds
// the name, on a lease the engine keeps alive, with nobody to release it.
// The engine must wait for the create's answer and delete what it made.
func TestCreateGivenUpOnLeavesNothing(t *testing.T) {
	lc := &lateCreate{latency: 300 * time.Millisecond, sent: make(chan struct{})}
	defer func() { <-lc.sent }()
	e := newEngine(t, interceptedClient(t, lc.intercept, endpoint))
	other := newEngine(t, newClient(t, endpoint))
	name := t.Name()
	lc.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := newLocker(t, e, name).LockCtx(ctx)
	cancel()
	if err == nil {
		t.Fatal("LockCtx() with its create delayed past the deadline = nil; want an error")
	}
	probe := newLocker(t, other, name)
	deadline := time.Now().Add(3 * time.Second)
	for {
		ok, err := probe.TryLock()
		if err != nil {
			t.Fatalf("TryLock() = %v", err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the name is still held 3s after a LockCtx that gave up; want the late create's key deleted")
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded by the deadline
	}
	if err := probe.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}
