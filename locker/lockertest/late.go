package lockertest

import (
	"fmt"
	"time"
)

// The fault suite bounds how soon a call returns once its time is up
// (returnWithin, callWithin): that is the engine's share. On a loaded
// machine every goroutine of the process may also wait for a CPU past
// that moment, which no engine can help: a probe, a timer due at the same
// moment, measures that wait, and the bounds apply after it.

// probe is a timer due when a call's time is up.
type probe struct {
	d   time.Duration
	due time.Time
	ran chan time.Time
	t   *time.Timer
}

// newProbe starts a probe due in d, as the call under test starts.
func newProbe(d time.Duration) *probe {
	p := &probe{d: d, due: time.Now().Add(d), ran: make(chan time.Time, 1)}
	p.t = time.AfterFunc(d, func() { p.ran <- time.Now() })
	return p
}

// over reports whether a call that took took returned later than slack
// after its time was up, the probe's lateness deducted, and says what was
// wanted. Call it once, after the call returned.
func (p *probe) over(took, slack time.Duration) (bool, string) {
	var late time.Duration
	if !p.t.Stop() {
		late = max((<-p.ran).Sub(p.due), 0)
	}
	limit := p.d + slack + late
	return took > limit, fmt.Sprintf("within %v (%v + %v, with the process %v late to run then)", limit, p.d, slack, late)
}
