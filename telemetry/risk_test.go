package telemetry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// riskRig is a rig that notes when a hold is reported at risk.
type riskRig struct {
	*rig
	atRisk chan time.Time
}

func (r *riskRig) AtRisk(h observe.HoldInfo, left time.Duration, err error) {
	r.rig.AtRisk(h, left, err)
	signal(r.atRisk, time.Now())
}

// A frozen server drops every renewal: the hold is reported at risk (an
// Observer call, a metric and a span) while its lease still runs, before
// Lost closes.
func TestAtRiskBeforeLost(t *testing.T) {
	srv := testserver.Redis(t)
	r := &riskRig{rig: newRig(t), atRisk: make(chan time.Time, 1)}
	e := newEngine(t, newClient(t, srv.Addr()), "redis", r)
	defer e.Close()
	h, err := e.NewLocker("job", locker.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatalf("NewLocker() = %v", err)
	}
	if err := h.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	lost := h.Lost()
	if err := srv.Pause(); err != nil {
		t.Fatalf("Pause() = %v", err)
	}
	paused := time.Now()
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatalf("Lost() not closed 10s into the freeze")
	}
	lostAt := time.Now()
	if err := srv.Resume(); err != nil {
		t.Fatalf("Resume() = %v", err)
	}
	select {
	case at := <-r.atRisk:
		t.Logf("paused at 0; at risk after %v; lost after %v (%v after the risk)",
			at.Sub(paused), lostAt.Sub(paused), lostAt.Sub(at))
		if !at.Before(lostAt) {
			t.Errorf("at risk %v after the loss; want before it", at.Sub(lostAt))
		}
	default:
		t.Fatalf("AtRisk not called before Lost() closed")
	}
	got := r.gather(t)
	checkFamily(t, got, "orthrus_lock_at_risk_total", map[string]float64{`orthrus_lock_at_risk_total{engine="redis"}`: 1})
	var seen bool
	for _, s := range r.spans.Ended() {
		seen = seen || s.Name() == "orthrus.lock.at_risk"
	}
	if !seen {
		t.Errorf("no orthrus.lock.at_risk span")
	}
	if err := h.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() after the loss = %v; want ErrLockLost", err)
	}
}
