package switcher_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/internal/benchround"
	"github.com/orthrus-go/orthrus/locker"
)

// cycle is one Lock+Unlock.
func cycle(b *testing.B, l locker.Locker) {
	if err := l.Lock(); err != nil {
		b.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOverhead measures the switcher against the bare engine it
// routes to, on the same Redis, cycle by cycle so that a busy machine slows
// both alike: x-engine is the switcher's throughput relative to the
// engine's (1 is free). scripts/bench runs it with the engines' benchmarks.
//
//	go test -run '^$' -bench Overhead -count 7 ./switcher/
func BenchmarkOverhead(b *testing.B) {
	bare, _ := redisEngine(b, "bare", primaryAddr)
	defer bare.Close()
	sw, _ := newSwitcher(b, [2]string{primaryAddr, secondaryAddr})
	le, _ := bare.NewLocker("bench-bare")
	ls, _ := sw.NewLocker("bench-switched")
	b.ReportAllocs()
	spent := benchround.Alternate(b, []benchround.Mutex{le, ls})
	b.ReportMetric(spent[0].Seconds()/spent[1].Seconds(), "x-engine")
}

// BenchmarkOverheadParallel is BenchmarkOverhead with 8 goroutines on
// names of their own.
func BenchmarkOverheadParallel(b *testing.B) {
	bare, _ := redisEngine(b, "bare", primaryAddr)
	defer bare.Close()
	sw, _ := newSwitcher(b, [2]string{primaryAddr, secondaryAddr})
	const workers = 8
	var engine, switched time.Duration
	b.ResetTimer()
	// Rounds alternate: all workers on the engine, then all on the
	// switcher, each round b.N/8/rounds cycles per worker.
	const rounds = 10
	per := max(b.N/workers/rounds, 1)
	for r := range rounds {
		for _, e := range []locker.Engine{bare, sw} {
			var wg sync.WaitGroup
			t0 := time.Now()
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l, _ := e.NewLocker(fmt.Sprintf("bench-par-%d-%d", r, w))
					for range per {
						cycle(b, l)
					}
				}()
			}
			wg.Wait()
			if e == locker.Engine(bare) {
				engine += time.Since(t0)
			} else {
				switched += time.Since(t0)
			}
		}
	}
	b.ReportMetric(engine.Seconds()/switched.Seconds(), "x-engine")
}
