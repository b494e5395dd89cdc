package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// answer is one node's reply to a request sent to several.
type answer[T any] struct {
	node int
	val  T
	err  error
}

// fan collects the answers of one request sent to several nodes. Once its
// caller has left, a worker's answer goes to the late handler instead.
type fan[T any] struct {
	mu   sync.Mutex
	left bool
	ch   chan answer[T] // buffered for every node: a worker never blocks
}

// fanOut sends call to the nodes idx at once, on the engine's workers,
// each bounded by the node timeout (on clients that honour a context's
// deadline; the others' workers answer late), and returns the answers that
// came before the node timeout passed or ctx ended. A worker whose answer
// comes after that hands a successful one to late, if not nil, on the
// worker's goroutine: what the request did must then be undone there.
func fanOut[T any](ctx context.Context, e *Engine, idx []int, call func(context.Context, int) (T, error), late func(context.Context, int, T)) []answer[T] {
	f := &fan[T]{ch: make(chan answer[T], len(idx))}
	for _, i := range idx {
		if !e.work.Go(func(bg context.Context) { f.ask(bg, e.timeout, i, call, late) }) {
			var zero T
			f.ch <- answer[T]{node: i, val: zero, err: fmt.Errorf("node %d: %w", i, locker.ErrClosed)}
		}
	}
	got := make([]answer[T], 0, len(idx))
	if len(idx) == 0 {
		return got
	}
	timer := time.NewTimer(e.timeout)
	defer timer.Stop()
	for len(got) < len(idx) {
		select {
		case a := <-f.ch:
			got = append(got, a)
		case <-timer.C:
			return f.leave(got)
		case <-ctx.Done():
			return f.leave(got)
		}
	}
	return got
}

// ask runs call on node i and delivers its answer, or hands it to late
// when the caller has left.
func (f *fan[T]) ask(bg context.Context, timeout time.Duration, i int, call func(context.Context, int) (T, error), late func(context.Context, int, T)) {
	ctx, cancel := context.WithTimeout(bg, timeout)
	v, err := call(ctx, i)
	cancel()
	f.mu.Lock()
	gone := f.left
	if !gone {
		f.ch <- answer[T]{node: i, val: v, err: err}
	}
	f.mu.Unlock()
	if gone && err == nil && late != nil {
		ctx, cancel := context.WithTimeout(bg, timeout)
		late(ctx, i, v)
		cancel()
	}
}

// leave marks the caller gone and returns got with the answers that came
// in meanwhile.
func (f *fan[T]) leave(got []answer[T]) []answer[T] {
	f.mu.Lock()
	f.left = true
	f.mu.Unlock()
	for {
		select {
		case a := <-f.ch:
			got = append(got, a)
		default:
			return got
		}
	}
}

// tally counts the answers without an error and returns the errors, each
// naming its node.
func tally[T any](answers []answer[T]) (ok int, errs []error) {
	for _, a := range answers {
		if a.err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", a.node, a.err))
			continue
		}
		ok++
	}
	return ok, errs
}
