package locker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Observer is told what a Core does, for metrics and traces: outermost
// acquisitions with their outcome and wait, releases, renewals, and every
// hold from its grant to its end (released or lost, with the cause).
// Engines take one through an option (redis.WithObserver, ...); package
// telemetry implements it with OpenTelemetry. Without an Observer a Core
// does no observation work: no clock reads, no allocations.
//
// Methods run synchronously on the path they observe (the caller's
// goroutine, the renewal loop, an engine's session watcher), some under
// the Core's locks: they must be quick, must not block, and must not call
// back into the Locker.
type Observer interface {
	// AcquireStart is called when an outermost acquisition begins;
	// re-entry is counted in the process and not observed. It returns the
	// context the acquisition runs in, ctx or one derived from it (to
	// carry a span), which AcquireEnd receives.
	AcquireStart(ctx context.Context, a Acquisition) context.Context
	// AcquireEnd is called once the acquisition has its outcome.
	AcquireEnd(ctx context.Context, a Acquisition, r AcquireResult)
	// ReleaseStart and ReleaseEnd surround the round trip of an Unlock
	// that frees the lock. err is the engine's answer; one wrapping
	// ErrLockLost means the hold was already gone (HoldEnd says so too).
	ReleaseStart(ctx context.Context, h HoldInfo) context.Context
	ReleaseEnd(ctx context.Context, h HoldInfo, err error)
	// Renewed is called for each hold of a renewal round trip, with nil
	// or the failure. A failed renewal is retried until the hold's TTL
	// runs out; HoldEnd follows when the hold is lost. Holds that live on
	// a lease or session the engine keeps (etcd, ZooKeeper) have no
	// renewal of their own to report.
	Renewed(h HoldInfo, err error)
	// HoldEnd is called exactly once per granted hold, when it ends:
	// released (cause LostNone) or lost (any other cause). held is the
	// time since the grant.
	HoldEnd(h HoldInfo, held time.Duration, cause LostCause)
}

// Acquisition is one outermost acquisition as an Observer sees it.
type Acquisition struct {
	// Engine is the engine the acquisition runs on; empty for a
	// switcher's, whose result names the engine that answered.
	Engine string
	// Switcher is the switcher a caller acquires through; empty for an
	// engine's own acquisition.
	Switcher string
	Name     string // the lock name
	Owner    string // the owner ID of the Locker
	Wait     bool   // true for Lock, LockCtx, TryLockTimeout; false for TryLock
}

// AcquireResult is the outcome of an Acquisition.
type AcquireResult struct {
	Outcome Outcome
	Engine  string        // the engine that answered last: the granting engine when granted
	Token   uint64        // the fencing token when granted
	Waited  time.Duration // from the start of the acquisition to its outcome
	Err     error         // the error, for OutcomeUnavailable and OutcomeError
}

// HoldInfo identifies one hold to an Observer.
type HoldInfo struct {
	Engine, Name, Owner string
	Token               uint64
}

// Outcome classifies how an acquisition ended. The set is fixed, so that
// it can label metrics.
type Outcome string

// The outcomes of an acquisition.
const (
	OutcomeGranted     Outcome = "granted"     // the lock is held
	OutcomeContended   Outcome = "contended"   // TryLock: another owner holds it
	OutcomeTimeout     Outcome = "timeout"     // the caller's deadline passed while another owner held it
	OutcomeCancelled   Outcome = "cancelled"   // the caller's context was cancelled (or a switch moved the wait)
	OutcomeUnavailable Outcome = "unavailable" // the engine failed or did not answer (ErrUnavailable)
	OutcomeError       Outcome = "error"       // anything else: closed engine, lost hold on re-entry
)

// Classify returns the Outcome of an acquisition that returned ok and
// err, err wrapping the context's error when the caller's context ended
// (as Backend.Acquire and a Handle's raw acquisition report). A caller's cancellation
// wins over an engine that had not answered; a deadline does not, as for
// the switcher's breakers.
func Classify(ok bool, err error) Outcome {
	switch {
	case err == nil && ok:
		return OutcomeGranted
	case err == nil:
		return OutcomeContended
	case errors.Is(err, context.Canceled):
		return OutcomeCancelled
	case errors.Is(err, ErrUnavailable):
		return OutcomeUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	}
	return OutcomeError
}

// LostCause says why a hold ended without Unlock.
type LostCause string

