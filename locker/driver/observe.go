package driver

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// CoreOption configures a Core.
type CoreOption func(*Core)

// ObservedBy makes the Core report to o; a nil o observes nothing.
func ObservedBy(o observe.Observer) CoreOption { return func(c *Core) { c.obs = o } }

// ReleaseWait sets how long Unlock waits for the engine's answer (at most
// the lock's release timeout): an engine over a cluster passes its
// ride-through window, so that an Unlock during an election waits for the
// new leader. Default: DefaultReleaseWait (1s); shorter values are raised
// to it.
func ReleaseWait(d time.Duration) CoreOption {
	return func(c *Core) { c.releaseWait.Timeout = max(d, DefaultReleaseWait) }
}

// RenewChunk sets how many holds one Renew call takes at most (eight times
// that when renewal is late): a backend whose renewal of many holds in one
// call holds up no other request and has no limit per call (PostgreSQL's
// UPDATE, row by row) renews them in fewer, larger calls, at less cost per
// hold. Default: 128, the bound of a Redis script that must not sit long
// in front of an acquisition; smaller values are raised to it.
func RenewChunk(n int) CoreOption { return func(c *Core) { c.renewChunk = max(n, renewChunk) } }

// holdObs is what an observed hold carries for its observe.Observer.
type holdObs struct {
	core    *Core
	granted atomic.Int64 // monotonic nanoseconds since clockBase at the grant; 0 before
	ended   atomic.Bool  // HoldEnd has been called
}

// clockBase makes monotonic instants fit an atomic integer.
var clockBase = time.Now()

func monoNow() int64 { return int64(time.Since(clockBase)) + 1 }

func (h *Hold) info(engine string) observe.HoldInfo {
	return observe.HoldInfo{Engine: engine, Name: h.Name, Owner: h.Owner, Token: h.Token}
}

// markLost reports cause, then closes Lost, once per hold: whoever wakes
// on Lost finds the loss already counted.
func (h *Hold) markLost(cause observe.LostCause) {
	h.lostOnce.Do(func() {
		h.obs.end(h, cause)
		// Before the close: whoever sees Lost closed sees isLost true
		// (an Unlock right after <-Lost() must report ErrLockLost).
		h.isGone.Store(true)
		close(h.lost)
	})
}

// end reports the end of h once; o may be nil (h is not observed).
func (o *holdObs) end(h *Hold, cause observe.LostCause) {
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
func lostCause(err error) observe.LostCause {
	if errors.Is(err, locker.ErrLockLost) {
		return observe.LostGone
	}
	return observe.LostExpired
}

// acquireStart begins observing an acquisition of h; c.obs is not nil.
func (c *Core) acquireStart(ctx context.Context, h *Hold, wait bool) (context.Context, observe.Acquisition, time.Time) {
	h.obs = &holdObs{core: c}
	a := observe.Acquisition{Engine: c.engine, Name: h.Name, Owner: h.Owner, Wait: wait}
	return c.obs.AcquireStart(ctx, a), a, time.Now()
}

// acquireEnd reports the outcome of an acquisition of h that returned ok
// and err.
func (c *Core) acquireEnd(ctx context.Context, a observe.Acquisition, start time.Time, h *Hold, ok bool, err error) {
	r := observe.AcquireResult{Outcome: observe.Classify(ok, err), Engine: c.engine, Waited: time.Since(start)}
	switch r.Outcome {
	case observe.OutcomeGranted:
		r.Token = h.Token
	case observe.OutcomeUnavailable, observe.OutcomeError:
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
	if errors.Is(err, locker.ErrLockLost) {
		h.markLost(observe.LostGone)
	} else {
		h.obs.end(h, observe.LostNone) // released, or left to expire on an engine that did not answer
	}
	return err
}
