package switcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
)

// epochShift places the switch epoch above the engine's token. Engine
// tokens stay below 2^44: Redis tokens are milliseconds since 1970 (2^41),
// etcd revisions and ZooKeeper zxids of realistic clusters are far below.
const epochShift = 44

const engineTokenMask = 1<<epochShift - 1

// retryPause spaces retries on an engine whose breaker has not opened yet.
const retryPause = 20 * time.Millisecond

// NewLocker returns a new owner's Locker for name. Each outermost
// acquisition goes to the engine current at that moment, and the hold stays
// pinned there: re-entry, renewal and Unlock go to the granting engine
// whatever switches happen meanwhile.
func (s *Switcher) NewLocker(name string, opts ...locker.Option) (locker.Handle, error) {
	owner, opts, err := s.prepareOwner(name, opts)
	if err != nil {
		return nil, err
	}
	l := s.newSwitchLocker(name, owner, func(_ int, e locker.Engine) (locker.Handle, error) {
		return e.NewLocker(name, opts...)
	})
	return l.h, nil
}

// prepareOwner validates a new owner's name and options, and pins its owner
// ID, so that the owner is the same on every engine.
func (s *Switcher) prepareOwner(name string, opts []locker.Option) (string, []locker.Option, error) {
	if err := driver.ValidateName(name); err != nil {
		return "", nil, err
	}
	st, err := driver.ResolveFor(s.name, s.minTTL, opts...)
	if err != nil {
		return "", nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return "", nil, fmt.Errorf("switcher: %w", locker.ErrClosed)
	}
	return st.Owner, append(append([]locker.Option(nil), opts...), locker.WithOwner(st.Owner)), nil
}

// newSwitchLocker returns an owner's Locker whose hold on engine e is made
// by newInner, once per engine.
func (s *Switcher) newSwitchLocker(name, owner string, newInner func(i int, e locker.Engine) (locker.Handle, error)) *switchLocker {
	l := &switchLocker{s: s, name: name, owner: owner, newInner: newInner, inner: make([]locker.Handle, len(s.members))}
	l.h = locker.NewHandle("switcher", name, l.take)
	return l
}

// switchLocker makes the outermost acquisitions of one owner's Handle
// across the engines of a switcher; the Handle (h) counts re-entry and
// pins the grant, a switchGrant.
type switchLocker struct {
	h        locker.Handle
	s        *Switcher
	name     string
	newInner func(i int, e locker.Engine) (locker.Handle, error)

	owner string // the owner ID, for observers

	// For a side of a read-write lock, set once before use: check refuses
	// an acquisition (an upgrade), follow names the engine and epoch an
	// acquisition must go to (a downgrade goes to the writer's engine).
	check  func() error
	follow func() (engine int, epoch uint64, ok bool)

	mu    sync.Mutex
	inner []locker.Handle // per engine, made on first use; the switcher's alone
}

// switchGrant is one hold through the switcher: the grant of the engine
// it is pinned to.
type switchGrant struct {
	l      *switchLocker
	in     locker.Grant
	engine int
	epoch  uint64 // switch epoch when the hold was granted
}

// innerFor returns this owner's Locker on engine i.
func (l *switchLocker) innerFor(i int) (locker.Handle, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inner[i] == nil {
		in, err := l.newInner(i, l.s.members[i].engine)
		if err != nil {
			return nil, err
		}
		l.inner[i] = in
	}
	return l.inner[i], nil
}

// route is the switcher's state that one attempt is made against.
type route struct {
	engine, previous int
	epoch            uint64
	since            time.Time     // of the last switch
	switched         chan struct{} // closes at the next switch
	unsynced         chan struct{} // closes once the epoch agrees with the engine's record; nil when it does
}

// route returns the current route, or ErrClosed.
func (l *switchLocker) route() (route, error) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return route{}, fmt.Errorf("switcher: acquire %q: %w", l.name, locker.ErrClosed)
	}
	r := route{engine: s.current, previous: s.previous, epoch: s.epoch, since: s.switchedAt, switched: s.switched}
	if s.pending != nil {
		r.unsynced = s.pending.done
	}
	return r, nil
}

// take makes the outermost acquisition on the engine current now, and goes
// again on the engine current next when that one fails or a switch moves
// the wait, as long as the caller's budget lasts. Errors are raw (see
// locker.NewHandle): the Handle maps them for the caller.
func (l *switchLocker) take(ctx context.Context, wait bool) (g locker.Grant, err error) {
	s := l.s
	var obs acquireObs // observes nothing without an observer
	if s.opts.observer != nil {
		ctx, obs = l.observeStart(ctx, wait)
		defer func() { obs.end(ctx, l, g, err) }()
	}
	if err := s.awaitLearned(ctx); err != nil {
		return nil, err
	}
	if l.check != nil {
		if err := l.check(); err != nil {
			return nil, err
		}
	}
	if l.follow != nil {
		if i, epoch, ok := l.follow(); ok {
			return l.takeOn(ctx, i, epoch, wait)
		}
	}
	return l.takeRouted(ctx, wait, &obs)
}

