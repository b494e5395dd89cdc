package cpustall

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStretch(t *testing.T) {
	for _, tc := range []struct {
		share float64
		want  time.Duration
	}{
		{0, time.Second},
		{0.5, 2 * time.Second},
		{0.75, 4 * time.Second},
		{0.99, 4 * time.Second},
		{1, 4 * time.Second},
	} {
		if got := Stretch(time.Second, tc.share); got != tc.want {
			t.Errorf("Stretch(1s, %v) = %v; want %v", tc.share, got, tc.want)
		}
	}
}

// Twice as many threads spinning as CPUs keep a task waiting for a CPU
// all the time: the share goes up. Without pressure stall information it
// stays 0, as documented.
func TestShareSeesABusyMachine(t *testing.T) {
	_, ok := read()
	spinners := 2 * runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(spinners))
	span := Start()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for range spinners {
		wg.Go(func() {
			for ctx.Err() == nil {
			}
		})
	}
	wg.Wait()
	got := span.Share()
	switch {
	case !ok && got != 0:
		t.Errorf("Share() without /proc/pressure/cpu = %v; want 0", got)
	case ok && got < 0.3:
		t.Errorf("Share() with %d threads spinning on %d CPUs = %.2f; want >= 0.3", spinners, runtime.NumCPU(), got)
	}
}
