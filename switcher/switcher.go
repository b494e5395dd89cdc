package switcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// Switcher spreads new acquisitions over ordered engines: all go to the
// current engine, and the current engine changes by breaker, by a watched
// source, by hand, or by failback. It implements locker.Engine.
type Switcher struct {
	name     string
	members  []*member
	opts     settings
	log      *slog.Logger
	proposer Proposer      // the first shared source, nil without one
	voter    voter         // the proposer, when it lists the fleet's processes too
	id       string        // this switcher's Member ID
	minTTL   time.Duration // the largest MinTTL of the engines

	announced []chan struct{} // one per Announcer source

	mu         sync.Mutex
	current    int
	epoch      uint64
	previous   int       // the engine before the last switch
	switchedAt time.Time // when the last switch happened
	switched   chan struct{}
	closed     bool
	waits      map[*wait]struct{} // acquisitions waiting on an engine
	desired    int                // the engine the sources name; -1 before any value
	desiredEp  uint64             // the epoch of that value (0 from a source without epochs)
	alone      bool               // switched by breaker without the shared source's agreement: propose it again
	override   bool               // on an engine the source did not name (breaker, by hand, failback): stay until the source names another
	deferred   int                // the desired engine this process said it cannot use yet; -1 when none
	isolated   bool               // down here but not for the fleet (no quorum)
	home       int                // the fleet's engine this process left alone (IsolationAlone); -1 when none
	published  Member             // the last Member announced to the voter
	pending    *epochSync         // the epoch agreement grants wait for; nil when none
	fresh      bool               // before the decider's first decision: a move then is no switch of a process that granted

	retried atomic.Int64 // acquisitions that failed on an engine and went again

	// learned closes once the decider has read the shared source and acted
	// on it: grants wait for it, so that none is made at a stale epoch.
	learned chan struct{}

	kick   chan struct{}      // something changed: the decider looks again
	cancel context.CancelFunc // ends the context of the switcher's goroutines
	wg     sync.WaitGroup
	hook   hookQueue
	detach func() // the observer's, nil without one
}

var (
	_ locker.Engine           = (*Switcher)(nil)
	_ inspect.FamilyInspector = (*Switcher)(nil)
)

// member is one engine, its breaker and its health.
type member struct {
	engine   locker.Engine
	breaker  *gobreaker.TwoStepCircuitBreaker[struct{}]
	refused  atomic.Bool // the last failure said the engine is down: trip at once
	timedOut atomic.Bool // the last failure was a request given no answer in time
	tripNow  atomic.Bool // tripAtStart is reporting the start's failure: trip on it
	// untilOpen ends when the breaker opens, and is replaced then: a
	// release waiting on the engine gives up at once.
	untilOpen atomic.Pointer[openSignal]
	// window is the engine's ride-through window (Cluster), 0 for an
	// engine of one server; failingSince is when the current run of
	// failures began (UnixNano), 0 after a success.
	window       time.Duration
	failingSince atomic.Int64

	// With the consecutive-failures policy, a closed breaker whose last
	// outcome was a success needs to hear only of the next failure: calls
	// then skip the breaker's mutex, which every acquisition would share.
	bypass  bool
	closed  atomic.Bool // mirrors the breaker's state being closed
	failing atomic.Bool // the last outcome counted was a failure
	report  func(error) // the bypass's outcome: reports failures only
	// lastFailure is the latest failure counted, logged when the breaker
	// opens: the reason an operator looks for.
	lastFailure atomic.Pointer[error]

	// Guarded by Switcher.mu.
	healthySince time.Time // zero when the last ping failed or none succeeded yet
	pingFailed   bool      // the last ping failed
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
		name:     s.name,
		opts:     s,
		log:      s.logger.With("switcher", s.name),
		switched: make(chan struct{}),
		kick:     make(chan struct{}, 1),
		learned:  make(chan struct{}),
		hook:     newHookQueue(),
		waits:    make(map[*wait]struct{}),
		desired:  -1,
		deferred: -1,
		home:     -1,
		fresh:    true,
		id:       memberID(s.name),
	}
	if err := sw.addMembers(engines); err != nil {
		return nil, err
	}
	for _, src := range s.sources {
		if p, ok := src.(Proposer); ok {
			sw.proposer = p
			sw.voter, _ = src.(voter)
			break
		}
	}
	if sw.proposer == nil {
		close(sw.learned) // no fleet's epoch to learn: the decider's first look changes nothing
	}
	if s.start != "" {
		i, err := sw.index(s.start)
		if err != nil {
			return nil, fmt.Errorf("switcher: WithStart: %w", err)
		}
		sw.current = i
	}
	if err := sw.startDown(); err != nil {
		return nil, err
	}
	sw.switchedAt = time.Now()
	sw.pendSync(sw.current)
	if s.observer != nil {
		sw.detach = s.observer.Attach(sw)
	}
	sw.start()
	return sw, nil
}

