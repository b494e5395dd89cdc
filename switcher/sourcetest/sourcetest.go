// Package sourcetest helps test switcher.Source implementations: it runs a
// source's Watch as the switcher would and records what it applies.
package sourcetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/switcher"
)

// Recorder runs one Watch and records the values it applies.
type Recorder struct {
	mu      sync.Mutex
	applied []switcher.Desired
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
}

// Watch starts src.Watch in a goroutine; the watch stops when the test
// ends, or earlier with Stop.
func Watch(t *testing.T, src switcher.Source) *Recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- src.Watch(ctx, func(d switcher.Desired) {
			r.mu.Lock()
			r.applied = append(r.applied, d)
			r.mu.Unlock()
		})
	}()
	t.Cleanup(func() { r.Stop(t) })
	return r
}

// Stop cancels the watch and checks that Watch returns nil within 5s.
// Only the first call does anything.
func (r *Recorder) Stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Watch() = %v; want nil after cancel", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Watch did not return within 5s of cancel")
		}
	})
}

// Applied returns the values applied so far, oldest first.
func (r *Recorder) Applied() []switcher.Desired {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]switcher.Desired(nil), r.applied...)
}

// WaitFor polls until the last applied value names engine, within d, and
// returns it.
func (r *Recorder) WaitFor(t *testing.T, engine string, d time.Duration) switcher.Desired {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := r.Applied()
		if n := len(got); n > 0 && got[n-1].Engine == engine {
			return got[n-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("applied %+v; want the last to name engine %q within %v", got, engine, d)
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}
