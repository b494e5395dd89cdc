package faults

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// mode is the outage the engine shows, if any.
type mode int

const (
	healthy mode = iota
	failing
	refusing
	hanging
)

// Engine wraps a locker.Engine and injects faults into the calls that would
// reach its server. It implements locker.Engine.
type Engine struct {
	name  string
	inner locker.Engine
	clock clockwork.Clock

	mu           sync.Mutex
	closed       bool
	mode         mode
	latency      time.Duration
	dropRenewals bool
	changed      chan struct{} // closed and replaced when the faults change; closed by Close
	holds        map[*hold]struct{}
	waits        map[*inFlight]struct{}
	timers       map[clockwork.Timer]struct{}
	wg           sync.WaitGroup // Lost watchers and timer callbacks
}

var (
	_ locker.Engine           = (*Engine)(nil)
	_ inspect.FamilyInspector = (*Engine)(nil)
)

type settings struct {
	name  string
	clock clockwork.Clock
}

// Option configures an Engine.
type Option func(*settings) error

// WithName names the wrapper in Lease.Engine, errors and the switcher.
// Default: the inner engine's name.
func WithName(name string) Option {
	return func(s *settings) error {
		if name == "" {
			return fmt.Errorf("faults: WithName: %w: name is empty", locker.ErrInvalidArgument)
		}
		s.name = name
		return nil
	}
}

// WithClock sets the clock that latency, dropped renewals, lingering holds
// and After run by; give it the fake clock of a mem.Store to drive both
// with one Advance. Default: the real clock.
func WithClock(c clockwork.Clock) Option {
	return func(s *settings) error {
		if c == nil {
			return fmt.Errorf("faults: WithClock: %w: clock is nil", locker.ErrInvalidArgument)
		}
		s.clock = c
		return nil
	}
}

// Wrap returns a healthy wrapper around inner. The wrapper owns inner:
// Close closes it.
func Wrap(inner locker.Engine, opts ...Option) (*Engine, error) {
	if inner == nil {
		return nil, fmt.Errorf("faults: Wrap: %w: engine is nil", locker.ErrInvalidArgument)
	}
	s := settings{name: inner.Name(), clock: clockwork.NewRealClock()}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("faults: Wrap: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	return &Engine{
		name:    s.name,
		inner:   inner,
		clock:   s.clock,
		changed: make(chan struct{}),
		holds:   make(map[*hold]struct{}),
		waits:   make(map[*inFlight]struct{}),
		timers:  make(map[clockwork.Timer]struct{}),
	}, nil
}

// Name returns the wrapper's name.
func (e *Engine) Name() string { return e.name }

// MinTTL implements driver.MinTTLer with the inner engine's minimum: the
// wrapper refuses at NewLocker what the inner engine would refuse at the
// first acquisition.
func (e *Engine) MinTTL() time.Duration { return driver.MinTTL(e.inner) }

// Fail makes every call fail at once with an error wrapping
// locker.ErrUnavailable, as an engine that times out or drops connections.
// Waits in flight fail too, renewals stop getting through (see
// DropRenewals), and Unlock leaves the hold on the engine until its TTL
// runs out.
func (e *Engine) Fail() { e.setMode(failing) }

// Refuse is Fail with errors that also wrap locker.ErrRefused: the engine
// is certainly down (connection refused), which a breaker may trip on at
// once.
func (e *Engine) Refuse() { e.setMode(refusing) }

// Hang makes every call block, as a paused server does, until its context
// ends, when it fails with an error wrapping locker.ErrUnavailable and
// ctx.Err(): an engine that did not answer, not contention. Heal lets the
// calls go through, Close fails them with ErrClosed. Waits in flight stop
// being granted and renewals stop getting through. A call without a
// deadline (Lock, TryLock) hangs until Heal or Close, as with a client
// that has no timeout.
func (e *Engine) Hang() { e.setMode(hanging) }

// Heal ends every fault: the outage, the latency and dropped renewals.
// Hung calls go through; holds not yet expired live on.
func (e *Engine) Heal() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.mode, e.latency, e.dropRenewals = healthy, 0, false
	e.faultsChanged()
}

// SetLatency makes every call wait d (on the wrapper's clock) before it
// reaches the engine; a call whose context ends first fails as one the
// engine did not answer. 0 removes the latency.
func (e *Engine) SetLatency(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("faults: SetLatency(%v): %w: latency must not be negative", d, locker.ErrInvalidArgument)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.latency = d
	return nil
}

