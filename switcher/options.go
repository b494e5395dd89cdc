package switcher

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/orthrus-go/orthrus/locker"
)

type settings struct {
	name          string
	logger        *slog.Logger
	breaker       gobreaker.Settings
	healthEvery   time.Duration
	healthTimeout time.Duration
	failbackAfter time.Duration
	safeSwitch    time.Duration
	outageWait    time.Duration
	onSwitch      func(Event)
	sources       []Source
	start         string
	down          []downAtStart // WithDownAtStart, in the order given
	customBreaker bool          // WithBreakerSettings: its ReadyToTrip may count successes
	observer      Observer
	quorum        int // WithQuorum; 0: a majority of the live processes
	isolation     Isolation
}

// Defaults of the options. A killed engine refuses connections and trips
// its breaker on the first failed call or health check (within
// DefaultHealthEvery when idle). A hung engine fails DefaultFailures
// health checks in a row, each after DefaultHealthTimeout: its breaker
// opens well within a second, while a loopback or LAN ping (well under
// 10ms) has ample room not to trip it on a busy host. An open breaker lets
// one health check through after DefaultOpenTimeout: an engine that comes
// back (or a link that heals) is used again within a second, at the
// cost of two pings a second to a dead one. A waiting acquisition gives an
// outage DefaultOutageWait before it fails.
const (
	DefaultFailures      = 3
	DefaultOpenTimeout   = 500 * time.Millisecond
	DefaultHealthEvery   = 100 * time.Millisecond
	DefaultHealthTimeout = 300 * time.Millisecond
	DefaultOutageWait    = 5 * time.Second
)

func defaults() settings {
	return settings{
		name:   "switcher",
		logger: slog.Default(),
		breaker: gobreaker.Settings{
			Timeout:     DefaultOpenTimeout,
			ReadyToTrip: consecutiveFailures(DefaultFailures),
		},
		healthEvery:   DefaultHealthEvery,
		healthTimeout: DefaultHealthTimeout,
		outageWait:    DefaultOutageWait,
	}
}

func consecutiveFailures(n uint32) func(gobreaker.Counts) bool {
	return func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= n }
}

// Option configures a Switcher.
type Option func(*settings) error

func invalid(option string, format string, args ...any) error {
	return fmt.Errorf("switcher: %s: %w: %s", option, locker.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// WithName names the switcher in logs and as a locker.Engine.
// Default: "switcher".
func WithName(name string) Option {
	return func(s *settings) error {
		if name == "" {
			return invalid("WithName", "name is empty")
		}
		s.name = name
		return nil
	}
}

// WithLogger sets the logger of switch events. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return invalid("WithLogger", "logger is nil")
		}
		s.logger = l
		return nil
	}
}

// WithBreaker sets when an engine's breaker opens (after failures
// consecutive engine failures) and how long it stays open before a health
// check may close it again. Only errors wrapping locker.ErrUnavailable
// count; contention and cancellation do not. An error that also wraps
// locker.ErrRefused (the engine is certainly down) opens it at once. An
// engine over a cluster (Cluster) also needs to have failed for its whole
// ride-through window. Default: DefaultFailures (3) and
// DefaultOpenTimeout (500ms).
func WithBreaker(failures uint32, openFor time.Duration) Option {
	return func(s *settings) error {
		if failures == 0 {
			return invalid("WithBreaker", "failures must be at least 1")
		}
		if openFor <= 0 {
			return invalid("WithBreaker", "openFor must be positive, got %v", openFor)
		}
		s.breaker.ReadyToTrip = consecutiveFailures(failures)
		s.breaker.Timeout = openFor
		return nil
	}
}

// WithBreakerSettings gives full control of the gobreaker settings of every
// engine. Name, IsSuccessful and IsExcluded are the switcher's; an
// OnStateChange is called after the switcher's own.
func WithBreakerSettings(st gobreaker.Settings) Option {
	return func(s *settings) error {
		s.breaker, s.customBreaker = st, true
		return nil
	}
}

// WithHealthCheck sets how often every engine is pinged through its breaker
// and how long a ping may take. Pings trip the breaker of a dead engine
// that has no traffic, and close it again once the engine is back.
// Default: DefaultHealthEvery (100ms), DefaultHealthTimeout (300ms).
func WithHealthCheck(every, timeout time.Duration) Option {
	return func(s *settings) error {
		if every <= 0 || timeout <= 0 {
			return invalid("WithHealthCheck", "every and timeout must be positive, got %v and %v", every, timeout)
		}
		s.healthEvery, s.healthTimeout = every, timeout
		return nil
	}
}

// WithFailback switches back to the primary (the first engine) once it has
// answered every health check for healthyFor. Default: off, failback is
// manual.
func WithFailback(healthyFor time.Duration) Option {
	return func(s *settings) error {
		if healthyFor <= 0 {
			return invalid("WithFailback", "healthyFor must be positive, got %v", healthyFor)
		}
		s.failbackAfter = healthyFor
		return nil
	}
}

// WithSafeSwitch trades availability for safety: for maxTTL after a switch,
// the new engine grants a name only once no hold on it can remain on the
// previous engine — checked there by taking and releasing the name while it
// answers, otherwise by waiting until maxTTL has passed since the switch.
// maxTTL must cover the longest TTL or lease used on the previous engine.
// Default: off.
func WithSafeSwitch(maxTTL time.Duration) Option {
	return func(s *settings) error {
		if maxTTL <= 0 {
			return invalid("WithSafeSwitch", "maxTTL must be positive, got %v", maxTTL)
		}
		s.safeSwitch = maxTTL
		return nil
	}
}

