package locker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orthrus-go/orthrus/internal/deadline"
)

// Front implements Lock, LockCtx, TryLock and TryLockTimeout for one owner
// over two steps the owner supplies, so that every Locker (the engines'
// and the switcher's) keeps the context contract in one place:
//
//   - reenter counts one more hold when the owner already holds the lock;
//   - take makes an outermost acquisition, waiting until ctx is done or not.
//
// Outermost acquisitions of one owner are serialised, so that two
// goroutines sharing a Locker never queue twice; TryLock does not wait for
// another goroutine's acquisition and reports false instead.
type Front struct {
	name    string
	reenter func() (bool, error)
	take    func(ctx context.Context, wait bool) (bool, error)
	turn    chan struct{}
}

// NewFront returns the acquisition methods of the owner of lock name.
func NewFront(name string, reenter func() (bool, error), take func(ctx context.Context, wait bool) (bool, error)) *Front {
	return &Front{name: name, reenter: reenter, take: take, turn: make(chan struct{}, 1)}
}

// Lock blocks until the lock is held.
func (f *Front) Lock() error { return f.LockCtx(context.Background()) }

// LockCtx blocks until the lock is held or ctx is done, when it returns
// ctx.Err() itself, not wrapped, whatever the engine was doing then. Any
// other failure (the engine failed, closed) comes before ctx is done.
func (f *Front) LockCtx(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: LockCtx(%q): nil context", ErrInvalidArgument, f.name)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := f.acquire(ctx, true)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
	}
	return err
}

// TryLock makes one attempt: (false, nil) when another owner holds the lock.
func (f *Front) TryLock() (bool, error) { return f.acquire(context.Background(), false) }

// TryLockTimeout waits at most wait. It returns (false, nil) when the wait
// ran out while another owner held the lock, or while the engine had left
// a request unanswered for less than OutageAfter; when the engine had left
// it unanswered longer, the error wraps ErrUnavailable (and
// context.DeadlineExceeded). A wait of 0 makes one attempt, as TryLock
// does; a negative wait is an error.
func (f *Front) TryLockTimeout(wait time.Duration) (bool, error) {
	switch {
	case wait < 0:
		return false, fmt.Errorf("%w: TryLockTimeout(%q): wait must not be negative, got %v", ErrInvalidArgument, f.name, wait)
	case wait == 0:
		return f.TryLock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ok, err := f.acquire(ctx, true)
	// deadline.Err, not ctx.Err(): on a loaded machine the engine can answer
	// with the deadline passed before ctx's timer has fired.
	if err != nil && deadline.Err(ctx) != nil && errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrClosed) {
		return false, nil // contended until the end
	}
	return ok, err
}

// Acquire is the one path under Lock, LockCtx, TryLock and TryLockTimeout,
// for wrappers such as the switcher that need the engine's own outcome: when
// ctx ends, the error wraps ctx.Err(), and also ErrUnavailable when the
// engine had left its latest request unanswered for OutageAfter (it was
// unreachable, not contended nor merely slow). Callers of LockCtx see
// ctx.Err() alone.
func (f *Front) Acquire(ctx context.Context, wait bool) (bool, error) { return f.acquire(ctx, wait) }

func (f *Front) acquire(ctx context.Context, wait bool) (bool, error) {
	if ok, err := f.reenter(); ok || err != nil {
		return ok, err
	}
	if wait {
		select {
		case f.turn <- struct{}{}:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	} else {
		select {
		case f.turn <- struct{}{}:
		default:
			return false, nil // this owner is already acquiring
		}
	}
	defer func() { <-f.turn }()
	// Another goroutine of this owner may have taken it while we queued.
	if ok, err := f.reenter(); ok || err != nil {
		return ok, err
	}
	return f.take(ctx, wait)
}
