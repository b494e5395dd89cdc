package locker

import (
	"context"
	"errors"
	"fmt"
)

// HoldContext returns a context derived from ctx that ends when l's
// current hold is lost: Lost closes and the context is cancelled with a
// cause wrapping ErrLockLost (read it with context.Cause). Work that must
// not go on without the lock runs under it. The returned cancel ends the
// context and waits for the goroutine that watches Lost; call it when the
// work is done, before Unlock.
//
// The hold is the one current when HoldContext is called: when l holds
// nothing (Lost is nil), the context is cancelled at once with a cause
// wrapping ErrNotHeld.
func HoldContext(ctx context.Context, l Lease) (context.Context, context.CancelFunc) {
	hctx, cancel := context.WithCancelCause(ctx)
	lost := l.Lost()
	if lost == nil {
		cancel(fmt.Errorf("locker: hold context of %q: %w", l.Name(), ErrNotHeld))
		return hctx, func() {}
	}
	// Read now: after the loss, the hold's accessors describe it no longer
	// once its owner calls Unlock.
	cause := fmt.Errorf("locker: hold of %q on %q (token %d): %w", l.Name(), l.Engine(), l.Token(), ErrLockLost)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-lost:
			cancel(cause)
		case <-hctx.Done(): // ctx ended or the caller cancelled
		}
	}()
	return hctx, func() {
		cancel(nil)
		<-done
	}
}

// WithLock acquires l (LockCtx on ctx), runs fn under a context that ends
// when the hold is lost (HoldContext), and releases l once fn returns,
// even when it panics. fn's context carries ctx's values and deadline.
//
// It returns LockCtx's error when the lock was not acquired (ctx.Err()
// when ctx ended first; fn did not run), and otherwise fn's error joined
// with Unlock's. A hold lost while fn ran makes the result wrap
// ErrLockLost, even when fn returned nil: the work was not covered by the
// lock to its end, and any resource it wrote should have checked the
// fencing token (l.Token(), read inside fn).
func WithLock(ctx context.Context, l Handle, fn func(ctx context.Context) error) (err error) {
	switch {
	case l == nil:
		return fmt.Errorf("%w: WithLock: l is nil", ErrInvalidArgument)
	case fn == nil:
		return fmt.Errorf("%w: WithLock(%q): fn is nil", ErrInvalidArgument, l.Name())
	}
	if err := l.LockCtx(ctx); err != nil {
		return err
	}
	hctx, cancel := HoldContext(ctx, l)
	defer func() {
		cancel()
		err = joinRelease(err, l.Unlock())
	}()
	return fn(hctx)
}

// joinRelease joins the error of the work done under a hold with the
// release's: a loss that both report is said once.
func joinRelease(work, release error) error {
	if release == nil {
		return work
	}
	if errors.Is(work, ErrLockLost) && errors.Is(release, ErrLockLost) {
		return work
	}
	return errors.Join(work, release)
}
