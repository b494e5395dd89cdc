package locker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
)

// MultiLock holds several locks as one: all of them or none. Its parts are
// Handles of any engines or switchers, mixed as needed.
//
// Parts are acquired one after the other in one global order, by lock name
// (byte-wise), whatever order they were given in: every owner in every
// process computes the same order without asking an engine, so two owners
// of overlapping sets never wait for each other in a cycle. (The engine
// cannot be part of the order: a Handle names its engine only once granted,
// and a switcher's part is granted by whichever engine is current then.)
//
// One wait budget covers all parts: LockCtx's context, or TryLockTimeout's
// wait, is shared by every part in turn; TryLock makes one attempt per part.
// When a part fails, is contended (TryLock) or the budget ends, the parts
// already taken are released before the call returns, each on its own
// bounded release context (the parts' WithReleaseTimeout), never the
// caller's. The context contract is the mutex's: LockCtx returns ctx.Err()
// itself once ctx is done.
//
// A MultiLock is re-entrant like a mutex: each successful acquisition is
// matched by one Unlock, and the last Unlock releases every part, last
// acquired first (their errors joined; ErrLockLost for a part that was
// lost). It is safe for concurrent use. While it is in use, its parts
// belong to it: a part locked or unlocked directly counts on the part's
// own re-entry count.
//
// Name lists the parts' names in acquisition order, quoted: ["a" "b" "c"].
// Token is 0 when not held, otherwise the largest of the parts' tokens:
// every grant of the set grants each part anew, and each part's token
// increases with its grants, so the largest increases with every grant of
// the set; it fences a resource guarded by exactly this set of names on
// the same engines (a resource guarded by one name is fenced with that
// part's own token, from Parts). Engine is "" when not held, otherwise
// the names of the engines that granted the parts, each once, in
// acquisition order, joined by ",". Lost is nil when not held; otherwise
// it is closed as soon as any part's hold is lost: with several parts, the
// first call of a hold starts one goroutine that waits on the parts' Lost
// channels, until a part is lost or the last Unlock; a hold whose Lost is
// never asked for costs no goroutine.
type MultiLock struct {
	handle
	parts []Handle // in acquisition order
}

var _ Handle = (*MultiLock)(nil)

// NewMultiLock returns a MultiLock over parts. It refuses an empty list, a
// nil part, a MultiLock as a part (pass its Parts instead) and two parts
// with the same lock name, which would wait for each other; the error wraps
// ErrInvalidArgument and names the argument.
func NewMultiLock(parts ...Handle) (*MultiLock, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: NewMultiLock: parts is empty", ErrInvalidArgument)
	}
	seen := make(map[string]int, len(parts))
	for i, p := range parts {
		if isNil(p) {
			return nil, fmt.Errorf("%w: NewMultiLock: parts[%d] is nil", ErrInvalidArgument, i)
		}
		if _, ok := p.(*MultiLock); ok {
			return nil, fmt.Errorf("%w: NewMultiLock: parts[%d] is a *MultiLock; pass its Parts()", ErrInvalidArgument, i)
		}
		if j, dup := seen[p.Name()]; dup {
			return nil, fmt.Errorf("%w: NewMultiLock: parts[%d] and parts[%d] both lock %q", ErrInvalidArgument, j, i, p.Name())
		}
		seen[p.Name()] = i
	}
	sorted := slices.Clone(parts)
	slices.SortFunc(sorted, func(a, b Handle) int { return cmp.Compare(a.Name(), b.Name()) })
	names := make([]string, len(sorted))
	for i, p := range sorted {
		names[i] = p.Name()
	}
	m := &MultiLock{parts: sorted}
	m.handle = handle{label: "multilock", name: fmt.Sprintf("%q", names), listName: true, take: m.take}
	return m, nil
}

