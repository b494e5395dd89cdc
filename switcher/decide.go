package switcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
)

// decide is the one goroutine that changes engines on its own: when a
// breaker opens or closes, a source names another engine, a health check
// changes its verdict, or a proposal to the shared source must be retried.
// Making every such decision here keeps them in order and lets concurrent
// triggers collapse into one.
func (s *Switcher) decide(ctx context.Context) {
	defer s.wg.Done()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	s.adoptRecords(ctx)
	if s.proposer != nil {
		s.learn(ctx)
	}
	for first := true; ; first = false {
		again := s.reconcile(ctx)
		if first && s.proposer != nil {
			close(s.learned) // the first decision is made: grants may begin
		}
		again = s.completeSync(ctx) || again
		if first {
			s.mu.Lock()
			s.fresh = false
			s.mu.Unlock()
		}
		if again {
			retry.Reset(s.opts.healthEvery)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-retry.C:
		}
	}
}

// reconcile makes one decision and reports whether it must be retried
// later (a switch the shared source has not agreed to yet).
func (s *Switcher) reconcile(ctx context.Context) bool {
	s.mu.Lock()
	cur, epoch, want, wantEp, alone, override := s.current, s.epoch, s.desired, s.desiredEp, s.alone, s.override
	s.mu.Unlock()

	if home := s.homeAgain(); home >= 0 {
		_, _ = s.switchTo(home, ReasonBreaker, keepEpoch)
		return false
	}
	switch {
	case want < 0 || override:
	case want == cur && wantEp > epoch:
		// Already on the engine the source names (started there, or
		// stayed while others switched to it): take its epoch, which
		// every process that switched to it has, or this process's
		// tokens would be refused by a resource they wrote to.
		_, _ = s.switchTo(want, ReasonSource, wantEp)
	case want == cur:
	case s.ready(want):
		_, _ = s.switchTo(want, ReasonSource, wantEp)
		return false
	case s.waitsForFleet():
		// Down here only, as far as this process knows: it grants on the
		// fleet's engine or nowhere, and votes there like every process.
		_, _ = s.switchTo(want, ReasonSource, wantEp)
	default:
		s.deferTo(want)
	}
	if s.open(cur) {
		next := s.nextUsable(cur)
		if next < 0 {
			return false // every breaker is open: waiting callers ride out the outage
		}
		if s.proposer == nil {
			_, _ = s.switchTo(next, ReasonBreaker, 0)
			return false
		}
		if !s.fleetSeesDown(ctx, cur) {
			if s.opts.isolation == IsolationAlone {
				s.leave(cur, next)
			}
			return true // count the votes again: the fleet may come to see it too
		}
		// Without a value yet (a key never written: every new fleet), the
		// proposal from epoch 0 creates it, so the fleet still follows one
		// decision at one epoch.
		return s.propose(ctx, next, wantEp, ReasonBreaker)
	}
	s.rejoined(cur)
	switch {
	case alone:
		// Switched without the source: ask it again, so that the fleet
		// and the epoch converge on one decision.
		return s.propose(ctx, cur, wantEp, ReasonBreaker)
	case s.failbackDue(cur):
		if s.proposer == nil {
			_, _ = s.switchTo(0, ReasonFailback, 0)
			return false
		}
		return s.propose(ctx, 0, wantEp, ReasonFailback)
	}
	return false
}

// ready reports whether engine i can take acquisitions: its breaker is
// closed and its last health check, if any, passed.
func (s *Switcher) ready(i int) bool {
	m := s.members[i]
	s.mu.Lock()
	failed := m.pingFailed
	s.mu.Unlock()
	return !failed && m.breaker.State() == gobreaker.StateClosed
}

func (s *Switcher) open(i int) bool { return s.members[i].breaker.State() == gobreaker.StateOpen }

// nextUsable returns the engine to fail over to from cur: the one the
// source names if it is ready, else the next in order with a closed
// breaker; -1 when there is none.
func (s *Switcher) nextUsable(cur int) int {
	s.mu.Lock()
	want := s.desired
	s.mu.Unlock()
	if want >= 0 && want != cur && s.ready(want) {
		return want
	}
	for k := 1; k < len(s.members); k++ {
		j := (cur + k) % len(s.members)
		if s.members[j].breaker.State() == gobreaker.StateClosed {
			return j
		}
	}
	return -1
}

