package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/observe"
	"github.com/orthrus-go/orthrus/switcher"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/orthrus-go/orthrus/telemetry"

// WaitBuckets are the bucket boundaries, in seconds, of the wait
// histograms: from 0.1 ms (an uncontended grant on a LAN) to 30 s (the
// default TTL, the longest wait a lost holder can cause).
var WaitBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// HoldBuckets are the bucket boundaries, in seconds, of the hold duration
// histogram: from 1 ms to an hour.
var HoldBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}

// Telemetry reports engines and switchers to OpenTelemetry. It implements
// observe.Observer (give it to each engine's WithObserver) and
// switcher.Observer (switcher.WithObserver). It is safe for concurrent use
// and holds nothing that needs closing.
type Telemetry struct {
	tracer    trace.Tracer
	meter     metric.Meter
	nameLabel func(string) string
	// Span start options made once: a variadic call through an interface
	// allocates its slice.
	clientSpan, internalSpan []trace.SpanStartOption

	acquisitions metric.Int64Counter
	wait         metric.Float64Histogram
	holdTime     metric.Float64Histogram
	holds        metric.Int64ObservableUpDownCounter // from attrSets.holds, at collection
	waiters      metric.Int64ObservableUpDownCounter
	renewals     metric.Int64Counter
	lost         metric.Int64Counter
	errs         metric.Int64Counter
	atRisk       metric.Int64Counter // risk.go
	swAcquire    metric.Int64Counter
	swWait       metric.Float64Histogram
	switches     metric.Int64Counter
	deferred     metric.Int64Counter
	current      metric.Int64ObservableGauge
	epoch        metric.Int64ObservableGauge
	breaker      metric.Int64ObservableGauge
	retries      metric.Int64ObservableCounter

	// Attribute sets per engine (and lock name label), copied on write so
	// that the hot path reads them without a lock or an allocation.
	attrMu sync.Mutex
	attrs  atomic.Pointer[map[attrKey]*attrSets]

	// Buffers of span attributes (*spanAttrs): attributes passed to a
	// Span, an interface, would escape to the heap on every call.
	attrBufs sync.Pool

	// The latest switches' spans, for the links of the waits they move.
	switchMu    sync.Mutex
	switchSpans []switchSpan
}

var (
	_ observe.Observer  = (*Telemetry)(nil)
	_ switcher.Observer = (*Telemetry)(nil)
)

type settings struct {
	mp        metric.MeterProvider
	tp        trace.TracerProvider
	nameLabel func(string) string
}

// Option configures New.
type Option func(*settings) error

// WithMeterProvider sets where the metrics go. Default: the global
// provider (otel.GetMeterProvider), a no-op until the application sets one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(s *settings) error {
		if mp == nil {
			return fmt.Errorf("telemetry: WithMeterProvider: %w: provider is nil", locker.ErrInvalidArgument)
		}
		s.mp = mp
		return nil
	}
}

// WithTracerProvider sets where the spans go. Default: the global
// provider (otel.GetTracerProvider), a no-op until the application sets
// one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *settings) error {
		if tp == nil {
			return fmt.Errorf("telemetry: WithTracerProvider: %w: provider is nil", locker.ErrInvalidArgument)
		}
		s.tp = tp
		return nil
	}
}

// WithLockNames labels the acquisition, wait, hold and lost-hold metrics
// with name(lockName) as "name", for applications whose lock names fall in
// a small set: name must map every lock name to one of a few values (say
// "orders/42" to "orders"), or to "" for no label. Every distinct value is
// a time series per engine and result. Default: no name label.
func WithLockNames(name func(lockName string) string) Option {
	return func(s *settings) error {
		if name == nil {
			return fmt.Errorf("telemetry: WithLockNames: %w: func is nil", locker.ErrInvalidArgument)
		}
		s.nameLabel = name
		return nil
	}
}

