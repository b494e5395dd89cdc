package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// hookKV runs a function once, just before the next transaction of its
// client, and counts the transactions: it lets a test change the keys
// between an operator's read and its write.
type hookKV struct {
	clientv3.KV
	before atomic.Pointer[func()]
	txns   atomic.Int64
}

func (k *hookKV) Txn(ctx context.Context) clientv3.Txn {
	if f := k.before.Swap(nil); f != nil {
		(*f)()
	}
	k.txns.Add(1)
	return k.KV.Txn(ctx)
}

// operator is an engine that only inspects and forces, on a client of
// its own whose transactions can be hooked, under prefix.
func operator(t *testing.T, prefix string) (*etcd.Engine, *hookKV) {
	c := newClient(t, endpoint)
	kv := &hookKV{KV: c.KV}
	c.KV = kv
	return newEngine(t, c, etcd.WithPrefix(prefix)), kv
}

func testPrefix(t *testing.T) string {
	return fmt.Sprintf("fu-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
}

// Forcing a downgrading writer's token ends its write and its downgraded
// read, both shown with that token and their lease's time left; the writer
// queued behind them gets in.
func TestFamilyForceUnlockDowngrade(t *testing.T) {
	prefix, name := testPrefix(t), familyName(t)
	op, _ := operator(t, prefix)
	owner := newEngine(t, newClient(t, endpoint), etcd.WithPrefix(prefix))
	rw, err := owner.NewRWLock(name, locker.WithOwner("downgrader"), locker.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.WriteLock().Lock(); err != nil {
		t.Fatal(err)
	}
	if err := rw.ReadLock().Lock(); err != nil {
		t.Fatal(err)
	}
	next, err := op.NewRWLock(name, locker.WithOwner("next"))
	if err != nil {
		t.Fatal(err)
	}
	done := lockAsync(next.WriteLock(), 30*time.Second)
	awaitFamily(t, op, inspect.KindWrite, name, "the writer queued", waiters(1))

	tok := rw.WriteLock().Token()
	ended, err := op.ForceUnlockFamily(context.Background(), inspect.KindRead, name, tok)
	if err != nil {
		t.Fatalf("ForceUnlockFamily(the writer's token) = %v", err)
	}
	var kinds []inspect.Kind
	for _, h := range ended {
		kinds = append(kinds, h.Kind)
		if h.Owner != "downgrader" || h.Token != tok || h.Permits != 1 || h.TTL <= 0 || h.TTL > 2*time.Second {
			t.Errorf("ended %+v; want downgrader's hold with token %d, 1 permit, a TTL in (0, 2s]", h, tok)
		}
	}
	slices.Sort(kinds)
	if want := []inspect.Kind{inspect.KindRead, inspect.KindWrite}; !slices.Equal(kinds, want) {
		t.Errorf("ended kinds %v; want %v", kinds, want)
	}
	lockertest.WantGranted(t, done, "writer queued behind the forced-out holds")
	lockertest.WantLost(t, rw.ReadLock(), "forced-out downgraded read")
	lockertest.WantLost(t, rw.WriteLock(), "forced-out write")
	if err := next.WriteLock().Unlock(); err != nil {
		t.Error(err)
	}
	if _, err := op.ForceUnlockFamily(context.Background(), inspect.KindMutex, name, 0); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("ForceUnlockFamily(KindMutex) = %v; want ErrInvalidArgument", err)
	}
}

// A hold released between the operator's read and its delete, and a new
// hold granted meanwhile (on the same key name: the owner's engine reuses
// its slot), are not touched: the force finds nothing it read and says
// ErrNotHeld.
func TestFamilyForceUnlockNewerHold(t *testing.T) {
	prefix, name := testPrefix(t), familyName(t)
	op, kv := operator(t, prefix)
	owner := newEngine(t, newClient(t, endpoint), etcd.WithPrefix(prefix))
	old, err := owner.NewRWLock(name, locker.WithOwner("old"))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.ReadLock().Lock(); err != nil {
		t.Fatal(err)
	}
	newer, err := owner.NewRWLock(name, locker.WithOwner("newer"))
	if err != nil {
		t.Fatal(err)
	}
	swap := func() {
		if err := old.ReadLock().Unlock(); err != nil {
			t.Errorf("old reader: Unlock() = %v", err)
		}
		if err := newer.ReadLock().Lock(); err != nil {
			t.Errorf("newer reader: Lock() = %v", err)
		}
	}
	kv.before.Store(&swap)
	if ended, err := op.ForceUnlockFamily(context.Background(), inspect.KindRead, name, 0); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("ForceUnlockFamily() with the hold replaced meanwhile = %+v, %v; want ErrNotHeld", ended, err)
	}
	in, err := op.InspectFamily(context.Background(), inspect.KindRead, name)
	if err != nil || len(in.Holders) != 1 || in.Holders[0].Owner != "newer" || in.Holders[0].Token != newer.ReadLock().Token() {
		t.Errorf("InspectFamily() = %+v, %v; want the newer reader holding, token %d", in, err, newer.ReadLock().Token())
	}
	select {
	case <-newer.ReadLock().Lost():
		t.Error("newer reader: Lost() closed; want it held")
	default:
	}
	if err := newer.ReadLock().Unlock(); err != nil {
		t.Errorf("newer reader: Unlock() = %v; want nil", err)
	}
}

