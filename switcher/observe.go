package switcher

import (
	"context"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// Observer is told what a Switcher does, for metrics and traces; package
// telemetry implements it with OpenTelemetry. Its acquisition methods
// have the signatures of observe.Observer's, so that one value can observe
// the engines and the switcher: the switcher's acquisitions carry the
// switcher's name in Acquisition.Switcher.
//
// Methods run synchronously on the switcher's goroutines or the caller's:
// they must be quick and must not block.
type Observer interface {
	// Attach is called once by New, with the switcher about to start. From
	// then on the observer may read Current, Epoch, States and Retried
	// (for gauges), until Close calls the detach it returned (may be nil).
	Attach(s *Switcher) (detach func())
	// Switched is called at every switch of the switcher named switcher,
	// before the waits on the old engine move, and when a switch is
	// deferred (ReasonDeferred).
	Switched(switcher string, ev Event)
	// AcquireStart and AcquireEnd surround an outermost acquisition
	// through the switcher, across every engine it tries.
	AcquireStart(ctx context.Context, a observe.Acquisition) context.Context
	AcquireEnd(ctx context.Context, a observe.Acquisition, r observe.AcquireResult)
	// Moved is called when an acquisition goes again on another engine:
	// a switch moved its wait, or the engine failed and the switcher
	// moved on. epoch is the switch epoch it goes on with.
	Moved(ctx context.Context, a observe.Acquisition, from, to string, epoch uint64)
}

// WithObserver reports switches, the breakers and the acquisitions through
// the switcher to o. Give the engines the same observer (their
// WithObserver) for holds, renewals and per-engine acquisitions.
// Default: none, and no observation cost.
func WithObserver(o Observer) Option {
	return func(s *settings) error {
		if o == nil {
			return invalid("WithObserver", "observer is nil")
		}
		s.observer = o
		return nil
	}
}

// observeSwitch reports ev, when something observes.
func (s *Switcher) observeSwitch(ev Event) {
	if s.opts.observer != nil {
		s.opts.observer.Switched(s.name, ev)
	}
}

// acquireObs follows one observed acquisition of a switchLocker.
type acquireObs struct {
	o     Observer
	a     observe.Acquisition
	start time.Time
	last  int // the engine of the latest attempt; -1 before the first
}

func (l *switchLocker) observeStart(ctx context.Context, wait bool) (context.Context, acquireObs) {
	o := acquireObs{
		o:     l.s.opts.observer,
		a:     observe.Acquisition{Switcher: l.s.name, Name: l.name, Owner: l.owner, Wait: wait},
		start: time.Now(),
		last:  -1,
	}
	return o.o.AcquireStart(ctx, o.a), o
}

// attempt notes an attempt on engine i at epoch; a change of engine is a
// move.
func (o *acquireObs) attempt(ctx context.Context, s *Switcher, i int, epoch uint64) {
	if o.o == nil {
		return
	}
	if o.last >= 0 && o.last != i {
		o.o.Moved(ctx, o.a, s.members[o.last].engine.Name(), s.members[i].engine.Name(), epoch)
	}
	o.last = i
}

func (o *acquireObs) end(ctx context.Context, l *switchLocker, g locker.Grant, err error) {
	r := observe.AcquireResult{Outcome: observe.Classify(g != nil, err), Waited: time.Since(o.start)}
	if o.last >= 0 {
		r.Engine = l.s.members[o.last].engine.Name()
	}
	switch r.Outcome {
	case observe.OutcomeGranted:
		r.Token = g.Token()
	case observe.OutcomeUnavailable, observe.OutcomeError:
		r.Err = err
	}
	o.o.AcquireEnd(ctx, o.a, r)
}
