package elect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// Observer hears what candidates do, for metrics (package telemetry's
// Telemetry.Jobs is one). Its methods are called on the candidate's
// goroutines; they must be quick and must not call the candidate.
type Observer interface {
	// Campaigned is called when Campaign returns, won or not.
	Campaigned(e CampaignEvent)
	// TermEnded is called when a leadership a candidate won ends: on
	// Resign, or when its hold is lost (before the next Campaign of the
	// candidate starts).
	TermEnded(e TermEvent)
}

// CampaignResult is how a Campaign ended: a label value, as
// observe.Outcome is.
type CampaignResult string

// The results of a Campaign.
const (
	CampaignWon       CampaignResult = "won"       // the candidate leads
	CampaignCancelled CampaignResult = "cancelled" // the caller's context ended first
	CampaignError     CampaignResult = "error"     // bad input (the candidate already campaigned or led), or the engine failed
)

// CampaignEvent is one Campaign's result.
type CampaignEvent struct {
	Engine string // the Name of the engine or switcher the candidate was made on
	Name   string // the election's name
	Result CampaignResult
	Took   time.Duration // how long Campaign blocked
	Err    error         // nil when won
}

// TermEnd is how a leadership ended: a label value, as
// observe.LostCause is.
type TermEnd string

// The ends of a leadership.
const (
	TermResigned TermEnd = "resigned" // the leader called Resign
	TermLost     TermEnd = "lost"     // the hold was lost: it expired, the engine lost it, it was forced out, or the engine was closed
)

// TermEvent is the end of one leadership.
type TermEvent struct {
	Engine string // as in CampaignEvent
	Name   string
	End    TermEnd
	Held   time.Duration // from the win to the end
	Token  uint64        // the leadership's fencing token
}

// WithObserver reports the candidate's campaigns and leaderships to o.
// Default: none (and no goroutine watches a leadership).
func WithObserver(o Observer) Option {
	return func(s *settings) error {
		if o == nil {
			return fmt.Errorf("%w: elect: WithObserver: observer is nil", locker.ErrInvalidArgument)
		}
		s.obs = o
		return nil
	}
}

// campaigned reports a Campaign that began at start and ended with err.
func (c *Candidate) campaigned(start time.Time, err error) {
	if c.obs == nil {
		return
	}
	r := CampaignWon
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		r = CampaignCancelled
	default:
		r = CampaignError
	}
	c.obs.Campaigned(CampaignEvent{Engine: c.engine.Name(), Name: c.name, Result: r, Took: time.Since(start), Err: err})
}

// watchTerm reports the end of the leadership whose context is lctx, won
// at won with token; the channel it returns closes once it has. Without an
// observer it starts nothing and returns nil.
func (c *Candidate) watchTerm(lctx context.Context, won time.Time, token uint64) <-chan struct{} {
	if c.obs == nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-lctx.Done() // ended by the loss, Resign or a new Campaign after a loss
		end := TermResigned
		if errors.Is(context.Cause(lctx), locker.ErrLockLost) {
			end = TermLost
		}
		c.obs.TermEnded(TermEvent{Engine: c.engine.Name(), Name: c.name, End: end, Held: time.Since(won), Token: token})
	}()
	return done
}
