package mem

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// Engine is the in-process lock engine. It implements locker.Engine.
type Engine struct {
	name   string
	prefix string
	store  *Store
	core   *driver.Core

	closeOnce sync.Once
	closing   chan struct{} // closed by Close: waiting acquisitions return ErrClosed
}

var (
	_ locker.Engine           = (*Engine)(nil)
	_ driver.Backend          = (*Engine)(nil)
	_ driver.Renewer          = (*Engine)(nil)
	_ inspect.Inspector       = (*Engine)(nil)
	_ inspect.FamilyInspector = (*Engine)(nil)
	_ driver.Weigher          = (*Engine)(nil)
)

type settings struct {
	name   string
	prefix string
	store  *Store
	logger *slog.Logger

	observer observe.Observer // nil: nothing observes
}

// Option configures an Engine.
type Option func(*settings) error

// WithName names the engine in Lease.Engine, logs and the switcher.
// Default: "mem".
func WithName(name string) Option {
	return func(s *settings) error {
		if name == "" {
			return fmt.Errorf("mem: WithName: %w: name is empty", locker.ErrInvalidArgument)
		}
		s.name = name
		return nil
	}
}

// WithPrefix sets the namespace of the engine's locks in its store: engines
// with different prefixes never exclude each other. Default: "orthrus".
func WithPrefix(prefix string) Option {
	return func(s *settings) error {
		if prefix == "" {
			return fmt.Errorf("mem: WithPrefix: %w: prefix is empty", locker.ErrInvalidArgument)
		}
		s.prefix = prefix
		return nil
	}
}

// WithStore makes the engine keep its locks in st, shared with every other
// engine given st, as processes share one server. Default: a store of the
// engine's own, on the real clock.
func WithStore(st *Store) Option {
	return func(s *settings) error {
		if st == nil {
			return fmt.Errorf("mem: WithStore: %w: store is nil", locker.ErrInvalidArgument)
		}
		s.store = st
		return nil
	}
}

// WithLogger sets the logger for lost holds. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("mem: WithLogger: %w: logger is nil", locker.ErrInvalidArgument)
		}
		s.logger = l
		return nil
	}
}

// New returns an engine over its own store, or over the one WithStore
// gives.
func New(opts ...Option) (*Engine, error) {
	s := settings{name: "mem", prefix: "orthrus", logger: slog.Default()}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("mem: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	if s.store == nil {
		st, err := NewStore()
		if err != nil {
			return nil, err
		}
		s.store = st
	}
	e := &Engine{name: s.name, prefix: s.prefix, store: s.store, closing: make(chan struct{})}
	e.core = driver.NewCore(s.name, e, s.logger.With("engine", s.name), driver.ObservedBy(s.observer))
	return e, nil
}

// Name returns the engine's name.
func (e *Engine) Name() string { return e.name }

// MinTTL is the shortest TTL, or fixed lease, the engine accepts: the
// watchdog renews a hold every TTL/3 on Go timers and goroutines, which a
// loaded process (a GC, -race, two cores) runs milliseconds late; below
// 10ms a hold would be lost between two renewals.
const MinTTL = 10 * time.Millisecond

// MinTTL implements driver.MinTTLer: NewLocker refuses a WithTTL or
// WithLease below MinTTL.
func (e *Engine) MinTTL() time.Duration { return MinTTL }

// Store returns the store the engine keeps its locks in.
func (e *Engine) Store() *Store { return e.store }

// NewLocker returns a new owner's Locker for name.
func (e *Engine) NewLocker(name string, opts ...locker.Option) (locker.Handle, error) {
	return e.core.NewLocker(name, opts...)
}

// NewRWLock returns a new owner's read-write lock on name.
func (e *Engine) NewRWLock(name string, opts ...locker.Option) (locker.RWLock, error) {
	return e.core.NewRWLock(name, opts...)
}

// NewSemaphore returns a semaphore of permits permits on name.
func (e *Engine) NewSemaphore(name string, permits int, opts ...locker.Option) (locker.Semaphore, error) {
	return e.core.NewSemaphore(name, permits, opts...)
}

// Ping reports ErrClosed after Close and nil otherwise: the store is always
// there. Wrap the engine with package locker/faults to make it fail.
func (e *Engine) Ping(ctx context.Context) error {
	if e.core.Closed() {
		return fmt.Errorf("mem: ping: %w", locker.ErrClosed)
	}
	return nil
}

// Close releases the holds still held (their Lost channels close) and makes
// waiting acquisitions return ErrClosed. It is idempotent.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() { close(e.closing) })
	ctx, cancel := context.WithTimeout(context.Background(), driver.DefaultReleaseTimeout)
	defer cancel()
	return e.core.Close(ctx)
}

func (e *Engine) key(name string, k inspect.Kind) lockKey {
	return lockKey{prefix: e.prefix, name: name, class: keyClass(k)}
}