// New creates the instruments. It fails only on a nil option or when the
// meter provider refuses an instrument.
func New(opts ...Option) (*Telemetry, error) {
	var s settings
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("telemetry: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	if s.mp == nil {
		s.mp = otel.GetMeterProvider()
	}
	if s.tp == nil {
		s.tp = otel.GetTracerProvider()
	}
	m := s.mp.Meter(ScopeName)
	t := &Telemetry{tracer: s.tp.Tracer(ScopeName), meter: m, nameLabel: s.nameLabel,
		clientSpan:   []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)},
		internalSpan: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)},
	}
	empty := map[attrKey]*attrSets{}
	t.attrs.Store(&empty)

	if err := errors.Join(t.lockInstruments(m), t.riskInstruments(m), t.switcherInstruments(m)); err != nil {
		return nil, fmt.Errorf("telemetry: New: %w", err)
	}
	if _, err := m.RegisterCallback(t.observeCounts, t.holds, t.waiters); err != nil {
		return nil, fmt.Errorf("telemetry: New: %w", err)
	}
	return t, nil
}

// lockInstruments makes the instruments of the engines' holds.
func (t *Telemetry) lockInstruments(m metric.Meter) error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	t.acquisitions, err = m.Int64Counter("orthrus.lock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Outermost acquisitions on an engine, by result: granted, contended, timeout, cancelled, unavailable, error."))
	add(err)
	t.wait, err = m.Float64Histogram("orthrus.lock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of an acquisition on an engine to its result."),
		metric.WithExplicitBucketBoundaries(WaitBuckets...))
	add(err)
	t.holdTime, err = m.Float64Histogram("orthrus.lock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a grant to the end of the hold: released, or lost."),
		metric.WithExplicitBucketBoundaries(HoldBuckets...))
	add(err)
	// Counted in atomics and observed at collection: an SDK measurement
	// on every grant, release and wait would cost more than the rest.
	t.holds, err = m.Int64ObservableUpDownCounter("orthrus.lock.holds", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds currently held by this process."))
	add(err)
	t.waiters, err = m.Int64ObservableUpDownCounter("orthrus.lock.waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Acquisitions currently waiting (Lock, LockCtx, TryLockTimeout)."))
	add(err)
	t.renewals, err = m.Int64Counter("orthrus.lock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals of holds by the watchdog, by result: ok, failed."))
	add(err)
	t.lost, err = m.Int64Counter("orthrus.lock.lost", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds lost without Unlock, by cause: expired, gone, lease_end, engine, closed."))
	add(err)
	t.errs, err = m.Int64Counter("orthrus.lock.engine.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Engine requests that failed, by operation: acquire, release, renew."))
	add(err)
	return errors.Join(errs...)
}

// switcherInstruments makes the instruments of the switchers.
func (t *Telemetry) switcherInstruments(m metric.Meter) error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	t.swAcquire, err = m.Int64Counter("orthrus.switcher.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions through a switcher as the caller sees them, by the engine that answered last and result."))
	add(err)
	t.swWait, err = m.Float64Histogram("orthrus.switcher.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of an acquisition through a switcher to its result, across every engine it tried."),
		metric.WithExplicitBucketBoundaries(WaitBuckets...))
	add(err)
	t.switches, err = m.Int64Counter("orthrus.switcher.switches", metric.WithUnit("{switch}"),
		metric.WithDescription("Switches of the current engine, by reason: breaker, manual, source, failback."))
	add(err)
	t.deferred, err = m.Int64Counter("orthrus.switcher.deferred", metric.WithUnit("{switch}"),
		metric.WithDescription("Switches a source asked for that this process deferred, the engine asked for being down here."))
	add(err)
	t.current, err = m.Int64ObservableGauge("orthrus.switcher.engine.current", metric.WithDescription("1 for the engine new acquisitions go to, 0 for the others."))
	add(err)
	t.epoch, err = m.Int64ObservableGauge("orthrus.switcher.epoch", metric.WithDescription("The switch epoch: the high part of the fencing tokens granted now."))
	add(err)
	t.breaker, err = m.Int64ObservableGauge("orthrus.switcher.breaker.state", metric.WithDescription("1 for the state each engine's breaker is in (closed, half_open, open), 0 for the others."))
	add(err)
	t.retries, err = m.Int64ObservableCounter("orthrus.switcher.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Acquisitions that failed on an unavailable engine and went again."))
	add(err)
	return errors.Join(errs...)
}

