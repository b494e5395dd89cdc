package zkconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/async"
)

var (
	// ErrClosed: Close has begun.
	ErrClosed = errors.New("connection closed")
	// ErrNoAnswer: the ensemble did not answer within the connect timeout.
	ErrNoAnswer = errors.New("no answer from ZooKeeper")
	// ErrNoServer: no server of the ensemble accepts a connection.
	ErrNoServer = errors.New("no ZooKeeper server accepts a connection")
	// ErrNoSession: a Lazy connection has not had a session yet, or has
	// not authenticated it yet.
	ErrNoSession = errors.New("no ZooKeeper session yet")
)

// Backoff between attempts of a request whose connection dropped.
const (
	MinBackoff = 10 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

// answers are the server's answers that another attempt would not change.
var answers = []error{
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

// Answered reports whether err is an answer of the server (no node, bad
// version, no permission...), not a failure to reach it.
func Answered(err error) bool {
	for _, a := range answers {
		if errors.Is(err, a) {
			return true
		}
	}
	return false
}

// Retryable reports whether err may be transient: the connection dropped
// or no server could be reached, and the request may succeed once the
// client has reconnected. Answers, Close and time running out are final.
func Retryable(err error) bool {
	return !Answered(err) && !isCtx(err) && !errors.Is(err, ErrClosed) && !errors.Is(err, async.ErrTimedOut)
}

// isCtx reports whether err is a context's.
func isCtx(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// A request runs on a worker of the connection as an async.Pending:
// go-zookeeper's calls take no context, so the worker lets the caller stop
// waiting, and the request ends on its own, at the latest when Close
// closes the connection.

// Start runs f on a worker. When the caller has stopped waiting by the time
// f returns, orphan, if not nil, gets f's result, to undo what the request
// did. Once Close has begun, f does not run and the result is ErrClosed.
func Start[T any](c *Conn, f func() (T, error), orphan func(T, error)) *async.Pending[T] {
	return start(c, f, orphan, true)
}

// start is Start; gate false lets f run before a Lazy connection is
// ready, for the requests that make it so.
func start[T any](c *Conn, f func() (T, error), orphan func(T, error), gate bool) *async.Pending[T] {
	p := async.NewPending[T]()
	var zero T
	if gate && !isClosed(c.ready) {
		// Not one request on a session without its credentials.
		p.Deliver(zero, ErrNoSession)
		return p
	}
	ok := c.Go(func(context.Context) {
		v, err := f()
		if !p.Deliver(v, err) && orphan != nil {
			orphan(v, err)
		}
	})
	if !ok {
		p.Deliver(zero, ErrClosed)
	}
	return p
}

// Do runs the request f, and runs it again after a transient failure (a
// dropped connection, no server reachable), within ctx and the connect
// timeout. f must be safe to repeat. It returns f's error, ctx.Err(),
// ErrClosed, or ErrNoAnswer (wrapping f's last error) when time ran out.
func Do[T any](ctx context.Context, c *Conn, f func() (T, error)) (T, error) {
	return retry(ctx, c, f, false, true)
}

// Probe is Do, except that it gives up at once with ErrNoServer when the
// connection is Refused: for a health check, which must tell a dead
// ensemble at once, whereas a request may ride out a restart.
func Probe[T any](ctx context.Context, c *Conn, f func() (T, error)) (T, error) {
	return retry(ctx, c, f, true, true)
}

// retry runs f until it succeeds or fails for good, within ctx and the
// connect timeout; fast: see Probe; gate: see start.
func retry[T any](ctx context.Context, c *Conn, f func() (T, error), fast, gate bool) (T, error) {
	deadline := time.Now().Add(c.cfg.ConnectTimeout)
	backoff := MinBackoff
	for {
		v, err := start(c, f, nil, gate).WaitUntil(ctx, deadline)
		switch {
		case err == nil, !Retryable(err) && !isCtx(err) && err != async.ErrTimedOut:
			return v, err
		case ctx.Err() != nil, err == async.ErrTimedOut, !time.Now().Before(deadline):
			return v, c.stepErr(ctx, err)
		case fast && c.Refused():
			// No server to try again on: say so now, not at the deadline.
			return v, fmt.Errorf("%w: %w", ErrNoServer, c.Explain(err))
		}
		ready := c.Up()
		if fast && !isClosed(c.ready) {
			// A Lazy connection before its first session: look again
			// after the backoff rather than at the deadline, as its
			// first dials may be refused meanwhile. The attempts cost
			// nothing: they fail with ErrNoSession before reaching
			// go-zookeeper.
			ready = closedChan
		}
		if perr := c.pause(ctx, deadline, &backoff, ready); perr != nil {
			return v, c.stepErr(ctx, perr)
		}
	}
}

// closedChan is ready at once.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// stepErr explains why a request gave up: the caller's context, Close, or
// the connect timeout. last is the request's last error.
func (c *Conn) stepErr(ctx context.Context, last error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case c.Closing() || errors.Is(last, ErrClosed):
		return ErrClosed
	case errors.Is(last, context.DeadlineExceeded), errors.Is(last, async.ErrTimedOut):
		return fmt.Errorf("%w within %v", ErrNoAnswer, c.cfg.ConnectTimeout)
	default:
		return fmt.Errorf("%w within %v: %w", ErrNoAnswer, c.cfg.ConnectTimeout, last)
	}
}

// GiveUp is the error of a step that failed with err: ctx's error,
// ErrClosed or ErrNoAnswer when it is why, or err itself.
func (c *Conn) GiveUp(ctx context.Context, err error) error {
	if ctx.Err() != nil || c.Closing() || isCtx(err) || errors.Is(err, async.ErrTimedOut) {
		return c.stepErr(ctx, err)
	}
	return err
}

// pause waits for ready (a connected session, say), then for the backoff,
// which it doubles, within ctx and deadline (none when zero).
func (c *Conn) pause(ctx context.Context, deadline time.Time, backoff *time.Duration, ready <-chan struct{}) error {
	var late <-chan time.Time
	if !deadline.IsZero() {
		t := async.StartTimer(time.Until(deadline))
		defer async.StopTimer(t)
		late = t.C
	}
	if err := await(ctx, c, ready, late); err != nil {
		return err
	}
	t := async.StartTimer(*backoff)
	defer async.StopTimer(t)
	if err := await(ctx, c, t.C, late); err != nil {
		return err
	}
	*backoff = min(*backoff*2, maxBackoff)
	return nil
}

// await waits for ready, unless ctx, Close or late come first.
func await[T any](ctx context.Context, c *Conn, ready <-chan T, late <-chan time.Time) error {
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return ErrClosed
	case <-late:
		return async.ErrTimedOut
	}
}

// Call runs f, a request on a connection the caller owns, and waits for it
// or ctx, when it returns ctx.Err(); one attempt, no retries. A request
// abandoned here ends in the background when ZooKeeper answers or the
// caller closes the connection, which fails every request in flight.
func Call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	p := async.NewPending[T]()
	go func() { p.Deliver(f()) }()
	return p.Wait(ctx)
}

// Go runs f on a worker goroutine that Close waits for (an async.Pool's:
// workers outlive their request, so that the next ones do not pay for a
// goroutine and for growing its stack, which go-zookeeper's calls need).
// f's context never ends: the closed client ends go-zookeeper's calls. Go
// reports false, and does not run f, once Close has begun.
func (c *Conn) Go(f func(context.Context)) bool { return c.work.Go(f) }