// addMembers wraps each engine with its breaker, refusing nil engines and
// duplicate names.
func (s *Switcher) addMembers(engines []locker.Engine) error {
	seen := make(map[string]int, len(engines))
	for i, e := range engines {
		if e == nil {
			return fmt.Errorf("switcher: New: %w: engines[%d] is nil", locker.ErrInvalidArgument, i)
		}
		if j, dup := seen[e.Name()]; dup {
			return fmt.Errorf("switcher: New: %w: engines[%d] and engines[%d] are both named %q", locker.ErrInvalidArgument, j, i, e.Name())
		}
		seen[e.Name()] = i
		m := &member{engine: e, bypass: !s.opts.customBreaker}
		if c, ok := e.(Cluster); ok {
			m.window = max(c.RideThrough(), 0)
		}
		m.closed.Store(true)
		m.untilOpen.Store(newOpenSignal())
		m.report = m.reportFailure
		m.breaker = s.newBreaker(m)
		s.members = append(s.members, m)
		s.minTTL = max(s.minTTL, driver.MinTTL(e))
	}
	return nil
}

// MinTTL implements driver.MinTTLer: the largest minimum TTL of the
// engines, since a hold may go to any of them. NewLocker, NewRWLock and
// NewSemaphore refuse a WithTTL or WithLease below it.
func (s *Switcher) MinTTL() time.Duration { return s.minTTL }

// startDown opens the breaker of each engine WithDownAtStart names, and
// moves current off a down engine to the first one in order that is up.
// It runs before the switcher's goroutines: nothing can use the engines
// yet.
func (s *Switcher) startDown() error {
	down := make([]bool, len(s.members))
	for _, d := range s.opts.down {
		i, err := s.index(d.engine)
		if err != nil {
			return fmt.Errorf("switcher: WithDownAtStart: %w", err)
		}
		if down[i] {
			continue
		}
		down[i] = true
		m := s.members[i]
		m.tripAtStart(d.cause)
		m.pingFailed = true // not ready for a source until a health check passes
		s.log.Warn("switcher: engine down at start; its breaker starts open and the health check retries it after the open period",
			"engine", d.engine, "err", d.cause)
	}
	up := slices.Index(down, false)
	if !down[s.current] || up < 0 || s.waitsForFleet() {
		return nil // with a fleet, its vote decides, at the first decision
	}
	s.log.Warn("switcher: starting on the first engine that is up", "down", s.members[s.current].engine.Name(), "current", s.members[up].engine.Name())
	s.current = up
	return nil
}

// tripAtStart opens m's breaker with the failure that kept its engine from
// answering at start. gobreaker has no call that opens a breaker: the
// failure goes through Allow and the outcome as any other does, with
// ReadyToTrip told to trip on it, so that the state, the counts, the open
// period and OnStateChange stay the breaker's own.
func (m *member) tripAtStart(cause error) {
	if !errors.Is(cause, locker.ErrUnavailable) {
		cause = fmt.Errorf("%w: %w", locker.ErrUnavailable, cause) // what the breaker counts
	}
	m.tripNow.Store(true)
	defer m.tripNow.Store(false)
	if done, err := m.breaker.Allow(); err == nil {
		m.record(done, cause)
	}
}

