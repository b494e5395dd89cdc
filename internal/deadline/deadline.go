// Package deadline bounds requests whose context cannot end cheaply: one
// context with a timer serves every request that starts within a 64th of
// the timeout after it was made, so such a request costs a clock read
// instead of a timer and five allocations, and still ends within the
// timeout.
package deadline

import (
	"context"
	"sync/atomic"
	"time"
)

// Shared gives requests whose context cannot end (a Lock, a Begin on
// context.Background) a deadline of Timeout. The zero value with Timeout
// set is ready to use; Stop ends its latest timer.
type Shared struct {
	Timeout time.Duration
	cur     atomic.Pointer[shared]
}

type shared struct {
	ctx    context.Context
	cancel context.CancelFunc
	until  time.Time // requests that start before then take ctx
}

// Context returns the context of a request that starts now.
func (s *Shared) Context() context.Context {
	now := time.Now()
	if d := s.cur.Load(); d != nil && now.Before(d.until) {
		return d.ctx
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(s.Timeout))
	s.cur.Store(&shared{ctx: ctx, cancel: cancel, until: now.Add(s.Timeout / 64)})
	return ctx
}

// Bound returns the context of a request that starts now on behalf of
// ctx, which ends within Timeout, and the cancel to call when the request
// is done: Context() when ctx is context.Background() (it has no values
// to keep), else Within(ctx, Timeout).
func (s *Shared) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == context.Background() {
		return s.Context(), noCancel
	}
	return Within(ctx, s.Timeout)
}

// Within returns ctx bounded by d: ctx itself when its deadline comes
// first, which spares a timer, else ctx with a deadline d from now.
func Within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, d)
}

func noCancel() {}

// Stop ends the latest context's timer; the earlier ones have ended, or
// end at their deadline.
func (s *Shared) Stop() {
	if d := s.cur.Load(); d != nil {
		d.cancel()
	}
}

// Err is ctx.Err(), or context.DeadlineExceeded once ctx's deadline has
// passed although its timer has not fired yet: on a loaded machine an
// answer to a request the deadline cut short (etcd's "request timed out")
// can come before the timer, and so can the end of a wait bounded by the
// same deadline.
func Err(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
