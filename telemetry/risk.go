package telemetry

import (
	"context"
	"time"

	"github.com/orthrus-go/orthrus/locker/observe"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
)

var _ observe.RiskObserver = (*Telemetry)(nil)

// spanLeft is the time an at-risk hold had left, in seconds.
const spanLeft = attribute.Key("orthrus.lock.left")

// riskInstruments makes the at-risk counter.
func (t *Telemetry) riskInstruments(m metric.Meter) error {
	var err error
	t.atRisk, err = m.Int64Counter("orthrus.lock.at_risk", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds whose renewal failed while their lease still ran: lost unless a retry gets through in time. Counted once per streak of failures."))
	return err
}

// AtRisk counts a hold at risk, with a span: in a trace it comes before
// the loss, if one follows.
func (t *Telemetry) AtRisk(h observe.HoldInfo, left time.Duration, err error) {
	ctx := context.Background()
	t.atRisk.Add(ctx, 1, t.sets(h.Engine, "", h.Name).engine.add...)
	t.holdSpan(ctx, "orthrus.lock.at_risk", h, spanLeft.Float64(left.Seconds()), "renewal failed: "+err.Error())
}

// holdSpan records a span for an event of hold h that nothing else shows
// in a trace: its loss, or its risk of one. extra says what happened.
func (t *Telemetry) holdSpan(ctx context.Context, name string, h observe.HoldInfo, extra attribute.KeyValue, status string) {
	_, span := t.tracer.Start(ctx, name)
	if span.IsRecording() {
		b := t.spanAttrs()
		b.put(spanEngine.String(h.Engine))
		b.put(spanName.String(h.Name))
		b.put(spanOwner.String(h.Owner))
		b.put(token(h.Token))
		b.put(extra)
		t.setSpanAttrs(span, b)
		span.SetStatus(codes.Error, status)
	}
	span.End()
}
