package async

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrTimedOut is WaitUntil's error when its deadline passed first.
var ErrTimedOut = errors.New("request timed out")

// Result is a delivered result.
type Result[T any] struct {
	Value T
	Err   error
}

// Pending is the result of one request that runs elsewhere (on a Pool's
// worker, most often), for a waiter that may stop waiting. The worker
// calls Deliver once; the waiter calls Wait or WaitUntil, or receives from
// Answer and calls Abandon to leave, once. Whichever of the two gets the
// result owns p from then on: the waiter once it has received it, the
// worker when Deliver reports false.
//
// A Pending can be reused, to keep a request on the hot path free of
// allocations: its owner calls Reset before the next request.
type Pending[T any] struct {
	ch    chan Result[T] // buffered: Deliver never blocks
	state atomic.Int32   // waiting, delivered or abandoned
}

const (
	waiting int32 = iota
	delivered
	abandoned
)

// NewPending returns a Pending ready for one request.
func NewPending[T any]() *Pending[T] {
	p := new(Pending[T])
	p.Reset()
	return p
}

// Reset makes p ready for a new request: a zero Pending, or one its owner
// got back (see Pending).
func (p *Pending[T]) Reset() {
	if p.ch == nil {
		p.ch = make(chan Result[T], 1)
	}
	p.state.Store(waiting)
}

// Deliver hands v and err to the waiter and reports true; or it reports
// false when the waiter has left, and the result, and p, stay with the
// caller of Deliver, who undoes what the request did if it must.
func (p *Pending[T]) Deliver(v T, err error) bool {
	if !p.state.CompareAndSwap(waiting, delivered) {
		return false
	}
	p.ch <- Result[T]{v, err}
	return true
}

// Answer is where the result arrives, for a waiter that waits for more
// than a context: receive from it at most once, and call Abandon instead
// to leave.
func (p *Pending[T]) Answer() <-chan Result[T] { return p.ch }

// Abandon leaves without the result and reports false; or, when the
// result came meanwhile, it returns it and reports true. Call it only
// before receiving from Answer.
func (p *Pending[T]) Abandon() (Result[T], bool) {
	if p.state.CompareAndSwap(waiting, abandoned) {
		return Result[T]{}, false
	}
	return <-p.ch, true // delivered just now
}

// Wait returns the result, or ctx.Err() when ctx is done first.
func (p *Pending[T]) Wait(ctx context.Context) (T, error) {
	select {
	case r := <-p.ch:
		return r.Value, r.Err
	case <-ctx.Done():
		return p.leave(ctx.Err())
	}
}

// WaitUntil is Wait, also bounded by deadline: past it, it returns
// ErrTimedOut.
func (p *Pending[T]) WaitUntil(ctx context.Context, deadline time.Time) (T, error) {
	select {
	case r := <-p.ch: // no timer for a result that is there already
		return r.Value, r.Err
	default:
	}
	t := StartTimer(time.Until(deadline))
	defer StopTimer(t)
	select {
	case r := <-p.ch:
		return r.Value, r.Err
	case <-ctx.Done():
		return p.leave(ctx.Err())
	case <-t.C:
		return p.leave(ErrTimedOut)
	}
}

// leave abandons p with err, unless the result came meanwhile.
func (p *Pending[T]) leave(err error) (T, error) {
	r, ok := p.Abandon()
	if !ok {
		r.Err = err
	}
	return r.Value, r.Err
}

// timers recycles the timers that bound requests: a request per round
// trip makes them part of every acquisition's cost.
var timers sync.Pool

// StartTimer returns a timer that fires after d, from a pool; give it back
// with StopTimer.
func StartTimer(d time.Duration) *time.Timer {
	if t, _ := timers.Get().(*time.Timer); t != nil {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// StopTimer stops t and returns it to the pool: t must not be used after.
func StopTimer(t *time.Timer) {
	t.Stop() // no stale tick survives Stop since Go 1.23
	timers.Put(t)
}