// takeRouted makes the acquisition on the engine current now, and on the next
// one current when that one fails or a switch moves the wait.
func (l *switchLocker) takeRouted(ctx context.Context, wait bool, obs *acquireObs) (locker.Grant, error) {
	s := l.s
	var outage time.Time // since when the current engine's breaker has been open
	for moved := false; ; {
		r, err := l.route()
		if err != nil {
			return nil, err
		}
		if r.unsynced != nil { // no grant at an epoch lower than the engine's record
			select {
			case <-r.unsynced:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		obs.attempt(ctx, s, r.engine, r.epoch)
		m := s.members[r.engine]
		done, err := m.allow()
		if err != nil { // open, or half-open and busy: the decider moves on
			if outage.IsZero() {
				outage = time.Now()
			}
			if err := l.rideOut(ctx, r, outage, wait, err); err != nil {
				return nil, err
			}
			continue
		}
		outage = time.Time{}
		in, err := l.prepare(ctx, r, wait)
		if in == nil {
			done(nil) // says nothing of this engine
			return nil, err
		}
		g, switchedAway, err := l.attempt(ctx, r, in, wait)
		// The engine has judged a wait its caller cut short: ErrUnavailable
		// only after OutageAfter without an answer (driver.OutageAfter).
		done(err)
		switch {
		case switchedAway:
			moved = true
			continue
		case g != nil:
			return &switchGrant{l: l, in: g, engine: r.engine, epoch: r.epoch}, nil
		case err == nil:
			return nil, nil
		case ctx.Err() != nil, !errors.Is(err, locker.ErrUnavailable):
			return nil, err
		case !wait && moved:
			return nil, err // TryLock: one attempt on the engine it moved to
		}
		// The engine failed and the caller's budget is not spent: go again
		// on the engine current by then, once the decider has had its say.
		s.retried.Add(1)
		s.poke()
		moved = true
		if werr := awaitSwitch(ctx, r.switched, retryPause); werr != nil {
			return nil, fmt.Errorf("%w: %w", werr, err)
		}
	}
}

// takeOn acquires on engine i, whatever the current engine: a downgrade
// goes where its write hold is, as one hold with the writer's epoch.
func (l *switchLocker) takeOn(ctx context.Context, i int, epoch uint64, wait bool) (locker.Grant, error) {
	in, err := l.innerFor(i)
	if err != nil {
		return nil, err
	}
	g, err := locker.Take(ctx, in, wait)
	if g == nil {
		return nil, err
	}
	return &switchGrant{l: l, in: g, engine: i, epoch: epoch}, nil
}

// held returns the engine and epoch of the current hold, if any.
func (l *switchLocker) held() (engine int, epoch uint64, ok bool) {
	if g, ok := locker.GrantOf(l.h).(*switchGrant); ok {
		return g.engine, g.epoch, true
	}
	return 0, 0, false
}

// rideOut handles a current engine whose breaker refuses calls: the
// decider is told, and the caller waits for a switch while its patience
// lasts. A waiting caller gives every engine the outage wait to come back;
// one that does not wait only lets the decider move to an engine that
// works. It returns nil to go again, or the error to give up with.
func (l *switchLocker) rideOut(ctx context.Context, r route, outage time.Time, wait bool, refusal error) error {
	s := l.s
	s.poke()
	m := s.members[r.engine]
	err := fmt.Errorf("switcher: acquire %q: %w: %s: %w", l.name, locker.ErrUnavailable, m.engine.Name(), refusal)
	limit := s.opts.outageWait
	if !wait {
		s.mu.Lock()
		isolated := s.isolated
		s.mu.Unlock()
		if isolated || s.nextUsable(r.engine) < 0 {
			return err // no switch is coming for it to wait for
		}
		limit = s.opts.healthTimeout
	}
	if time.Since(outage) > limit {
		return err
	}
	if werr := awaitSwitch(ctx, r.switched, retryPause); werr != nil {
		return fmt.Errorf("%w: %w", werr, err)
	}
	return nil
}

// prepare returns this owner's Locker on the route's engine, once, with
// WithSafeSwitch, no hold of the name can remain on the previous engine;
// nil when the acquisition ends here (an error, or the name still held
// there for a caller that does not wait).
func (l *switchLocker) prepare(ctx context.Context, r route, wait bool) (locker.Handle, error) {
	s := l.s
	if s.opts.safeSwitch > 0 && r.previous != r.engine && time.Since(r.since) < s.opts.safeSwitch {
		if ok, err := l.drainPrevious(ctx, r.previous, r.since.Add(s.opts.safeSwitch), wait); !ok || err != nil {
			return nil, err
		}
	}
	return l.innerFor(r.engine)
}

// attempt acquires with in on the route's engine; a switch away from the
// engine cancels the acquisition, which it reports as switchedAway. A
// waiting caller with a context that can be cancelled (LockCtx,
// TryLockTimeout) makes one acquisition, on a context that a switch ends
// too: that one costs the engines their slower path anyway, and the switch
// must be able to end a request stuck on an engine that stopped answering,
// or its caller would wait out the engine's request timeout before the
// next engine is tried. A caller whose context cannot be cancelled (Lock)
// first tries on it, since most acquisitions are granted at once and such
// a context spares the engines that path, and waits only when the name is
// held.
func (l *switchLocker) attempt(ctx context.Context, r route, in locker.Handle, wait bool) (g locker.Grant, switchedAway bool, err error) {
	if !wait || ctx.Done() == nil {
		if g, err = locker.Take(ctx, in, false); !wait || g != nil || err != nil {
			return g, false, err
		}
	}
	actx, stop := l.s.startWait(ctx, r.engine)
	defer stop()
	g, err = locker.Take(actx, in, true)
	return g, err != nil && ctx.Err() == nil && actx.Err() != nil, err
}

// awaitSwitch waits for a switch (switched closes), at most d, or until
// ctx is done, when it returns ctx.Err().
func awaitSwitch(ctx context.Context, switched <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-switched:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drainPrevious makes sure no hold of the name remains on engine prev
// before the new engine grants it: it takes and releases the name there,
// or, if prev does not answer, waits until the window closes.
func (l *switchLocker) drainPrevious(ctx context.Context, prev int, windowEnd time.Time, wait bool) (bool, error) {
	in, err := l.innerFor(prev)
	if err != nil {
		return false, err
	}
	var g locker.Grant
	if wait {
		wctx, cancel := context.WithDeadline(ctx, windowEnd)
		g, err = locker.Take(wctx, in, true)
		cancel()
	} else {
		g, err = locker.Take(context.Background(), in, false)
	}
	if g != nil {
		return true, g.Unlock()
	}
	if err == nil { // held there, and the caller does not wait
		return false, nil
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if !wait {
		return false, nil
	}
	// The previous engine is unreachable, or still held there: sit out the
	// rest of the window.
	if err := awaitSwitch(ctx, nil, time.Until(windowEnd)); err != nil {
		return false, err
	}
	return true, nil
}

// Unlock ends the hold on its engine, waiting for the answer at most
// driver.DefaultReleaseWait, or an engine cluster's ride-through window
// (an election is waited out), and no longer than the engine's breaker
// stays closed: then the error wraps locker.ErrUnavailable and the release
// goes on in the background, so that a frozen engine never holds its
// caller, whose next acquisition goes to the engine current then.
func (g *switchGrant) Unlock() error {
	return g.release(max(driver.DefaultReleaseWait, g.l.s.members[g.engine].window), nil)
}

// ReleaseWithin is Unlock for a caller that waits at most wait, or until
// done closes, and no longer than the engine's breaker stays closed.
func (g *switchGrant) ReleaseWithin(wait time.Duration, done <-chan struct{}) error {
	return g.release(wait, done)
}

// release ends the hold on its engine, waiting at most wait, until done
// closes, or until the engine's breaker opens, and not at all when it is
// open already.
func (g *switchGrant) release(wait time.Duration, done <-chan struct{}) error {
	m := g.l.s.members[g.engine]
	opened := m.untilOpen.Load() // before the state: an opening in between ends it
	if !m.closed.Load() {
		wait = 0
	}
	if r, ok := g.in.(ctxReleaser); ok && done == nil {
		return r.ReleaseCtx(opened.ctx, wait)
	}
	stop := opened.ctx.Done()
	if done != nil { // rare: a caller's channel joined to the breaker's
		ctx, cancel := context.WithCancel(opened.ctx)
		defer cancel()
		defer closeOn(done, cancel)()
		stop = ctx.Done()
	}
	return g.in.ReleaseWithin(wait, stop)
}

// ctxReleaser is a grant whose release a context can bound (engines on
// locker/driver): on an engine that honours deadlines it releases on the
// caller's goroutine, where a done channel costs a worker and two
// goroutine switches.
type ctxReleaser interface {
	ReleaseCtx(ctx context.Context, wait time.Duration) error
}

// closeOn calls cancel when done closes, until stop is called: a caller's
// done channel joined to a context, for the rare release given both.
func closeOn(done <-chan struct{}, cancel func()) (stop func()) {
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			cancel()
		case <-quit:
		}
	}()
	return func() {
		close(quit)
		<-finished
	}
}

// Token is the engine's token with the switch epoch of the grant above it,
// so that a token granted after a switch is higher than any granted before.
func (g *switchGrant) Token() uint64 {
	return g.epoch<<epochShift | g.in.Token()&engineTokenMask
}

func (g *switchGrant) Engine() string { return g.l.s.members[g.engine].engine.Name() }

func (g *switchGrant) Lost() <-chan struct{} { return g.in.Lost() }
