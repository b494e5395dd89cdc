package idem

import "errors"

// Sentinel errors of the gate, beside the locker sentinels it also wraps
// (locker.ErrUnavailable when a store cannot be reached or times out,
// locker.ErrInvalidArgument for a bad option or argument). Match them with
// errors.Is.
var (
	// ErrNotOwner is returned by Done and Succeed when the record is no
	// longer this attempt's: it expired (and may now belong to a newer
	// attempt), or an operator deleted it. Nothing was written.
	ErrNotOwner = errors.New("idem: record no longer belongs to this attempt")
	// ErrDone is returned by a second Done or Succeed on a ticket whose
	// outcome the store has already recorded.
	ErrDone = errors.New("idem: ticket already done")
	// ErrPending is returned by Done and Succeed when the store did not
	// answer and the gate keeps the outcome to write it when the store
	// answers again (WithPending). The ticket is done; see Gate.Close.
	ErrPending = errors.New("idem: outcome pending: it is written when the store answers again")
)
