package etcd_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker"
)

// unanswered leaves the deletes of one key unanswered, as a member that
// died or lost its leader would: a release's delete (hedged on a cluster:
// a transaction comparing the key's create revision) always, and the
// keeper's sweep of the key (a transaction of plain deletes) for the
// outage that starts with the first sweep, an election's worth.
type unanswered struct {
	outage time.Duration

	mu    sync.Mutex
	key   string
	until time.Time     // the sweep's outage ends; zero before the first sweep
	swept chan struct{} // closed at the first sweep
}

func (u *unanswered) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	u.mu.Lock()
	hang := false
	txn, ok := req.(*pb.TxnRequest)
	switch {
	case u.key == "" || !ok || len(txn.Success) == 0 || string(txn.Success[0].GetRequestDeleteRange().GetKey()) != u.key:
	case len(txn.Compare) > 0: // the release: a delete comparing the create revision
		hang = true
	default: // the sweep: plain deletes
		if u.until.IsZero() {
			u.until = time.Now().Add(u.outage)
			close(u.swept)
		}
		hang = time.Now().Before(u.until)
	}
	u.mu.Unlock()
	if !hang {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// A release that got no answer leaves its key to the keeper, which deletes
// it before it refreshes the lease again. That sweep is one attempt, like
// the refresh: an attempt sent into an election must not hold the lease's
// refresh for the request timeout, past the life of the holds that share
// the lease.
func TestSweepDoesNotHoldTheRefresh(t *testing.T) {
	const ttl = 3 * time.Second
	u := &unanswered{outage: time.Second, swept: make(chan struct{})}
	c := newClient(t, endpoint)
	e := newEngine(t, interceptedClient(t, u.intercept, endpoint),
		etcd.WithAttemptTimeout(200*time.Millisecond), etcd.WithRequestTimeout(5*time.Second))
	ctx := context.Background()
	kept := newLocker(t, e, "sweep-kept", locker.WithTTL(ttl))
	if err := kept.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx(kept) = %v", err)
	}
	defer kept.Unlock()
	given := newLocker(t, e, "sweep-given", locker.WithTTL(ttl))
	if err := given.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx(given) = %v", err)
	}
	held := keys(t, c, e, "sweep-given")
	if len(held) != 1 {
		t.Fatalf("keys of the held name = %v; want 1", held)
	}
	u.mu.Lock()
	u.key = held[0].key
	u.mu.Unlock()
	if err := given.Unlock(); !errors.Is(err, locker.ErrUnavailable) {
		t.Fatalf("Unlock(given) with its delete unanswered = %v; want ErrUnavailable", err)
	}
	select {
	case <-u.swept:
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper never swept the key of the release that got no answer")
	}
	select {
	case <-kept.Lost():
		t.Fatal("a hold on the swept lease was lost: the sweep held up the lease's refresh")
	case <-time.After(ttl + time.Second):
	}
	waitKeys(t, c, e, "sweep-given", 0)
	// A delete of that key given up on may still be applied: a new hold
	// on the lease gets another key name.
	again := newLocker(t, e, "sweep-given", locker.WithTTL(ttl))
	if err := again.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx(again) = %v", err)
	}
	defer again.Unlock()
	if now := keys(t, c, e, "sweep-given"); len(now) != 1 || now[0].key == held[0].key || now[0].lease != held[0].lease {
		t.Errorf("keys after locking again = %v; want one key on lease %x other than %s", now, held[0].lease, held[0].key)
	}
}
