package runonce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/orthrus-go/orthrus/locker"
)

// DefaultAtMostFor is how long a run keeps its name at most, unless
// AtMostFor says otherwise: a job that may run longer must say so, and a
// process that dies mid-run blocks the job this long.
const DefaultAtMostFor = 10 * time.Minute

// ErrClosed is returned by Run on a closed Runner. It wraps
// locker.ErrClosed.
var ErrClosed = fmt.Errorf("runonce: runner closed: %w", locker.ErrClosed)

type settings struct {
	atMost, atLeast time.Duration
	clock           clockwork.Clock
	log             *slog.Logger
	obs             Observer
}

// Option configures a Runner or one run.
type Option func(*settings) error

// AtMostFor bounds how long a run keeps the name: the engine ends the hold
// d after its grant, whether the process is alive or not, and the run's
// context ends then. Default: DefaultAtMostFor (10m).
func AtMostFor(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("%w: runonce: AtMostFor(%v): must be positive", locker.ErrInvalidArgument, d)
		}
		s.atMost = d
		return nil
	}
}

// AtLeastFor keeps the name held at least d after the run started, even
// when the job returns sooner, so that hosts whose schedules fire a little
// later skip it. It must not exceed AtMostFor; leave a margin of a round
// trip below it, since the server counts AtMostFor from before this
// process sees the grant. Default: 0, the name is released when the job
// returns.
func AtLeastFor(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return fmt.Errorf("%w: runonce: AtLeastFor(%v): must not be negative", locker.ErrInvalidArgument, d)
		}
		s.atLeast = d
		return nil
	}
}

// WithClock sets the clock that measures AtLeastFor from the grant, for
// tests. Default: the real clock (its monotonic reading).
func WithClock(c clockwork.Clock) Option {
	return func(s *settings) error {
		if c == nil {
			return fmt.Errorf("%w: runonce: WithClock: clock is nil", locker.ErrInvalidArgument)
		}
		s.clock = c
		return nil
	}
}

// WithLogger sets where a release that fails is reported. Default:
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("%w: runonce: WithLogger: logger is nil", locker.ErrInvalidArgument)
		}
		s.log = l
		return nil
	}
}

// resolve applies opts over base and checks the result.
func resolve(base settings, opts []Option) (settings, error) {
	s := base
	for _, opt := range opts {
		if opt == nil {
			return s, fmt.Errorf("%w: runonce: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return s, err
		}
	}
	if s.atLeast > s.atMost {
		return s, fmt.Errorf("%w: runonce: AtLeastFor(%v) is longer than AtMostFor(%v)", locker.ErrInvalidArgument, s.atLeast, s.atMost)
	}
	return s, nil
}

// Runner runs jobs at most once across the processes that run them on the
// same engine (or switcher). It is safe for concurrent use. Close it
// before the engine (closing the engine releases every hold at once):
// Close waits for the AtLeastFor windows still running, and releases
// their names at their end.
type Runner struct {
	engine   locker.Engine
	settings settings

	mu      sync.Mutex
	closed  bool
	windows sync.WaitGroup // names held past their job, until AtLeastFor
}

// New returns a Runner over e; opts are the defaults of its runs.
func New(e locker.Engine, opts ...Option) (*Runner, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: runonce: New: engine is nil", locker.ErrInvalidArgument)
	}
	s, err := resolve(settings{atMost: DefaultAtMostFor, clock: clockwork.NewRealClock(), log: slog.Default(), obs: nopObserver{}}, opts)
	if err != nil {
		return nil, err
	}
	return &Runner{engine: e, settings: s}, nil
}

// RunOnce runs fn as Runner.Run does, on a Runner of its own, and returns
// once the name is released: after fn, and no sooner than AtLeastFor after
// the run started. Use a Runner when the caller must not wait out
// AtLeastFor.
func RunOnce(ctx context.Context, e locker.Engine, name string, fn func(ctx context.Context) error, opts ...Option) (ran bool, err error) {
	r, err := New(e, opts...)
	if err != nil {
		return false, err
	}
	defer r.Close()
	return r.Run(ctx, name, fn)
}

