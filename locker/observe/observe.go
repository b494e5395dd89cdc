// Package observe is what an Observer of the engines sees: outermost
// acquisitions with their outcome (Acquisition, AcquireResult, Outcome,
// Classify), releases, renewals, holds at risk and every hold's end with
// its cause (HoldInfo, LostCause). Engines take an Observer through an
// option (redis.WithObserver, ...); package telemetry implements one.
package observe

import (
	"context"
	"errors"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// Observer is told what an engine's driver.Core does, for metrics and
// traces: outermost acquisitions with their outcome and wait, releases,
// renewals, and every hold from its grant to its end (released or lost,
// with the cause). Engines take one through an option (redis.WithObserver,
// ...); package telemetry implements it with OpenTelemetry. Without an
// Observer a Core does no observation work: no clock reads, no
// allocations.
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
	// locker.ErrLockLost means the hold was already gone (HoldEnd says so too).
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
	OutcomeUnavailable Outcome = "unavailable" // the engine failed or did not answer (locker.ErrUnavailable)
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
	case errors.Is(err, locker.ErrUnavailable):
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

// RiskObserver is implemented by an Observer that also wants to know when
// a hold is at risk: the engine failed to keep it alive while its lease
// still runs, so it is lost when the lease runs out unless a retry gets
// through first. That is the moment to stop starting work that a loss
// would leave half done; Lost closing is the moment the lock is gone.
// Package telemetry implements it.
type RiskObserver interface {
	// AtRisk is called when a renewal of h fails while h still lives:
	// left is the time h has before it is lost, err the failure. It is
	// called once per streak of failures (again only after a renewal got
	// through), and always before HoldEnd. It runs on the renewal path:
	// it must be quick and must not block.
	AtRisk(h HoldInfo, left time.Duration, err error)
}
