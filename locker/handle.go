package locker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/internal/deadline"
)

// Grant is one outermost hold as a Handle pins it: what the acquisition
// step given to NewHandle returns. The Handle reads Token, Engine and Lost
// from it while it holds it, and ends it once, at its last Unlock.
type Grant interface {
	Token() uint64
	Engine() string
	Lost() <-chan struct{}
	// Unlock ends the hold, waiting for the engine's answer as long as a
	// Handle's Unlock says; ReleaseWithin ends it waiting at most wait, or
	// until done closes (nil: never), as Release does.
	Unlock() error
	ReleaseWithin(wait time.Duration, done <-chan struct{}) error
}

// NewHandle returns one owner's Handle on the lock name whose outermost
// acquisitions take makes. The Handle keeps everything else, once for
// every engine and wrapper: counted re-entry (a lost hold is not
// re-entered), the pinned Grant, Unlock, the Lease accessors and the
// context contract of Lock, LockCtx, TryLock and TryLockTimeout. It runs
// one outermost acquisition of the owner at a time, so that two goroutines
// sharing the Handle never queue twice; TryLock does not wait for another
// goroutine's acquisition and reports false instead.
//
// take returns the grant, (nil, nil) when another owner holds the lock and
// wait is false, or an error, raw: once ctx ends, one wrapping ctx.Err()
// (and ErrUnavailable when the engine had not answered for driver.OutageAfter).
// label starts the Handle's errors: the engine's name, "switcher".
func NewHandle(label, name string, take func(ctx context.Context, wait bool) (Grant, error)) Handle {
	return &handle{label: label, name: name, take: take}
}

// Take makes l's outermost acquisition for a wrapper that owns l alone
// (the switcher's Handle on one engine) and pins the grant: l's re-entry
// count and its one-at-a-time rule are the wrapper's own, checked once
// there, not again in l. It returns nil and the raw error (see NewHandle)
// when not granted. The grant is l itself at a count of one, so that l's
// siblings (the other side of a read-write lock) see the hold; release it
// through the grant.
func Take(ctx context.Context, l Handle, wait bool) (Grant, error) {
	if h, ok := l.(interface {
		takeAlone(ctx context.Context, wait bool) (Grant, error)
	}); ok {
		return h.takeAlone(ctx, wait)
	}
	if ok, err := acquire(ctx, l, wait); !ok {
		return nil, err
	}
	return foreign{l}, nil
}

// GrantOf returns the grant l holds now: nil when l holds nothing, has
// lost its hold, or was not made by NewHandle.
func GrantOf(l Handle) Grant {
	if h, ok := l.(interface{ current() Grant }); ok {
		return h.current()
	}
	return nil
}

// handle is the one Handle of this module (see NewHandle).
type handle struct {
	label, name string
	listName    bool // name is a MultiLock's list, quoted already
	take        func(ctx context.Context, wait bool) (Grant, error)

	mu    sync.Mutex
	count int
	cur   Grant         // the pinned hold; nil when not held
	busy  bool          // an outermost acquisition is under way
	free  chan struct{} // made by the first goroutine that waits for busy; closed when busy ends
}

var _ Handle = (*handle)(nil)

func (h *handle) quoted() string {
	if h.listName {
		return h.name
	}
	return strconv.Quote(h.name)
}

// Lock blocks until the lock is held.
func (h *handle) Lock() error { return h.LockCtx(context.Background()) }

// LockCtx blocks until the lock is held or ctx is done, when it returns
// ctx.Err() itself, not wrapped, whatever the engine was doing then. Any
// other failure (the engine failed, closed) comes before ctx is done.
func (h *handle) LockCtx(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: LockCtx(%s): nil context", ErrInvalidArgument, h.quoted())
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := h.acquire(ctx, true)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
	}
	return err
}

// TryLock makes one attempt: (false, nil) when another owner holds the lock.
func (h *handle) TryLock() (bool, error) { return h.acquire(context.Background(), false) }