// Run runs fn unless another process (or another run of this one) holds
// name: then it returns (false, nil) at once. Otherwise it takes name for
// at most AtMostFor, runs fn under a context that ends when the hold is
// lost (at AtMostFor at the latest) and that AssertHeld accepts, and
// returns (true, fn's error joined with the release's). The name stays
// held until AtLeastFor after the grant when fn returns sooner: Run
// returns at once, and the Runner releases the name then. opts override
// the Runner's for this run.
func (r *Runner) Run(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) (ran bool, err error) {
	ev := RunEvent{Engine: r.engine.Name(), Name: name, Outcome: OutcomeError}
	s, err := resolve(r.settings, opts)
	if err != nil {
		ev.Err = err
		r.settings.obs.Ran(ev)
		return false, err
	}
	defer func() {
		ev.Err = err
		s.obs.Ran(ev)
	}()
	return r.run(ctx, name, fn, s, &ev)
}

// run is Run with its settings resolved; it sets ev's outcome and the
// job's time.
func (r *Runner) run(ctx context.Context, name string, fn func(ctx context.Context) error, s settings, ev *RunEvent) (ran bool, err error) {
	if fn == nil {
		return false, fmt.Errorf("%w: runonce: Run(%q): fn is nil", locker.ErrInvalidArgument, name)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := r.open(); err != nil {
		return false, err
	}
	l, err := r.take(name, s)
	if l == nil {
		r.windows.Done()
		if err == nil {
			ev.Outcome = OutcomeSkipped
		}
		return false, err
	}
	granted := s.clock.Now()
	hctx, cancel := locker.HoldContext(ctx, l)
	ended := make(chan struct{})
	defer func() {
		close(ended)
		cancel()
		err = errors.Join(err, r.release(l, s, s.atLeast-s.clock.Since(granted)))
	}()
	err = fn(withHold(hctx, l, ended))
	ev.Took, ev.Outcome = s.clock.Since(granted), ranOutcome(err, l.Lost())
	return true, err
}

// take makes one attempt at name for a fixed lease of AtMostFor: nil when
// another owner holds it or the engine failed (err says which).
func (r *Runner) take(name string, s settings) (locker.Handle, error) {
	l, err := r.engine.NewLocker(name, locker.WithLease(s.atMost))
	if err != nil {
		return nil, fmt.Errorf("runonce: %q with AtMostFor(%v): %w", name, s.atMost, err)
	}
	ok, err := l.TryLock()
	if !ok || err != nil {
		return nil, err
	}
	return l, nil
}

// open counts one more window to wait for on Close, or fails when closed.
func (r *Runner) open() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	r.windows.Add(1)
	return nil
}

// release ends the hold of l after left, or now when left is not
// positive, and ends the window open counted.
func (r *Runner) release(l locker.Handle, s settings, left time.Duration) error {
	if left <= 0 {
		defer r.windows.Done()
		return unlock(l)
	}
	s.clock.AfterFunc(left, func() {
		defer r.windows.Done()
		if err := unlock(l); err != nil {
			// The name may have been free before AtLeastFor: a host whose
			// schedule fired since may have run the job again.
			s.log.Warn("runonce: release at the end of AtLeastFor failed", "name", l.Name(), "err", err)
		}
	})
	return nil
}

// unlock releases l; a hold that was lost reports ErrLockLost.
func unlock(l locker.Handle) error {
	if err := l.Unlock(); err != nil {
		return fmt.Errorf("runonce: release %q: %w", l.Name(), err)
	}
	return nil
}

// Close refuses new runs, waits for the runs in progress and for the
// AtLeastFor windows still running, and releases their names as each
// ends. It is idempotent.
func (r *Runner) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.windows.Wait()
	return nil
}