// A permit key rewritten between the operator's read and its delete (as a
// grant mark does) is the same hold: the force deletes it with its new mod
// revision, in a second transaction, and the waiter gets the permits.
func TestFamilyForceUnlockRewritten(t *testing.T) {
	prefix, name := testPrefix(t), familyName(t)
	op, kv := operator(t, prefix)
	client := newClient(t, endpoint)
	owner := newEngine(t, client, etcd.WithPrefix(prefix))
	sem, err := owner.NewSemaphore(name, 1, locker.WithOwner("stuck"), locker.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stuck, ok, err := sem.TryAcquire(1)
	if !ok || err != nil {
		t.Fatalf("TryAcquire(1) = %v, %v; want a permit", ok, err)
	}
	waiter, err := op.NewSemaphore(name, 1, locker.WithOwner("waiter"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := waiter.NewPermit(1)
	if err != nil {
		t.Fatal(err)
	}
	done := lockAsync(p, 30*time.Second)
	awaitFamily(t, op, inspect.KindPermit, name, "the permit waiter queued", waiters(1))

	rewrite := func() {
		ctx := context.Background()
		resp, err := client.Get(ctx, prefix+"/", clientv3.WithPrefix())
		if err != nil {
			t.Errorf("Get() = %v", err)
			return
		}
		for _, k := range resp.Kvs {
			if strings.HasSuffix(string(k.Value), " stuck") {
				if _, err := client.Put(ctx, string(k.Key), string(k.Value), clientv3.WithIgnoreLease()); err != nil {
					t.Errorf("Put() = %v", err)
				}
				return
			}
		}
		t.Error("the stuck hold's key not found")
	}
	kv.before.Store(&rewrite)
	before := kv.txns.Load()
	ended, err := op.ForceUnlockFamily(context.Background(), inspect.KindPermit, name, stuck.Token())
	if err != nil || len(ended) != 1 || ended[0].Owner != "stuck" || ended[0].Token != stuck.Token() || ended[0].Kind != inspect.KindPermit {
		t.Fatalf("ForceUnlockFamily(stuck's token) = %+v, %v; want stuck's hold", ended, err)
	}
	if got := kv.txns.Load() - before; got != 2 {
		t.Errorf("ForceUnlockFamily() made %d transactions; want 2 (the rewritten key deleted again)", got)
	}
	lockertest.WantGranted(t, done, "permit waiter after the rewritten hold was forced out")
	lockertest.WantLost(t, stuck, "forced-out permit hold")
	if err := p.Unlock(); err != nil {
		t.Error(err)
	}
}
