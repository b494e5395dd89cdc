package idem

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// Defaults of the gate's options.
const (
	DefaultExpiry         = 30 * time.Second
	DefaultRetention      = 24 * time.Hour
	DefaultRequestTimeout = 2 * time.Second
	DefaultMaxResult      = 64 << 10
	DefaultPending        = 1024
)

// Policy says what Begin does when the store cannot be reached.
type Policy int

const (
	// FailClosed refuses the operation: Begin returns an error wrapping
	// locker.ErrUnavailable. Duplicates can never run, and neither can
	// anything else while the store is away.
	FailClosed Policy = iota
	// FailOpen lets the operation run unguarded: Begin returns a Ticket whose
	// Unguarded is true and whose Done writes nothing. Nothing is refused,
	// and duplicates can run while the store is away.
	FailOpen
)

func (p Policy) String() string {
	switch p {
	case FailClosed:
		return "fail-closed"
	case FailOpen:
		return "fail-open"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

type settings struct {
	expiry, retention, timeout time.Duration
	policy                     Policy
	log                        *slog.Logger
	maxResult                  int
	previous                   time.Duration // 0: do not check the previous store
	pending                    int           // WithPending
	cacheSize                  int           // WithLocalCache; 0: no cache
	cacheTTL                   time.Duration
	disabled                   bool // WithDisabled
	fromDeadline               bool // WithExpiryFromDeadline
	obs                        Observer
}

// Option configures a Gate. A bad value makes New fail with an error
// wrapping locker.ErrInvalidArgument that names the option.
type Option func(*settings) error

// WithExpiry sets how long a running attempt's record lives: an attempt
// that neither succeeds nor fails within it (its process died, say) frees
// the operation to run again. Make it longer than the operation takes.
// Default: DefaultExpiry (30s). etcd rounds it up to whole seconds, and to
// the cluster's minimum lease TTL.
func WithExpiry(d time.Duration) Option {
	return func(s *settings) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: WithExpiry(%v): must be at least 1ms", locker.ErrInvalidArgument, d)
		}
		s.expiry = d
		return nil
	}
}

// WithRetention sets how long a succeeded operation's record lives, during
// which a duplicate is refused. Default: DefaultRetention (24h).
func WithRetention(d time.Duration) Option {
	return func(s *settings) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: WithRetention(%v): must be at least 1ms", locker.ErrInvalidArgument, d)
		}
		s.retention = d
		return nil
	}
}

// WithPolicy sets what Begin does when the store cannot be reached.
// Default: FailClosed.
func WithPolicy(p Policy) Option {
	return func(s *settings) error {
		if p != FailClosed && p != FailOpen {
			return fmt.Errorf("%w: WithPolicy(%v): want FailClosed or FailOpen", locker.ErrInvalidArgument, p)
		}
		s.policy = p
		return nil
	}
}

// WithRequestTimeout bounds every round trip to a store, within the
// caller's context: a store that does not answer in time counts as
// unavailable and the policy applies. Default: DefaultRequestTimeout (2s).
func WithRequestTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithRequestTimeout(%v): must be positive", locker.ErrInvalidArgument, d)
		}
		s.timeout = d
		return nil
	}
}

// WithLogger sets the logger of degradations and recoveries.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger: logger is nil", locker.ErrInvalidArgument)
		}
		s.log = l
		return nil
	}
}

// WithMaxResult sets the largest result Succeed stores.
// Default: DefaultMaxResult (64 KiB).
func WithMaxResult(n int) Option {
	return func(s *settings) error {
		if n < 0 || n > 1<<20 {
			return fmt.Errorf("%w: WithMaxResult(%d): want 0 to 1 MiB", locker.ErrInvalidArgument, n)
		}
		s.maxResult = n
		return nil
	}
}

// WithCheckPrevious makes a switched gate (NewSwitched) also look for the
// record on the previous engine's store after a switch, for the retention
// and while that store answers: a lookup that fails or takes longer than
// timeout stops the checks until that store answers again (or for 5s).
// It closes the dedupe window a switch opens, for a round trip to the
// previous store on every Begin. With it, a switch also makes the gate
// claim its running attempts, and copy its successes of the last expiry,
// on the new store (in the background), so that duplicates see them there
// even when the previous store does not answer. Default: off (on with
// FromSwitcher).
func WithCheckPrevious(timeout time.Duration) Option {
	return func(s *settings) error {
		if timeout <= 0 {
			return fmt.Errorf("%w: WithCheckPrevious(%v): timeout must be positive", locker.ErrInvalidArgument, timeout)
		}
		s.previous = timeout
		return nil
	}
}

