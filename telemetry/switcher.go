package telemetry

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/orthrus-go/orthrus/locker/observe"
	"github.com/orthrus-go/orthrus/switcher"
)

// maxSwitchSpans is how many recent switches keep their span for the
// waits they move to link to: a wait moves within moments of its switch.
const maxSwitchSpans = 32

type switchSpan struct {
	switcher string
	epoch    uint64
	sc       trace.SpanContext
}

// breakerStates are the values of the breaker gauge's state label.
var breakerStates = [...]string{"closed", "half_open", "open"}

// Attach reports the switcher's current engine, epoch, breakers and
// retries at every collection, until the switcher closes.
func (t *Telemetry) Attach(sw *switcher.Switcher) (detach func()) {
	name := sw.Name()
	swAttr := keySwitcher.String(name)
	epochOpt := metric.WithAttributes(swAttr)
	reg, err := t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(t.epoch, int64(sw.Epoch()), epochOpt)
		o.ObserveInt64(t.retries, sw.Retried(), epochOpt)
		for _, st := range sw.States() {
			eng := keyEngine.String(st.Name)
			o.ObserveInt64(t.current, boolInt(st.Current), metric.WithAttributes(swAttr, eng))
			// gobreaker says "half-open"; a label value reads better without the dash.
			state := strings.ReplaceAll(st.Breaker.String(), "-", "_")
			for _, s := range breakerStates {
				o.ObserveInt64(t.breaker, boolInt(s == state), metric.WithAttributes(swAttr, eng, keyState.String(s)))
			}
		}
		return nil
	}, t.epoch, t.retries, t.current, t.breaker)
	if err != nil {
		otel.Handle(err) // the application's OpenTelemetry error handler
		return nil
	}
	return func() { _ = reg.Unregister() }
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Switched counts a switch, or a deferred one, and records it as a span
// that the waits it moves link to.
func (t *Telemetry) Switched(sw string, ev switcher.Event) {
	ctx := context.Background()
	if ev.Reason == switcher.ReasonDeferred {
		t.deferred.Add(ctx, 1, metric.WithAttributes(keySwitcher.String(sw), keyFrom.String(ev.From), keyTo.String(ev.To)))
	} else {
		t.switches.Add(ctx, 1, metric.WithAttributes(keySwitcher.String(sw), keyFrom.String(ev.From), keyTo.String(ev.To),
			keyReason.String(string(ev.Reason))))
	}
	name := "orthrus.switch"
	if ev.Reason == switcher.ReasonDeferred {
		name = "orthrus.switch.deferred"
	}
	_, span := t.tracer.Start(ctx, name, trace.WithTimestamp(ev.At), trace.WithAttributes(
		spanSwitcher.String(sw), spanFrom.String(ev.From), spanTo.String(ev.To),
		spanReason.String(string(ev.Reason)), spanEpoch.Int64(int64(ev.Epoch))))
	span.End()
	if ev.Reason == switcher.ReasonDeferred || !span.SpanContext().IsValid() {
		return
	}
	t.switchMu.Lock()
	defer t.switchMu.Unlock()
	if len(t.switchSpans) == maxSwitchSpans {
		t.switchSpans = append(t.switchSpans[:0], t.switchSpans[1:]...)
	}
	t.switchSpans = append(t.switchSpans, switchSpan{switcher: sw, epoch: ev.Epoch, sc: span.SpanContext()})
}

// Moved records on the acquisition's span that it went to another engine,
// with a link to the switch that moved it when that switch was recorded.
func (t *Telemetry) Moved(ctx context.Context, a observe.Acquisition, from, to string, epoch uint64) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{spanFrom.String(from), spanTo.String(to), spanEpoch.Int64(int64(epoch))}
	span.AddEvent("orthrus.lock.moved", trace.WithAttributes(attrs...))
	if sc, ok := t.switchSpan(a.Switcher, epoch); ok {
		span.AddLink(trace.Link{SpanContext: sc, Attributes: attrs})
	}
}

func (t *Telemetry) switchSpan(sw string, epoch uint64) (trace.SpanContext, bool) {
	t.switchMu.Lock()
	defer t.switchMu.Unlock()
	for i := len(t.switchSpans) - 1; i >= 0; i-- {
		if s := t.switchSpans[i]; s.switcher == sw && s.epoch == epoch {
			return s.sc, true
		}
	}
	return trace.SpanContext{}, false
}
