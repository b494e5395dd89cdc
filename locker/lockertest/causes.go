package lockertest

import (
	"context"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker/observe"
)

// Causes is a observe.Observer that records why each hold ended, by token.
// The zero value is ready to use.
type Causes struct {
	mu      sync.Mutex
	byToken map[uint64]observe.LostCause
	atRisk  map[uint64]time.Time
}

var (
	_ observe.Observer     = (*Causes)(nil)
	_ observe.RiskObserver = (*Causes)(nil)
)

// AtRiskAt returns when the hold with token was first reported at risk,
// and whether it was.
func (c *Causes) AtRiskAt(token uint64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.atRisk[token]
	return at, ok
}

// AtRisk records when the hold was first reported at risk.
func (c *Causes) AtRisk(h observe.HoldInfo, _ time.Duration, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.atRisk == nil {
		c.atRisk = make(map[uint64]time.Time)
	}
	if _, ok := c.atRisk[h.Token]; !ok {
		c.atRisk[h.Token] = time.Now()
	}
}

// Of returns the cause the hold with token ended with, and whether it has
// ended. A hold's cause is recorded before its Lost closes.
func (c *Causes) Of(token uint64) (observe.LostCause, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cause, ok := c.byToken[token]
	return cause, ok
}

// HoldEnd records cause.
func (c *Causes) HoldEnd(h observe.HoldInfo, _ time.Duration, cause observe.LostCause) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byToken == nil {
		c.byToken = make(map[uint64]observe.LostCause)
	}
	c.byToken[h.Token] = cause
}

// AcquireStart records nothing.
func (*Causes) AcquireStart(ctx context.Context, _ observe.Acquisition) context.Context { return ctx }

// AcquireEnd records nothing.
func (*Causes) AcquireEnd(context.Context, observe.Acquisition, observe.AcquireResult) {}

// ReleaseStart records nothing.
func (*Causes) ReleaseStart(ctx context.Context, _ observe.HoldInfo) context.Context { return ctx }

// ReleaseEnd records nothing.
func (*Causes) ReleaseEnd(context.Context, observe.HoldInfo, error) {}

// Renewed records nothing.
func (*Causes) Renewed(observe.HoldInfo, error) {}
