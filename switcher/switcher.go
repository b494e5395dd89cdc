package switcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/orthrus-go/orthrus/locker"
)

// Switcher spreads new acquisitions over ordered engines: all go to the
// current engine, and the current engine changes by breaker, by a watched
// source, by hand, or by failback. It implements locker.Engine.
type Switcher struct {
	name    string
	members []*member
	opts    settings
	log     *slog.Logger

	mu         sync.Mutex
	current    int
	epoch      uint64
	previous   int       // the engine before the last switch
	switchedAt time.Time // when the last switch happened
	closed     bool
	waits      map[*wait]struct{} // acquisitions waiting on an engine

	retried atomic.Int64 // acquisitions that failed on an engine and went again

	tripped chan struct{}   // a breaker changed state
	ctx     context.Context // done when Close starts
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	events  chan Event
}

var _ locker.Engine = (*Switcher)(nil)

// member is one engine and its breaker.
type member struct {
	engine  locker.Engine
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]

	healthySince time.Time // guarded by Switcher.mu; zero when the last ping failed
}

// New returns a switcher over engines, in order: primary, secondary, ...
// The first engine is current until something switches. The switcher owns
// the engines: Close closes them.
func New(engines []locker.Engine, opts ...Option) (*Switcher, error) {
	s := defaults()
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("switcher: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	if len(engines) == 0 {
		return nil, fmt.Errorf("switcher: New: %w: engines is empty", locker.ErrInvalidArgument)
	}
	sw := &Switcher{
		name:    s.name,
		opts:    s,
		log:     s.logger.With("switcher", s.name),
		tripped: make(chan struct{}, 1),
		events:  make(chan Event, 64),
		waits:   make(map[*wait]struct{}),
	}
	seen := make(map[string]int, len(engines))
	for i, e := range engines {
		if e == nil {
			return nil, fmt.Errorf("switcher: New: %w: engines[%d] is nil", locker.ErrInvalidArgument, i)
		}
		if j, dup := seen[e.Name()]; dup {
			return nil, fmt.Errorf("switcher: New: %w: engines[%d] and engines[%d] are both named %q", locker.ErrInvalidArgument, j, i, e.Name())
		}
		seen[e.Name()] = i
		sw.members = append(sw.members, &member{engine: e, breaker: sw.newBreaker(e.Name())})
	}
	sw.ctx, sw.cancel = context.WithCancel(context.Background())
	sw.wg.Add(2 + len(sw.members))
	go sw.watchBreakers()
	go sw.deliver()
	for _, m := range sw.members {
		go sw.checkHealth(m)
	}
	for _, src := range s.sources {
		sw.wg.Add(1)
		go sw.follow(src)
	}
	return sw, nil
}

func (s *Switcher) newBreaker(name string) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	st := s.opts.breaker
	st.Name = name
	st.IsSuccessful = func(err error) bool { return !errors.Is(err, locker.ErrUnavailable) }
	// A caller giving up says nothing about the engine.
	st.IsExcluded = func(err error) bool {
		return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, locker.ErrUnavailable)
	}
	user := st.OnStateChange
	st.OnStateChange = func(name string, from, to gobreaker.State) {
		// Runs under the breaker's mutex: only signal from here.
		select {
		case s.tripped <- struct{}{}:
		default:
		}
		if user != nil {
			user(name, from, to)
		}
	}
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](st)
}

// Name returns the switcher's name.
func (s *Switcher) Name() string { return s.name }

// Current returns the name of the engine new acquisitions go to.
func (s *Switcher) Current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members[s.current].engine.Name()
}

// Epoch returns the current switch epoch: the number of switches so far, or
// the shared source's epoch when it is ahead.
func (s *Switcher) Epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Engines returns the engines in order, for operator tools that inspect
// them. The switcher still owns them.
func (s *Switcher) Engines() []locker.Engine {
	out := make([]locker.Engine, len(s.members))
	for i, m := range s.members {
		out[i] = m.engine
	}
	return out
}

