package lockertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/elect"
	"github.com/orthrus-go/orthrus/locker"
)

// RunElection runs the conformance suite of package elect on the engines
// factory makes, each one process of a fleet: one leader at a time among
// candidates on several processes, with no write refused by a fenced
// resource; observers that see every leadership in order with its value,
// host and pid; Resign that hands over; a lost hold that ends the
// leadership context with ErrLockLost; and errors naming the misuse.
// Engines must implement inspect.Inspector. The Lost case needs
// Harness.Expire, and is skipped without it.
func RunElection(t *testing.T, factory Factory) {
	runCases(t, factory, []suiteCase{
		{"OneLeader", testElectOneLeader},
		{"Resign", testElectResign},
		{"Lost", testElectLost},
		{"Misuse", testElectMisuse},
	})
}

// electTTL is the leadership TTL of the suite: short, so that a broken
// hand-off shows within the case's time, but long enough that renewals on
// a loaded machine keep it.
const electTTL = 3 * time.Second

func newCandidate(t *testing.T, e locker.Engine, name string, opts ...elect.Option) *elect.Candidate {
	t.Helper()
	c, err := elect.New(e, name, append([]elect.Option{elect.WithTTL(shortTTL(electTTL, e))}, opts...)...)
	if err != nil {
		t.Fatalf("elect.New(%q) = %v", name, err)
	}
	return c
}

// campaign is a Campaign of c on its own goroutine: its result comes on
// done, its leadership context on won.
type campaign struct {
	done chan error
	won  chan context.Context
}

func startCampaign(ctx context.Context, c *elect.Candidate) campaign {
	r := campaign{done: make(chan error, 1), won: make(chan context.Context, 1)}
	go func() {
		lctx, err := c.Campaign(ctx)
		if err == nil {
			r.won <- lctx
		}
		r.done <- err
	}()
	return r
}

// wait waits up to d for the campaign to win, and returns its leadership
// context.
func (r campaign) wait(t *testing.T, d time.Duration, what string) context.Context {
	t.Helper()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("%s: Campaign() = %v; want nil", what, err)
		}
		return <-r.won
	case <-time.After(d):
		t.Fatalf("%s: Campaign() not won within %v", what, d)
		return nil
	}
}

// sightings are the leaders an observer reported, in order; a leader
// waits for its own.
type sightings struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced at each sighting
	seen    []elect.Leader
}

