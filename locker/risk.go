package locker

import "time"

// RiskObserver is implemented by an Observer that also wants to know when
// a hold is at risk: the engine failed to keep it alive while its lease
// still runs, so it is lost when the lease runs out unless a retry gets
// through first. That is the moment to stop starting work that a loss
// would leave half done; Lost closing is the moment the lock is gone.
// Package telemetry implements it.
type RiskObserver interface {
	// AtRisk is called when a renewal of h fails while h still lives:
	// left is the time h has before it is lost, err the failure. It is
	// called once per streak of failures (again only after a renewal got
	// through), and always before HoldEnd. It runs on the renewal path:
	// it must be quick and must not block.
	AtRisk(h HoldInfo, left time.Duration, err error)
}

// MarkAtRisk reports h at risk to the Core's Observer when it is a
// RiskObserver: left is the time h has before it is lost, err the
// failure. The Core calls it for the renewals it makes (engines that are
// Renewers); an engine that keeps its holds alive itself (etcd's shared
// leases) calls it when keeping them alive fails, once per streak of
// failures. It does nothing for a hold already lost.
func (h *Hold) MarkAtRisk(left time.Duration, err error) {
	if h.obs == nil || h.isLost() {
		return
	}
	if ro, ok := h.obs.core.obs.(RiskObserver); ok {
		ro.AtRisk(h.info(h.obs.core.engine), left, err)
	}
}
