package etcd_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// floorOf returns the mod revision of the floor of the queue range rng
// (0: there is none), as the package doc names it under the default
// prefix.
func floorOf(t *testing.T, c *clientv3.Client, rng string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := "orthrus/%floor/" + strings.TrimPrefix(rng, "orthrus/")
	resp, err := c.Get(ctx, key)
	noErr(t, err)
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].ModRevision
}

// wantAbove checks that the token of a hold granted after another's
// exceeds it.
func wantAbove(t *testing.T, what string, token, before uint64) {
	t.Helper()
	if token <= before {
		t.Errorf("%s: token %d; want above %d", what, token, before)
	}
}

// TestWeightedTokens: a heavy waiter passes an older one, so the older
// one, granted after it, holds with a token above the heavy one's though
// its create revision is below; and no grant writes: the floor the heavy
// arrival created keeps its revision.
func TestWeightedTokens(t *testing.T) {
	e, name, holder, light, heavy, lightDone := lightBehindHolder(t)
	c := newClient(t, endpoint)
	heavyDone := queued(t, e, inspect.KindMutex, name, heavy, 2)
	floor := floorOf(t, c, e.LockPrefix(name))
	if floor == 0 {
		t.Fatal("no floor once a heavy arrival passed a waiter")
	}
	noErr(t, holder.Unlock())
	lockertest.WantGranted(t, heavyDone, "the weight-5 waiter")
	h := heavy.Token()
	noErr(t, heavy.Unlock())
	lockertest.WantGranted(t, lightDone, "the older weight-1 waiter")
	wantAbove(t, "the older waiter, granted after the heavy one", light.Token(), h)
	if got := floorOf(t, c, e.LockPrefix(name)); got != floor {
		t.Errorf("the floor's mod revision %d after the grants; want %d, its create: a grant wrote", got, floor)
	}
	noErr(t, light.Unlock())
}

// TestWeightOneTokens: in a name where no heavy waiter passed (all of
// weight 1), tokens are the keys' create revisions, as before weights,
// and there is no floor.
func TestWeightOneTokens(t *testing.T) {
	c := newClient(t, endpoint)
	e := newEngine(t, c)
	name := t.Name()
	ls := []locker.Handle{mutex(t, e, name, "first", 1), mutex(t, e, name, "second", 1), mutex(t, e, name, "third", 1)}
	noErr(t, ls[0].Lock())
	done := []<-chan error{nil, queued(t, e, inspect.KindMutex, name, ls[1], 1), queued(t, e, inspect.KindMutex, name, ls[2], 2)}
	ks := keys(t, c, e, name)
	for i, l := range ls {
		if i > 0 {
			lockertest.WantGranted(t, done[i], "a weight-1 waiter")
		}
		if got := l.Token(); got != uint64(ks[i].rev) {
			t.Errorf("holder %d: token %d; want its key's create revision %d", i, got, ks[i].rev)
		}
		noErr(t, l.Unlock())
	}
	if f := floorOf(t, c, e.LockPrefix(name)); f != 0 {
		t.Errorf("a floor (mod revision %d) in a name with weight 1 only", f)
	}
}

// TestFlooredSoleReaderToken: see testSoleReaderToken.
func TestFlooredSoleReaderToken(t *testing.T) {
	testSoleReaderToken(t, true)
}

// TestSoleReaderSeesFloor: see testSoleReaderToken; the reader, waiting
// alone behind the writer, must see the heavy reader come.
func TestSoleReaderSeesFloor(t *testing.T) {
	testSoleReaderToken(t, false)
}

// testSoleReaderToken: a reader holds, a writer waits, and a reader whose
// only older key is that writer waits behind it; a heavy reader comes,
// before that reader or after it (heavyFirst), passes the writer and
// shares the hold: it creates the floor. When both holders go, the writer
// is granted by a read after the reader's create, whose revision is its
// token. When it goes, the reader is granted with no read, and holds with
// a token above the writer's although its create revision is below.
func testSoleReaderToken(t *testing.T, heavyFirst bool) {
	c := newClient(t, endpoint)
	e := newEngine(t, c)
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano()) // no floor yet, with -count too
	first, heavy := rwLock(t, e, name, "first reader", 1), rwLock(t, e, name, "heavy reader", 3)
	// The reader on an engine of its own, whose first watch is its wait's.
	rc, watching := watchedClient(t, nil)
	writer, reader := rwLock(t, e, name, "writer", 1), rwLock(t, newEngine(t, rc), name, "reader", 1)
	noErr(t, first.ReadLock().Lock())
	writeDone := queued(t, e, inspect.KindWrite, name, writer.WriteLock(), 1)
	var readDone <-chan error
	queueReader := func() {
		readDone = queued(t, e, inspect.KindRead, name, reader.ReadLock(), 2)
		select {
		case <-watching:
		case <-time.After(20 * time.Second):
			t.Fatal("the reader's watch not confirmed within 20s")
		}
	}
	if !heavyFirst {
		queueReader() // a heavy key that came before the watch would be read
	}
	noErr(t, heavy.ReadLock().LockCtx(t.Context()))
	if heavyFirst {
		queueReader()
	}
	if floorOf(t, c, e.FamilyRange(inspect.KindWrite, name)) == 0 {
		t.Fatal("no floor once a heavy reader passed a waiting writer")
	}
	noErr(t, first.ReadLock().Unlock())
	noErr(t, heavy.ReadLock().Unlock())
	lockertest.WantGranted(t, writeDone, "the writer")
	w := writer.WriteLock().Token()
	noErr(t, writer.WriteLock().Unlock())
	lockertest.WantGranted(t, readDone, "the reader behind the writer")
	wantAbove(t, "the reader, granted after the writer", reader.ReadLock().Token(), w)
	noErr(t, reader.ReadLock().Unlock())
}