// isNil reports a nil interface or a nil pointer in one.
func isNil(p Handle) bool {
	if p == nil {
		return true
	}
	v := reflect.ValueOf(p)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// Parts returns the parts in acquisition order. Read each part's Token to
// fence the resource that part's name guards.
func (m *MultiLock) Parts() []Handle { return slices.Clone(m.parts) }

// take acquires every part in order, or none. The parts are acquired
// through their own Handles, re-entry included: they are the caller's too.
func (m *MultiLock) take(ctx context.Context, wait bool) (Grant, error) {
	lost := make([]<-chan struct{}, 0, len(m.parts))
	for i, p := range m.parts {
		ok, err := acquire(ctx, p, wait)
		if err != nil || !ok {
			// A part lost meanwhile is released already: not worth an error.
			if rerr := releaseAll(m.parts[:i], true, Handle.Unlock); rerr != nil {
				err = errors.Join(err, rerr)
			}
			if err != nil {
				return nil, fmt.Errorf("multilock: acquire %q: %w", p.Name(), err)
			}
			return nil, nil
		}
		lost = append(lost, p.Lost())
	}
	return &multiGrant{parts: m.parts, held: lost}, nil
}

// releaseAll releases parts with release, last first, and joins their
// errors, leaving out ErrLockLost when skipLost is set.
func releaseAll(parts []Handle, skipLost bool, release func(Handle) error) error {
	var errs []error
	for i := len(parts) - 1; i >= 0; i-- {
		if err := release(parts[i]); err != nil && !(skipLost && errors.Is(err, ErrLockLost)) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// multiGrant is one hold of every part of a MultiLock.
type multiGrant struct {
	parts []Handle
	held  []<-chan struct{} // the parts' Lost channels of this hold

	mu    sync.Mutex
	merge *lostMerge // started by the first Lost call
	ended bool       // released: Lost starts nothing more
}

// lostNow reports whether a part's hold has been lost.
func (g *multiGrant) lostNow() bool {
	for _, c := range g.held {
		select {
		case <-c:
			return true
		default:
		}
	}
	return false
}

func (g *multiGrant) Unlock() error {
	g.end()
	return releaseAll(g.parts, false, Handle.Unlock)
}

func (g *multiGrant) ReleaseWithin(wait time.Duration, done <-chan struct{}) error {
	g.end()
	return releaseAll(g.parts, false, func(p Handle) error { return releaseWithin(p, wait, done) })
}

// end stops the goroutine of Lost, if any, for good.
func (g *multiGrant) end() {
	g.mu.Lock()
	merge := g.merge
	g.ended = true
	g.mu.Unlock()
	merge.stop()
}

func (g *multiGrant) Token() uint64 {
	var top uint64
	for _, p := range g.parts {
		top = max(top, p.Token())
	}
	return top
}

func (g *multiGrant) Engine() string {
	var names []string
	for _, p := range g.parts {
		if e := p.Engine(); e != "" && !slices.Contains(names, e) {
			names = append(names, e)
		}
	}
	return strings.Join(names, ",")
}

// Lost is nil once the hold has been released, as a Handle's is.
func (g *multiGrant) Lost() <-chan struct{} {
	if len(g.held) == 1 {
		return g.held[0]
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.merge != nil:
		return g.merge.lost
	case g.ended:
		return nil
	}
	g.merge = startLostMerge(g.held)
	return g.merge.lost
}

// lostMerge closes lost when any of its inputs closes, until stopped.
type lostMerge struct {
	lost chan struct{}
	quit chan struct{}
	done chan struct{}
}

func startLostMerge(in []<-chan struct{}) *lostMerge {
	g := &lostMerge{lost: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
	cases := make([]reflect.SelectCase, 0, len(in)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(g.quit)})
	for _, c := range in {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
	}
	go func() {
		defer close(g.done)
		if chosen, _, _ := reflect.Select(cases); chosen > 0 {
			close(g.lost)
		}
	}()
	return g
}

// stop ends the goroutine and waits for it; nil-safe.
func (g *lostMerge) stop() {
	if g == nil {
		return
	}
	close(g.quit)
	<-g.done
}
