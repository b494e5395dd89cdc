package runonce

import (
	"fmt"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// Observer hears how runs end, for metrics (package telemetry's
// Telemetry.Jobs is one). Ran is called on the caller's goroutine as
// Run returns; it must be quick and must not call the Runner.
type Observer interface {
	Ran(e RunEvent)
}

// Outcome is how one Run ended: a label value, as observe.Outcome is.
type Outcome string

// The outcomes of a Run.
const (
	OutcomeRan      Outcome = "ran"       // the job ran under the hold and returned nil
	OutcomeSkipped  Outcome = "skipped"   // another owner held the name: the job did not run
	OutcomeFailed   Outcome = "failed"    // the job ran under the hold and returned an error
	OutcomeCutShort Outcome = "cut_short" // the hold was lost before the job returned: it ran past AtMostFor, or the engine lost it
	OutcomeError    Outcome = "error"     // neither ran nor skipped: the engine failed the attempt, bad input, a closed Runner, or ctx had ended
)

// RunEvent is one Run's end.
type RunEvent struct {
	Engine  string // the Name of the engine or switcher the Runner was made on
	Name    string // the job's name
	Outcome Outcome
	Took    time.Duration // the job's time, from the grant to its return; 0 when it did not run
	Err     error         // what Run returned
}

// WithObserver reports each run's end to o. Default: none.
func WithObserver(o Observer) Option {
	return func(s *settings) error {
		if o == nil {
			return fmt.Errorf("%w: runonce: WithObserver: observer is nil", locker.ErrInvalidArgument)
		}
		s.obs = o
		return nil
	}
}

// nopObserver is the observer of a Runner without WithObserver.
type nopObserver struct{}

func (nopObserver) Ran(RunEvent) {}

// ranOutcome is the outcome of a job that ran and returned err, with its
// hold lost or not.
func ranOutcome(err error, lost <-chan struct{}) Outcome {
	select {
	case <-lost:
		return OutcomeCutShort
	default:
	}
	if err != nil {
		return OutcomeFailed
	}
	return OutcomeRan
}