// TryLockTimeout waits at most wait. It returns (false, nil) when the wait
// ran out while another owner held the lock, or while the engine had left
// a request unanswered for less than driver.OutageAfter; when the engine had left
// it unanswered longer, the error wraps ErrUnavailable (and
// context.DeadlineExceeded). A wait of 0 makes one attempt, as TryLock
// does; a negative wait is an error.
func (h *handle) TryLockTimeout(wait time.Duration) (bool, error) {
	switch {
	case wait < 0:
		return false, fmt.Errorf("%w: TryLockTimeout(%s): wait must not be negative, got %v", ErrInvalidArgument, h.quoted(), wait)
	case wait == 0:
		return h.TryLock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ok, err := h.acquire(ctx, true)
	// deadline.Err, not ctx.Err(): on a loaded machine the engine can answer
	// with the deadline passed before ctx's timer has fired.
	if err != nil && deadline.Err(ctx) != nil && errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrClosed) {
		return false, nil // contended until the end
	}
	return ok, err
}

// Acquire is the one path under Lock, LockCtx, TryLock and TryLockTimeout,
// for wrappers that need the engine's own outcome (MultiLock, a breaker):
// when ctx ends, the error wraps ctx.Err(), and also ErrUnavailable when
// the engine had left its latest request unanswered for driver.OutageAfter (it
// was unreachable, not contended nor merely slow). Callers of LockCtx see
// ctx.Err() alone.
func (h *handle) Acquire(ctx context.Context, wait bool) (bool, error) { return h.acquire(ctx, wait) }

func (h *handle) acquire(ctx context.Context, wait bool) (bool, error) {
	if done, ok, err := h.enter(ctx, wait); done {
		return ok, err
	}
	g, err := h.take(ctx, wait)
	if err != nil {
		g = nil
	}
	h.mu.Lock()
	if g != nil {
		h.cur, h.count = g, 1
	}
	h.busy = false
	if h.free != nil {
		close(h.free)
		h.free = nil
	}
	h.mu.Unlock()
	return g != nil, err
}

// enter re-enters a hold the owner has, or makes this goroutine the one
// whose outermost acquisition is under way: done reports the former (or a
// failure, or a TryLock that found another goroutine acquiring) with its
// outcome.
func (h *handle) enter(ctx context.Context, wait bool) (done, ok bool, err error) {
	for {
		h.mu.Lock()
		switch {
		case h.cur != nil:
			err := h.reenterLocked()
			h.mu.Unlock()
			return true, err == nil, err
		case !h.busy:
			h.busy = true
			h.mu.Unlock()
			return false, false, nil
		case !wait:
			h.mu.Unlock()
			return true, false, nil // this owner is already acquiring
		}
		if h.free == nil {
			h.free = make(chan struct{})
		}
		free := h.free
		h.mu.Unlock()
		select {
		case <-free: // look again: it may hold the lock now
		case <-ctx.Done():
			return true, false, ctx.Err()
		}
	}
}

// reenterLocked counts one more hold of h.cur, unless it is lost.
func (h *handle) reenterLocked() error {
	if isLost(h.cur) {
		return fmt.Errorf("%s: re-enter %s: %w (Unlock it first)", h.label, h.quoted(), ErrLockLost)
	}
	h.count++
	return nil
}

// takeAlone is Take's path: the outermost acquisition without enter.
func (h *handle) takeAlone(ctx context.Context, wait bool) (Grant, error) {
	g, err := h.take(ctx, wait)
	if g == nil || err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.cur, h.count = g, 1
	h.mu.Unlock()
	return h, nil
}

// current is GrantOf's path.
func (h *handle) current() Grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil || isLost(h.cur) {
		return nil
	}
	return h.cur
}

// isLost reports whether g's hold has been lost, without the goroutine a
// MultiLock's Lost starts.
func isLost(g Grant) bool {
	if m, ok := g.(*multiGrant); ok {
		return m.lostNow()
	}
	select {
	case <-g.Lost():
		return true
	default:
		return false
	}
}

// Unlock releases one hold; the last one ends the grant on the engine,
// whose answer it waits for at most driver.DefaultReleaseWait (or the engine's
// ride-through window), leaving the rest to the background. It returns
// ErrNotHeld without a hold and ErrLockLost after a loss.
func (h *handle) Unlock() error { return h.release(true, 0, nil, nil) }

// ReleaseWithin is Unlock for a caller that waits for the engine's answer
// at most wait (never past the release timeout), or until done closes
// (nil: never); past that the release goes on in the background and the
// error wraps ErrUnavailable.
func (h *handle) ReleaseWithin(wait time.Duration, done <-chan struct{}) error {
	return h.release(false, wait, done, nil)
}