// Retried counts the acquisitions that failed on an unavailable engine and
// were tried again, on the new current engine or on the same one.
func (s *Switcher) Retried() int64 { return s.retried.Load() }

// EngineState is the state of one engine as the switcher sees it.
type EngineState struct {
	Name    string
	Current bool
	Breaker gobreaker.State
	Healthy bool // the last health check succeeded
}

// States returns every engine in order with its breaker and health.
func (s *Switcher) States() []EngineState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]EngineState, len(s.members))
	for i, m := range s.members {
		out[i] = EngineState{
			Name:    m.engine.Name(),
			Current: i == s.current,
			Breaker: m.breaker.State(),
			Healthy: !m.healthySince.IsZero(),
		}
	}
	return out
}

// SwitchEngine makes the next engine in order current (after the last
// comes the first) and returns its name.
func (s *Switcher) SwitchEngine() (string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", fmt.Errorf("switcher: switch: %w", locker.ErrClosed)
	}
	next := (s.current + 1) % len(s.members)
	s.mu.Unlock()
	return s.switchTo(next, ReasonManual, 0)
}

// SwitchEngineTo makes the named engine current.
func (s *Switcher) SwitchEngineTo(name string) (string, error) {
	i, err := s.index(name)
	if err != nil {
		return "", err
	}
	return s.switchTo(i, ReasonManual, 0)
}

func (s *Switcher) index(name string) (int, error) {
	for i, m := range s.members {
		if m.engine.Name() == name {
			return i, nil
		}
	}
	names := make([]string, len(s.members))
	for i, m := range s.members {
		names[i] = m.engine.Name()
	}
	return -1, fmt.Errorf("switcher: %w: unknown engine %q (want one of %q)", locker.ErrInvalidArgument, name, names)
}

// switchTo makes engine i current. A source epoch ahead of ours is adopted;
// otherwise the epoch goes up by one.
func (s *Switcher) switchTo(i int, reason Reason, epoch uint64) (string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", fmt.Errorf("switcher: switch: %w", locker.ErrClosed)
	}
	to := s.members[i].engine.Name()
	if i == s.current {
		if epoch > s.epoch {
			s.epoch = epoch
		}
		s.mu.Unlock()
		return to, nil
	}
	ev := Event{From: s.members[s.current].engine.Name(), To: to, Reason: reason, At: time.Now()}
	s.epoch = max(epoch, s.epoch+1)
	ev.Epoch = s.epoch
	s.previous, s.current, s.switchedAt = s.current, i, ev.At
	var moved []*wait
	for w := range s.waits {
		if w.engine != i {
			moved = append(moved, w)
		}
	}
	s.mu.Unlock()
	// Waiters on the old engine go to the new one: a dead engine would
	// never wake them, and a flip should move everyone.
	for _, w := range moved {
		w.cancel()
	}

	s.log.Info("switcher: engine switched", "from", ev.From, "to", ev.To, "reason", ev.Reason, "epoch", ev.Epoch)
	select {
	case s.events <- ev:
	default:
		s.log.Warn("switcher: OnSwitch hook is behind; event dropped", "from", ev.From, "to", ev.To)
	}
	return to, nil
}

// wait is an acquisition waiting on an engine; a switch away from that
// engine cancels it so that it goes again on the new current engine.
type wait struct {
	engine int
	cancel context.CancelFunc
}

// startWait registers a wait on engine i and returns its context; the
// returned func unregisters it.
func (s *Switcher) startWait(ctx context.Context, i int) (context.Context, func()) {
	wctx, cancel := context.WithCancel(ctx)
	w := &wait{engine: i, cancel: cancel}
	s.mu.Lock()
	s.waits[w] = struct{}{}
	moved := s.current != i
	s.mu.Unlock()
	if moved { // switched between reading current and registering
		cancel()
	}
	return wctx, func() {
		s.mu.Lock()
		delete(s.waits, w)
		s.mu.Unlock()
		cancel()
	}
}

