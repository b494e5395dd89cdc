package etcd_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/orthrus-go/orthrus/internal/benchround"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// Benchmarks against etcd's own concurrency.Mutex over the same client and
// server: go test -run '^$' -bench . -count 10 | benchstat

func benchName(b *testing.B) string { return fmt.Sprintf("%s/%d", b.Name(), time.Now().UnixNano()) }

// owner is one contender: a Lock and an Unlock. It is the adapter that
// makes a concurrency.Mutex, whose calls take a context, a
// lockertest.Mutex.
type owner struct {
	l            locker.Handle // orthrus owners only
	lock, unlock func() error
}

func (o owner) Lock() error   { return o.lock() }
func (o owner) Unlock() error { return o.unlock() }

// orthrusCtxOwner locks with LockCtx on a context that can end, as a
// service's request handler does: the path on which a caller may give up.
// It makes n owners, as the hand-off benchmark asks for.
func orthrusCtxOwner(b *testing.B, n int) []owner {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	owners := orthrusOwners(b, n)
	for i := range owners {
		l := owners[i].l
		owners[i].lock = func() error { return l.LockCtx(ctx) }
	}
	return owners
}

func orthrusOwners(b *testing.B, n int) []owner {
	e := newEngine(b, newClient(b, endpoint))
	name := benchName(b)
	owners := make([]owner, n)
	for i := range owners {
		l := newLocker(b, e, name)
		owners[i] = owner{l: l, lock: l.Lock, unlock: l.Unlock}
	}
	return owners
}

