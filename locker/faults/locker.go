package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// NewLocker returns a new owner's Locker for name. Its holds are the inner
// engine's, one inner Locker per outermost acquisition (with the same owner
// ID), so a hold left behind on the engine never meets the owner's next one.
// Re-entry is counted in the wrapper and never reaches the engine.
func (e *Engine) NewLocker(name string, opts ...locker.Option) (locker.Handle, error) {
	st, opts, err := e.prepareOwner(name, opts)
	if err != nil {
		return nil, err
	}
	return e.newFaultLocker(name, st, func() (locker.Handle, error) { return e.inner.NewLocker(name, opts...) }), nil
}

// prepareOwner validates a new owner's name and options and pins its owner
// ID, so that each inner Locker of the owner has it.
func (e *Engine) prepareOwner(name string, opts []locker.Option) (locker.Settings, []locker.Option, error) {
	if err := locker.ValidateName(name); err != nil {
		return locker.Settings{}, nil, err
	}
	st, err := locker.ResolveFor(e.name, e.MinTTL(), opts...)
	if err != nil {
		return locker.Settings{}, nil, err
	}
	if e.isClosed() {
		return locker.Settings{}, nil, fmt.Errorf("%s: %w", e.name, locker.ErrClosed)
	}
	return st, append(append([]locker.Option(nil), opts...), locker.WithOwner(st.Owner)), nil
}

func (e *Engine) newFaultLocker(name string, st locker.Settings, newInner func() (locker.Handle, error)) *faultLocker {
	l := &faultLocker{e: e, name: name, st: st, newInner: newInner}
	l.Front = locker.NewFront(name, l.reenter, l.take)
	return l
}

// faultLocker is one owner's Locker through the wrapper.
type faultLocker struct {
	*locker.Front
	e        *Engine
	name     string
	st       locker.Settings
	newInner func() (locker.Handle, error) // a fresh inner Locker of the owner

	// For a side of a read-write lock, set once before use: check refuses
	// an acquisition (an upgrade).
	check func() error

	mu    sync.Mutex
	count int
	cur   *hold
}

var (
	_ locker.Locker = (*faultLocker)(nil)
	_ locker.Lease  = (*faultLocker)(nil)
)

// hold is one outermost hold through the wrapper, over one inner hold.
type hold struct {
	l        *faultLocker
	inner    locker.Handle
	token    uint64
	lost     chan struct{}
	lostOnce sync.Once
	done     chan struct{} // closed by claim: stops the Lost watcher

	// Guarded by Engine.mu.
	ended  bool
	expiry func() bool // stops the pending expiry; nil when none
}

func (h *hold) markLost() { h.lostOnce.Do(func() { close(h.lost) }) }

func (h *hold) isLost() bool {
	select {
	case <-h.lost:
		return true
	default:
		return false
	}
}

// acquirer is the raw acquisition of the Lockers of this module
// (locker.Front.Acquire).
type acquirer interface {
	Acquire(ctx context.Context, wait bool) (bool, error)
}

// take makes the outermost acquisition through the faults.
func (l *faultLocker) take(ctx context.Context, wait bool) (bool, error) {
	e := l.e
	if l.check != nil {
		if err := l.check(); err != nil {
			return false, err
		}
	}
	if err := e.enter(ctx, fmt.Sprintf("acquire %q", l.name), true); err != nil {
		return false, err
	}
	in, err := l.newInner()
	if err != nil {
		return false, err
	}
	for {
		cctx, done := e.startCall(ctx)
		ok, err := acquire(cctx, in, wait)
		interrupted := cctx.Err() != nil // before done, which cancels cctx
		done()
		if err != nil && ctx.Err() == nil && interrupted {
			// A fault started while the engine had the request: the request
			// is lost with the engine. Fail, hang or go again as it says.
			if err := e.enter(ctx, fmt.Sprintf("acquire %q", l.name), true); err != nil {
				return false, err
			}
			continue
		}
		if err != nil || !ok {
			return false, err
		}
		break
	}
	h := &hold{l: l, inner: in, token: in.Token(), lost: make(chan struct{}), done: make(chan struct{})}
	if !e.register(h) {
		_ = in.Unlock()
		return false, fmt.Errorf("%s: acquire %q: %w", e.name, l.name, locker.ErrClosed)
	}
	l.mu.Lock()
	l.cur, l.count = h, 1
	l.mu.Unlock()
	return true, nil
}

