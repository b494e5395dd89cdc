package elect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// switcherEngine is what a switcher offers beside locker.Engine: its
// engines, and the current one.
type switcherEngine interface {
	Engines() []locker.Engine
	Current() string
}

// engines lists the engines an election on e may hold its leadership on.
func engines(e locker.Engine) []locker.Engine {
	if sw, ok := e.(switcherEngine); ok {
		return sw.Engines()
	}
	return []locker.Engine{e}
}

// holder returns who holds name on e; nil when nobody does.
func holder(ctx context.Context, e locker.Engine, name string) (*inspect.Holder, error) {
	in, ok := e.(inspect.Inspector)
	if !ok {
		return nil, fmt.Errorf("%w: elect: engine %q cannot be inspected", locker.ErrInvalidArgument, e.Name())
	}
	got, err := in.Inspect(ctx, name)
	if err != nil {
		return nil, err
	}
	return got.Holder, nil
}

// elsewhere returns an engine of sw other than granted on which name is
// held, or which has not answered for less than a TTL (a leader cut off
// from it loses its hold within a TTL); nil when there is none. down
// notes since when each engine has not answered.
func (c *Candidate) elsewhere(ctx context.Context, sw switcherEngine, granted string, down map[string]time.Time) locker.Engine {
	for _, e := range sw.Engines() {
		if e.Name() == granted {
			continue
		}
		h, err := holder(ctx, e, c.name)
		if err == nil {
			delete(down, e.Name())
			if h != nil {
				return e
			}
			continue
		}
		since, ok := down[e.Name()]
		if !ok {
			since = time.Now()
			down[e.Name()] = since
		}
		if time.Since(since) < c.ttl {
			return e
		}
	}
	return nil
}

// waitOut waits, for a TTL at most, until name is free on e: the engine
// wakes the wait when the hold there ends. An engine that fails is waited
// on for the whole TTL, not asked again at once.
func (c *Candidate) waitOut(ctx context.Context, e locker.Engine) error {
	wctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	l, err := e.NewLocker(c.name, locker.WithTTL(c.ttl), locker.WithOwner(waitOwnerPrefix+c.owner))
	if err != nil {
		return fmt.Errorf("elect: campaign %q: %w", c.name, err)
	}
	if err := l.LockCtx(wctx); err == nil {
		_ = locker.Release(context.Background(), l) // unanswered: it ends at its TTL
		return nil
	}
	<-wctx.Done()
	return ctx.Err()
}

// waitOwnerPrefix starts the owner of the lock waitOut takes only to learn
// when a leader pinned on another engine is gone: held for a moment, and
// never a leader, so CurrentLeader skips it. No candidate's owner starts
// so: a candidate's starts with its host name.
const waitOwnerPrefix = "(waiting) "

// CurrentLeader returns the leader of the election of name on e (an
// engine or a switcher), or ErrNoLeader. Through a switcher, a hold on an
// engine other than the current one wins: it is the leader pinned there
// since before a switch, and a hold on the current engine meanwhile is a
// candidate about to step back. The engines are read one after the other,
// not at one instant: for a round trip around a switch, the hold of a
// candidate stepping back may be reported as the leader. Engines must implement inspect.Inspector
// (every engine of this module does).
func CurrentLeader(ctx context.Context, e locker.Engine, name string) (Leader, error) {
	var found *Leader
	current := ""
	if sw, ok := e.(switcherEngine); ok {
		current = sw.Current()
	}
	var errs []error
	waiting := false // a candidate waits on another engine for its leader's end
	for _, eng := range engines(e) {
		h, err := holder(ctx, eng, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if h == nil {
			continue
		}
		if strings.HasPrefix(h.Owner, waitOwnerPrefix) {
			waiting = waiting || eng.Name() != current
			continue
		}
		l := parseLeader(eng.Name(), h.Owner, h.Token)
		if found == nil || found.Engine == current {
			found = &l
		}
	}
	switch {
	case found != nil && found.Engine == current && waiting:
		// The hold on the current engine is a candidate's that steps
		// back when it sees the waiter: nobody leads yet.
		return Leader{}, ErrNoLeader
	case found != nil:
		return *found, nil
	case len(errs) > 0:
		return Leader{}, fmt.Errorf("elect: leader of %q: %w", name, errors.Join(errs...))
	}
	return Leader{}, ErrNoLeader
}

// DefaultObserveEvery is how often Observe looks at the leader.
const DefaultObserveEvery = 100 * time.Millisecond

// Observe reports the leader of name on e each time it changes, starting
// with the current one (a zero Leader: nobody leads), on a channel that
// closes once ctx is done. It looks every interval (DefaultObserveEvery
// when 0): changes come in the order they happened, but a leadership
// shorter than the interval may go unseen. Lookups that fail are skipped.
func Observe(ctx context.Context, e locker.Engine, name string, every time.Duration) <-chan Leader {
	if every <= 0 {
		every = DefaultObserveEvery
	}
	out := make(chan Leader)
	go func() {
		defer close(out)
		t := time.NewTicker(every)
		defer t.Stop()
		var last Leader
		first := true
		for {
			l, err := CurrentLeader(ctx, e, name)
			if err == nil || errors.Is(err, ErrNoLeader) {
				if first || l.Owner != last.Owner || l.Token != last.Token || l.Engine != last.Engine {
					select {
					case out <- l:
					case <-ctx.Done():
						return
					}
					last, first = l, false
				}
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
