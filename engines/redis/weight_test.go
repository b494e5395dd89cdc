package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// Weights need WithFair: without it a mutex does not queue, the engine
// is no Weigher, and a weight above 1 is refused at once on every kind.
func TestWeightsNeedFair(t *testing.T) {
	plain, fair := openEngine(t), fairEngine(t)
	if plain.Weighs() == nil || fair.Weighs() != nil {
		t.Fatalf("Weighs() = %v without WithFair, %v with it; want a reason, nil", plain.Weighs(), fair.Weighs())
	}
	m, _ := plain.NewLocker(t.Name(), locker.WithWeight(3))
	rw, _ := plain.NewRWLock(t.Name(), locker.WithWeight(3))
	for _, l := range []locker.Locker{m, rw.WriteLock(), rw.ReadLock()} {
		if ok, err := l.TryLock(); ok || !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "WithWeight(3): a redis engine ranks waiters by weight only when fair (redis.WithFair") {
			t.Errorf("TryLock() with WithWeight(3) without WithFair = %v, %v; want false, ErrUnsupported naming WithWeight(3) and WithFair", ok, err)
		}
	}
}

// enqueue starts l's LockCtx and waits until the family lock name shows
// n waiters.
func enqueue(t *testing.T, e *redis.Engine, kind inspect.Kind, name string, l locker.Locker, n int) <-chan error {
	t.Helper()
	done := lockLater(l)
	await(t, "waiters queued", func() bool {
		in, err := e.InspectFamily(context.Background(), kind, name)
		return err == nil && len(in.Waiters) == n
	})
	return done
}