// ReleaseCtx is ReleaseWithin for a caller that waits at most wait or
// until ctx ends: an engine that honours deadlines releases on the
// caller's goroutine, under ctx, where a done channel needs a worker.
func (h *handle) ReleaseCtx(ctx context.Context, wait time.Duration) error {
	return h.release(false, wait, nil, ctx)
}

// release ends one hold: by Unlock (unlock), or within wait and done, or
// within wait and ctx when ctx is not nil.
func (h *handle) release(unlock bool, wait time.Duration, done <-chan struct{}, ctx context.Context) error {
	h.mu.Lock()
	g := h.cur
	if g == nil {
		h.mu.Unlock()
		return fmt.Errorf("%s: unlock %s: %w", h.label, h.quoted(), ErrNotHeld)
	}
	h.count--
	if h.count > 0 {
		lost := isLost(g)
		h.mu.Unlock()
		if lost {
			return fmt.Errorf("%s: unlock %s: %w", h.label, h.quoted(), ErrLockLost)
		}
		return nil
	}
	h.cur = nil
	h.mu.Unlock()
	if unlock {
		return g.Unlock()
	}
	if ctx != nil {
		if r, ok := g.(ctxReleaser); ok {
			return r.ReleaseCtx(ctx, wait)
		}
		done = ctx.Done()
	}
	return g.ReleaseWithin(wait, done)
}

// Name is the lock name given to NewLocker.
func (h *handle) Name() string { return h.name }

// Token is the fencing token of the current hold; 0 when not held.
func (h *handle) Token() uint64 {
	if g := h.pinned(); g != nil {
		return g.Token()
	}
	return 0
}

// Engine names the engine that granted the current hold; "" when not held.
func (h *handle) Engine() string {
	if g := h.pinned(); g != nil {
		return g.Engine()
	}
	return ""
}

// Lost is closed when the current hold is lost without Unlock; nil when
// not held.
func (h *handle) Lost() <-chan struct{} {
	if g := h.pinned(); g != nil {
		return g.Lost()
	}
	return nil
}

// pinned returns the current grant, lost or not; nil when not held.
func (h *handle) pinned() Grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur
}

// releaser is the bounded release of the Handles this module returns.
type releaser interface {
	ReleaseWithin(wait time.Duration, done <-chan struct{}) error
}

// ctxReleaser is the release bounded by a context of the Handles and
// Grants this module returns (engines on locker/driver): see ReleaseCtx.
type ctxReleaser interface {
	ReleaseCtx(ctx context.Context, wait time.Duration) error
}

// acquirer is the raw acquisition of the Handles this module returns.
type acquirer interface {
	Acquire(ctx context.Context, wait bool) (bool, error)
}

// Release releases one hold of l, waiting for the engine's answer until
// ctx is done (at most the release timeout), through its bounded path
// when it has one, and otherwise with Unlock.
func Release(ctx context.Context, l Locker) error {
	if ctx == nil {
		return fmt.Errorf("%w: Release: nil context", ErrInvalidArgument)
	}
	if r, ok := l.(ctxReleaser); ok {
		return r.ReleaseCtx(ctx, math.MaxInt64)
	}
	return releaseWithin(l, math.MaxInt64, ctx.Done())
}

// releaseWithin releases one hold of l through its bounded path when it
// has one.
func releaseWithin(l Locker, wait time.Duration, done <-chan struct{}) error {
	if r, ok := l.(releaser); ok {
		return r.ReleaseWithin(wait, done)
	}
	return l.Unlock()
}

// acquire acquires l through its raw path when it has one, and otherwise
// through LockCtx (wait) or TryLock.
func acquire(ctx context.Context, l Locker, wait bool) (bool, error) {
	if a, ok := l.(acquirer); ok {
		return a.Acquire(ctx, wait)
	}
	if wait {
		err := l.LockCtx(ctx)
		return err == nil, err
	}
	return l.TryLock()
}

// foreign is the Grant of a Handle not made by NewHandle, which Take
// acquired through its own methods.
type foreign struct{ Handle }

func (f foreign) ReleaseWithin(wait time.Duration, done <-chan struct{}) error {
	return releaseWithin(f.Handle, wait, done)
}
