package zk_test

import (
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/engines/zk"
)

// mutex is what orthrus Lockers and go-zookeeper's Lock have in common.
type mutex interface {
	Lock() error
	Unlock() error
}

// BenchmarkLockUnlock: one owner takes and releases one name, uncontended,
// through orthrus and through go-zookeeper's own lock recipe.
func BenchmarkLockUnlock(b *testing.B) {
	b.Run("orthrus", func(b *testing.B) {
		e := newEngine(b, []string{zkAddr}, zk.WithPrefix("/bench"))
		defer e.Close()
		l, _ := e.NewLocker("uncontended")
		lockUnlock(b, l)
	})
	b.Run("gozk", func(b *testing.B) {
		c := admin(b)
		lockUnlock(b, gozk.NewLock(c, "/bench-gozk/uncontended", gozk.WorldACL(gozk.PermAll)))
	})
}

func lockUnlock(b *testing.B, m mutex) {
	for b.Loop() {
		if err := m.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandoff: eight owners, each with its own session, contend for
// one name; handoff-ms is the median time from one owner's Unlock to the
// next owner's Lock returning.
func BenchmarkHandoff(b *testing.B) {
	const owners = 8
	b.Run("orthrus", func(b *testing.B) {
		ms := make([]mutex, owners)
		for i := range ms {
			e := newEngine(b, []string{zkAddr}, zk.WithPrefix("/bench"))
			defer e.Close()
			ms[i], _ = e.NewLocker("contended")
		}
		handoff(b, ms)
	})
	b.Run("gozk", func(b *testing.B) {
		ms := make([]mutex, owners)
		for i := range ms {
			ms[i] = gozk.NewLock(admin(b), "/bench-gozk/contended", gozk.WorldACL(gozk.PermAll))
		}
		handoff(b, ms)
	})
}

func handoff(b *testing.B, ms []mutex) {
	var (
		released  atomic.Int64 // when the holder called Unlock, in ns since start
		remaining atomic.Int64
		mu        sync.Mutex
		samples   []time.Duration
		wg        sync.WaitGroup
	)
	errs := make(chan error, len(ms))
	start := time.Now()
	remaining.Store(int64(b.N))
	b.ResetTimer()
	for _, m := range ms {
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
		sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
		b.ReportMetric(float64(samples[len(samples)/2])/float64(time.Millisecond), "handoff-ms")
	}
}