// watchedClient is newClient to endpoint whose watches, once etcd
// confirms them, each send on the channel returned (up to 16 unread);
// unary, if not nil, intercepts its other calls.
func watchedClient(t *testing.T, unary grpc.UnaryClientInterceptor) (*clientv3.Client, <-chan struct{}) {
	t.Helper()
	created := make(chan struct{}, 16)
	cfg := clientConfig(endpoint)
	if unary != nil {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithUnaryInterceptor(unary))
	}
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc,
		cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return createdStream{s, created}, nil
	}))
	return newClientOf(t, cfg), created
}

// createdStream signals each watch response that confirms a watch.
type createdStream struct {
	grpc.ClientStream
	created chan<- struct{}
}

func (s createdStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*pb.WatchResponse); ok && err == nil && r.Created {
		select {
		case s.created <- struct{}{}:
		default:
		}
	}
	return err
}

// soleWaiter queues l, of weight w, on name on an engine of its own, and
// waits until etcd confirmed its watch; reads counts the engine's reads
// and transactions.
func soleWaiter(t *testing.T, e *etcd.Engine, name, owner string, w, n int) (l locker.Handle, done <-chan error, reads *atomic.Int64) {
	t.Helper()
	reads = new(atomic.Int64)
	c, watching := watchedClient(t, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		switch req.(type) {
		case *pb.TxnRequest, *pb.RangeRequest:
			reads.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	l = mutex(t, newEngine(t, c), name, owner, w)
	done = queued(t, e, inspect.KindMutex, name, l, n)
	select {
	case <-watching:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: its watch not confirmed within 20s", owner)
	}
	return l, done, reads
}

// TestWeightedSoleGrant: a heavy waiter that only the holder stands
// before is granted when the holder goes, with no read; one that a
// heavier arrival passes after it decided so is not.
func TestWeightedSoleGrant(t *testing.T) {
	e := newEngine(t, newClient(t, endpoint))
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	holder := mutex(t, e, name, "holder", 1)
	noErr(t, holder.Lock())
	mid, midDone, reads := soleWaiter(t, e, name, "mid", 3, 1)
	before := reads.Load()
	noErr(t, holder.Unlock())
	lockertest.WantGranted(t, midDone, "the weight-3 waiter")
	if n := reads.Load() - before; n != 0 {
		t.Errorf("the weight-3 waiter read etcd %d times between the holder's release and its grant; want 0", n)
	}

	low, lowDone, _ := soleWaiter(t, e, name, "low", 2, 1)
	top := mutex(t, e, name, "top", 5)
	topDone := queued(t, e, inspect.KindMutex, name, top, 2)
	noErr(t, mid.Unlock())
	lockertest.WantGranted(t, topDone, "the weight-5 waiter, which came after the weight-2 one")
	lockertest.WantPending(t, lowDone, "the weight-2 waiter while the weight-5 one holds")
	_, waiters := waitersOf(t, e, inspect.KindMutex, name)
	wantOwners(t, "waiters", waiters, []string{"low"})
	noErr(t, top.Unlock())
	lockertest.WantGranted(t, lowDone, "the weight-2 waiter last")
	noErr(t, low.Unlock())
}

// TestWeightedSoleKeyDeleted: a heavy waiter that only the holder stands
// before, whose key is deleted by hand, queues again when the holder
// goes, rather than hold with no key.
func TestWeightedSoleKeyDeleted(t *testing.T) {
	c := newClient(t, endpoint)
	e := newEngine(t, c)
	name := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	holder := mutex(t, e, name, "holder", 1)
	noErr(t, holder.Lock())
	waiter, done, _ := soleWaiter(t, e, name, "waiter", 3, 1)
	ks := keys(t, c, e, name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Delete(ctx, ks[len(ks)-1].key)
	noErr(t, err)
	noErr(t, holder.Unlock())
	lockertest.WantGranted(t, done, "the waiter whose key was deleted")
	holders, _ := waitersOf(t, e, inspect.KindMutex, name)
	wantOwners(t, "holder", holders, []string{"waiter"})
	noErr(t, waiter.Unlock())
}
