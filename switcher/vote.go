package switcher

import (
	"context"
	"slices"
)

// voter is a shared source through which a fleet counts its processes'
// verdicts on an engine: each announces the engines it sees down, and the
// roster lists the live processes' announcements.
type voter interface {
	Announcer
	Roster
}

// fleetSeesDown reports whether the fleet agrees that engine cur, whose
// breaker is open here, is down: a quorum of its live processes, this one
// included, announce it down. Each process announces its vote before it
// counts, so when every process sees the engine down, the last to count
// sees every vote: a whole-engine outage moves the fleet at once, while one
// process with a bad link, a pause or a starved CPU moves nobody. Without a
// roster, or when the source does not answer, the fleet cannot be asked:
// it reports true, and the proposal decides (alone when the source is down).
// The votes get twice the proposal's time: a source that answers late (a
// starved process's reads come late) must be counted, not read as a fleet
// that agrees while the proposal, one request, still lands.
func (s *Switcher) fleetSeesDown(ctx context.Context, cur int) bool {
	if s.voter == nil {
		return true
	}
	vctx, cancel := context.WithTimeout(ctx, 2*s.opts.healthTimeout)
	defer cancel()
	me, err := s.vote(vctx)
	if err != nil {
		return true
	}
	fleet, err := s.voter.Members(vctx)
	if err != nil {
		return true
	}
	engine := s.members[cur].engine.Name()
	live, down := 1, 1 // this process, whose breaker is open
	for _, m := range fleet {
		if m.ID == me.ID {
			continue
		}
		live++
		if slices.Contains(m.Down, engine) {
			down++
		}
	}
	need := live/2 + 1
	if s.opts.quorum > 0 {
		need = min(s.opts.quorum, live)
	}
	agreed := down >= need
	s.mu.Lock()
	was := s.isolated
	s.isolated = !agreed
	s.mu.Unlock()
	if !agreed && !was {
		s.log.Warn("switcher: engine down here but not for the fleet; not switching the fleet",
			"engine", engine, "down_for", down, "live", live, "quorum", need, "isolation", s.opts.isolation.String())
	}
	return agreed
}

// waitsForFleet reports whether this process grants only on its fleet's
// engine (IsolationWait with a fleet it can count): then an engine that is
// down here alone is waited for, never left — at start too.
func (s *Switcher) waitsForFleet() bool {
	return s.voter != nil && s.opts.isolation == IsolationWait
}

// String names the Isolation in logs.
func (i Isolation) String() string {
	if i == IsolationAlone {
		return "alone"
	}
	return "wait"
}

// rejoined logs the end of an isolation: the fleet's engine answers this
// process again.
func (s *Switcher) rejoined(cur int) {
	s.mu.Lock()
	was := s.isolated
	s.isolated = false
	s.mu.Unlock()
	if was {
		s.log.Info("switcher: the fleet's engine answers again", "engine", s.members[cur].engine.Name())
	}
}

// leave moves this process alone off the fleet's engine cur to next
// (IsolationAlone), at the fleet's epoch; homeAgain brings it back.
func (s *Switcher) leave(cur, next int) {
	s.mu.Lock()
	s.home = cur
	s.mu.Unlock()
	s.log.Warn("switcher: leaving the fleet's engine alone until it answers here again",
		"from", s.members[cur].engine.Name(), "to", s.members[next].engine.Name())
	_, _ = s.switchTo(next, ReasonBreaker, keepEpoch)
}

// homeAgain returns the fleet's engine this process left alone, once it
// can use it again; -1 otherwise.
func (s *Switcher) homeAgain() int {
	s.mu.Lock()
	home := s.home
	s.mu.Unlock()
	if home < 0 || !s.ready(home) {
		return -1
	}
	return home
}

// vote announces this process's Member, and with it its vote, before it
// counts the others': unless the voter holds it already, since an isolated
// process counts at every health check.
func (s *Switcher) vote(ctx context.Context) (Member, error) {
	m := s.Member()
	s.mu.Lock()
	p := s.published
	s.mu.Unlock()
	if p.ID != "" && p.Engine == m.Engine && p.Epoch == m.Epoch && p.Desired == m.Desired && slices.Equal(p.Down, m.Down) {
		return m, nil
	}
	return m, s.announceTo(ctx, s.voter, m)
}

// announceTo announces m through a, and notes what the voter holds.
func (s *Switcher) announceTo(ctx context.Context, a Announcer, m Member) error {
	err := a.Announce(ctx, m)
	if err == nil && a == Announcer(s.voter) {
		s.mu.Lock()
		s.published = m
		s.mu.Unlock()
	}
	return err
}