// WithPending bounds the outcomes the gate keeps while their store does
// not answer: a Done or Succeed whose store is unavailable queues the
// outcome and returns an error wrapping ErrPending, and a goroutine of the
// gate writes it when the store answers again, until the record's own
// expiry (after which the store has freed the operation anyway). The
// goroutine starts with the first queued outcome; Close stops it. Past n
// queued outcomes, Done returns the store's error as without the option.
// 0 turns background recording off. Default: DefaultPending (1024).
func WithPending(n int) Option {
	return func(s *settings) error {
		if n < 0 || n > 1<<20 {
			return fmt.Errorf("%w: WithPending(%d): want 0 to 1048576", locker.ErrInvalidArgument, n)
		}
		s.pending = n
		return nil
	}
}

// WithLocalCache keeps up to size succeeded records in the process for
// ttl (at most the retention), so that a replay within that time makes no
// round trip. A record an operator deletes on the store (Forget from
// another process) is still replayed here until ttl passes. Default: no
// cache.
func WithLocalCache(size int, ttl time.Duration) Option {
	return func(s *settings) error {
		if size <= 0 || size > 1<<24 {
			return fmt.Errorf("%w: WithLocalCache(%d, %v): size must be 1 to 16777216", locker.ErrInvalidArgument, size, ttl)
		}
		if ttl <= 0 {
			return fmt.Errorf("%w: WithLocalCache(%d, %v): ttl must be positive", locker.ErrInvalidArgument, size, ttl)
		}
		s.cacheSize, s.cacheTTL = size, ttl
		return nil
	}
}

// WithDisabled(true) turns the gate off, for tests and local runs: every
// Begin returns an unguarded Ticket without touching a store. Default:
// enabled.
func WithDisabled(disabled bool) Option {
	return func(s *settings) error { s.disabled = disabled; return nil }
}

// WithExpiryFromDeadline makes a running attempt's record expire at the
// deadline of the context given to Begin when that comes before the
// expiry (WithExpiry): an attempt whose process dies frees its operation
// once the attempt could no longer have finished, rather than after the
// fixed expiry. Use it when operations honour their context's deadline.
// etcd rounds the expiry up to whole seconds. Default: off.
func WithExpiryFromDeadline() Option {
	return func(s *settings) error { s.fromDeadline = true; return nil }
}

// WithObserver reports what the gate does to o (package telemetry's
// Telemetry.Idem is one). Default: none.
func WithObserver(o Observer) Option {
	return func(s *settings) error {
		if o == nil {
			return fmt.Errorf("%w: WithObserver: observer is nil", locker.ErrInvalidArgument)
		}
		s.obs = o
		return nil
	}
}

// BeginOption configures one Begin.
type BeginOption func(*beginSettings) error

type beginSettings struct {
	fingerprint []byte
}

// WithFingerprint records fp (at most MaxFingerprint bytes, e.g. a SHA-256
// of the request) with the attempt, and reports a duplicate whose
// fingerprint differs as Duplicate.Mismatch: the same operation ID reused
// for a different request.
func WithFingerprint(fp []byte) BeginOption {
	return func(s *beginSettings) error {
		if len(fp) == 0 || len(fp) > MaxFingerprint {
			return fmt.Errorf("%w: WithFingerprint: %d bytes, want 1 to %d", locker.ErrInvalidArgument, len(fp), MaxFingerprint)
		}
		s.fingerprint = fp
		return nil
	}
}

func resolveBegin(opts []BeginOption) (beginSettings, error) {
	var bs beginSettings
	err := apply(&bs, opts, "idem: Begin: nil BeginOption")
	return bs, err
}

// apply applies opts to s in order; nilErr is the error's text for a nil
// option.
func apply[S any, O ~func(*S) error](s *S, opts []O, nilErr string) error {
	for _, opt := range opts {
		if opt == nil {
			return fmt.Errorf("%w: %s", locker.ErrInvalidArgument, nilErr)
		}
		if err := opt(s); err != nil {
			return err
		}
	}
	return nil
}
