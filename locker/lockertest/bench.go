package lockertest

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Mutex is what Handoff needs of a lock: a Locker has it, and a native peer
// (go-zookeeper's Lock, etcd's concurrency.Mutex) fits with an adapter, so
// that orthrus and its peer are measured by the same code in the same run.
type Mutex interface {
	Lock() error
	Unlock() error
}

// Handoff makes owners, all on one name, take b.N turns between them:
// Lock, nothing, Unlock. It reports the median time from one owner calling
// Unlock to the next owner's Lock returning as "handoff-ms": what a woken
// waiter costs, and what a polling one would show.
func Handoff(b *testing.B, owners []Mutex) {
	var (
		released  atomic.Int64 // when the holder called Unlock, in ns since start
		remaining atomic.Int64
		mu        sync.Mutex
		samples   []time.Duration
		wg        sync.WaitGroup
	)
	errs := make(chan error, len(owners))
	start := time.Now()
	remaining.Store(int64(b.N))
	b.ResetTimer()
	for _, m := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for remaining.Add(-1) >= 0 {
				if err := m.Lock(); err != nil {
					errs <- err
					return
				}
				if r := released.Swap(0); r != 0 {
					d := time.Since(start) - time.Duration(r)
					mu.Lock()
					samples = append(samples, d)
					mu.Unlock()
				}
				released.Store(int64(time.Since(start)))
				if err := m.Unlock(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if len(samples) > 0 {
		slices.Sort(samples)
		b.ReportMetric(float64(samples[len(samples)/2])/float64(time.Millisecond), "handoff-ms")
	}
}
