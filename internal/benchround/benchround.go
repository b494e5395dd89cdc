// Package benchround orders the implementations a benchmark compares by
// the round of scripts/bench, so that none always runs first: the first
// one runs on the coldest server and machine; and alternates them cycle
// by cycle.
package benchround

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Rotate returns names rotated by the round scripts/bench runs
// (ORTHRUS_BENCH_ROUND, from 1), and as they are outside it.
func Rotate[T any](names []T) []T {
	r, err := strconv.Atoi(os.Getenv("ORTHRUS_BENCH_ROUND"))
	if err != nil || r <= 0 || len(names) == 0 {
		return names
	}
	k := r % len(names)
	return append(names[k:len(names):len(names)], names[:k]...)
}

// Mutex is what Alternate compares: an uncontended Lock and Unlock.
type Mutex interface {
	Lock() error
	Unlock() error
}

// Alternate runs b.N rounds of one Lock+Unlock of each of ms in turn,
// cycle by cycle, so that the load of a busy machine falls on all alike,
// and returns the time spent in each: their ratios are the steadiest a
// benchmark can give. Each has made one cycle before the timer starts
// (connections made, scripts loaded).
func Alternate(b *testing.B, ms []Mutex) []time.Duration {
	for _, m := range ms {
		if err := cycle(m); err != nil {
			b.Fatal(err)
		}
	}
	spent := make([]time.Duration, len(ms))
	b.ResetTimer()
	for range b.N {
		if err := round(ms, spent); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	return spent
}

// AlternateParallel is Alternate run by owners goroutines at once
// (rounded up to a multiple of GOMAXPROCS), each over mutexes of its own:
// mutexes(i) for the i-th, from 0, on names no other uses. The rounds, b.N
// in all, share the server's queue too: at any moment each implementation
// has its turn in about as many goroutines. It returns the time spent in
// each implementation, summed over the goroutines. The mutexes are made
// and warmed on the benchmark's goroutine, before the timer starts, so
// that a failure there may end the benchmark.
func AlternateParallel(b *testing.B, owners int, mutexes func(i int) []Mutex) []time.Duration {
	parallelism := (owners + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)
	sets := make([][]Mutex, parallelism*runtime.GOMAXPROCS(0)) // RunParallel's goroutines
	for i := range sets {
		sets[i] = mutexes(i)
		if err := round(sets[i], make([]time.Duration, len(sets[i]))); err != nil {
			b.Fatal(err)
		}
	}
	var (
		mu    sync.Mutex
		spent = make([]time.Duration, len(sets[0]))
		next  atomic.Int64
	)
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ms := sets[next.Add(1)-1]
		mine := make([]time.Duration, len(ms))
		var err error
		for err == nil && pb.Next() {
			err = round(ms, mine)
		}
		if err != nil {
			b.Error(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for j, d := range mine {
			spent[j] += d
		}
	})
	b.StopTimer()
	return spent
}

// round makes one cycle of each of ms in turn, adding its time to spent.
func round(ms []Mutex, spent []time.Duration) error {
	for j, m := range ms {
		t0 := time.Now()
		if err := cycle(m); err != nil {
			return err
		}
		spent[j] += time.Since(t0)
	}
	return nil
}

// ReportRelative reports the throughput of the first of spent (from
// Alternate) relative to each other one's, as the metric "x-" + its name
// in names: 1 is as fast, above 1 faster.
func ReportRelative(b *testing.B, names []string, spent []time.Duration) {
	for j := 1; j < len(spent); j++ {
		b.ReportMetric(spent[j].Seconds()/spent[0].Seconds(), "x-"+names[j])
	}
}

func cycle(m Mutex) error {
	if err := m.Lock(); err != nil {
		return err
	}
	return m.Unlock()
}