// Attribute keys of the metrics: bounded sets only.
const (
	keyEngine    = attribute.Key("engine")
	keyResult    = attribute.Key("result")
	keyCause     = attribute.Key("cause")
	keyOperation = attribute.Key("operation")
	keyEnd       = attribute.Key("end")
	keyName      = attribute.Key("name")
	keySwitcher  = attribute.Key("switcher")
	keyReason    = attribute.Key("reason")
	keyFrom      = attribute.Key("from")
	keyTo        = attribute.Key("to")
	keyState     = attribute.Key("state")
)

// Attribute keys of the spans.
const (
	spanEngine   = attribute.Key("orthrus.engine")
	spanSwitcher = attribute.Key("orthrus.switcher")
	spanName     = attribute.Key("orthrus.lock.name")
	spanOwner    = attribute.Key("orthrus.lock.owner")
	spanToken    = attribute.Key("orthrus.lock.token")
	spanWait     = attribute.Key("orthrus.lock.wait")
	spanResult   = attribute.Key("orthrus.lock.result")
	spanCause    = attribute.Key("orthrus.lock.lost.cause")
	spanFrom     = attribute.Key("orthrus.switch.from")
	spanTo       = attribute.Key("orthrus.switch.to")
	spanReason   = attribute.Key("orthrus.switch.reason")
	spanEpoch    = attribute.Key("orthrus.switch.epoch")
)

// spanAttrs holds the attributes of one SetAttributes call.
type spanAttrs struct {
	kv [7]attribute.KeyValue // the most a span gets: a switcher's acquisition
	n  int
}

func (b *spanAttrs) put(kv attribute.KeyValue) {
	b.kv[b.n] = kv
	b.n++
}

func (t *Telemetry) spanAttrs() *spanAttrs {
	if b, ok := t.attrBufs.Get().(*spanAttrs); ok {
		return b
	}
	return new(spanAttrs)
}

// setSpanAttrs sets b's attributes on span, which copies them, and
// returns b to the pool.
func (t *Telemetry) setSpanAttrs(span trace.Span, b *spanAttrs) {
	span.SetAttributes(b.kv[:b.n]...)
	clear(b.kv[:b.n]) // keep no lock names or owners alive
	b.n = 0
	t.attrBufs.Put(b)
}

// token makes a fencing token an attribute value; tokens stay below 2^63
// (the switcher's epoch sits at bit 44).
func token(t uint64) attribute.KeyValue { return spanToken.Int64(int64(t)) }

// AcquireStart starts the span of an acquisition and counts a waiter.
// The span's attributes are set by AcquireEnd, in one write: each write
// takes the span's lock and may grow its attribute slice.
func (t *Telemetry) AcquireStart(ctx context.Context, a observe.Acquisition) context.Context {
	kind := t.clientSpan // a request to the engine's server
	if a.Switcher != "" {
		kind = t.internalSpan // spans the engines it tries
	}
	ctx, _ = t.tracer.Start(ctx, "orthrus.lock.acquire", kind...)
	if a.Wait && a.Switcher == "" {
		t.sets(a.Engine, "", a.Name).counting().waiters.Add(1)
	}
	return ctx
}