// WithOutageWait sets how long a waiting acquisition (Lock, LockCtx,
// TryLockTimeout) keeps retrying, within its own budget, while every
// engine's breaker is open, before it fails with ErrUnavailable. TryLock
// does not wait for an engine to come back: it fails at once when every
// breaker is open, and otherwise only gives the switcher the moment it needs
// to move off a tripped engine (at most the health timeout). Default:
// DefaultOutageWait (5s).
func WithOutageWait(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return invalid("WithOutageWait", "wait must not be negative, got %v", d)
		}
		s.outageWait = d
		return nil
	}
}

// OnSwitch calls fn with every switch, in order, on a goroutine of the
// switcher, after the switch has returned: SwitchEngine and the breaker
// never wait for fn. Call Switcher.WaitEvents to wait until fn has returned
// from every switch made so far. fn must not block for long: up to 64
// events queue behind it, and later ones are dropped with a WARN.
// Default: none.
func OnSwitch(fn func(Event)) Option {
	return func(s *settings) error {
		if fn == nil {
			return invalid("OnSwitch", "fn is nil")
		}
		s.onSwitch = fn
		return nil
	}
}

// WithStart names the engine current at start, for instance the one a
// configuration or a shared source names. Default: the first engine.
func WithStart(engine string) Option {
	return func(s *settings) error {
		if engine == "" {
			return invalid("WithStart", "engine is empty")
		}
		s.start = engine
		return nil
	}
}

// downAtStart is one engine that did not answer when its owner started
// the switcher.
type downAtStart struct {
	engine string
	cause  error
}

// WithDownAtStart tells New that engine did not answer at start, because
// of cause: its breaker starts open, as if it had tripped, so that nothing
// is sent to it, and New starts on the WithStart engine only if it is up,
// else on the first engine in order that is. The health check retries the
// engine once the breaker's open period (WithBreaker) has passed and closes
// the breaker when it answers; from then on it is an engine that recovered,
// for failback and sources alike. It lets a service start during an outage
// of some of its engines (config.Open uses it). With a shared source that
// lists its fleet (and IsolationWait), the process does not move off a
// down start engine by itself: its first decision, before any grant,
// follows the source's value or the fleet's vote, so a fleet started
// during an outage moves as one, and a process down alone waits. When every engine is down,
// New starts on the WithStart engine and acquisitions wait for one to
// recover, as in any outage (WithOutageWait). Each call adds one engine.
// Default: every engine is taken as up.
func WithDownAtStart(engine string, cause error) Option {
	return func(s *settings) error {
		if engine == "" {
			return invalid("WithDownAtStart", "engine is empty")
		}
		if cause == nil {
			return invalid("WithDownAtStart", "cause of %q is nil", engine)
		}
		s.down = append(s.down, downAtStart{engine, cause})
		return nil
	}
}

// WithSource makes the switcher follow src, a watched configuration key
// naming the engine to use. A value naming an unknown engine is logged and
// ignored.
func WithSource(src Source) Option {
	return func(s *settings) error {
		if src == nil {
			return invalid("WithSource", "source is nil")
		}
		s.sources = append(s.sources, src)
		return nil
	}
}

// WithQuorum sets how many processes of a fleet must see an engine down
// before a breaker switch moves the fleet off it: with a shared source that
// lists its processes (Roster: etcdsource, zksource), a process whose
// breaker opens publishes its vote and counts the live processes' votes,
// its own included. n larger than the live processes means all of them.
// Default: 0, a majority of the live processes (a fleet of one decides
// alone). Without such a source every process decides alone.
func WithQuorum(n int) Option {
	return func(s *settings) error {
		if n < 0 {
			return invalid("WithQuorum", "n must not be negative, got %d", n)
		}
		s.quorum = n
		return nil
	}
}

// Isolation is what a process does when its breaker opens on the fleet's
// engine but the fleet does not see that engine down (no quorum): a link,
// a pause or a starved CPU of its own.
type Isolation int

const (
	// IsolationWait keeps the process on the fleet's engine: its
	// acquisitions wait within their budget (WithOutageWait) and then fail
	// with locker.ErrUnavailable, its holds there are lost if they cannot
	// be renewed, and it grants again as soon as its breaker closes. The
	// fleet stays on one engine: no name is held on two.
	IsolationWait Isolation = iota
	// IsolationAlone moves the process alone to the next engine, at the
	// fleet's epoch, and back once the fleet's engine answers it again: it
	// keeps granting, but for that time a name may be held on two engines
	// at once (the switch window, for as long as the isolation lasts), and
	// tokens of its engine and the fleet's do not compare.
	IsolationAlone
)

// WithIsolation sets what a process cut off alone from the fleet's engine
// does. Default: IsolationWait, safety first.
func WithIsolation(i Isolation) Option {
	return func(s *settings) error {
		if i != IsolationWait && i != IsolationAlone {
			return invalid("WithIsolation", "unknown Isolation %d", i)
		}
		s.isolation = i
		return nil
	}
}
