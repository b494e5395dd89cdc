package locker

import (
	"context"
	"time"
)

// Locker is one owner's handle on one named distributed lock.
//
// Calls on the same Locker re-enter and count: each successful Lock, TryLock,
// TryLockTimeout or LockCtx must be matched by one Unlock, and the lock is
// freed when the count returns to zero. Two Lockers for the same name exclude
// each other, even in one process. A Locker is safe for concurrent use.
type Locker interface {
	// Lock blocks until the lock is held.
	Lock() error
	// TryLock makes one attempt and does not wait: (false, nil) when another
	// owner holds the lock.
	TryLock() (bool, error)
	// TryLockTimeout waits at most wait for the lock: (false, nil) when the wait
	// ran out while another owner held it.
	TryLockTimeout(wait time.Duration) (bool, error)
	// LockCtx blocks until the lock is held or ctx is done. On failure it
	// returns ctx.Err() and leaves nothing behind: no waiter, no key, no
	// goroutine, no subscription.
	LockCtx(ctx context.Context) error
	// Unlock releases one hold. It returns ErrNotHeld without a hold and
	// ErrLockLost when the hold ended without Unlock (expiry, session loss).
	Unlock() error
}

// Lease is implemented by every Locker this module returns.
type Lease interface {
	// Name is the lock name given to NewLocker.
	Name() string
	// Token is the fencing token of the current hold; 0 when not held.
	// Tokens of one name on one engine increase with every grant.
	Token() uint64
	// Engine is the name of the engine that granted the current hold; "" when
	// not held.
	Engine() string
	// Lost is closed when the current hold is lost without Unlock (expiry,
	// session loss, key deleted). It is nil, and so never ready, when not held.
	Lost() <-chan struct{}
}

// Handle is what NewLocker returns: one owner's Locker whose current hold
// reads as a Lease (Token, Engine, Lost) without a type assertion.
type Handle interface {
	Locker
	Lease
}

// Engine is implemented by each backend (and by the switcher).
type Engine interface {
	// Name identifies the engine in Lease.Engine, logs and configuration.
	Name() string
	// NewLocker returns a new owner's Handle on the named lock.
	NewLocker(name string, opts ...Option) (Handle, error)
	// Ping reports whether the engine's server answers; its errors wrap
	// ErrUnavailable or ErrClosed.
	Ping(ctx context.Context) error
	// Close releases the holds still held, stops every goroutine the engine
	// started and makes later calls return ErrClosed. It never closes a client
	// the caller passed in.
	Close() error
}