// deferTo says, once per value, that the source names an engine this
// process cannot use yet; the decider follows when a health check passes.
func (s *Switcher) deferTo(want int) {
	s.mu.Lock()
	if s.deferred == want {
		s.mu.Unlock()
		return
	}
	s.deferred = want
	ev := Event{From: s.members[s.current].engine.Name(), To: s.members[want].engine.Name(), Reason: ReasonDeferred, At: time.Now(), Epoch: s.epoch}
	s.mu.Unlock()
	s.log.Warn("switcher: the source names an engine that is down here; staying until it is healthy",
		"current", ev.From, "desired", ev.To, "breaker", s.members[want].breaker.State().String())
	s.observeSwitch(ev)
	s.emit(ev)
}

// propose asks the shared source to move the fleet to engine i, from the
// value of epoch from. Whoever wins, this process applies what the source
// holds now. When the source does not answer, the process switches alone,
// at the epoch the proposal would have had, and reconcile retries.
func (s *Switcher) propose(ctx context.Context, i int, from uint64, reason Reason) bool {
	to := s.members[i].engine.Name()
	pctx, cancel := context.WithTimeout(ctx, s.opts.healthTimeout)
	d, won, err := s.proposer.Propose(pctx, from, to)
	cancel()
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		s.mu.Lock()
		wasAlone := s.alone
		// Not alone when the source names i already (its watch delivered
		// another process's winning proposal, or this one's, applied
		// after the answer was given up on): proposing i again, from the
		// source's epoch, would raise every process's epoch for no switch.
		alone := s.desired != i
		s.alone = alone
		s.mu.Unlock()
		if alone && !wasAlone {
			s.log.Warn("switcher: the shared source did not answer; switching alone until it does", "to", to, "err", err)
		}
		_, _ = s.switchTo(i, reason, from+1)
		return alone
	}
	switch {
	case won:
		s.setDesired(d)
		_, _ = s.switchTo(i, reason, d.Epoch)
	case s.setDesired(d):
		s.poke() // another decision won: follow it
	default:
		// The source names no engine of this process (setDesired logged
		// it): there is nothing to follow, so decide alone, as without a
		// shared source, rather than propose again and again.
		_, _ = s.switchTo(i, reason, 0)
	}
	return false
}

// learn reads the shared source before the first grant, so that a process
// started or restarted after switches grants on the fleet's engine at the
// fleet's epoch, not on its start engine at epoch 0: the watch's first
// value may come after the first grant. A source that does not answer
// within the health timeout leaves the process where it starts until the
// watch delivers; one whose key was never written leaves it there too.
func (s *Switcher) learn(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, s.opts.healthTimeout)
	d, ok, err := s.proposer.Read(rctx)
	cancel()
	switch {
	case ctx.Err() != nil:
	case err != nil:
		s.log.Warn("switcher: the shared source did not answer at start; granting on the start engine until it does", "err", err)
	case ok:
		s.desire(d, true)
	}
}

