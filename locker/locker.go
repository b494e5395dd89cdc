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
	// NewRWLock and NewSemaphore return the rest of the lock family.
	Family
	// Ping reports whether the engine's server answers; its errors wrap
	// ErrUnavailable or ErrClosed.
	Ping(ctx context.Context) error
	// Close releases the holds still held, stops every goroutine the engine
	// started and makes later calls return ErrClosed. It never closes a client
	// the caller passed in.
	Close() error
}

// RWLock is one owner's read-write lock on a name: many owners may hold the
// read side at once, or one owner the write side. Both sides re-enter and
// count, as a Locker does. The owner may take the read side while it holds
// the write side (a downgrade: release the write side after and the read
// hold stays); taking the write side while holding only the read side is
// refused at once with ErrUpgrade, never a deadlock. A mutex, a read-write
// lock and a semaphore of the same name are independent of each other.
type RWLock interface {
	// ReadLock is the shared side.
	ReadLock() Handle
	// WriteLock is the exclusive side.
	WriteLock() Handle
}

// Semaphore is a named set of permits shared by every owner that opens it
// with the same count. Each acquisition takes n permits at once, all or
// none, as one hold: a Handle whose Unlock returns them, whose Lost closes
// when they expire under their holder, and whose Token fences like a lock's.
type Semaphore interface {
	// Name is the semaphore name given to NewSemaphore.
	Name() string
	// Acquire waits until n permits are free and takes them, or returns
	// ctx.Err() leaving nothing behind.
	Acquire(ctx context.Context, n int) (Handle, error)
	// TryAcquire makes one attempt, like TryLock: ok is false (and h nil)
	// when fewer than n permits are free; err is non-nil only for a failure.
	TryAcquire(n int) (h Handle, ok bool, err error)
	// NewPermit returns a new owner's Handle on n permits, not yet taken:
	// its Lock, LockCtx, TryLock and TryLockTimeout take them (re-entering
	// counts the hold, it takes no more permits) and Unlock returns them.
	// Acquire and TryAcquire are shorthands over it.
	NewPermit(n int) (Handle, error)
}

// Family is implemented by engines (and the switcher) that offer the lock
// family beside the mutex.
type Family interface {
	// NewRWLock returns a new owner's read-write lock on name.
	NewRWLock(name string, opts ...Option) (RWLock, error)
	// NewSemaphore returns a semaphore of permits permits on name. The
	// engine stores the count with the semaphore: the first acquisition of
	// a Semaphore whose count differs from the stored one fails with
	// ErrPermitsMismatch; after that, acquisitions honour the stored count,
	// which an operator may change (lockctl).
	NewSemaphore(name string, permits int, opts ...Option) (Semaphore, error)
}
