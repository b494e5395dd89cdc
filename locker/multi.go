package locker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
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
// matched by one Unlock, and the last Unlock releases every part (their
// errors joined). It is safe for concurrent use. While it is in use, its
// parts belong to it: a part locked or unlocked directly counts on the
// part's own re-entry count.
type MultiLock struct {
	*Front
	parts []Handle // in acquisition order
	name  string

	mu    sync.Mutex
	count int
	held  []<-chan struct{} // the parts' Lost channels of the current hold
	merge *lostMerge        // started by the first Lost call of a hold
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
	m := &MultiLock{parts: sorted, name: fmt.Sprintf("%q", names)}
	m.Front = NewFront(m.name, m.reenter, m.take)
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

// take acquires every part in order, or none.
func (m *MultiLock) take(ctx context.Context, wait bool) (bool, error) {
	lost := make([]<-chan struct{}, 0, len(m.parts))
	for i, p := range m.parts {
		ok, err := Acquire(ctx, p, wait)
		if err != nil || !ok {
			// A part lost meanwhile is released already: not worth an error.
			if rerr := releaseAll(m.parts[:i], true); rerr != nil {
				err = errors.Join(err, rerr)
			}
			if err != nil {
				return false, fmt.Errorf("multilock: acquire %q: %w", p.Name(), err)
			}
			return false, nil
		}
		lost = append(lost, p.Lost())
	}
	m.mu.Lock()
	m.count, m.held = 1, lost
	m.mu.Unlock()
	return true, nil
}

// releaseAll unlocks parts, last first, and joins their errors, leaving
// out ErrLockLost when skipLost is set.
func releaseAll(parts []Handle, skipLost bool) error {
	var errs []error
	for i := len(parts) - 1; i >= 0; i-- {
		if err := parts[i].Unlock(); err != nil && !(skipLost && errors.Is(err, ErrLockLost)) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reenter counts one more hold when the owner already holds every part.
func (m *MultiLock) reenter() (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.count == 0 {
		return false, nil
	}
	if i := firstLost(m.held); i >= 0 {
		return false, fmt.Errorf("multilock: re-enter %q: %w (Unlock it first)", m.parts[i].Name(), ErrLockLost)
	}
	m.count++
	return true, nil
}

// firstLost returns the index of the first closed channel, or -1.
func firstLost(chans []<-chan struct{}) int {
	for i, c := range chans {
		select {
		case <-c:
			return i
		default:
		}
	}
	return -1
}

// Unlock releases one hold; the last one releases every part, last
// acquired first, and returns their errors joined (ErrLockLost for a part
// that was lost). Without a hold it returns ErrNotHeld.
func (m *MultiLock) Unlock() error {
	m.mu.Lock()
	if m.count == 0 {
		m.mu.Unlock()
		return fmt.Errorf("multilock: unlock %s: %w", m.name, ErrNotHeld)
	}
	m.count--
	if m.count > 0 {
		i := firstLost(m.held)
		m.mu.Unlock()
		if i >= 0 {
			return fmt.Errorf("multilock: unlock %q: %w", m.parts[i].Name(), ErrLockLost)
		}
		return nil
	}
	merge := m.merge
	m.held, m.merge = nil, nil
	m.mu.Unlock()
	merge.stop()
	return releaseAll(m.parts, false)
}

// Name lists the parts' names in acquisition order, quoted:
// ["a" "b" "c"].
func (m *MultiLock) Name() string { return m.name }

// Token is 0 when not held, otherwise the largest of the parts' tokens.
// Every grant of the set grants each part anew, and each part's token
// increases with its grants, so the largest increases with every grant of
// the set: it fences a resource guarded by exactly this set of names on
// the same engines. A resource guarded by one name is fenced with that
// part's own token (Parts).
func (m *MultiLock) Token() uint64 {
	m.mu.Lock()
	held := m.count > 0
	m.mu.Unlock()
	if !held {
		return 0
	}
	var top uint64
	for _, p := range m.parts {
		top = max(top, p.Token())
	}
	return top
}

// Engine is "" when not held, otherwise the names of the engines that
// granted the parts, each once, in acquisition order, joined by ",".
func (m *MultiLock) Engine() string {
	m.mu.Lock()
	held := m.count > 0
	m.mu.Unlock()
	if !held {
		return ""
	}
	var names []string
	for _, p := range m.parts {
		if e := p.Engine(); e != "" && !slices.Contains(names, e) {
			names = append(names, e)
		}
	}
	return strings.Join(names, ",")
}

// Lost is nil when not held; otherwise it is closed as soon as any part's
// hold is lost. With several parts, the first call of a hold starts one
// goroutine that waits on the parts' Lost channels; it ends when a part is
// lost or at the last Unlock. A hold whose Lost is never asked for costs
// no goroutine.
func (m *MultiLock) Lost() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.count == 0:
		return nil
	case len(m.held) == 1:
		return m.held[0]
	case m.merge == nil:
		m.merge = startLostMerge(m.held)
	}
	return m.merge.lost
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

// Acquirer is the raw acquisition path of the Lockers this module returns
// (Front.Acquire): once ctx ends, its error wraps ctx.Err(), and also
// ErrUnavailable when the engine had not answered for OutageAfter.
type Acquirer interface {
	Acquire(ctx context.Context, wait bool) (bool, error)
}

// Releaser is the bounded release path of the Lockers this module
// returns, for wrappers such as the switcher: ReleaseWithin releases one
// hold as Unlock does, but waits for the engine's answer at most wait
// (never past the release timeout), or until done closes (nil: never).
// Past that, the release goes on in the background and the error wraps
// ErrUnavailable.
type Releaser interface {
	ReleaseWithin(wait time.Duration, done <-chan struct{}) error
}

// Release releases one hold of l, waiting for the engine's answer until
// ctx is done (at most the release timeout), through its bounded path
// when it has one (Releaser), and otherwise with Unlock.
func Release(ctx context.Context, l Locker) error {
	if ctx == nil {
		return fmt.Errorf("%w: Release: nil context", ErrInvalidArgument)
	}
	if r, ok := l.(Releaser); ok {
		return r.ReleaseWithin(math.MaxInt64, ctx.Done())
	}
	return l.Unlock()
}

// Acquire acquires l through its raw path when it has one (Acquirer), and
// otherwise through LockCtx (wait) or TryLock. Wrappers such as the
// switcher and MultiLock use it to keep the engine's own outcome.
func Acquire(ctx context.Context, l Locker, wait bool) (bool, error) {
	if a, ok := l.(Acquirer); ok {
		return a.Acquire(ctx, wait)
	}
	if wait {
		err := l.LockCtx(ctx)
		return err == nil, err
	}
	return l.TryLock()
}