func newRW(t *testing.T, e *redis.Engine, name string, opts ...locker.Option) locker.RWLock {
	t.Helper()
	rw, err := e.NewRWLock(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return rw
}

// Behind a writer, a heavier writer that came after a reader is granted
// first, with a higher token; the reader then gets in, with a higher one
// still.
func TestWeightedRW(t *testing.T) {
	e := fairEngine(t)
	name := t.Name()
	holder, reader, writer := newRW(t, e, name), newRW(t, e, name), newRW(t, e, name, locker.WithWeight(5))
	lockNow(t, holder.WriteLock())
	readDone := enqueue(t, e, inspect.KindRead, name, reader.ReadLock(), 1)
	writeDone := enqueue(t, e, inspect.KindWrite, name, writer.WriteLock(), 2)
	held := holder.WriteLock().Token()
	unlockNow(t, holder.WriteLock())
	lockertest.WantGranted(t, writeDone, "the weight-5 writer")
	lockertest.WantPending(t, readDone, "the weight-1 reader while the writer holds")
	w := writer.WriteLock().Token()
	if w <= held {
		t.Errorf("the heavier writer's token %d; want above the first writer's %d", w, held)
	}
	unlockNow(t, writer.WriteLock())
	lockertest.WantGranted(t, readDone, "the reader last")
	if r := reader.ReadLock().Token(); r <= w {
		t.Errorf("the reader's token %d, granted after the writer; want above the writer's %d", r, w)
	}
	unlockNow(t, reader.ReadLock())
}

// While a reader holds and a writer waits, a heavier reader gets in at
// once, as it ranks before the writer; a reader as light as the writer
// waits behind it.
func TestWeightedReaderPassesWriter(t *testing.T) {
	e := fairEngine(t)
	name := t.Name()
	holder, writer := newRW(t, e, name), newRW(t, e, name)
	lockNow(t, holder.ReadLock())
	writeDone := enqueue(t, e, inspect.KindWrite, name, writer.WriteLock(), 1)
	heavy, light := newRW(t, e, name, locker.WithWeight(2)), newRW(t, e, name)
	lockertest.WantGranted(t, lockLater(heavy.ReadLock()), "the weight-2 reader")
	lightDone := enqueue(t, e, inspect.KindRead, name, light.ReadLock(), 2)
	unlockNow(t, heavy.ReadLock())
	wantHeavyFirst(t, holder.ReadLock(), [2]locker.Locker{writer.WriteLock(), light.ReadLock()}, [2]<-chan error{writeDone, lightDone})
}

// A heavier request for 2 permits is granted before a lighter, older
// request for 1 when both fit in turn.
func TestWeightedSemaphore(t *testing.T) {
	e := fairEngine(t)
	name := t.Name()
	permit := func(n int, opts ...locker.Option) locker.Handle {
		s, err := e.NewSemaphore(name, 2, opts...)
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.NewPermit(n)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	holder, light, heavy := permit(2), permit(1), permit(2, locker.WithWeight(3))
	lockNow(t, holder)
	lightDone := enqueue(t, e, inspect.KindPermit, name, light, 1)
	heavyDone := enqueue(t, e, inspect.KindPermit, name, heavy, 2)
	wantHeavyFirst(t, holder, [2]locker.Locker{heavy, light}, [2]<-chan error{heavyDone, lightDone})
}

// wantHeavyFirst releases holder, then checks that the first of ls is
// granted while the second waits, then the second once the first
// released; done carries their LockCtx results.
func wantHeavyFirst(t *testing.T, holder locker.Locker, ls [2]locker.Locker, done [2]<-chan error) {
	t.Helper()
	unlockNow(t, holder)
	lockertest.WantGranted(t, done[0], "the heavier waiter")
	lockertest.WantPending(t, done[1], "the lighter waiter while the heavier holds")
	unlockNow(t, ls[0])
	lockertest.WantGranted(t, done[1], "the lighter waiter last")
	unlockNow(t, ls[1])
}

// A heavy arrival ranks before every lighter waiter at its first attempt:
// with the lock free and a weight-1 waiter first in line that has not
// taken it yet (here one that never will: an entry with no process), a
// weight-2 Lock gets it at once, while a weight-1 Lock waits its turn.
func TestWeightedArrival(t *testing.T) {
	ctx := context.Background()
	c := newSingle(t)
	e := newEngine(t, c, redis.WithFair())
	t.Cleanup(func() { _ = e.Close() })
	name := t.Name()
	ghost(t, c, e.QueueKeys(name))
	light, _ := e.NewLocker(name)
	lightDone := lockLater(light)
	await(t, "the weight-1 waiter queued", func() bool { return len(queue(t, e, name)) == 2 })
	heavy, _ := e.NewLocker(name, locker.WithWeight(2))
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := heavy.LockCtx(hctx); err != nil {
		t.Fatalf("LockCtx() of weight 2 with the lock free and a weight-1 waiter first = %v; want nil at once", err)
	}
	lockertest.WantPending(t, lightDone, "the weight-1 waiter behind the entry first in line")
	unlockNow(t, heavy)
	if err := c.Del(ctx, e.QueueKeys(name)...).Err(); err != nil {
		t.Fatal(err)
	}
	lockertest.WantGranted(t, lightDone, "the weight-1 waiter once the queue is gone")
	unlockNow(t, light)
}

// ghost queues, first in line for a minute, a weight-1 waiter that no
// process refreshes, in the fair queue whose keys are given.
func ghost(t *testing.T, c *goredis.Client, keys []string) {
	t.Helper()
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	rank := int64(9*redis.RankBand + 1)
	m := strconv.FormatInt(rank, 10) + ":ghost"
	exp := float64(now.Add(time.Minute).UnixMilli())
	if err := c.ZAdd(ctx, keys[0], goredis.Z{Score: float64(rank), Member: m}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(ctx, keys[1], goredis.Z{Score: exp, Member: m}).Err(); err != nil {
		t.Fatal(err)
	}
}

// A heavy writer that gives up while readers hold lets the lighter reader
// it held back in at once.
func TestWeightedWriterGivesUp(t *testing.T) {
	e := fairEngine(t)
	name := t.Name()
	holder, writer, reader := newRW(t, e, name), newRW(t, e, name, locker.WithWeight(5)), newRW(t, e, name)
	lockNow(t, holder.ReadLock())
	ctx, cancel := context.WithCancel(context.Background())
	quit := make(chan error, 1)
	go func() { quit <- writer.WriteLock().LockCtx(ctx) }()
	await(t, "the writer queued", func() bool { return waiting(t, e, inspect.KindWrite, name) == 1 })
	readDone := enqueue(t, e, inspect.KindRead, name, reader.ReadLock(), 2)
	lockertest.WantPending(t, readDone, "the weight-1 reader behind the weight-5 writer")
	cancel()
	if err := <-quit; err != context.Canceled {
		t.Fatalf("LockCtx() cancelled = %v; want context.Canceled", err)
	}
	lockertest.WantGranted(t, readDone, "the reader once the writer gave up")
	unlockNow(t, reader.ReadLock())
	unlockNow(t, holder.ReadLock())
}
