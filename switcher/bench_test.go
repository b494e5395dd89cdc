package switcher_test

import (
	"fmt"
	"testing"

	"github.com/orthrus-go/orthrus/internal/benchround"
)

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
	benchround.ReportRelative(b, []string{"switcher", "engine"}, benchround.Alternate(b, []benchround.Mutex{ls, le}))
}

// BenchmarkOverheadParallel is BenchmarkOverhead by 8 goroutines at once,
// on names of their own, each alternating the switcher and the engine.
func BenchmarkOverheadParallel(b *testing.B) {
	bare, _ := redisEngine(b, "bare", primaryAddr)
	defer bare.Close()
	sw, _ := newSwitcher(b, [2]string{primaryAddr, secondaryAddr})
	spent := benchround.AlternateParallel(b, 8, func(i int) []benchround.Mutex {
		ls, _ := sw.NewLocker(fmt.Sprintf("bench-par-%d", i))
		le, _ := bare.NewLocker(fmt.Sprintf("bench-par-%d", i))
		return []benchround.Mutex{ls, le}
	})
	benchround.ReportRelative(b, []string{"switcher", "engine"}, spent)
}