// awaitLearned waits until the decider has made its first decision with
// the shared source's value (at once without a shared source), or ctx is
// done.
func (s *Switcher) awaitLearned(ctx context.Context) error {
	select { // first alone: once learned, a done ctx is the attempt's business
	case <-s.learned:
		return nil
	default:
	}
	select {
	case <-s.learned:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// setDesired records a source's value; it reports false for an unknown
// engine.
func (s *Switcher) setDesired(d Desired) bool { return s.desire(d, false) }

// desire records a source's value, and with onlyFirst only when none was
// recorded yet: a value read once must not replace a newer one that the
// watch delivered meanwhile. It reports false for an unknown engine.
func (s *Switcher) desire(d Desired, onlyFirst bool) bool {
	i, err := s.index(d.Engine)
	if err != nil {
		s.log.Error("switcher: source names an unknown engine; keeping the current one", "err", err)
		return false
	}
	s.mu.Lock()
	if onlyFirst && s.desired >= 0 {
		s.mu.Unlock()
		return true
	}
	// A newer value decides; a source without versions (a file) decides
	// with every value it delivers, as an operator writing it means it.
	if i != s.desired || d.Epoch != s.desiredEp || d.Epoch == 0 {
		s.alone, s.override = false, false
		if i != s.desired {
			s.deferred, s.home = -1, -1 // the fleet moved: follow it, not the engine left
		}
	}
	s.desired, s.desiredEp = i, d.Epoch
	s.mu.Unlock()
	s.changed()
	return true
}

// failbackDue reports whether the primary has been healthy for the
// failback period while another engine is current.
func (s *Switcher) failbackDue(cur int) bool {
	if s.opts.failbackAfter <= 0 || cur == 0 {
		return false
	}
	m := s.members[0]
	s.mu.Lock()
	since := m.healthySince
	s.mu.Unlock()
	return !since.IsZero() && time.Since(since) >= s.opts.failbackAfter && m.breaker.State() == gobreaker.StateClosed
}

// follow applies a source's values until Close.
func (s *Switcher) follow(ctx context.Context, src Source) {
	defer s.wg.Done()
	err := src.Watch(ctx, func(d Desired) {
		if s.setDesired(d) {
			s.poke()
		}
	})
	if err != nil && ctx.Err() == nil {
		s.log.Error("switcher: source stopped", "err", err)
	}
}

// maxPings bounds the health checks of one engine in flight at once: a
// hung engine keeps failing them at the check rate, not at the timeout's.
const maxPings = 4

// checkHealth pings one engine through its breaker every healthEvery, so
// that a dead engine trips without traffic and a revived one closes again.
func (s *Switcher) checkHealth(ctx context.Context, m *member) {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.healthEvery)
	defer t.Stop()
	var pings sync.WaitGroup
	defer pings.Wait()
	inflight := make(chan struct{}, maxPings)
	i := slices.Index(s.members, m)
	var checks atomic.Int64
	for {
		select {
		case <-ctx.Done():
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
			ok := s.ping(ctx, m)
			s.recordHealth(m, ok)
			if ok && checks.Add(1)%epochResync == 0 {
				s.syncEpoch(ctx, i) // only while current: another process may have raised its record
			}
			<-inflight
		}()
	}
}

// recordHealth notes a health check and wakes the decider when the
// verdict changes or a failback may be due.
func (s *Switcher) recordHealth(m *member, ok bool) {
	s.mu.Lock()
	changed := m.pingFailed == ok
	m.pingFailed = !ok
	switch {
	case !ok:
		m.healthySince = time.Time{}
	case m.healthySince.IsZero():
		m.healthySince = time.Now()
	}
	failback := s.opts.failbackAfter > 0 && m == s.members[0] && s.current != 0
	s.mu.Unlock()
	if changed || failback {
		s.poke()
	}
}

func (s *Switcher) ping(ctx context.Context, m *member) bool {
	done, err := m.breaker.Allow()
	if err != nil {
		return false // open: wait for half-open
	}
	// When no other engine is usable, slow is not dead: a ping may take as
	// long as a request may, so that a slow engine whose breaker opened
	// while another was still up closes again once it is all there is.
	wait := s.opts.healthTimeout
	if !s.closedElsewhere(m) {
		wait = max(wait, driver.DefaultRequestTimeout)
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	err = m.engine.Ping(pctx)
	late := pctx.Err() != nil
	cancel()
	if ctx.Err() != nil {
		done(ctx.Err()) // closing: excluded, says nothing of the engine
		return false
	}
	if err != nil && !errors.Is(err, locker.ErrUnavailable) {
		err = fmt.Errorf("%w: %w", locker.ErrUnavailable, err) // a ping timing out is the engine's failure
	}
	if err != nil && late && !timeout(err) {
		// Slow, whatever the client made of its cut-short request (an EOF,
		// a closed connection): slow is not dead while nothing else is left.
		err = fmt.Errorf("%w: %w", err, context.DeadlineExceeded)
	}
	m.record(done, err)
	return err == nil
}
