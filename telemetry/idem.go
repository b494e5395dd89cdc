package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/orthrus-go/orthrus/idem"
)

// Attributes of the gate's metrics.
const (
	keyOutcome = attribute.Key("outcome")
	keyStore   = attribute.Key("store")
	keyOp      = attribute.Key("op")
)

// IdemObserver reports idempotency gates (package idem) to OpenTelemetry:
// give it to a gate with idem.WithObserver. Its metrics, beside the
// locks':
//
//   - orthrus.idem.begins: Begins by outcome (ran, replayed, conflict,
//     mismatch, refused, unguarded, error) and store ("local" for the
//     gate's own memory, "" when no store decided);
//   - orthrus.idem.store.duration: round trips to a store by store, op
//     (create, replace, remove, get, delete) and result (ok, error);
//   - orthrus.idem.pending: writes waiting for their store to answer
//     again, by store: outcomes, and after a switch the claims and copies
//     on the new store, and the clean-up of records whose creation timed
//     out.
//
// Each Begin is a span "idem.Begin" with the outcome and the store. Ops
// and outcomes are few; store names are the engines'. Operation IDs and
// keys are never labels.
type IdemObserver struct {
	tracer  trace.Tracer
	span    []trace.SpanStartOption
	begins  metric.Int64Counter
	latency metric.Float64Histogram
	pending metric.Int64UpDownCounter

	sets sync.Map // attribute sets by idemKey, made once
}

type idemKey struct {
	kind          byte // 'b' begin, 's' store call, 'p' pending
	outcome       idem.Outcome
	store, op, ok string
}

var _ idem.Observer = (*IdemObserver)(nil)

// Idem returns the observer of idempotency gates, over the same providers
// as t. It fails when the meter provider refuses an instrument.
func (t *Telemetry) Idem() (*IdemObserver, error) {
	o := &IdemObserver{tracer: t.tracer, span: t.internalSpan}
	var errs []error
	var err error
	o.begins, err = t.meter.Int64Counter("orthrus.idem.begins", metric.WithUnit("{begin}"),
		metric.WithDescription("Begins of idempotency gates, by outcome: ran, replayed, conflict, mismatch, refused, unguarded, error."))
	errs = append(errs, err)
	o.latency, err = t.meter.Float64Histogram("orthrus.idem.store.duration", metric.WithUnit("s"),
		metric.WithDescription("Round trips of idempotency gates to their stores, by op and result."),
		metric.WithExplicitBucketBoundaries(WaitBuckets...))
	errs = append(errs, err)
	o.pending, err = t.meter.Int64UpDownCounter("orthrus.idem.pending", metric.WithUnit("{outcome}"),
		metric.WithDescription("Writes of idempotency gates (outcomes, claims, copies, clean-ups) waiting for their store to answer again."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("telemetry: Idem: %w", err)
	}
	return o, nil
}

func (o *IdemObserver) set(k idemKey) metric.MeasurementOption {
	if s, ok := o.sets.Load(k); ok {
		return s.(metric.MeasurementOption)
	}
	var kv []attribute.KeyValue
	switch k.kind {
	case 'b':
		kv = []attribute.KeyValue{keyOutcome.String(k.outcome.String()), keyStore.String(k.store)}
	case 's':
		kv = []attribute.KeyValue{keyStore.String(k.store), keyOp.String(k.op), keyResult.String(k.ok)}
	default:
		kv = []attribute.KeyValue{keyStore.String(k.store)}
	}
	s, _ := o.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return s.(metric.MeasurementOption)
}

// BeginStart implements idem.Observer: it starts the span.
func (o *IdemObserver) BeginStart(ctx context.Context) context.Context {
	ctx, _ = o.tracer.Start(ctx, "idem.Begin", o.span...)
	return ctx
}

// BeginEnd implements idem.Observer: it counts the outcome and ends the
// span.
func (o *IdemObserver) BeginEnd(ctx context.Context, e idem.BeginEvent) {
	o.begins.Add(ctx, 1, o.set(idemKey{kind: 'b', outcome: e.Outcome, store: e.Store}))
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(keyOutcome.String(e.Outcome.String()), keyStore.String(e.Store))
	if e.Err != nil {
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Outcome.String())
	}
	span.End()
}

// StoreCall implements idem.Observer: it records the round trip's time.
func (o *IdemObserver) StoreCall(ctx context.Context, store, op string, took time.Duration, err error) {
	ok := "ok"
	if err != nil {
		ok = "error"
	}
	o.latency.Record(ctx, took.Seconds(), o.set(idemKey{kind: 's', store: store, op: op, ok: ok}))
}

// Pending implements idem.Observer.
func (o *IdemObserver) Pending(store string, delta int) {
	o.pending.Add(context.Background(), int64(delta), o.set(idemKey{kind: 'p', store: store}))
}
