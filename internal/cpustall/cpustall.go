// Package cpustall measures how much of a span of time the machine's
// runnable tasks spent waiting for a CPU, from Linux's pressure stall
// information (/proc/pressure/cpu), so that a test's latency bound, set
// for a machine with CPU to spare, can stretch by what a busy machine did
// not give. Bounds of correctness (errors, lost holds, order) never
// stretch; only how long something took.
package cpustall

import (
	"time"

	"github.com/prometheus/procfs"
)

// maxStretch caps Stretch: past it the machine is too busy for a latency
// bound to mean anything, and a test should fail rather than wait on.
const maxStretch = 4

// Span is a span of time begun by Start.
type Span struct {
	began   time.Time
	stalled time.Duration
	ok      bool
}

// Start begins a span now.
func Start() Span {
	stalled, ok := read()
	return Span{began: time.Now(), stalled: stalled, ok: ok}
}

// Share returns the share of the span so far during which at least one
// runnable task waited for a CPU: 0 on a machine with CPU to spare, or
// without pressure stall information.
func (s Span) Share() float64 {
	stalled, ok := read()
	elapsed := time.Since(s.began)
	if !s.ok || !ok || elapsed <= 0 {
		return 0
	}
	return min(max(float64(stalled-s.stalled)/float64(elapsed), 0), 1)
}

// Stretch returns d as long as it takes on a machine that gave its tasks
// a CPU only 1 - share of the time: d / (1 - share), at most maxStretch × d.
func Stretch(d time.Duration, share float64) time.Duration {
	if share >= 1-1.0/maxStretch {
		return maxStretch * d
	}
	return time.Duration(float64(d) / (1 - share))
}

// read returns the total time, since boot, during which some runnable
// task waited for a CPU.
func read() (time.Duration, bool) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, false
	}
	psi, err := fs.PSIStatsForResource("cpu")
	if err != nil || psi.Some == nil {
		return 0, false
	}
	return time.Duration(psi.Some.Total) * time.Microsecond, true
}
