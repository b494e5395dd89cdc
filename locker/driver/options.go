package driver

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// DefaultTTL is how long a hold outlives its owner when nothing renews it.
const DefaultTTL = 30 * time.Second

// DefaultReleaseTimeout bounds a release on the engine, which never uses the
// caller's context so that a cancelled caller still releases.
const DefaultReleaseTimeout = 5 * time.Second

// DefaultRequestTimeout is how long every engine waits for the answer to
// one request whose context has no deadline (Lock, TryLock, a health
// check) before it gives up with an error wrapping locker.ErrUnavailable: a
// TryLock on a frozen server returns within it on every engine (redis,
// etcd, zk each take it as their default, and an option of theirs
// changes it). A caller's own deadline bounds its requests instead.
const DefaultRequestTimeout = 2 * time.Second

// DefaultReleaseWait bounds how long Unlock waits for the engine's answer:
// a release still unanswered then goes on in the background, within the
// release timeout, and Unlock returns an error wrapping locker.ErrUnavailable, so
// that a frozen engine never holds its caller for long. Use Release to wait
// for as long as a context allows instead.
const DefaultReleaseWait = time.Second

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

// Weigher is implemented by engines that may rank their waiters by weight
// (locker.WithWeight): Weighs returns nil when they do, else why not. Core
// refuses a weight above 1 on the others, at each acquisition, with an
// error wrapping errors.ErrUnsupported and that reason.
type Weigher interface {
	Weighs() error
}

// errNoWeights is the reason of a backend that is no Weigher.
var errNoWeights = errors.New("the engine does not rank waiters by weight")

// ResolveFor is Resolve for the engine named engine, whose minimum TTL is
// min: a WithTTL or WithLease below it fails with an error wrapping
// locker.ErrInvalidArgument that names the option and the minimum, rather than a
// hold that ends (or outlives its owner) other than asked. Engines pass
// MinTTL of themselves; wrappers, that of what they wrap.
func ResolveFor(engine string, min time.Duration, opts ...locker.Option) (locker.Settings, error) {
	s, err := Resolve(opts...)
	if err == nil && s.TTL < min {
		return locker.Settings{}, fmt.Errorf("%w: %s(%v): engine %q honours no TTL below %v", locker.ErrInvalidArgument, ttlBy(opts), s.TTL, engine, min)
	}
	return s, err
}

// Resolve applies opts over the defaults, with no minimum TTL (see
// ResolveFor).
func Resolve(opts ...locker.Option) (locker.Settings, error) {
	// TTL starts at 0, which no option accepts: still 0 afterwards means
	// that no WithTTL or WithLease was given.
	s := locker.Settings{Renew: true}
	for _, opt := range opts {
		if opt == nil {
			return locker.Settings{}, fmt.Errorf("%w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return locker.Settings{}, err
		}
	}
	if s.TTL == 0 {
		s.TTL = DefaultTTL
	}
	if s.ReleaseTimeout == 0 {
		s.ReleaseTimeout = DefaultReleaseTimeout
	}
	if s.Owner == "" {
		s.Owner = newOwnerID()
	}
	if s.Weight == 0 {
		s.Weight = 1
	}
	return s, nil
}

// ttlBy names what set the TTL of opts, for the minimum's error: the
// last WithTTL or WithLease, or the default. Options only validate and
// set fields, so applying them again to a blank Settings is safe.
func ttlBy(opts []locker.Option) string {
	by := "DefaultTTL"
	for _, opt := range opts {
		var s locker.Settings
		switch {
		case opt(&s) != nil || s.TTL == 0: // not a TTL option
		case s.Renew:
			by = "WithTTL"
		default:
			by = "WithLease"
		}
	}
	return by
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
