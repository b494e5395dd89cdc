package zk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"
)

// errClosed is returned inside the engine once Close has begun; fail turns
// it into locker.ErrClosed.
var errClosed = errors.New("engine closed")

// errNoAnswer: the ensemble did not answer within the connect timeout.
var errNoAnswer = errors.New("no answer from ZooKeeper")

// Backoff between attempts of a request whose connection dropped.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

type result[T any] struct {
	v   T
	err error
}

// pending is one go-zookeeper request running on a goroutine of the
// engine. go-zookeeper's calls take no context: the goroutine lets the
// caller stop waiting, and the request ends on its own, at the latest when
// Close closes the connection.
type pending[T any] struct {
	ch    chan result[T]
	state atomic.Int32 // running, abandoned or delivered
}

const (
	running int32 = iota
	abandoned
	delivered
)

// start runs f. When the caller has stopped waiting by the time f returns,
// orphan, if not nil, gets f's result, to undo what the request did.
func start[T any](e *Engine, f func() (T, error), orphan func(T, error)) *pending[T] {
	p := &pending[T]{ch: make(chan result[T], 1)}
	ok := e.spawn(func() {
		v, err := f()
		if p.state.CompareAndSwap(running, delivered) {
			p.ch <- result[T]{v, err}
			return
		}
		if orphan != nil {
			orphan(v, err)
		}
	})
	if !ok {
		p.state.Store(delivered)
		p.ch <- result[T]{err: errClosed}
	}
	return p
}

// wait returns f's result, or ctx.Err() when ctx is done first.
func (p *pending[T]) wait(ctx context.Context) (T, error) {
	select {
	case r := <-p.ch:
		return r.v, r.err
	case <-ctx.Done():
		if p.state.CompareAndSwap(running, abandoned) {
			var zero T
			return zero, ctx.Err()
		}
		r := <-p.ch // delivered just now
		return r.v, r.err
	}
}

// waitNotify is wait, calling onSent if sent is closed meanwhile.
func (p *pending[T]) waitNotify(ctx context.Context, sent <-chan struct{}, onSent func()) (T, error) {
	if sent != nil {
		select {
		case r := <-p.ch:
			return r.v, r.err
		case <-sent:
			onSent()
		case <-ctx.Done():
		}
	}
	return p.wait(ctx)
}

// errLate: a request's time ran out.
var errLate = errors.New("request timed out")

// timers recycles the timers that bound requests: a request per round trip
// makes them part of every acquisition's cost.
var timers sync.Pool

func getTimer(d time.Duration) *time.Timer {
	if t, _ := timers.Get().(*time.Timer); t != nil {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func putTimer(t *time.Timer) {
	t.Stop() // no stale tick survives Stop since Go 1.23
	timers.Put(t)
}

// waitUntil is wait, also bounded by deadline, past which it returns
// errLate.
func (p *pending[T]) waitUntil(ctx context.Context, deadline time.Time) (T, error) {
	select {
	case r := <-p.ch:
		return r.v, r.err
	default:
	}
	t := getTimer(time.Until(deadline))
	defer putTimer(t)
	var err error
	select {
	case r := <-p.ch:
		return r.v, r.err
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = errLate
	}
	if p.state.CompareAndSwap(running, abandoned) {
		var zero T
		return zero, err
	}
	r := <-p.ch // delivered just now
	return r.v, r.err
}

// do runs the request f, and runs it again after a transient failure (a
// dropped connection, no server reachable), within ctx and the connect
// timeout. f must be safe to repeat.
func do[T any](e *Engine, ctx context.Context, f func() (T, error)) (T, error) {
	return retry(e, ctx, f, false)
}

// probe is do, except that it gives up at once when the engine is refused:
// for Ping, which must tell a dead ensemble at once, whereas a queued
// acquisition rides out a restart within the connect timeout.
func probe[T any](e *Engine, ctx context.Context, f func() (T, error)) (T, error) {
	return retry(e, ctx, f, true)
}

func retry[T any](e *Engine, ctx context.Context, f func() (T, error), fast bool) (T, error) {
	deadline := time.Now().Add(e.connectTimeout)
	backoff := minBackoff
	for {
		v, err := start(e, f, nil).waitUntil(ctx, deadline)
		switch {
		case err == nil, !retryable(err) && !isCtx(err) && err != errLate:
			return v, err
		case ctx.Err() != nil, err == errLate, !time.Now().Before(deadline):
			return v, e.stepErr(ctx, err)
		case fast && e.refused():
			// No server to try again on: say so now, not at the deadline.
			return v, fmt.Errorf("%w: %w", errNoServer, err)
		}
		if perr := e.pause(ctx, deadline, &backoff); perr != nil {
			return v, e.stepErr(ctx, perr)
		}
	}
}

// stepErr explains why a request gave up: the caller's context, Close, or
// the connect timeout. last is the request's last error.
func (e *Engine) stepErr(ctx context.Context, last error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case e.ctx.Err() != nil || errors.Is(last, errClosed):
		return errClosed
	case errors.Is(last, context.DeadlineExceeded), errors.Is(last, errLate):
		return fmt.Errorf("%w within %v", errNoAnswer, e.connectTimeout)
	default:
		return fmt.Errorf("%w within %v: %w", errNoAnswer, e.connectTimeout, last)
	}
}

// pause waits for a connected session, then for the backoff, which it
// doubles, within ctx and deadline (none when zero).
func (e *Engine) pause(ctx context.Context, deadline time.Time, backoff *time.Duration) error {
	var late <-chan time.Time
	if !deadline.IsZero() {
		t := getTimer(time.Until(deadline))
		defer putTimer(t)
		late = t.C
	}
	select {
	case <-e.upChan():
	case <-ctx.Done():
		return ctx.Err()
	case <-e.ctx.Done():
		return errClosed
	case <-late:
		return errLate
	}
	t := getTimer(*backoff)
	defer putTimer(t)
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-e.ctx.Done():
		return errClosed
	case <-late:
		return errLate
	}
	*backoff = min(*backoff*2, maxBackoff)
	return nil
}

// permanent are the failures that another attempt would not change.
var permanent = []error{
	errClosed,
	errLate,
	context.Canceled,
	context.DeadlineExceeded,
	gozk.ErrNoNode,
	gozk.ErrNodeExists,
	gozk.ErrNoAuth,
	gozk.ErrBadVersion,
	gozk.ErrNotEmpty,
	gozk.ErrInvalidACL,
	gozk.ErrAuthFailed,
	gozk.ErrBadArguments,
	gozk.ErrNoChildrenForEphemerals,
	gozk.ErrInvalidPath,
	gozk.ErrInvalidFlags,
	gozk.ErrAPIError,
}

// retryable reports whether err may be transient: the connection dropped
// or no server could be reached, and the request may succeed once the
// client has reconnected.
func retryable(err error) bool {
	for _, p := range permanent {
		if errors.Is(err, p) {
			return false
		}
	}
	return true
}
