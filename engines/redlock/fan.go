package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// answer is one node's reply to a request sent to several.
type answer[T any] struct {
	node int
	val  T
	err  error
}

// failure is a's error naming its node, nil when the node answered.
func (a answer[T]) failure() error {
	if a.err == nil {
		return nil
	}
	return fmt.Errorf("node %d: %w", a.node, a.err)
}

// fan collects the answers of one request sent to several nodes: the
// worker of the last answer signals done, so that the caller wakes once,
// not per node. Once the caller has left, a worker's answer goes to the
// late handler instead.
type fan[T any] struct {
	mu   sync.Mutex
	left bool
	got  []answer[T]
	done chan struct{} // buffered: signalled once every node answered, or enough did
	want int
	// enough: that many answers without an error end the wait (0: all).
	enough, ok int

	// ctx bounds every node's request by the node timeout: one context
	// for them all, cancelled by the last worker to finish (running).
	ctx     context.Context
	cancel  context.CancelFunc
	running atomic.Int32
}

// fanOut sends call to the nodes idx at once, on the engine's workers,
// each bounded by the node timeout (on clients that honour a context's
// deadline; the others' workers answer late), and returns the answers that
// came before the node timeout passed or ctx ended. A worker whose answer
// comes after that hands a successful one to late, if not nil, on the
// worker's goroutine: what the request did must then be undone there.
func fanOut[T any](ctx context.Context, e *Engine, idx []int, call func(context.Context, int) (T, error), late func(context.Context, int, T)) []answer[T] {
	return fanOutUntil(ctx, e, idx, 0, call, late)
}

// fanOutUntil is fanOut that returns as soon as enough nodes answered
// without an error (0: all), leaving the others' requests to go on.
func fanOutUntil[T any](ctx context.Context, e *Engine, idx []int, enough int, call func(context.Context, int) (T, error), late func(context.Context, int, T)) []answer[T] {
	if len(idx) == 0 {
		return nil
	}
	f := &fan[T]{got: make([]answer[T], 0, len(idx)), done: make(chan struct{}, 1), want: len(idx), enough: enough}
	// Not under the workers' context: Close waits for them, and the node
	// timeout ends them.
	f.ctx, f.cancel = context.WithTimeout(context.Background(), e.timeout)
	f.running.Store(int32(len(idx)))
	for _, i := range idx {
		if !e.work.Go(func(bg context.Context) { f.ask(bg, e.timeout, i, call, late) }) {
			var zero T
			f.deliver(answer[T]{node: i, val: zero, err: fmt.Errorf("node %d: %w", i, locker.ErrClosed)})
			f.finished()
		}
	}
	timer := time.NewTimer(e.timeout)
	defer timer.Stop()
	select {
	case <-f.done:
	case <-timer.C:
	case <-ctx.Done():
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = true
	return f.got
}

// ask runs call on node i and delivers its answer, or hands it to late
// when the caller has left.
func (f *fan[T]) ask(bg context.Context, timeout time.Duration, i int, call func(context.Context, int) (T, error), late func(context.Context, int, T)) {
	v, err := call(f.ctx, i)
	f.finished()
	if !f.deliver(answer[T]{node: i, val: v, err: err}) && err == nil && late != nil {
		ctx, cancel := context.WithTimeout(bg, timeout)
		late(ctx, i, v)
		cancel()
	}
}

// finished counts a worker's request done; the last one ends the shared
// context.
func (f *fan[T]) finished() {
	if f.running.Add(-1) == 0 {
		f.cancel()
	}
}

// deliver records a, and reports false when the caller had left.
func (f *fan[T]) deliver(a answer[T]) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.left {
		return false
	}
	f.got = append(f.got, a)
	if a.err == nil {
		f.ok++
	}
	if len(f.got) == f.want || (f.enough > 0 && f.ok == f.enough) {
		select {
		case f.done <- struct{}{}:
		default: // signalled already
		}
	}
	return true
}

// tally counts the answers without an error and returns the errors, each
// naming its node.
func tally[T any](answers []answer[T]) (ok int, errs []error) {
	for _, a := range answers {
		if err := a.failure(); err != nil {
			errs = append(errs, err)
			continue
		}
		ok++
	}
	return ok, errs
}