// failover switches away from engine i if its breaker is open and it is
// still current. It reports whether a usable engine is current afterwards.
func (s *Switcher) failover(i int) bool {
	s.mu.Lock()
	cur := s.current
	s.mu.Unlock()
	if cur != i {
		return true // someone already switched
	}
	if s.members[i].breaker.State() != gobreaker.StateOpen {
		return true // not tripped yet: the same engine may be retried
	}
	for k := 1; k < len(s.members); k++ {
		j := (i + k) % len(s.members)
		if s.members[j].breaker.State() != gobreaker.StateOpen {
			_, err := s.switchTo(j, ReasonBreaker, 0)
			return err == nil
		}
	}
	return false
}

// watchBreakers fails over when a breaker opens outside an acquisition
// (a failed health check).
func (s *Switcher) watchBreakers() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.tripped:
			s.mu.Lock()
			cur := s.current
			s.mu.Unlock()
			s.failover(cur)
		}
	}
}

// deliver calls the OnSwitch hook in order, off the switching goroutine.
func (s *Switcher) deliver() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case ev := <-s.events:
			if s.opts.onSwitch != nil {
				s.opts.onSwitch(ev)
			}
		}
	}
}

// maxPings bounds the health checks of one engine in flight at once: a
// hung engine keeps failing them at the check rate, not at the timeout's.
const maxPings = 4

// checkHealth pings one engine through its breaker every healthEvery, so
// that a dead engine trips without traffic and a revived one closes again.
func (s *Switcher) checkHealth(m *member) {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.healthEvery)
	defer t.Stop()
	var pings sync.WaitGroup
	defer pings.Wait()
	inflight := make(chan struct{}, maxPings)
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		select {
		case inflight <- struct{}{}:
		default:
			continue
		}
		pings.Add(1)
		go func() {
			defer pings.Done()
			s.recordHealth(m, s.ping(m))
			<-inflight
		}()
	}
}

// recordHealth notes a health check and fails back to the primary once it
// has been healthy long enough.
func (s *Switcher) recordHealth(m *member, ok bool) {
	s.mu.Lock()
	switch {
	case !ok:
		m.healthySince = time.Time{}
	case m.healthySince.IsZero():
		m.healthySince = time.Now()
	}
	failback := s.opts.failbackAfter > 0 && m == s.members[0] && s.current != 0 &&
		ok && time.Since(m.healthySince) >= s.opts.failbackAfter &&
		m.breaker.State() == gobreaker.StateClosed
	s.mu.Unlock()
	if failback {
		_, _ = s.switchTo(0, ReasonFailback, 0)
	}
}

func (s *Switcher) ping(m *member) bool {
	done, err := m.breaker.Allow()
	if err != nil {
		return false // open: wait for half-open
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.healthTimeout)
	err = m.engine.Ping(ctx)
	cancel()
	if err != nil && !errors.Is(err, locker.ErrUnavailable) {
		err = fmt.Errorf("%w: %w", locker.ErrUnavailable, err) // a ping timing out is the engine's failure
	}
	done(err)
	return err == nil
}

// follow applies a source's values until Close.
func (s *Switcher) follow(src Source) {
	defer s.wg.Done()
	err := src.Watch(s.ctx, func(d Desired) {
		i, err := s.index(d.Engine)
		if err != nil {
			s.log.Error("switcher: source names an unknown engine; keeping the current one", "err", err)
			return
		}
		if _, err := s.switchTo(i, ReasonSource, d.Epoch); err != nil {
			s.log.Warn("switcher: source switch failed", "err", err)
		}
	})
	if err != nil && s.ctx.Err() == nil {
		s.log.Error("switcher: source stopped", "err", err)
	}
}

// Ping checks the current engine.
func (s *Switcher) Ping(ctx context.Context) error {
	s.mu.Lock()
	closed, m := s.closed, s.members[s.current]
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("switcher: ping: %w", locker.ErrClosed)
	}
	return m.engine.Ping(ctx)
}

// Close stops the health checks and sources and closes every engine, which
// releases the holds still held.
func (s *Switcher) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	var errs []error
	for _, m := range s.members {
		errs = append(errs, m.engine.Close())
	}
	return errors.Join(errs...)
}