// collect records what observed reports until it closes; done closes
// then.
func (s *sightings) collect(observed <-chan elect.Leader, done chan<- struct{}) {
	defer close(done)
	for l := range observed {
		s.mu.Lock()
		s.seen = append(s.seen, l)
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
}

// of counts the sightings of owner, and returns a channel closed at the
// next sighting of anyone.
func (s *sightings) of(owner string) (int, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.seen {
		if l.Owner == owner {
			n++
		}
	}
	return n, s.changed
}

// await waits until owner has been sighted more than before times.
func (s *sightings) await(ctx context.Context, owner string, before int) error {
	for {
		n, changed := s.of(owner)
		if n > before {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("leadership of %s not observed: %w", owner, ctx.Err())
		}
	}
}

// fence is a resource that refuses a write whose token is lower than the
// highest it has accepted.
type fence struct {
	mu                 sync.Mutex
	max                uint64
	accepted, refused  int
	firstRefusedToken  uint64
	firstRefusedLeader string
}

func (f *fence) write(token uint64, leader string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.max {
		if f.refused == 0 {
			f.firstRefusedToken, f.firstRefusedLeader = token, leader
		}
		f.refused++
		return
	}
	f.max = token
	f.accepted++
}

// Five candidates on three processes take turns, each leading until an
// observer on a fourth process has reported it: never two leaders at
// once, no write refused by a fenced resource, and every leadership
// observed, in order, with its value, host and pid.
func testElectOneLeader(t *testing.T, f Factory) {
	const candidates, minTerms = 5, 10
	procs := []locker.Engine{open(t, f).Engine, open(t, f).Engine, open(t, f).Engine}
	name := lockName(t, "leader")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	observed := elect.Observe(octx, open(t, f).Engine, name, 20*time.Millisecond)
	if l := <-observed; l.Owner != "" {
		t.Fatalf("Observe() first reported %+v; want the zero Leader (nobody leads)", l)
	}
	s := &sightings{changed: make(chan struct{})}
	collected := make(chan struct{})
	go s.collect(observed, collected)

	tl := &turns{}
	res := &fence{}
	var wg sync.WaitGroup
	for i := range candidates {
		c := newCandidate(t, procs[i%len(procs)], name, elect.WithValue(fmt.Sprint("candidate-", i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tl.count() < minTerms && ctx.Err() == nil {
				if err := leadOnce(ctx, c, s, res, tl); err != nil {
					t.Error(err)
					_ = c.Resign() // if it still leads: let the others end
					return
				}
			}
		}()
	}
	wg.Wait()
	stopObserving()
	<-collected

	if tl.overlaps > 0 {
		t.Errorf("%d leaderships began while another was on", tl.overlaps)
	}
	if res.refused > 0 {
		t.Errorf("fenced resource refused %d writes (the first: token %d of %s); want 0", res.refused, res.firstRefusedToken, res.firstRefusedLeader)
	}
	n := checkSightings(t, s.seen, tl.terms)
	t.Logf("%d terms, %d leaderships observed, %d writes accepted", tl.terms, n, res.accepted)
}

// turns counts the leaderships of a case: those on now, those that began
// while another was on, and those that ended well.
type turns struct {
	mu                       sync.Mutex
	leading, overlaps, terms int
}

// lead notes a leadership's start (on) or end.
func (tl *turns) lead(on bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	switch {
	case !on:
		tl.leading--
	case tl.leading > 0:
		tl.overlaps++
		fallthrough
	default:
		tl.leading++
	}
}

func (tl *turns) count() int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.terms
}

func (tl *turns) ended() {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.terms++
}

// leadOnce campaigns, leads until the observer has reported the
// leadership (writing to res at its start and end), and resigns.
func leadOnce(ctx context.Context, c *elect.Candidate, s *sightings, res *fence, tl *turns) error {
	before, _ := s.of(c.Owner())
	lctx, err := c.Campaign(ctx)
	if err != nil {
		return fmt.Errorf("Campaign() = %w", err)
	}
	tl.lead(true)
	token := c.Token()
	if token == 0 {
		return fmt.Errorf("Token() of a leader = 0; want the leadership's token")
	}
	res.write(token, c.Owner())
	seen := s.await(ctx, c.Owner(), before)
	res.write(token, c.Owner())
	tl.lead(false)
	if lctx.Err() != nil {
		return fmt.Errorf("leadership context ended during the term: %v", context.Cause(lctx))
	}
	if err := c.Resign(); err != nil {
		return fmt.Errorf("Resign() = %w", err)
	}
	if !errors.Is(context.Cause(lctx), context.Canceled) {
		return fmt.Errorf("leadership context's cause after Resign() = %v; want context.Canceled", context.Cause(lctx))
	}
	if seen != nil {
		return seen
	}
	tl.ended()
	return nil
}

// checkSightings checks what an observer reported while terms leaderships
// came and went: each leadership (but the zero Leader when nobody led)
// once, in token order on each engine, with its value, host and pid. It
// returns how many leaderships were reported.
func checkSightings(t *testing.T, seen []elect.Leader, terms int) int {
	t.Helper()
	var leaders []elect.Leader
	for _, l := range seen {
		if l.Owner != "" {
			leaders = append(leaders, l)
		}
	}
	if len(leaders) != terms {
		t.Errorf("observer reported %d leaderships; want %d (every term)", len(leaders), terms)
	}
	host, _ := os.Hostname()
	for i, l := range leaders {
		if !strings.HasPrefix(l.Value, "candidate-") || l.PID != os.Getpid() || (host != "" && l.Host != host) || l.Engine == "" || l.Token == 0 {
			t.Errorf("observed leader %d = %+v; want its value, host %q, pid %d, engine and token", i, l, host, os.Getpid())
		}
		if i == 0 {
			continue
		}
		prev := leaders[i-1]
		if l.Engine == prev.Engine && l.Token <= prev.Token {
			t.Errorf("observed leader %d (token %d) after leader %d (token %d): out of order", i, l.Token, i-1, prev.Token)
		}
	}
	return len(leaders)
}

// Resign ends the leadership context (cause context.Canceled) and hands
// over to a waiting candidate of another process, whose token is higher;
// CurrentLeader reports each leader with its value, host and pid, and
// ErrNoLeader when nobody leads.
func testElectResign(t *testing.T, f Factory) {
	p1, p2 := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "resign")
	ctx := context.Background()
	if l, err := elect.CurrentLeader(ctx, p2, name); !errors.Is(err, elect.ErrNoLeader) {
		t.Fatalf("CurrentLeader() before any campaign = %+v, %v; want ErrNoLeader", l, err)
	}
	a := newCandidate(t, p1, name, elect.WithValue("a"))
	b := newCandidate(t, p2, name, elect.WithValue("b"))
	lctxA := startCampaign(ctx, a).wait(t, 20*time.Second, "a")
	tokenA := a.Token()
	wantLeader(t, p2, name, a, "a")

	cb := startCampaign(ctx, b)
	WantPending(t, cb.done, "b's Campaign() while a leads")
	if err := a.Resign(); err != nil {
		t.Fatalf("a.Resign() = %v", err)
	}
	resigned := time.Now()
	select {
	case <-lctxA.Done():
	default:
		t.Errorf("a's leadership context not done when Resign() returned")
	}
	if cause := context.Cause(lctxA); !errors.Is(cause, context.Canceled) {
		t.Errorf("a's leadership context's cause = %v; want context.Canceled", cause)
	}
	cb.wait(t, 20*time.Second, "b after a resigned")
	t.Logf("b led %v after a resigned", time.Since(resigned))
	if got := b.Token(); got <= tokenA {
		t.Errorf("b's token %d after a's %d; want higher", got, tokenA)
	}
	wantLeader(t, p1, name, b, "b")
	if err := a.Resign(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("a.Resign() again = %v; want ErrNotHeld", err)
	}
	if err := b.Resign(); err != nil {
		t.Errorf("b.Resign() = %v", err)
	}
	if l, err := elect.CurrentLeader(ctx, p1, name); !errors.Is(err, elect.ErrNoLeader) {
		t.Errorf("CurrentLeader() after the last Resign() = %+v, %v; want ErrNoLeader", l, err)
	}
}

// wantLeader checks that CurrentLeader, asked through e, reports c.
func wantLeader(t *testing.T, e locker.Engine, name string, c *elect.Candidate, value string) {
	t.Helper()
	l, err := elect.CurrentLeader(context.Background(), e, name)
	if err != nil {
		t.Fatalf("CurrentLeader() = %v", err)
	}
	host, _ := os.Hostname()
	if l.Owner != c.Owner() || l.Value != value || l.PID != os.Getpid() || (host != "" && l.Host != host) || l.Engine == "" || l.Token == 0 {
		t.Errorf("CurrentLeader() = %+v; want owner %s, value %q, host %q, pid %d, an engine and a token", l, c.Owner(), value, host, os.Getpid())
	}
}

// A leadership whose hold vanishes on the server ends its context with
// ErrLockLost; a candidate of another process takes over, and the one
// that lost may campaign again without Resign.
func testElectLost(t *testing.T, f Factory) {
	h := open(t, f)
	if h.Expire == nil {
		t.Skip("the factory offers no Expire hook: the loss is not checked")
	}
	name := lockName(t, "lost")
	ctx := context.Background()
	// A short TTL: on Redis the holder learns of the loss at its next
	// renewal, and the waiter at the hold's expiry.
	ttl := elect.WithTTL(shortTTL(1500*time.Millisecond, h.Engine))
	a, b := newCandidate(t, h.Engine, name, ttl), newCandidate(t, open(t, f).Engine, name, ttl)
	lctx := startCampaign(ctx, a).wait(t, 20*time.Second, "a")
	cb := startCampaign(ctx, b)
	WantPending(t, cb.done, "b's Campaign() while a leads")
	if err := h.Expire(ctx, name); err != nil {
		t.Fatalf("Expire(%q) = %v", name, err)
	}
	select {
	case <-lctx.Done():
	case <-time.After(electTTL + 10*time.Second):
		t.Fatalf("leadership context not done %v after the hold vanished", electTTL+10*time.Second)
	}
	if cause := context.Cause(lctx); !errors.Is(cause, locker.ErrLockLost) {
		t.Errorf("leadership context's cause = %v; want ErrLockLost", cause)
	}
	cb.wait(t, 20*time.Second, "b after a's loss")
	ca := startCampaign(ctx, a)
	WantPending(t, ca.done, "a's Campaign() after its loss, while b leads")
	if err := b.Resign(); err != nil {
		t.Fatalf("b.Resign() = %v", err)
	}
	ca.wait(t, 20*time.Second, "a again")
	if err := a.Resign(); err != nil {
		t.Errorf("a.Resign() = %v", err)
	}
}

// Campaigning twice from one candidate, while it campaigns or leads, and
// resigning without the leadership are errors that say so.
func testElectMisuse(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "misuse")
	a, b := newCandidate(t, e, name), newCandidate(t, open(t, f).Engine, name)
	if err := a.Resign(); !errors.Is(err, locker.ErrNotHeld) || !strings.Contains(fmt.Sprint(err), "Resign(") {
		t.Errorf("Resign() without the leadership = %v; want ErrNotHeld naming Resign", err)
	}
	startCampaign(context.Background(), a).wait(t, 20*time.Second, "a")
	if _, err := a.Campaign(context.Background()); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), "already leads") {
		t.Errorf("Campaign() while leading = %v; want ErrInvalidArgument saying it already leads", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		for {
			_, err := b.Campaign(ctx)
			if !strings.Contains(fmt.Sprint(err), "already campaigning") { // not refused for the probe below
				done <- err
				return
			}
		}
	}()
	// Until b's campaign has begun, a Campaign with a context already
	// done returns context.Canceled at once; then it is refused.
	gone, stop := context.WithCancel(context.Background())
	stop()
	var err error
	eventually(t, 10*time.Second, "Campaign() refused while campaigning", func() bool {
		_, err = b.Campaign(gone)
		return !errors.Is(err, context.Canceled)
	})
	if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), "Campaign(") {
		t.Errorf("Campaign() while campaigning = %v; want ErrInvalidArgument naming Campaign", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Campaign() = %v; want context.Canceled", err)
	}
	if err := b.Resign(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Resign() after a cancelled Campaign() = %v; want ErrNotHeld", err)
	}
	if err := a.Resign(); err != nil {
		t.Errorf("Resign() = %v", err)
	}
}
