package driver

import (
	"time"

	"github.com/orthrus-go/orthrus/locker/observe"
)

// MarkAtRisk reports h at risk to the Core's observe.Observer when it is a
// observe.RiskObserver: left is the time h has before it is lost, err the
// failure. The Core calls it for the renewals it makes (engines that are
// Renewers); an engine that keeps its holds alive itself (etcd's shared
// leases) calls it when keeping them alive fails, once per streak of
// failures. It does nothing for a hold already lost.
func (h *Hold) MarkAtRisk(left time.Duration, err error) {
	if h.obs == nil || h.isLost() {
		return
	}
	if ro, ok := h.obs.core.obs.(observe.RiskObserver); ok {
		ro.AtRisk(h.info(h.obs.core.engine), left, err)
	}
}