// DropRenewals stops renewals from reaching the engine while every other
// call goes through: each renewed hold made through the wrapper is lost
// one TTL later (its Lost closes and the engine frees the name) unless Heal
// comes first. Fixed leases are not renewed and are unaffected.
func (e *Engine) DropRenewals() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.dropRenewals = true
	e.faultsChanged()
}

// ExpireNow ends every hold of name made through the wrapper, as an expiry
// on the server would: Lost closes, the engine frees the name, and the
// holder's Unlock returns ErrLockLost. It returns how many holds it ended.
func (e *Engine) ExpireNow(name string) int {
	e.mu.Lock()
	var holds []*hold
	for h := range e.holds {
		if h.l.name == name {
			holds = append(holds, h)
		}
	}
	e.mu.Unlock()
	n := 0
	for _, h := range holds {
		if e.expire(h) {
			n++
		}
	}
	return n
}

// After calls fault after d on the wrapper's clock, unless Close or the
// returned stop function comes first; stop reports whether it prevented
// the call. For a schedule: w.After(time.Second, w.Hang).
func (e *Engine) After(d time.Duration, fault func()) (stop func() bool, err error) {
	if d < 0 || fault == nil {
		return nil, fmt.Errorf("faults: After(%v): %w: want a non-negative delay and a fault", d, locker.ErrInvalidArgument)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	stopLocked := e.afterFunc(d, fault)
	return func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return stopLocked()
	}, nil
}

func (e *Engine) setMode(m mode) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.mode = m
	// The engine no longer answers the waits it had.
	for w := range e.waits {
		w.cancel()
	}
	e.faultsChanged()
}

// faultsChanged wakes hung calls and arms or stops the expiry of renewed
// holds. Called with e.mu held.
func (e *Engine) faultsChanged() {
	close(e.changed)
	e.changed = make(chan struct{})
	blocked := e.renewalsBlocked()
	for h := range e.holds {
		switch {
		case !h.l.st.Renew:
		case blocked && h.expiry == nil:
			e.armExpiry(h)
		case !blocked && h.expiry != nil:
			h.expiry()
			h.expiry = nil
		}
	}
}

// renewalsBlocked reports whether renewals get through. Called with e.mu
// held.
func (e *Engine) renewalsBlocked() bool { return e.dropRenewals || e.mode != healthy }

// armExpiry loses h one TTL from now. Called with e.mu held.
func (e *Engine) armExpiry(h *hold) {
	h.expiry = e.afterFunc(h.l.st.TTL, func() { e.expire(h) })
}

// afterFunc runs f after d on the wrapper's clock, unless Close comes
// first, which then waits for f. Called with e.mu held; so is the stop
// function it returns.
func (e *Engine) afterFunc(d time.Duration, f func()) func() bool {
	if e.closed {
		return func() bool { return false }
	}
	var t clockwork.Timer
	// The callback locks e.mu, which the caller holds until t is set.
	t = e.clock.AfterFunc(d, func() {
		e.mu.Lock()
		if _, ok := e.timers[t]; !ok || e.closed {
			e.mu.Unlock()
			return
		}
		delete(e.timers, t)
		e.wg.Add(1)
		e.mu.Unlock()
		defer e.wg.Done()
		f()
	})
	e.timers[t] = struct{}{}
	return func() bool {
		_, pending := e.timers[t]
		delete(e.timers, t)
		t.Stop()
		return pending
	}
}

// enter waits out the latency and the outage of a call that is about to
// reach the engine: nil when it may go on. An acquisition whose caller
// gives up is judged as the engines judge it (see noAnswer).
func (e *Engine) enter(ctx context.Context, op string, acquiring bool) error {
	e.mu.Lock()
	latency := e.latency
	e.mu.Unlock()
	asked := time.Now() // real time, as ctx's deadline is
	if latency > 0 {
		t := e.clock.NewTimer(latency)
		select {
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			return e.noAnswer(ctx, op, "within the injected latency", asked, acquiring)
		}
	}
	for {
		e.mu.Lock()
		closed, m, changed := e.closed, e.mode, e.changed
		e.mu.Unlock()
		switch {
		case closed:
			return fmt.Errorf("%s: %s: %w", e.name, op, locker.ErrClosed)
		case m == healthy:
			return nil
		case m == failing:
			return fmt.Errorf("%s: %s: %w (injected outage)", e.name, op, locker.ErrUnavailable)
		case m == refusing:
			return fmt.Errorf("%s: %s: %w: %w (injected outage)", e.name, op, locker.ErrUnavailable, locker.ErrRefused)
		}
		select {
		case <-ctx.Done():
			return e.noAnswer(ctx, op, "(injected hang)", asked, acquiring)
		case <-changed:
		}
	}
}