// The causes of a lost hold; LostNone is a hold released by Unlock.
const (
	LostNone     LostCause = ""
	LostExpired  LostCause = "expired"   // renewals failed until the TTL ran out
	LostGone     LostCause = "gone"      // the engine no longer had it (key deleted or expired, taken over)
	LostLeaseEnd LostCause = "lease_end" // a fixed lease (WithLease) ran out
	LostEngine   LostCause = "engine"    // the engine reported it: ZooKeeper session expiry, etcd lease loss
	LostClosed   LostCause = "closed"    // the engine was closed while it was held
)

// CoreOption configures a Core.
type CoreOption func(*Core)

// ObservedBy makes the Core report to o; a nil o observes nothing.
func ObservedBy(o Observer) CoreOption { return func(c *Core) { c.obs = o } }

// ReleaseWait sets how long Unlock waits for the engine's answer (at most
// the lock's release timeout): an engine over a cluster passes its
// ride-through window, so that an Unlock during an election waits for the
// new leader. Default: DefaultReleaseWait (1s); shorter values are raised
// to it.
func ReleaseWait(d time.Duration) CoreOption {
	return func(c *Core) { c.releaseWait = max(d, DefaultReleaseWait) }
}

// holdObs is what an observed hold carries for its Observer.
type holdObs struct {
	core    *Core
	granted atomic.Int64 // monotonic nanoseconds since clockBase at the grant; 0 before
	ended   atomic.Bool  // HoldEnd has been called
}

// clockBase makes monotonic instants fit an atomic integer.
var clockBase = time.Now()

func monoNow() int64 { return int64(time.Since(clockBase)) + 1 }

func (h *Hold) info(engine string) HoldInfo {
	return HoldInfo{Engine: engine, Name: h.Name, Owner: h.Owner, Token: h.Token}
}

// markLost reports cause, then closes Lost, once per hold: whoever wakes
// on Lost finds the loss already counted.
func (h *Hold) markLost(cause LostCause) {
	h.lostOnce.Do(func() {
		h.obs.end(h, cause)
		close(h.lost)
	})
}

// end reports the end of h once; o may be nil (h is not observed).
func (o *holdObs) end(h *Hold, cause LostCause) {
	if o == nil || !o.ended.CompareAndSwap(false, true) {
		return
	}
	var held time.Duration
	if g := o.granted.Load(); g > 0 {
		held = time.Duration(monoNow() - g)
	}
	o.core.obs.HoldEnd(h.info(o.core.engine), held, cause)
}

// renewed reports a renewal result of h, when h is observed.
func (h *Hold) renewed(err error) {
	if h.obs != nil {
		h.obs.core.obs.Renewed(h.info(h.obs.core.engine), err)
	}
}

// lostCause is the cause of a hold the renewal loop gives up on.
func lostCause(err error) LostCause {
	if errors.Is(err, ErrLockLost) {
		return LostGone
	}
	return LostExpired
}

// acquireStart begins observing an acquisition of h; c.obs is not nil.
func (c *Core) acquireStart(ctx context.Context, h *Hold, wait bool) (context.Context, Acquisition, time.Time) {
	h.obs = &holdObs{core: c}
	a := Acquisition{Engine: c.engine, Name: h.Name, Owner: h.Owner, Wait: wait}
	return c.obs.AcquireStart(ctx, a), a, time.Now()
}

// acquireEnd reports the outcome of an acquisition of h that returned ok
// and err.
func (c *Core) acquireEnd(ctx context.Context, a Acquisition, start time.Time, h *Hold, ok bool, err error) {
	r := AcquireResult{Outcome: Classify(ok, err), Engine: c.engine, Waited: time.Since(start)}
	switch r.Outcome {
	case OutcomeGranted:
		r.Token = h.Token
	case OutcomeUnavailable, OutcomeError:
		r.Err = err
	}
	c.obs.AcquireEnd(ctx, a, r)
}

// observeRelease releases h on the engine, reporting the round trip and
// the end of the hold.
func (c *Core) observeRelease(ctx context.Context, h *Hold) error {
	info := h.info(c.engine)
	ctx = c.obs.ReleaseStart(ctx, info)
	err := c.backend.Release(ctx, h)
	c.obs.ReleaseEnd(ctx, info, err)
	if errors.Is(err, ErrLockLost) {
		h.markLost(LostGone)
	} else {
		h.obs.end(h, LostNone) // released, or left to expire on an engine that did not answer
	}
	return err
}
