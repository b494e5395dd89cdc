package locker

import (
	"fmt"
	"time"
)

// maxWeight is the heaviest weight WithWeight takes; the lightest is 1.
const maxWeight = 10

// maxOwnerLen keeps owner IDs small enough for every engine's key or node name.
const maxOwnerLen = 256

// Option configures a Locker. Options validate their value and make NewLocker
// fail with an error wrapping ErrInvalidArgument that names the option.
type Option func(*Settings) error

// Settings is the resolved configuration of one Locker, as engines see it:
// each Option sets its fields, and driver.Resolve applies the options over
// the defaults. Option's signature makes it exported.
type Settings struct {
	// Owner identifies the Locker's owner; unique per Locker by default.
	Owner string
	// TTL is how long a hold lives without renewal.
	TTL time.Duration
	// Renew is true when a watchdog renews the hold every TTL/3 while held,
	// false for a fixed lease (WithLease).
	Renew bool
	// ReleaseTimeout bounds a release on the engine; Unlock waits for it
	// at most driver.DefaultReleaseWait.
	ReleaseTimeout time.Duration
	// Delay is the lock delay (WithLockDelay): how long the name stays
	// barred after a hold of it ends without Unlock. 0: none.
	Delay time.Duration
	// Weight ranks the Locker's waits among a name's waiters (WithWeight):
	// 1 to 10, heavier first.
	Weight int
}

// WithTTL sets the TTL of a renewed hold: the watchdog extends it every ttl/3
// while the Locker holds it, so a dead owner's hold ends within ttl.
// Default: 30s (driver.DefaultTTL). WithTTL and WithLease override each
// other; the last one wins.
func WithTTL(ttl time.Duration) Option {
	return func(s *Settings) error {
		if ttl <= 0 {
			return fmt.Errorf("%w: WithTTL(%v): ttl must be positive", ErrInvalidArgument, ttl)
		}
		s.TTL, s.Renew = ttl, true
		return nil
	}
}

// WithLease gives every hold a fixed lease d with no renewal: the hold ends d
// after it was granted, Lost closes then, and a later Unlock returns
// ErrLockLost.
func WithLease(d time.Duration) Option {
	return func(s *Settings) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithLease(%v): lease must be positive", ErrInvalidArgument, d)
		}
		s.TTL, s.Renew = d, false
		return nil
	}
}

// WithOwner sets the owner ID explicitly, for instance to a job or request ID
// that an operator recognises. Two Lockers with the same owner ID are still two
// owners: re-entry is counted per Locker. Default: host:pid:random.
func WithOwner(id string) Option {
	return func(s *Settings) error {
		switch {
		case id == "":
			return fmt.Errorf("%w: WithOwner: id is empty", ErrInvalidArgument)
		case len(id) > maxOwnerLen:
			return fmt.Errorf("%w: WithOwner: id is %d bytes, over the limit of %d", ErrInvalidArgument, len(id), maxOwnerLen)
		}
		s.Owner = id
		return nil
	}
}

// WithReleaseTimeout bounds how long a release may take on the engine:
// Unlock waits for it at most 1s (driver.DefaultReleaseWait) or this timeout,
// whichever is shorter, and leaves the rest in the background.
// Default: 5s (driver.DefaultReleaseTimeout).
func WithReleaseTimeout(d time.Duration) Option {
	return func(s *Settings) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithReleaseTimeout(%v): timeout must be positive", ErrInvalidArgument, d)
		}
		s.ReleaseTimeout = d
		return nil
	}
}

// WithLockDelay sets the lock delay d: after a hold ends without Unlock
// (its TTL or fixed lease ran out because its owner died, was paused or
// was cut off; a ZooKeeper session was lost; an operator forced it open
// on ZooKeeper), the name is not granted again for d. Waiters wait it out,
// with no error; an Unlock frees the name at once, as without a delay.
// The holder itself still loses the hold at its TTL (Lost closes then), so
// a holder that is alive but cut off stops d before anyone else may start.
//
// The delay makes it unlikely that a stale holder's late writes land
// after the next holder's, as Chubby's and Consul's lock-delay do (15s by
// default in Consul); it cannot make it impossible, since a pause may
// last longer than any delay. Fencing does: pass Lease.Token to the
// resource and have it refuse tokens lower than the highest it has seen.
// Use the delay where the resource cannot check a token.
//
// It applies to a mutex; NewRWLock and NewSemaphore refuse it. A negative
// d is refused. Default: 0 (no delay).
func WithLockDelay(d time.Duration) Option {
	return func(s *Settings) error {
		if d < 0 {
			return fmt.Errorf("%w: WithLockDelay(%v): delay must not be negative", ErrInvalidArgument, d)
		}
		s.Delay = d
		return nil
	}
}

// WithWeight ranks the Locker's waits: among the waiters of a name, the
// heaviest is granted first, and waiters of one weight in their order of
// arrival. A weight never takes a hold from its holder, and TryLock, which
// does not wait, is granted or refused as without it. w runs from 1 to
// 10. Default: 1, where every waiter is served in order.
//
// Weights trade fairness away: a steady stream of heavier waiters starves
// lighter ones, whose weight does not grow with their wait (no aging).
// Engines and kinds that do not rank waiters (see the package's
// "Weights") refuse a weight above 1 when a hold is asked for, with an
// error wrapping errors.ErrUnsupported.
func WithWeight(w int) Option {
	return func(s *Settings) error {
		if w < 1 || w > maxWeight {
			return fmt.Errorf("%w: WithWeight(%d): weight must be 1 to %d", ErrInvalidArgument, w, maxWeight)
		}
		s.Weight = w
		return nil
	}
}
