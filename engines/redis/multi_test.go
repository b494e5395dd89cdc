package redis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestMultiConformance(t *testing.T) {
	c := newSingle(t)
	lockertest.RunMulti(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}

func TestMultiConformanceCluster(t *testing.T) {
	c := newCluster(t)
	lockertest.RunMulti(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}

// BenchmarkMultiLock compares one uncontended multi-lock cycle over three
// names with three Lock+Unlock cycles of plain mutexes on the same names:
// six round trips each. The two alternate cycle by cycle, so that a busy
// machine slows both alike; mutex3/multi is the multi-lock's throughput
// relative to the three mutex cycles.
func BenchmarkMultiLock(b *testing.B) {
	e := newEngine(b, newSingle(b))
	defer e.Close()
	var multiParts, mutexes []locker.Handle
	for i := range 3 {
		name := fmt.Sprintf("bench:multi:%d", i)
		mp, err := e.NewLocker(name)
		if err != nil {
			b.Fatal(err)
		}
		mx, err := e.NewLocker(name)
		if err != nil {
			b.Fatal(err)
		}
		multiParts, mutexes = append(multiParts, mp), append(mutexes, mx)
	}
	m, err := locker.NewMultiLock(multiParts...)
	if err != nil {
		b.Fatal(err)
	}
	var multi, seq time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if err := m.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		for _, l := range mutexes {
			if err := l.Lock(); err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
		multi, seq = multi+t1.Sub(t0), seq+time.Since(t1)
	}
	b.ReportMetric(float64(multi.Nanoseconds())/float64(b.N), "multi-ns/op")
	b.ReportMetric(float64(seq.Nanoseconds())/float64(b.N), "mutex3-ns/op")
	b.ReportMetric(seq.Seconds()/multi.Seconds(), "mutex3/multi")
}
