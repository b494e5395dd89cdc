// Package benchround orders the implementations a benchmark compares by
// the round of scripts/bench, so that none always runs first: the first
// one runs on the coldest server and machine; and alternates them cycle
// by cycle.
package benchround

import (
	"os"
	"strconv"
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
		cycle(b, m)
	}
	spent := make([]time.Duration, len(ms))
	b.ResetTimer()
	for range b.N {
		for j, m := range ms {
			t0 := time.Now()
			cycle(b, m)
			spent[j] += time.Since(t0)
		}
	}
	b.StopTimer()
	return spent
}

// ReportRelative reports the throughput of the first of spent (from
// Alternate) relative to each other one's, as the metric "x-" + its name
// in names: 1 is as fast, above 1 faster.
func ReportRelative(b *testing.B, names []string, spent []time.Duration) {
	for j := 1; j < len(spent); j++ {
		b.ReportMetric(spent[j].Seconds()/spent[0].Seconds(), "x-"+names[j])
	}
}

func cycle(b *testing.B, m Mutex) {
	if err := m.Lock(); err != nil {
		b.Fatal(err)
	}
	if err := m.Unlock(); err != nil {
		b.Fatal(err)
	}
}