// noAnswer is the error of a call whose ctx ended before the engine
// answered. An acquisition left unanswered for less than
// driver.OutageAfter merely ran out of time (ctx.Err()), as on the
// engines; anything longer, and any other call, is an outage.
func (e *Engine) noAnswer(ctx context.Context, op, how string, asked time.Time, acquiring bool) error {
	if acquiring && time.Since(asked) < driver.OutageAfter {
		return ctx.Err()
	}
	return fmt.Errorf("%s: %s: %w: no answer %s: %w", e.name, op, locker.ErrUnavailable, how, ctx.Err())
}

// inFlight is a call the engine has in hand; a fault that starts cancels it.
type inFlight struct{ cancel context.CancelFunc }

// startCall returns ctx for a call to the inner engine that a fault
// starting meanwhile interrupts; done unregisters it.
func (e *Engine) startCall(ctx context.Context) (context.Context, func()) {
	cctx, cancel := context.WithCancel(ctx)
	w := &inFlight{cancel: cancel}
	e.mu.Lock()
	if e.mode != healthy || e.closed {
		cancel()
	}
	e.waits[w] = struct{}{}
	e.mu.Unlock()
	return cctx, func() {
		e.mu.Lock()
		delete(e.waits, w)
		e.mu.Unlock()
		cancel()
	}
}

// register records a new hold; false when the wrapper closed meanwhile.
func (e *Engine) register(h *hold) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.holds[h] = struct{}{}
	if h.l.st.Renew && e.renewalsBlocked() {
		e.armExpiry(h)
	}
	innerLost := h.inner.Lost()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		select {
		case <-innerLost:
			h.markLost()
		case <-h.done:
		}
	}()
	return true
}

// claim ends h's life in the wrapper, for whoever gets there first: Unlock,
// an expiry or Close. The claimant deals with the inner hold.
func (e *Engine) claim(h *hold) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.claimLocked(h)
}

func (e *Engine) claimLocked(h *hold) bool {
	if h.ended {
		return false
	}
	h.ended = true
	delete(e.holds, h)
	if h.expiry != nil {
		h.expiry()
		h.expiry = nil
	}
	close(h.done)
	return true
}

// expire frees h's name on the engine, then loses h: by the time Lost
// closes, the name is free, as after an expiry on a server.
func (e *Engine) expire(h *hold) bool {
	if !e.claim(h) {
		return false
	}
	_ = h.inner.Unlock() // ErrLockLost if the engine had lost it too
	h.markLost()
	return true
}

// linger leaves h on the engine after a release that did not get through,
// until its TTL runs out, as a server keeps a key whose owner went quiet.
func (e *Engine) linger(h *hold) {
	if !h.l.st.Renew {
		return // the inner engine ends a fixed lease itself
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.afterFunc(h.l.st.TTL, func() { _ = h.inner.Unlock() })
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// Ping fails, hangs or waits as the faults say, then pings the engine.
func (e *Engine) Ping(ctx context.Context) error {
	if err := e.enter(ctx, "ping", false); err != nil {
		return err
	}
	return e.inner.Ping(ctx)
}

// Close ends every hold made through the wrapper (Lost closes), fails hung
// calls with ErrClosed, stops the wrapper's timers and closes the inner
// engine, which releases the holds.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.changed)
	for t := range e.timers {
		t.Stop()
	}
	e.timers = nil
	for w := range e.waits {
		w.cancel()
	}
	var holds []*hold
	for h := range e.holds {
		holds = append(holds, h)
	}
	for _, h := range holds {
		e.claimLocked(h)
	}
	e.mu.Unlock()
	for _, h := range holds {
		h.markLost()
	}
	err := e.inner.Close()
	e.wg.Wait()
	return err
}