// AcquireEnd ends the span of an acquisition and records its result.
func (t *Telemetry) AcquireEnd(ctx context.Context, a observe.Acquisition, r observe.AcquireResult) {
	oc := outcomeIndex(r.Outcome)
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		b := t.spanAttrs()
		if a.Switcher != "" {
			b.put(spanSwitcher.String(a.Switcher))
			if r.Engine != "" {
				b.put(spanEngine.String(r.Engine))
			}
		} else {
			b.put(spanEngine.String(a.Engine))
		}
		b.put(spanName.String(a.Name))
		b.put(spanOwner.String(a.Owner))
		b.put(spanWait.Bool(a.Wait))
		b.put(spanResult.String(string(r.Outcome)))
		if r.Outcome == observe.OutcomeGranted {
			b.put(token(r.Token))
		}
		t.setSpanAttrs(span, b)
		if r.Err != nil {
			span.SetStatus(codes.Error, r.Err.Error())
		}
	}
	span.End()
	waited := r.Waited.Seconds()
	if a.Switcher != "" {
		s := t.sets(r.Engine, a.Switcher, a.Name)
		t.swAcquire.Add(ctx, 1, s.result[oc].add...)
		t.swWait.Record(ctx, waited, s.swResult[oc].rec...)
		return
	}
	s := t.sets(a.Engine, "", a.Name).counting()
	t.acquisitions.Add(ctx, 1, s.result[oc].add...)
	t.wait.Record(ctx, waited, s.result[oc].rec...)
	if a.Wait {
		s.waiters.Add(-1)
	}
	switch r.Outcome {
	case observe.OutcomeGranted:
		s.holds.Add(1)
	case observe.OutcomeUnavailable:
		t.errs.Add(ctx, 1, s.opAcquire.add...)
	}
}

// ReleaseStart starts the span of a release; ReleaseEnd sets its
// attributes.
func (t *Telemetry) ReleaseStart(ctx context.Context, _ observe.HoldInfo) context.Context {
	ctx, _ = t.tracer.Start(ctx, "orthrus.lock.release", t.clientSpan...)
	return ctx
}

// ReleaseEnd ends the span of a release and counts a failed one.
func (t *Telemetry) ReleaseEnd(ctx context.Context, h observe.HoldInfo, err error) {
	lost := errors.Is(err, locker.ErrLockLost)
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		result := "released"
		switch {
		case lost:
			result = "lost"
		case err != nil:
			result = "error"
		}
		b := t.spanAttrs()
		b.put(spanEngine.String(h.Engine))
		b.put(spanName.String(h.Name))
		b.put(spanOwner.String(h.Owner))
		b.put(token(h.Token))
		b.put(spanResult.String(result))
		t.setSpanAttrs(span, b)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
	if err != nil && !lost {
		t.errs.Add(ctx, 1, t.sets(h.Engine, "", "").opRelease.add...)
	}
}

// Renewed counts a renewal.
func (t *Telemetry) Renewed(h observe.HoldInfo, err error) {
	s := t.sets(h.Engine, "", "")
	if err == nil {
		t.renewals.Add(context.Background(), 1, s.renewOK.add...)
		return
	}
	t.renewals.Add(context.Background(), 1, s.renewFail.add...)
	if !errors.Is(err, locker.ErrLockLost) {
		t.errs.Add(context.Background(), 1, s.opRenew.add...)
	}
}

// HoldEnd records a hold's duration, and a lost hold with its cause (and
// a span, since nothing else shows it in a trace).
func (t *Telemetry) HoldEnd(h observe.HoldInfo, held time.Duration, cause observe.LostCause) {
	ctx := context.Background()
	s := t.sets(h.Engine, "", h.Name)
	s.holds.Add(-1)
	if cause == observe.LostNone {
		t.holdTime.Record(ctx, held.Seconds(), s.released.rec...)
		return
	}
	t.holdTime.Record(ctx, held.Seconds(), s.lostEnd.rec...)
	t.lost.Add(ctx, 1, s.lostCause[causeIndex(cause)].add...)
	t.holdSpan(ctx, "orthrus.lock.lost", h, spanCause.String(string(cause)), "hold lost: "+string(cause))
}

// observeCounts reports the holds and waiters of every engine that has
// had any.
func (t *Telemetry) observeCounts(_ context.Context, o metric.Observer) error {
	for _, s := range *t.attrs.Load() {
		if s.counted.Load() {
			o.ObserveInt64(t.holds, s.holds.Load(), s.engine.obs...)
			o.ObserveInt64(t.waiters, s.waiters.Load(), s.engine.obs...)
		}
	}
	return nil
}
