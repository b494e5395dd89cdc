package redlock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/observe"
)

type settings struct {
	name     string
	prefix   string
	timeout  time.Duration
	logger   *slog.Logger
	observer observe.Observer
}

// Option configures an Engine.
type Option func(*settings) error

// check is an Option that applies set when ok, and otherwise refuses with
// an error naming the option and why.
func check(ok bool, opt, why string, set func(*settings)) Option {
	if !ok {
		err := fmt.Errorf("redlock: %s: %w: %s", opt, locker.ErrInvalidArgument, why)
		return func(*settings) error { return err }
	}
	return func(s *settings) error { set(s); return nil }
}

// WithName is the engine's name, as Lease.Engine, the logs and a switcher
// show it. Default: "redlock".
func WithName(name string) Option {
	return check(name != "", "WithName", "name is empty", func(s *settings) { s.name = name })
}

// WithPrefix sets the namespace of every key on every node. Default:
// "orthrus".
func WithPrefix(prefix string) Option {
	return check(prefix != "", fmt.Sprintf("WithPrefix(%q)", prefix), "prefix is empty", func(s *settings) { s.prefix = prefix })
}

// DefaultNodeTimeout bounds each request to one node: see WithNodeTimeout.
const DefaultNodeTimeout = 100 * time.Millisecond

// WithNodeTimeout bounds each request to one node. A node that has not
// answered by then is counted as failed for that request, so it bounds
// what a frozen or unreachable node adds to every acquisition, release and
// renewal. It must be small against the TTL (an acquisition spends up to
// twice it, which the grant's validity pays), and large enough for a
// loaded host's scheduling hiccups: Redis answers a loopback or LAN request
// in well under a millisecond, but a GC pause, a -race build or a busy
// two-core host delays one by tens of milliseconds, and a node counted as
// failed because of that makes a majority harder to reach. Default:
// DefaultNodeTimeout (100ms: a 30s TTL's drift allowance is 302ms).
func WithNodeTimeout(d time.Duration) Option {
	return check(d > 0, fmt.Sprintf("WithNodeTimeout(%v)", d), "timeout must be positive", func(s *settings) { s.timeout = d })
}

// WithLogger sets the logger. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return check(l != nil, "WithLogger", "logger is nil", func(s *settings) { s.logger = l })
}

// WithObserver reports the engine's acquisitions, releases, renewals and
// holds to o. Default: none, and no observation cost.
func WithObserver(o observe.Observer) Option {
	return check(o != nil, "WithObserver", "observer is nil", func(s *settings) { s.observer = o })
}