// concurrencyOwners gives each owner a session of its own: two Mutexes on
// one session share a key and would both hold.
func concurrencyOwners(b *testing.B, n int) []owner {
	c := newClient(b, endpoint)
	pfx := benchName(b)
	ctx := context.Background()
	owners := make([]owner, n)
	for i := range owners {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(int(driver.DefaultTTL/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		m := concurrency.NewMutex(s, pfx)
		owners[i] = owner{lock: func() error { return m.Lock(ctx) }, unlock: func() error { return m.Unlock(ctx) }}
	}
	return owners
}

// implementations are compared in an order that scripts/bench rotates
// from round to round, so that none always runs first.
func implementations() []implementation {
	return benchround.Rotate([]implementation{{"orthrus", orthrusOwners}, {"orthrus-lockctx", orthrusCtxOwner}, {"concurrency", concurrencyOwners}})
}

// implementation makes n owners of one name.
type implementation struct {
	name   string
	owners func(b *testing.B, n int) []owner
}

// BenchmarkLockUnlock is one owner locking and unlocking, uncontended.
func BenchmarkLockUnlock(b *testing.B) {
	for _, impl := range implementations() {
		b.Run(impl.name, func(b *testing.B) {
			o := impl.owners(b, 1)[0]
			lockUnlock := func() {
				if err := o.lock(); err != nil {
					b.Fatal(err)
				}
				if err := o.unlock(); err != nil {
					b.Fatal(err)
				}
			}
			lockUnlock() // lease granted, connection warm
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				lockUnlock()
			}
		})
	}
}

// BenchmarkAlternating runs the uncontended cycle of orthrus and of
// concurrency.Mutex in turn, cycle by cycle, so that a busy machine slows
// both alike, and reports orthrus's throughput relative to the peer's
// (x-concurrency).
func BenchmarkAlternating(b *testing.B) {
	ms := []benchround.Mutex{orthrusOwners(b, 1)[0], concurrencyOwners(b, 1)[0]}
	benchround.ReportRelative(b, []string{"orthrus", "concurrency"}, benchround.Alternate(b, ms))
}

// BenchmarkHandoff is 8 owners taking turns on one name. handoff-ms is the
// median time from a holder's Unlock to the next holder's Lock returning.
func BenchmarkHandoff(b *testing.B) {
	const owners = 8
	for _, impl := range implementations() {
		b.Run(impl.name, func(b *testing.B) {
			ms := make([]lockertest.Mutex, owners)
			for i, o := range impl.owners(b, owners) {
				ms[i] = o
			}
			lockertest.Handoff(b, ms)
		})
	}
}

// BenchmarkHandoffQueue is BenchmarkHandoff with w owners of one engine
// queued on one name: their keys ride on one lease that the keeper keeps
// alive, so the hand-off should not grow with w. Run it with b.N well
// above w (-benchtime 5000x) so that the queue stays deep.
func BenchmarkHandoffQueue(b *testing.B) {
	for _, w := range []int{10, 1000} {
		b.Run(fmt.Sprintf("W=%d", w), func(b *testing.B) {
			ms := make([]lockertest.Mutex, w)
			for i, o := range orthrusOwners(b, w) {
				ms[i] = o
			}
			lockertest.Handoff(b, ms)
		})
	}
}

// BenchmarkLockUnlockParallel is 4×GOMAXPROCS owners, each locking and
// unlocking a name of its own: orthrus's owners share one engine (its
// leases, slots and Core under concurrent use), concurrency's one session,
// each over one client.
func BenchmarkLockUnlockParallel(b *testing.B) {
	for _, impl := range parallelImplementations() {
		b.Run(impl.name, func(b *testing.B) {
			owner := impl.owners(b)
			var ids atomic.Int64
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				lock, unlock := owner(ids.Add(1))
				for pb.Next() {
					if err := lock(); err != nil {
						b.Error(err)
						return
					}
					if err := unlock(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkAlternatingParallel is BenchmarkAlternating by as many owners
// as BenchmarkLockUnlockParallel, each on names of its own, over one engine
// and one session as there: orthrus's throughput in parallel relative to
// concurrency.Mutex's (x-concurrency), both under the same load at once.
func BenchmarkAlternatingParallel(b *testing.B) {
	var mks [2]func(int64) (func() error, func() error)
	for _, impl := range parallelImplementations() {
		i := 0
		if impl.name == "concurrency" {
			i = 1
		}
		mks[i] = impl.owners(b)
	}
	spent := benchround.AlternateParallel(b, 4*runtime.GOMAXPROCS(0), func(i int) []benchround.Mutex {
		ms := make([]benchround.Mutex, len(mks))
		for j, mk := range mks {
			lock, unlock := mk(int64(i))
			ms[j] = owner{lock: lock, unlock: unlock}
		}
		return ms
	})
	benchround.ReportRelative(b, []string{"orthrus", "concurrency"}, spent)
}

// parallelImplementation makes, for one sub-benchmark, the Lock and Unlock
// of owner i's own name.
type parallelImplementation struct {
	name   string
	owners func(b *testing.B) func(i int64) (lock, unlock func() error)
}

func parallelImplementations() []parallelImplementation {
	return benchround.Rotate([]parallelImplementation{
		{"orthrus", func(b *testing.B) func(int64) (func() error, func() error) {
			e := newEngine(b, newClient(b, endpoint))
			name := benchName(b)
			return func(i int64) (func() error, func() error) {
				l, err := e.NewLocker(fmt.Sprintf("%s/%d", name, i))
				if err != nil {
					fail := func() error { return err }
					return fail, fail
				}
				return l.Lock, l.Unlock
			}
		}},
		{"concurrency", func(b *testing.B) func(int64) (func() error, func() error) {
			s, err := concurrency.NewSession(newClient(b, endpoint), concurrency.WithTTL(int(driver.DefaultTTL/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			pfx := benchName(b)
			ctx := context.Background()
			return func(i int64) (func() error, func() error) {
				m := concurrency.NewMutex(s, fmt.Sprintf("%s/%d", pfx, i))
				return func() error { return m.Lock(ctx) }, func() error { return m.Unlock(ctx) }
			}
		}},
	})
}

// BenchmarkHandoffWeighted is BenchmarkHandoff with 4 owners of weights
// 1, 3, 2 and 10 (each grant goes to the heaviest waiter, not the
// oldest), beside the same 4 of weight 1 to compare in one run.
// tries/arrival is the creates a heavy arrival sent per key it queued
// (above 1: the queue changed between its read and its create).
func BenchmarkHandoffWeighted(b *testing.B) {
	for _, weights := range [][]int{{1, 1, 1, 1}, {1, 3, 2, 10}} {
		b.Run(fmt.Sprintf("weights=%v", weights), func(b *testing.B) {
			e := newEngine(b, newClient(b, endpoint))
			name := benchName(b)
			ms := make([]lockertest.Mutex, len(weights))
			for i, w := range weights {
				l, err := e.NewLocker(name, locker.WithWeight(w))
				if err != nil {
					b.Fatal(err)
				}
				ms[i] = l
			}
			lockertest.Handoff(b, ms)
			if tries, arrivals := e.HeavyTries(); arrivals > 0 {
				b.ReportMetric(float64(tries)/float64(arrivals), "tries/arrival")
			}
		})
	}
}
