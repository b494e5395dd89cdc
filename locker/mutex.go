package locker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/internal/deadline"
)

// mutex is the Locker every engine returns: one owner, counted re-entry,
// one hold at a time.
type mutex struct {
	*Front
	core     *Core
	name     string
	settings Settings
	kind     Kind
	permits  int        // KindPermit: permits per hold
	sem      *semaphore // KindPermit: the semaphore the permits belong to
	rw       *rwLock    // KindRead, KindWrite: both sides of the lock

	mu    sync.Mutex
	count int
	hold  *Hold
}

var (
	_ Locker   = (*mutex)(nil)
	_ Lease    = (*mutex)(nil)
	_ Releaser = (*mutex)(nil)
)

func newMutex(c *Core, name string, s Settings) *mutex {
	return initMutex(&mutex{core: c, name: name, settings: s})
}

func initMutex(m *mutex) *mutex {
	m.Front = NewFront(m.name, m.reenter, m.take)
	return m
}

// take makes the outermost acquisition: a new hold on the engine.
func (m *mutex) take(ctx context.Context, wait bool) (ok bool, err error) {
	if err := m.core.checkOpen(); err != nil {
		return false, err
	}

	h := &Hold{
		Name:  m.name,
		Owner: m.settings.Owner,
		TTL:   m.settings.TTL,
		Renew: m.settings.Renew,

		ReleaseTimeout: m.settings.ReleaseTimeout,
		Delay:          m.settings.Delay,
		lost:           make(chan struct{}),

		Kind:    m.kind,
		Permits: 1,
	}
	if err := m.prepare(h); err != nil {
		return false, err
	}
	if m.core.obs != nil {
		var a Acquisition
		var start time.Time
		ctx, a, start = m.core.acquireStart(ctx, h, wait)
		defer func() { m.core.acquireEnd(ctx, a, start, h, ok, err) }()
	}
	if ctx.Done() != nil { // only a context that can end is judged
		h.Asking()
	}
	ok, err = m.core.backend.Acquire(ctx, h, wait)
	if err == nil && m.sem != nil {
		m.sem.checked.Store(true)
	}
	if err != nil {
		if ranOut(ctx, h, err) {
			return false, deadline.Err(ctx)
		}
		return false, withCtxErr(ctx, err)
	}
	if !ok {
		return false, nil
	}
	if !m.core.granted(h) {
		return false, m.core.checkOpen()
	}
	m.mu.Lock()
	m.hold, m.count = h, 1
	m.mu.Unlock()
	return true, nil
}

// prepare fills in what a hold of the read-write lock or the semaphore
// needs from its siblings, and refuses an upgrade.
func (m *mutex) prepare(h *Hold) error {
	switch m.kind {
	case KindPermit:
		h.Permits, h.Limit = m.permits, m.sem.permits
		h.CheckLimit = !m.sem.checked.Load()
	case KindWrite:
		if m.rw.read.held() {
			return fmt.Errorf("%s: write lock %q: %w", m.core.engine, m.name, ErrUpgrade)
		}
	case KindRead:
		h.Writer = m.rw.write.current()
	}
	return nil
}

// held reports whether the owner holds this lock now.
func (m *mutex) held() bool { return m.current() != nil }

// current is the hold of this lock now; nil when not held or lost.
func (m *mutex) current() *Hold {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hold == nil || m.hold.isLost() {
		return nil
	}
	return m.hold
}

// ranOut applies OutageAfter to an acquisition that failed with err: true
// when ctx ended with the engine's latest request unanswered (not refused:
// that is certain) for less than OutageAfter, measured to the deadline when
// that has passed, not to whenever the engine returned.
func ranOut(ctx context.Context, h *Hold, err error) bool {
	if deadline.Err(ctx) == nil || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRefused) {
		return false
	}
	unanswered := time.Duration(monoNow() - h.asked)
	if d, ok := ctx.Deadline(); ok {
		unanswered -= max(-time.Until(d), 0)
	}
	return unanswered < OutageAfter
}

// withCtxErr makes an acquisition's error wrap ctx.Err() once ctx is done,
// keeping the engine's error: ErrUnavailable in it tells that the engine had
// not answered when the caller gave up.
func withCtxErr(ctx context.Context, err error) error {
	ctxErr := ctx.Err()
	if ctxErr == nil || errors.Is(err, ctxErr) {
		return err
	}
	return fmt.Errorf("%w: %w", err, ctxErr)
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
	return m.unlock(nil, min(m.core.releaseWait, m.settings.ReleaseTimeout))
}

// ReleaseWithin implements Releaser.
func (m *mutex) ReleaseWithin(wait time.Duration, done <-chan struct{}) error {
	return m.unlock(done, min(wait, m.settings.ReleaseTimeout))
}

// unlock releases one hold; the last one is released on the engine, and
// its caller waits for the answer at most wait, or until done closes.
func (m *mutex) unlock(done <-chan struct{}, wait time.Duration) error {
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
	if err := m.core.release(h, wait, done); err != nil {
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
