package etcd_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/orthrus-go/orthrus/locker"
)

// A member whose view of the leases is stale (an old leader that has not
// yet applied its step-down: CPU-starved members of a 3.4 cluster were seen
// doing so during a rolling restart) can answer LeaseTimeToLive with TTL -1
// for a lease the leader still renews. The holds on that lease are not lost
// for it: a keep-alive, which the leader answers, decides.
func TestStaleTimeToLiveLosesNothing(t *testing.T) {
	var stale atomic.Bool
	e := newEngine(t, interceptedClient(t, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := reply.(*pb.LeaseTimeToLiveResponse); ok && err == nil && stale.Load() {
			r.TTL, r.Keys = -1, nil
		}
		return err
	}, endpoint))
	ttl := 2 * time.Second
	l := newLocker(t, e, t.Name(), locker.WithTTL(ttl))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.LockCtx(ctx); err != nil {
		t.Fatal(err)
	}
	stale.Store(true)
	// The engine checks a lease's keys every TTL: three checks.
	select {
	case <-l.Lost():
		t.Fatal("hold lost on a stale TimeToLive answer; want it kept while keep-alives succeed")
	case <-time.After(3 * ttl):
	}
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}