// start starts the switcher's goroutines, which Close stops.
func (s *Switcher) start() {
	// The announcers' kicks exist before any goroutine runs: the decider
	// and the followers read them at their first change.
	kicks := make([]chan struct{}, len(s.opts.sources))
	for i, src := range s.opts.sources {
		if _, ok := src.(Announcer); ok {
			kicks[i] = make(chan struct{}, 1)
			s.announced = append(s.announced, kicks[i])
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(2 + len(s.members))
	go s.decide(ctx)
	go s.deliver(ctx)
	for _, m := range s.members {
		go s.checkHealth(ctx, m)
	}
	for i, src := range s.opts.sources {
		s.wg.Add(1)
		go s.follow(ctx, src)
		if kicks[i] != nil {
			s.wg.Add(1)
			go s.announce(ctx, src.(Announcer), kicks[i])
		}
	}
}

func (s *Switcher) newBreaker(m *member) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	st := s.opts.breaker
	st.Name = m.engine.Name()
	st.IsSuccessful = func(err error) bool { return !errors.Is(err, locker.ErrUnavailable) }
	// A caller giving up says nothing about the engine.
	st.IsExcluded = func(err error) bool {
		return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, locker.ErrUnavailable)
	}
	trip := st.ReadyToTrip
	if trip == nil {
		trip = consecutiveFailures(DefaultFailures)
	}
	// A refused connection is certain: no need to wait for more failures.
	// A cluster's failures are its own business while they last less than
	// its ride-through window: an election, a member's death or restart,
	// even every member refusing clients while they elect. A timeout says
	// the engine is slow, which beats no engine: it opens the breaker only
	// while another engine's is closed. The failure that kept an engine
	// from answering at start waited out the start timeout already.
	st.ReadyToTrip = func(c gobreaker.Counts) bool {
		switch {
		case m.tripNow.Load():
			return true
		case m.window > 0 && !m.failedFor(m.window):
			return false
		}
		return m.refused.Load() || trip(c) && (!m.timedOut.Load() || s.closedElsewhere(m))
	}
	user := st.OnStateChange
	st.OnStateChange = func(name string, from, to gobreaker.State) {
		// Runs under the breaker's mutex: only signal from here.
		m.closed.Store(to == gobreaker.StateClosed)
		if to == gobreaker.StateOpen {
			m.untilOpen.Swap(newOpenSignal()).cancel()
		}
		s.changed() // the process's vote (Member.Down) changed
		// Not each failed probe of an outage, nor a start while the
		// engine is down, which startDown logs.
		if from == gobreaker.StateClosed && to == gobreaker.StateOpen && !m.tripNow.Load() {
			var last error
			if p := m.lastFailure.Load(); p != nil {
				last = *p
			}
			s.log.Warn("switcher: engine breaker opened", "engine", name, "last_failure", last)
		}
		s.poke()
		if user != nil {
			user(name, from, to)
		}
	}
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](st)
}

// closedElsewhere reports whether an engine other than m has a closed
// breaker. It reads the breakers' mirrors, not their state: it runs under
// m's breaker mutex, and two breakers asking each other would deadlock.
func (s *Switcher) closedElsewhere(m *member) bool {
	for _, o := range s.members {
		if o != m && o.closed.Load() {
			return true
		}
	}
	return false
}

// openSignal is a context that ends when a breaker opens.
type openSignal struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newOpenSignal() *openSignal {
	ctx, cancel := context.WithCancel(context.Background())
	return &openSignal{ctx, cancel}
}

// allow admits one call on m, as the breaker's Allow does; the returned
// func takes the call's outcome.
func (m *member) allow() (func(error), error) {
	if m.bypass && m.closed.Load() && !m.failing.Load() {
		return m.report, nil
	}
	done, err := m.breaker.Allow()
	if err != nil {
		return nil, err
	}
	return func(err error) { m.record(done, err) }, nil
}

// reportFailure is the outcome of a call admitted without the breaker:
// a success changes nothing it counts, a failure is reported in full.
func (m *member) reportFailure(err error) {
	if err == nil || !errors.Is(err, locker.ErrUnavailable) {
		return
	}
	if done, aerr := m.breaker.Allow(); aerr == nil {
		m.record(done, err)
	}
}

// record reports the outcome of one call on m to its breaker.
func (m *member) record(done func(error), err error) {
	switch {
	case errors.Is(err, locker.ErrUnavailable):
		// Set by failures only: ReadyToTrip reads them for the failure
		// it judges, which a success recorded meanwhile must not change.
		m.refused.Store(errors.Is(err, locker.ErrRefused))
		m.timedOut.Store(timeout(err))
		m.failing.Store(true)
		m.failingSince.CompareAndSwap(0, time.Now().UnixNano())
		m.lastFailure.Store(&err)
	case err == nil || !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
		m.failing.Store(false)
		m.failingSince.Store(0)
	}
	done(err)
}

// timeout reports whether err is a request that got no answer in time: a
// context's deadline, or a client's own read or dial timeout.
func timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}

// failedFor tells whether every outcome m counted in the last d was a
// failure.
func (m *member) failedFor(d time.Duration) bool {
	since := m.failingSince.Load()
	return since != 0 && time.Since(time.Unix(0, since)) >= d
}

// Cluster is implemented by engines over a cluster that elects a leader
// (etcd and ZooKeeper ensembles, Redis behind Sentinel): a leader
// election or a failover, a member's death or its
// restart make the engine fail for a moment that its cluster survives.
// RideThrough is that moment's longest expected length, from the
// cluster's election mechanics: the breaker opens only once the engine has
// failed, without a success, for that long — whatever the failures, a
// refused connection included. 0 (an engine over one server, which has no
// election to wait for) keeps the breaker's rule: a refusal opens it at
// once, other failures after WithBreaker's count.
type Cluster interface {
	RideThrough() time.Duration
}

// poke makes the decider look at the state again.
func (s *Switcher) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Name returns the switcher's name.
func (s *Switcher) Name() string { return s.name }

// Current returns the name of the engine new acquisitions go to.
func (s *Switcher) Current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members[s.current].engine.Name()
}

