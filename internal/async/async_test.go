package async

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// goid is the calling goroutine's ID, from its stack header.
func goid() uint64 {
	var buf [64]byte
	s := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	id, _ := strconv.ParseUint(string(s[:bytes.IndexByte(s, ' ')]), 10, 64)
	return id
}

// closePool closes p within a second, failing t if it had to cancel.
func closePool(t *testing.T, p *Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Errorf("Close() = %v; want nil", err)
	}
}

// run runs f on p and waits for it, returning the worker's goroutine ID.
func run(t *testing.T, p *Pool) uint64 {
	t.Helper()
	id := make(chan uint64, 1)
	if !p.Go(func(context.Context) { id <- goid() }) {
		t.Fatal("Go() = false on an open pool; want true")
	}
	return <-id
}

func TestPoolReusesIdleWorker(t *testing.T) {
	p := NewPool()
	defer closePool(t, p)
	seen := map[uint64]bool{run(t, p): true}
	// A worker that finished waits for more work; how soon it does is up
	// to the scheduler, so try until one is reused. Without reuse every
	// call gets a new goroutine, and IDs are never reused.
	for range 1000 {
		id := run(t, p)
		if seen[id] {
			return
		}
		seen[id] = true
	}
	t.Fatalf("1000 calls of Go ran on %d goroutines; want an idle one reused", len(seen))
}

func TestPoolBusyWorkerNotShared(t *testing.T) {
	p := NewPool()
	defer closePool(t, p)
	release := make(chan struct{})
	var ran sync.WaitGroup
	ran.Add(2)
	for range 2 {
		p.Go(func(context.Context) {
			ran.Done()
			<-release
		})
	}
	ran.Wait() // both run at once: the second did not queue behind the first
	close(release)
}

func TestPoolIdleWorkerEnds(t *testing.T) {
	before := goleak.IgnoreCurrent()
	p := NewPool()
	defer closePool(t, p)
	p.idleFor = time.Millisecond
	run(t, p)
	// goleak looks again for a while when the worker is still there.
	if err := goleak.Find(before); err != nil {
		t.Errorf("an idle worker outlived its idle time: %v", err)
	}
}

func TestPoolRefusesAfterStop(t *testing.T) {
	for _, stop := range []struct {
		name string
		f    func(*Pool)
	}{
		{"Stop", (*Pool).Stop},
		{"Close", func(p *Pool) { _ = p.Close(context.Background()) }},
	} {
		t.Run(stop.name, func(t *testing.T) {
			p := NewPool()
			run(t, p) // an idle worker must not take the work either
			stop.f(p)
			if p.Go(func(context.Context) { t.Error("f ran after " + stop.name) }) {
				t.Errorf("Go() after %s = true; want false", stop.name)
			}
			closePool(t, p)
		})
	}
}

func TestPoolCloseWaitsForWork(t *testing.T) {
	p := NewPool()
	release := make(chan struct{})
	var finished atomic.Bool
	p.Go(func(context.Context) {
		<-release
		finished.Store(true)
	})
	closed := make(chan error)
	go func() { closed <- p.Close(context.Background()) }()
	for p.Go(func(context.Context) {}) { // until Close has begun
		runtime.Gosched()
	}
	close(release)
	if err := <-closed; err != nil || !finished.Load() {
		t.Errorf("Close() = %v with the work finished %v; want nil, true", err, finished.Load())
	}
}

func TestPoolCloseCancelsWork(t *testing.T) {
	p := NewPool()
	started := make(chan struct{})
	var cancelled atomic.Bool
	p.Go(func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		cancelled.Store(true)
	})
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Close(ctx); !errors.Is(err, context.Canceled) || !cancelled.Load() {
		t.Errorf("Close(cancelled) = %v with the work cancelled %v; want %v, true", err, cancelled.Load(), context.Canceled)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
}