// Acquire implements driver.Backend. A waiter queues behind the holds and
// the waiters ranked before it (heavier, or as heavy and older); the store
// hands it the lock when its turn comes.
func (e *Engine) Acquire(ctx context.Context, h *driver.Hold, wait bool) (bool, error) {
	en := &entry{key: e.key(h.Name, h.Kind), hold: h}
	h.State = en
	ok, err := e.store.acquire(en, wait)
	if err != nil {
		return false, fmt.Errorf("mem: acquire %q: %w", h.Name, err)
	}
	if ok || !wait {
		h.Token = en.token
		return ok, nil
	}
	select {
	case <-en.granted:
		h.Token = en.token
		return true, nil
	case <-ctx.Done():
		e.store.release(en)
		return false, ctx.Err()
	case <-e.closing:
		e.store.release(en)
		return false, fmt.Errorf("mem: acquire %q: %w", h.Name, locker.ErrClosed)
	}
}

// Weighs implements driver.Weigher: waiters are granted heaviest first
// (locker.WithWeight), in their order of arrival within a weight.
func (e *Engine) Weighs() error { return nil }

// HonoursDeadlines implements driver.DeadlineHonourer: a release returns
// when its context ends.
func (e *Engine) HonoursDeadlines() bool { return true }

// Release implements driver.Backend.
func (e *Engine) Release(ctx context.Context, h *driver.Hold) error {
	if !e.store.release(h.State.(*entry)) {
		return fmt.Errorf("mem: release %q: %w", h.Name, locker.ErrLockLost)
	}
	return nil
}

// Renew implements driver.Renewer: each hold still held lives its TTL
// longer, from the store's now.
func (e *Engine) Renew(ctx context.Context, holds []*driver.Hold) []error {
	errs := make([]error, len(holds))
	for i, h := range holds {
		if !e.store.renew(h.State.(*entry)) {
			errs[i] = fmt.Errorf("mem: renew %q: %w", h.Name, locker.ErrLockLost)
		}
	}
	return errs
}

// Inspect reports who holds name, with the time its hold has left by the
// store's clock, and who waits for it, first in line first, with the token
// each will hold with.
func (e *Engine) Inspect(ctx context.Context, name string) (inspect.Inspection, error) {
	if err := e.checkOperation("inspect", name); err != nil {
		return inspect.Inspection{}, err
	}
	return e.store.inspect(e.key(name, inspect.KindMutex)), nil
}

// ForceUnlock removes the current hold of name whoever owns it, hands the
// lock to the first waiter and returns the hold it removed; ErrNotHeld when
// the name is free. The owner's Lost closes at once.
func (e *Engine) ForceUnlock(ctx context.Context, name string) (inspect.Holder, error) {
	if err := e.checkOperation("force unlock", name); err != nil {
		return inspect.Holder{}, err
	}
	ended := e.store.forceRelease(e.key(name, inspect.KindMutex), 0)
	if len(ended) == 0 {
		return inspect.Holder{}, fmt.Errorf("mem: force unlock %q: %w", name, locker.ErrNotHeld)
	}
	return ended[0].Holder, nil
}

// ForceUnlockFamily ends the holds of the read-write lock (KindRead or
// KindWrite) or semaphore (KindPermit) name whose token is token, or all of
// them when token is 0, grants the waiters that fit then, and returns the
// holds it ended; ErrNotHeld when none matched. Their owners' Lost close at
// once.
func (e *Engine) ForceUnlockFamily(ctx context.Context, kind inspect.Kind, name string, token uint64) ([]inspect.FamilyHolder, error) {
	if err := e.checkOperation("force unlock", name); err != nil {
		return nil, err
	}
	ended := e.store.forceRelease(e.key(name, kind), token)
	if len(ended) == 0 {
		return nil, fmt.Errorf("mem: force unlock %s %q: %w", kind, name, locker.ErrNotHeld)
	}
	return ended, nil
}

// InspectFamily reports the holds and waiters of the read-write lock
// (KindRead or KindWrite) or semaphore (KindPermit) name, and a
// semaphore's stored count.
func (e *Engine) InspectFamily(ctx context.Context, kind inspect.Kind, name string) (inspect.FamilyInspection, error) {
	if err := e.checkOperation("inspect", name); err != nil {
		return inspect.FamilyInspection{}, err
	}
	return e.store.inspectFamily(e.key(name, kind)), nil
}

// SetPermits stores n as the permit count of semaphore name.
func (e *Engine) SetPermits(ctx context.Context, name string, n int) error {
	if err := e.checkOperation("set permits", name); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("mem: set permits %q: %w: n = %d, want at least 1", name, locker.ErrInvalidArgument, n)
	}
	e.store.setPermits(e.key(name, inspect.KindPermit), n)
	return nil
}

func (e *Engine) checkOperation(op, name string) error {
	if err := driver.ValidateName(name); err != nil {
		return fmt.Errorf("mem: %s: %w", op, err)
	}
	if e.core.Closed() {
		return fmt.Errorf("mem: %s %q: %w", op, name, locker.ErrClosed)
	}
	return nil
}
