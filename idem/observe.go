package idem

import (
	"context"
	"time"
)

// Outcome is what one Begin returned, as an Observer hears it.
type Outcome uint8

const (
	// OutcomeRan: a Ticket for an operation to run.
	OutcomeRan Outcome = iota + 1
	// OutcomeReplayed: a Duplicate of a succeeded operation.
	OutcomeReplayed
	// OutcomeConflict: a Duplicate of an attempt still running.
	OutcomeConflict
	// OutcomeMismatch: a Duplicate whose fingerprint differs.
	OutcomeMismatch
	// OutcomeRefused: fail-closed, the store was unavailable.
	OutcomeRefused
	// OutcomeUnguarded: fail-open, or the gate is disabled; nothing was
	// recorded.
	OutcomeUnguarded
	// OutcomeError: bad input, a closed store, or the caller's context
	// ended.
	OutcomeError
)

var outcomeNames = [...]string{"", "ran", "replayed", "conflict", "mismatch", "refused", "unguarded", "error"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// Observer hears what a gate does, for metrics and traces (package
// telemetry implements it). Its methods are called on the caller's
// goroutine, or the gate's background recorder's for StoreCall; they must
// be quick and must not call the gate.
type Observer interface {
	// BeginStart is called when Begin starts; the context it returns is
	// the one the rest of the Begin (and BeginEnd) sees, for a span.
	BeginStart(ctx context.Context) context.Context
	// BeginEnd is called when Begin returns.
	BeginEnd(ctx context.Context, e BeginEvent)
	// StoreCall is called after each round trip to a store: op is
	// "create", "replace", "remove", "get" or "delete".
	StoreCall(ctx context.Context, store, op string, took time.Duration, err error)
	// Pending is called when the number of outcomes waiting for their
	// store to answer again changes by delta.
	Pending(store string, delta int)
}

// BeginEvent is one Begin's result.
type BeginEvent struct {
	Outcome Outcome
	// Store names the store that decided ("" when none did: unguarded by
	// WithDisabled, or bad input); "local" is the gate's own memory (the
	// local cache, or an attempt of this process).
	Store string
	Took  time.Duration
	Err   error
}

// nopObserver is the observer of a gate without WithObserver.
type nopObserver struct{}

func (nopObserver) BeginStart(ctx context.Context) context.Context                  { return ctx }
func (nopObserver) BeginEnd(context.Context, BeginEvent)                            {}
func (nopObserver) StoreCall(context.Context, string, string, time.Duration, error) {}
func (nopObserver) Pending(string, int)                                             {}
