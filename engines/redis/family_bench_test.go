package redis_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/internal/benchround"
	"github.com/orthrus-go/orthrus/locker"
)

// familyKinds are the holds the family benchmarks compare, the mutex first:
// the others' figures are reported relative to it.
var familyKinds = []string{"mutex", "read", "write", "permit"}

// familyHandle returns a new owner's handle of the given kind on name:
// a mutex, a side of a read-write lock, or one permit of a semaphore of
// permits.
func familyHandle(b *testing.B, e locker.Engine, kind, name string, permits int) locker.Handle {
	var h locker.Handle
	var err error
	switch kind {
	case "mutex":
		h, err = e.NewLocker(name)
	case "read", "write":
		var l locker.RWLock
		if l, err = e.NewRWLock(name); err == nil {
			h = l.ReadLock()
			if kind == "write" {
				h = l.WriteLock()
			}
		}
	case "permit":
		var s locker.Semaphore
		if s, err = e.NewSemaphore(name, permits); err == nil {
			h, err = s.NewPermit(1)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// BenchmarkFamilyCycle is one owner taking and releasing, uncontended, a
// mutex, a read lock, a write lock and one permit of a semaphore of one,
// in turn, cycle by cycle, so that a busy machine's load falls on all
// alike. An op is one cycle of each. It reports each kind's time per cycle
// (<kind>-us) and its throughput relative to the mutex's
// (<kind>-x-mutex: the mutex's time over the kind's; 1 is as fast).
func BenchmarkFamilyCycle(b *testing.B) {
	e := newEngine(b, benchClient(b, true))
	b.Cleanup(func() { _ = e.Close() })
	name := benchName(b)
	hs := make([]benchround.Mutex, len(familyKinds))
	for i, kind := range familyKinds {
		hs[i] = familyHandle(b, e, kind, name, 1)
	}
	spent := benchround.Alternate(b, hs)
	for j, kind := range familyKinds {
		b.ReportMetric(float64(spent[j].Microseconds())/float64(b.N), kind+"-us")
		if j > 0 {
			b.ReportMetric(spent[0].Seconds()/spent[j].Seconds(), kind+"-x-mutex")
		}
	}
}

// BenchmarkFamilyHandoff measures the time from a release to the grant of
// an owner parked behind it, on another engine (another process): a mutex
// to a mutex waiter, a writer to a reader, a permit to a permit waiter (a
// semaphore of one), in turn. The holder keeps the lock 2ms, in which the
// waiter parks. It reports each p50 (<kind>-ms) and its ratio to the
// mutex's (<kind>-x-mutex: 1.5 is half as fast again).
func BenchmarkFamilyHandoff(b *testing.B) {
	holders, waiters := newEngine(b, benchClient(b, true)), newEngine(b, benchClient(b, true))
	b.Cleanup(func() { _ = holders.Close(); _ = waiters.Close() })
	kinds := []struct{ holder, waiter string }{{"mutex", "mutex"}, {"write", "read"}, {"permit", "permit"}}
	type pair struct{ holder, waiter locker.Handle }
	pairs := make([]pair, len(kinds))
	for i, k := range kinds {
		name := benchName(b)
		pairs[i] = pair{familyHandle(b, holders, k.holder, name, 1), familyHandle(b, waiters, k.waiter, name, 1)}
	}
	const hold = 2 * time.Millisecond
	handoffs := make([][]time.Duration, len(kinds))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, p := range pairs {
			if err := p.holder.Lock(); err != nil {
				b.Fatal(err)
			}
			granted := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				granted <- p.waiter.LockCtx(ctx)
			}()
			time.Sleep(hold) // the critical section, in which the waiter parks
			t0 := time.Now()
			if err := p.holder.Unlock(); err != nil {
				b.Fatal(err)
			}
			if err := <-granted; err != nil {
				b.Fatal(err)
			}
			handoffs[j] = append(handoffs[j], time.Since(t0))
			if err := p.waiter.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	p50 := make([]float64, len(kinds))
	for j, k := range kinds {
		slices.Sort(handoffs[j])
		p50[j] = float64(handoffs[j][len(handoffs[j])/2]) / float64(time.Millisecond)
		b.ReportMetric(p50[j], k.waiter+"-ms")
		if j > 0 {
			b.ReportMetric(p50[j]/p50[0], k.waiter+"-x-mutex")
		}
	}
}
