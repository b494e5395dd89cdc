package locker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// mutex is the Locker every engine returns: one owner, counted re-entry,
// one hold at a time.
type mutex struct {
	core     *Core
	name     string
	settings Settings

	// turn serialises the outermost acquisitions of this owner, so that two
	// goroutines sharing the Locker never queue twice on the engine.
	turn chan struct{}

	mu    sync.Mutex
	count int
	hold  *Hold
}

var (
	_ Locker = (*mutex)(nil)
	_ Lease  = (*mutex)(nil)
)

func newMutex(c *Core, name string, s Settings) *mutex {
	return &mutex{core: c, name: name, settings: s, turn: make(chan struct{}, 1)}
}

func (m *mutex) Lock() error { return m.LockCtx(context.Background()) }

func (m *mutex) LockCtx(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: LockCtx(%q): nil context", ErrInvalidArgument, m.name)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := m.acquire(ctx, true)
	return err
}

func (m *mutex) TryLock() (bool, error) {
	return m.acquire(context.Background(), false)
}

func (m *mutex) TryLockTimeout(wait time.Duration) (bool, error) {
	if wait <= 0 {
		return false, fmt.Errorf("%w: TryLockTimeout(%q): wait must be positive, got %v (use TryLock for one attempt)", ErrInvalidArgument, m.name, wait)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ok, err := m.acquire(ctx, true)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return false, nil
	}
	return ok, err
}

// acquire re-enters a live hold or takes a new one. With wait false it
// neither waits for the engine nor for another goroutine of this owner.
func (m *mutex) acquire(ctx context.Context, wait bool) (bool, error) {
	if ok, err := m.reenter(); ok || err != nil {
		return ok, err
	}
	if wait {
		select {
		case m.turn <- struct{}{}:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	} else {
		select {
		case m.turn <- struct{}{}:
		default:
			return false, nil // this owner is already acquiring
		}
	}
	defer func() { <-m.turn }()
	// Another goroutine of this owner may have taken it while we queued.
	if ok, err := m.reenter(); ok || err != nil {
		return ok, err
	}
	if err := m.core.checkOpen(); err != nil {
		return false, err
	}

	h := &Hold{
		Name:  m.name,
		Owner: m.settings.Owner,
		TTL:   m.settings.TTL,
		Renew: m.settings.Renew,

		ReleaseTimeout: m.settings.ReleaseTimeout,
		lost:           make(chan struct{}),
		index:          -1,
	}
	ok, err := m.core.backend.Acquire(ctx, h, wait)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return false, ctxErr
		}
		return false, err
	}
	if !ok {
		return false, nil
	}
	if !m.core.granted(h, m.settings.ReleaseTimeout) {
		return false, m.core.checkOpen()
	}
	m.mu.Lock()
	m.hold, m.count = h, 1
	m.mu.Unlock()
	return true, nil
}

// reenter counts one more hold when the owner already holds the lock.
func (m *mutex) reenter() (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hold == nil {
		return false, nil
	}
	if m.hold.isLost() {
		return false, fmt.Errorf("%s: re-enter %q: %w (Unlock it first)", m.core.engine, m.name, ErrLockLost)
	}
	m.count++
	return true, nil
}

func (m *mutex) Unlock() error {
	m.mu.Lock()
	h := m.hold
	if h == nil {
		m.mu.Unlock()
		return fmt.Errorf("%s: unlock %q: %w", m.core.engine, m.name, ErrNotHeld)
	}
	m.count--
	if m.count > 0 {
		m.mu.Unlock()
		if h.isLost() {
			return fmt.Errorf("%s: unlock %q: %w", m.core.engine, m.name, ErrLockLost)
		}
		return nil
	}
	m.hold = nil
	m.mu.Unlock()

	if err := m.core.checkOpen(); err != nil {
		return fmt.Errorf("unlock %q: %w", m.name, err)
	}
	if h.isLost() {
		m.core.forget(h)
		return fmt.Errorf("%s: unlock %q: %w", m.core.engine, m.name, ErrLockLost)
	}
	// Never the caller's context: a release must happen even when the caller
	// has given up.
	ctx, cancel := context.WithTimeout(context.Background(), m.settings.ReleaseTimeout)
	defer cancel()
	if err := m.core.release(ctx, h); err != nil {
		return fmt.Errorf("%s: unlock %q: %w", m.core.engine, m.name, err)
	}
	return nil
}

func (m *mutex) Name() string { return m.name }

func (m *mutex) Token() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hold == nil {
		return 0
	}
	return m.hold.Token
}

func (m *mutex) Engine() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hold == nil {
		return ""
	}
	return m.core.engine
}

func (m *mutex) Lost() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hold == nil {
		return nil
	}
	return m.hold.lost
}
