package faults

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
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
	return e.newFaultLocker(name, st, func() (locker.Handle, error) { return e.inner.NewLocker(name, opts...) }).h, nil
}

// prepareOwner validates a new owner's name and options and pins its owner
// ID, so that each inner Locker of the owner has it.
func (e *Engine) prepareOwner(name string, opts []locker.Option) (locker.Settings, []locker.Option, error) {
	if err := driver.ValidateName(name); err != nil {
		return locker.Settings{}, nil, err
	}
	st, err := driver.ResolveFor(e.name, e.MinTTL(), opts...)
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
	l.h = locker.NewHandle(e.name, name, l.take)
	return l
}

// faultLocker makes the outermost acquisitions of one owner's Handle (h)
// through the wrapper; the Handle counts re-entry and pins the grant, a
// hold.
type faultLocker struct {
	h        locker.Handle
	e        *Engine
	name     string
	st       locker.Settings
	newInner func() (locker.Handle, error) // a fresh inner Locker of the owner

	// For a side of a read-write lock, set once before use: check refuses
	// an acquisition (an upgrade).
	check func() error
}

// hold is one outermost hold through the wrapper, over one inner hold.
type hold struct {
	l        *faultLocker
	inner    locker.Grant
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

// take makes the outermost acquisition through the faults, on a fresh
// inner Handle.
func (l *faultLocker) take(ctx context.Context, wait bool) (locker.Grant, error) {
	e := l.e
	if l.check != nil {
		if err := l.check(); err != nil {
			return nil, err
		}
	}
	if err := e.enter(ctx, fmt.Sprintf("acquire %q", l.name), true); err != nil {
		return nil, err
	}
	in, err := l.newInner()
	if err != nil {
		return nil, err
	}
	var g locker.Grant
	for {
		cctx, done := e.startCall(ctx)
		g, err = locker.Take(cctx, in, wait)
		interrupted := cctx.Err() != nil // before done, which cancels cctx
		done()
		if err != nil && ctx.Err() == nil && interrupted {
			// A fault started while the engine had the request: the request
			// is lost with the engine. Fail, hang or go again as it says.
			if err := e.enter(ctx, fmt.Sprintf("acquire %q", l.name), true); err != nil {
				return nil, err
			}
			continue
		}
		if g == nil {
			return nil, err
		}
		break
	}
	h := &hold{l: l, inner: g, token: g.Token(), lost: make(chan struct{}), done: make(chan struct{})}
	if !e.register(h) {
		_ = g.Unlock()
		return nil, fmt.Errorf("%s: acquire %q: %w", e.name, l.name, locker.ErrClosed)
	}
	return h, nil
}

// Unlock ends the hold on the engine through the faults, waiting at most
// driver.DefaultReleaseWait: when it does not get through, the error wraps
// locker.ErrUnavailable and the hold stays on the engine until its TTL
// runs out.
func (h *hold) Unlock() error { return h.ReleaseWithin(driver.DefaultReleaseWait, nil) }

// ReleaseWithin is Unlock for a caller that waits at most wait (and the
// release timeout), or until done closes.
func (h *hold) ReleaseWithin(wait time.Duration, done <-chan struct{}) error {
	l, e := h.l, h.l.e
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
	return h.inner.ReleaseWithin(math.MaxInt64, ctx.Done())
}

// held returns the current hold, nil when none or lost.
func (l *faultLocker) held() *hold {
	h, _ := locker.GrantOf(l.h).(*hold)
	return h
}

func (h *hold) Token() uint64 { return h.token }

func (h *hold) Engine() string { return h.l.e.name }

func (h *hold) Lost() <-chan struct{} { return h.lost }
