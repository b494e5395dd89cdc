package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orthrus-go/orthrus/internal/deadline"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// mutex is what the locker.Handle every engine returns (h, made by
// locker.NewHandle) takes its holds with: mutex.take makes them on the
// engine, for one owner.
type mutex struct {
	h        locker.Handle
	core     *Core
	name     string
	settings locker.Settings
	kind     inspect.Kind
	permits  int        // inspect.KindPermit: permits per hold
	sem      *semaphore // inspect.KindPermit: the semaphore the permits belong to
	rw       *rwLock    // inspect.KindRead, inspect.KindWrite: both sides of the lock
}

// grant is one hold of a mutex on the engine, in one allocation with the
// Hold the engine sees.
type grant struct {
	Hold
	m *mutex
}

var _ locker.Grant = (*grant)(nil)

func newMutex(c *Core, name string, s locker.Settings) locker.Handle {
	return initMutex(&mutex{core: c, name: name, settings: s}).h
}

func initMutex(m *mutex) *mutex {
	m.h = locker.NewHandle(m.core.engine, m.name, m.take)
	return m
}

// take makes the outermost acquisition: a new hold on the engine.
func (m *mutex) take(ctx context.Context, wait bool) (g locker.Grant, err error) {
	if err := m.core.checkOpen(); err != nil {
		return nil, err
	}
	if m.settings.Weight > 1 && m.core.noWeights != nil {
		return nil, fmt.Errorf("%s: %s %q: WithWeight(%d): %w: %w", m.core.engine, m.kind, m.name, m.settings.Weight, m.core.noWeights, errors.ErrUnsupported)
	}
	hg := &grant{m: m, Hold: Hold{
		Name:  m.name,
		Owner: m.settings.Owner,
		TTL:   m.settings.TTL,
		Renew: m.settings.Renew,

		ReleaseTimeout: m.settings.ReleaseTimeout,
		Delay:          m.settings.Delay,
		Weight:         m.settings.Weight,
		lost:           make(chan struct{}),

		Kind:    m.kind,
		Permits: 1,
	}}
	h := &hg.Hold
	if err := m.prepare(h); err != nil {
		return nil, err
	}
	if m.core.obs != nil {
		var a observe.Acquisition
		var start time.Time
		ctx, a, start = m.core.acquireStart(ctx, h, wait)
		defer func() { m.core.acquireEnd(ctx, a, start, h, g != nil, err) }()
	}
	if ctx.Done() != nil { // only a context that can end is judged
		h.Asking()
	}
	ok, err := m.core.backend.Acquire(ctx, h, wait)
	if err == nil && m.sem != nil {
		m.sem.checked.Store(true)
	}
	if err != nil {
		if ranOut(ctx, h, err) {
			return nil, deadline.Err(ctx)
		}
		return nil, withCtxErr(ctx, err)
	}
	if !ok {
		return nil, nil
	}
	if !m.core.granted(h) {
		return nil, m.core.checkOpen()
	}
	return hg, nil
}

// prepare fills in what a hold of the read-write lock or the semaphore
// needs from its siblings, and refuses an upgrade.
func (m *mutex) prepare(h *Hold) error {
	switch m.kind {
	case inspect.KindPermit:
		h.Permits, h.Limit = m.permits, m.sem.permits
		h.CheckLimit = !m.sem.checked.Load()
	case inspect.KindWrite:
		if locker.GrantOf(m.rw.read.h) != nil {
			return fmt.Errorf("%s: write lock %q: %w", m.core.engine, m.name, locker.ErrUpgrade)
		}
	case inspect.KindRead:
		if g, ok := locker.GrantOf(m.rw.write.h).(*grant); ok {
			h.Writer = &g.Hold
		}
	}
	return nil
}

// ranOut applies OutageAfter to an acquisition that failed with err: true
// when ctx ended with the engine's latest request unanswered (not refused:
// that is certain) for less than OutageAfter, measured to the deadline when
// that has passed, not to whenever the engine returned.
func ranOut(ctx context.Context, h *Hold, err error) bool {
	if deadline.Err(ctx) == nil || !errors.Is(err, locker.ErrUnavailable) || errors.Is(err, locker.ErrRefused) {
		return false
	}
	unanswered := time.Duration(monoNow() - h.asked)
	if d, ok := ctx.Deadline(); ok {
		unanswered -= max(-time.Until(d), 0)
	}
	return unanswered < OutageAfter
}

// withCtxErr makes an acquisition's error wrap ctx.Err() once ctx is done,
// keeping the engine's error: locker.ErrUnavailable in it tells that the engine had
// not answered when the caller gave up.
func withCtxErr(ctx context.Context, err error) error {
	ctxErr := ctx.Err()
	if ctxErr == nil || errors.Is(err, ctxErr) {
		return err
	}
	return fmt.Errorf("%w: %w", err, ctxErr)
}

// Token is the engine's fencing token of the hold.
func (g *grant) Token() uint64 { return g.Hold.Token }

func (g *grant) Engine() string { return g.m.core.engine }

// Unlock ends the hold, waiting for the engine's answer at most the
// Core's release wait.
func (g *grant) Unlock() error {
	return g.release(context.Background(), nil, min(g.m.core.releaseWait.Timeout, g.m.settings.ReleaseTimeout))
}

func (g *grant) ReleaseWithin(wait time.Duration, done <-chan struct{}) error {
	return g.release(context.Background(), done, min(wait, g.m.settings.ReleaseTimeout))
}

// ReleaseCtx is ReleaseWithin for a caller that waits at most wait or
// until ctx ends: on an engine that honours deadlines, the release is made
// on the caller's goroutine, where a done channel needs a worker.
func (g *grant) ReleaseCtx(ctx context.Context, wait time.Duration) error {
	return g.release(ctx, nil, min(wait, g.m.settings.ReleaseTimeout))
}

// release ends the hold on the engine; its caller waits for the answer at
// most wait, or until done (when not nil) closes or ctx ends.
func (g *grant) release(ctx context.Context, done <-chan struct{}, wait time.Duration) error {
	m, h := g.m, &g.Hold
	if err := m.core.checkOpen(); err != nil {
		return fmt.Errorf("unlock %q: %w", m.name, err)
	}
	if h.isLost() {
		m.core.forget(h)
		return fmt.Errorf("%s: unlock %q: %w", m.core.engine, m.name, locker.ErrLockLost)
	}
	var err error
	if done != nil {
		err = m.core.release(h, wait, done)
	} else {
		err = m.core.releaseCtx(ctx, h, wait)
	}
	if err != nil {
		return fmt.Errorf("%s: unlock %q: %w", m.core.engine, m.name, err)
	}
	return nil
}
