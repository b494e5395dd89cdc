package locker

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"
)

// DefaultTTL is how long a hold outlives its owner when nothing renews it.
const DefaultTTL = 30 * time.Second

// DefaultReleaseTimeout bounds a release on the engine, which never uses the
// caller's context so that a cancelled caller still releases.
const DefaultReleaseTimeout = 5 * time.Second

// DefaultRequestTimeout is how long every engine waits for the answer to
// one request whose context has no deadline (Lock, TryLock, a health
// check) before it gives up with an error wrapping ErrUnavailable: a
// TryLock on a frozen server returns within it on every engine (redis,
// etcd, zk each take it as their default, and an option of theirs
// changes it). A caller's own deadline bounds its requests instead.
const DefaultRequestTimeout = 2 * time.Second

// DefaultReleaseWait bounds how long Unlock waits for the engine's answer:
// a release still unanswered then goes on in the background, within the
// release timeout, and Unlock returns an error wrapping ErrUnavailable, so
// that a frozen engine never holds its caller for long. Use Release to wait
// for as long as a context allows instead.
const DefaultReleaseWait = time.Second

// maxOwnerLen keeps owner IDs small enough for every engine's key or node name.
const maxOwnerLen = 256

// Option configures a Locker. Options validate their value and make NewLocker
// fail with an error wrapping ErrInvalidArgument that names the option.
type Option func(*Settings) error

// Settings is the resolved configuration of one Locker, as engines see it.
type Settings struct {
	// Owner identifies the Locker's owner; unique per Locker by default.
	Owner string
	// TTL is how long a hold lives without renewal.
	TTL time.Duration
	// Renew is true when a watchdog renews the hold every TTL/3 while held,
	// false for a fixed lease (WithLease).
	Renew bool
	// ReleaseTimeout bounds a release on the engine; Unlock waits for it
	// at most DefaultReleaseWait.
	ReleaseTimeout time.Duration
	// Delay is the lock delay (WithLockDelay): how long the name stays
	// barred after a hold of it ends without Unlock. 0: none.
	Delay time.Duration

	// ttlBy names what set TTL, for the minimum's error.
	ttlBy string
}

// WithTTL sets the TTL of a renewed hold: the watchdog extends it every ttl/3
// while the Locker holds it, so a dead owner's hold ends within ttl.
// Default: DefaultTTL (30s). WithTTL and WithLease override each other; the
// last one wins.
func WithTTL(ttl time.Duration) Option {
	return func(s *Settings) error {
		if ttl <= 0 {
			return fmt.Errorf("%w: WithTTL(%v): ttl must be positive", ErrInvalidArgument, ttl)
		}
		s.TTL, s.Renew, s.ttlBy = ttl, true, "WithTTL"
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
		s.TTL, s.Renew, s.ttlBy = d, false, "WithLease"
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
// Unlock waits for it at most DefaultReleaseWait (1s) or this timeout,
// whichever is shorter, and leaves the rest in the background.
// Default: DefaultReleaseTimeout (5s).
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

// MinTTLer is implemented by engines (and the switcher) that cannot honour
// a TTL below a minimum: the shortest TTL or fixed lease their holds keep,
// documented by each engine. Their NewLocker, NewRWLock and NewSemaphore
// refuse a WithTTL or WithLease below it (see ResolveFor).
type MinTTLer interface {
	MinTTL() time.Duration
}

// MinTTL returns e's minimum TTL: 0 when e does not implement MinTTLer.
func MinTTL(e any) time.Duration {
	if m, ok := e.(MinTTLer); ok {
		return m.MinTTL()
	}
	return 0
}

// ResolveFor is Resolve for the engine named engine, whose minimum TTL is
// min: a WithTTL or WithLease below it fails with an error wrapping
// ErrInvalidArgument that names the option and the minimum, rather than a
// hold that ends (or outlives its owner) other than asked. Engines pass
// MinTTL of themselves; wrappers, that of what they wrap.
func ResolveFor(engine string, min time.Duration, opts ...Option) (Settings, error) {
	s, err := Resolve(opts...)
	if err == nil && s.TTL < min {
		return Settings{}, fmt.Errorf("%w: %s(%v): engine %q honours no TTL below %v", ErrInvalidArgument, s.ttlBy, s.TTL, engine, min)
	}
	return s, err
}

// Resolve applies opts over the defaults, with no minimum TTL (see
// ResolveFor).
func Resolve(opts ...Option) (Settings, error) {
	s := Settings{TTL: DefaultTTL, Renew: true, ReleaseTimeout: DefaultReleaseTimeout, ttlBy: "DefaultTTL"}
	for _, opt := range opts {
		if opt == nil {
			return Settings{}, fmt.Errorf("%w: nil Option", ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return Settings{}, err
		}
	}
	if s.Owner == "" {
		s.Owner = newOwnerID()
	}
	return s, nil
}

// ownerPrefix is host:pid, fixed for the life of the process.
var ownerPrefix = func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}()

func newOwnerID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux since Go 1.24.
	return ownerPrefix + ":" + hex.EncodeToString(b[:])
}