func acquire(ctx context.Context, in locker.Locker, wait bool) (bool, error) {
	if a, ok := in.(acquirer); ok {
		return a.Acquire(ctx, wait)
	}
	if !wait {
		return in.TryLock()
	}
	err := in.LockCtx(ctx)
	return err == nil, err
}

// LockCtx returns ctx.Err() itself when ctx ends, as the Locker contract
// says, also when the engine hung and Acquire says so.
func (l *faultLocker) LockCtx(ctx context.Context) error {
	err := l.Front.LockCtx(ctx)
	if err != nil && ctx != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Lock blocks until the lock is held.
func (l *faultLocker) Lock() error { return l.LockCtx(context.Background()) }

// TryLockTimeout reports (false, nil) when the wait ran out while another
// owner held the lock, and an error wrapping locker.ErrUnavailable when it
// ran out because the engine did not answer.
func (l *faultLocker) TryLockTimeout(wait time.Duration) (bool, error) {
	if wait <= 0 {
		return l.Front.TryLockTimeout(wait) // refuses it
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ok, err := l.Front.Acquire(ctx, true)
	if err != nil && ctx.Err() != nil && !errors.Is(err, locker.ErrUnavailable) {
		return false, nil
	}
	return ok, err
}

func (l *faultLocker) reenter() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return false, nil
	}
	if l.cur.isLost() {
		return false, fmt.Errorf("%s: re-enter %q: %w (Unlock it first)", l.e.name, l.name, locker.ErrLockLost)
	}
	l.count++
	return true, nil
}

// Unlock releases one hold. The last one goes to the engine through the
// faults, waiting at most locker.DefaultReleaseWait: when it does not get
// through, the error wraps locker.ErrUnavailable and the hold stays on the
// engine until its TTL runs out.
func (l *faultLocker) Unlock() error { return l.ReleaseWithin(locker.DefaultReleaseWait, nil) }

// ReleaseWithin is Unlock for a caller that waits at most wait (and the
// release timeout), or until done closes, as locker.Releaser.
func (l *faultLocker) ReleaseWithin(wait time.Duration, done <-chan struct{}) error {
	e := l.e
	l.mu.Lock()
	h := l.cur
	if h == nil {
		l.mu.Unlock()
		return fmt.Errorf("%s: unlock %q: %w", e.name, l.name, locker.ErrNotHeld)
	}
	l.count--
	if l.count > 0 {
		l.mu.Unlock()
		if h.isLost() {
			return fmt.Errorf("%s: unlock %q: %w", e.name, l.name, locker.ErrLockLost)
		}
		return nil
	}
	l.cur = nil
	l.mu.Unlock()

	if e.isClosed() {
		return fmt.Errorf("%s: unlock %q: %w", e.name, l.name, locker.ErrClosed)
	}
	if !e.claim(h) { // expired by the wrapper
		return fmt.Errorf("%s: unlock %q: %w", e.name, l.name, locker.ErrLockLost)
	}
	if h.isLost() { // lost by the engine: the inner Locker says so
		return h.inner.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(wait, l.st.ReleaseTimeout))
	defer cancel()
	if done != nil { // a test tool: a goroutine for the call is fine
		go func() {
			select {
			case <-done:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	if err := e.enter(ctx, fmt.Sprintf("unlock %q", l.name), false); err != nil {
		e.linger(h)
		return err
	}
	return locker.Release(ctx, h.inner)
}

func (l *faultLocker) Name() string { return l.name }

// held returns the current hold, nil when none or lost.
func (l *faultLocker) held() *hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil || l.cur.isLost() {
		return nil
	}
	return l.cur
}

func (l *faultLocker) Token() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return 0
	}
	return l.cur.token
}

func (l *faultLocker) Engine() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return ""
	}
	return l.e.name
}

func (l *faultLocker) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return nil
	}
	return l.cur.lost
}