// Epoch returns the current switch epoch. With a shared source it is the
// version of the source's value that the current engine follows, the same
// in every process of the fleet; otherwise it counts this process's
// switches.
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
	Desired bool            // a source names it; it differs from Current while this process cannot use it
	Breaker gobreaker.State // in JSON, its name: "closed", "half-open" or "open"
	Healthy bool            // the last health check succeeded
}

// engineStateJSON is EngineState with its breaker state by name.
type engineStateJSON struct {
	Name    string
	Current bool
	Desired bool
	Breaker string
	Healthy bool
}

// MarshalJSON writes the breaker state by name, as gobreaker's String
// spells it: a number would mean nothing to a reader of a status page.
func (st EngineState) MarshalJSON() ([]byte, error) {
	return json.Marshal(engineStateJSON{st.Name, st.Current, st.Desired, st.Breaker.String(), st.Healthy})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (st *EngineState) UnmarshalJSON(b []byte) error {
	var j engineStateJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*st = EngineState{Name: j.Name, Current: j.Current, Desired: j.Desired, Healthy: j.Healthy}
	switch j.Breaker {
	case gobreaker.StateClosed.String():
		st.Breaker = gobreaker.StateClosed
	case gobreaker.StateHalfOpen.String():
		st.Breaker = gobreaker.StateHalfOpen
	case gobreaker.StateOpen.String():
		st.Breaker = gobreaker.StateOpen
	default:
		return fmt.Errorf("switcher: EngineState: unknown breaker state %q (want closed, half-open or open)", j.Breaker)
	}
	return nil
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
			Desired: i == s.desired,
			Breaker: m.breaker.State(),
			Healthy: !m.healthySince.IsZero(),
		}
	}
	return out
}

// SwitchEngine makes the next engine in order current (after the last
// comes the first) and returns its name. The switch is this process's
// alone, even with a shared source: use the source's Set to move a fleet.
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

// SwitchEngineTo makes the named engine current, in this process only.
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

// keepEpoch asks switchTo to leave the epoch as it is: a process that
// leaves the fleet's engine alone, or comes back to it, must not raise its
// epoch above the fleet's.
const keepEpoch = ^uint64(0)

// switchTo makes engine i current. A shared source's epoch (> 0) is
// adopted as it is, so that every process following the source has the
// same, unless the process's own is as high already (a record outranked
// the source's versions): a switch always raises the epoch — but for a
// process's first decision, which moves it to where its fleet is and takes
// the fleet's epoch. keepEpoch keeps it; with 0 the epoch goes up by one.
func (s *Switcher) switchTo(i int, reason Reason, epoch uint64) (string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", fmt.Errorf("switcher: switch: %w", locker.ErrClosed)
	}
	to := s.members[i].engine.Name()
	if i == s.current {
		// No switch; a shared source's newer epoch is still adopted, so
		// that this process's tokens on the engine match the fleet's.
		raised := epoch > s.epoch && epoch != keepEpoch
		if raised {
			s.epoch = epoch
		}
		s.mu.Unlock()
		if raised {
			s.log.Info("switcher: epoch raised to the source's", "engine", to, "reason", reason, "epoch", epoch)
			s.changed()
		}
		return to, nil
	}
	ev := Event{From: s.members[s.current].engine.Name(), To: to, Reason: reason, At: time.Now()}
	switch {
	case epoch == keepEpoch:
	case epoch > 0 && s.fresh:
		s.epoch = max(epoch, s.epoch)
	case epoch > 0:
		s.epoch = max(epoch, s.epoch+1)
	default:
		s.epoch++
	}
	ev.Epoch = s.epoch
	s.previous, s.current, s.switchedAt = s.current, i, ev.At
	if s.deferred == i {
		s.deferred = -1
	}
	if s.home == i {
		s.home = -1
	}
	s.isolated = false
	s.pendSync(i)
	if i == s.desired {
		s.alone, s.override = false, false
	} else if s.desired >= 0 && reason != ReasonSource {
		s.override = true
	}
	close(s.switched)
	s.switched = make(chan struct{})
	var moved []*wait
	for w := range s.waits {
		if w.engine != i {
			moved = append(moved, w)
		}
	}
	s.mu.Unlock()
	s.observeSwitch(ev)
	// Waiters on the old engine go to the new one: a dead engine would
	// never wake them, and a flip should move everyone.
	for _, w := range moved {
		w.cancel()
	}
	s.log.Info("switcher: engine switched", "from", ev.From, "to", ev.To, "reason", ev.Reason, "epoch", ev.Epoch)
	s.emit(ev)
	s.changed()
	s.poke() // the decider agrees the epoch with the new engine's record
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
	if s.detach != nil {
		s.detach()
	}
	var errs []error
	for _, m := range s.members {
		errs = append(errs, m.engine.Close())
	}
	return errors.Join(errs...)
}
