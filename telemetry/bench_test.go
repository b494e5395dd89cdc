package telemetry_test

import (
	"context"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/observe"
	"github.com/orthrus-go/orthrus/telemetry"
)

// benchLocker returns a Locker of a Redis engine observed by o (none when
// nil), closed with b.
func benchLocker(b *testing.B, c goredis.UniversalClient, name string, o observe.Observer) locker.Locker {
	b.Helper()
	opts := []redis.Option{redis.WithName(name), redis.WithPrefix("bench")}
	if o != nil {
		opts = append(opts, redis.WithObserver(o))
	}
	e, err := redis.New(c, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	l, err := e.NewLocker(name)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// discard is a span exporter that drops what it is given: the SDK's
// span processing and snapshots are paid, the wire is not.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// observers returns a Telemetry over no-op providers, one with the SDK's
// metrics (aggregated for a reader) and no-op traces, one over the SDK for
// both (every span sampled, recorded and exported by the synchronous span
// processor), and one like it with the batching span processor.
//
// The batching processor hands each ended span to its goroutine, which a
// machine with few idle cores pays for in wake-ups: that cost is the
// SDK's, not this package's, and it would slow the cycles it is
// interleaved with, so it is measured on its own.
func observers(b *testing.B) (noopTel, metricsTel, sdkTel, batchTel *telemetry.Telemetry) {
	b.Helper()
	var err error
	noopTel, err = telemetry.New(telemetry.WithMeterProvider(noop.NewMeterProvider()),
		telemetry.WithTracerProvider(tracenoop.NewTracerProvider()))
	if err != nil {
		b.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSyncer(discard{}))
	batch := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discard{}))
	b.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
		_ = batch.Shutdown(context.Background())
	})
	sdkTel, err = telemetry.New(telemetry.WithMeterProvider(mp), telemetry.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	metricsTel, err = telemetry.New(telemetry.WithMeterProvider(mp), telemetry.WithTracerProvider(tracenoop.NewTracerProvider()))
	if err != nil {
		b.Fatal(err)
	}
	batchTel, err = telemetry.New(telemetry.WithMeterProvider(mp), telemetry.WithTracerProvider(batch))
	if err != nil {
		b.Fatal(err)
	}
	return noopTel, metricsTel, sdkTel, batchTel
}

func cycle(b *testing.B, l locker.Locker) {
	if err := l.Lock(); err != nil {
		b.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLockUnlock is one uncontended Redis Lock+Unlock cycle with no
// observer, with a Telemetry over no-op providers, over the SDK's metrics
// alone, and over the SDK's metrics and traces (synchronous, then
// batching span processor). "interleaved" alternates the first four cycle
// by cycle, so that a busy machine slows them alike, and reports each
// observed cycle's time relative to the unobserved one.
func BenchmarkLockUnlock(b *testing.B) {
	c := goredis.NewClient(&goredis.Options{Addr: redisA})
	defer c.Close()
	noopTel, metricsTel, sdkTel, batchTel := observers(b)
	for _, bc := range []struct {
		name string
		o    observe.Observer
	}{{"none", nil}, {"noop", noopTel}, {"sdk-metrics", metricsTel}, {"sdk", sdkTel}, {"sdk-batch", batchTel}} {
		b.Run(bc.name, func(b *testing.B) {
			l := benchLocker(b, c, "bench-"+bc.name, bc.o)
			b.ReportAllocs()
			for b.Loop() {
				cycle(b, l)
			}
		})
	}
	// Cycle by cycle, in an order that rotates, so that neither load on
	// the machine nor the position in the round favours one; the ratios
	// are of median cycle times, which a stray pause does not move.
	b.Run("interleaved", func(b *testing.B) {
		lockers := []locker.Locker{
			benchLocker(b, c, "il-none", nil),
			benchLocker(b, c, "il-noop", noopTel),
			benchLocker(b, c, "il-metrics", metricsTel),
			benchLocker(b, c, "il-sdk", sdkTel),
		}
		var spent [4][]time.Duration
		round := 0
		for b.Loop() {
			for k := range lockers {
				i := (k + round) % len(lockers)
				t0 := time.Now()
				cycle(b, lockers[i])
				spent[i] = append(spent[i], time.Since(t0))
			}
			round++
		}
		none := median(spent[0])
		for i, unit := range []string{"noop/none", "sdk-metrics/none", "sdk/none"} {
			b.ReportMetric(float64(median(spent[i+1]))/float64(none), unit)
		}
	})
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkObserve is what a Lock+Unlock cycle costs the Telemetry alone,
// without the engine: the absolute overhead behind BenchmarkLockUnlock's
// ratios.
func BenchmarkObserve(b *testing.B) {
	noopTel, metricsTel, sdkTel, batchTel := observers(b)
	a := observe.Acquisition{Engine: "redis", Name: "orders/42", Owner: "host:1:abc", Wait: true}
	h := observe.HoldInfo{Engine: "redis", Name: "orders/42", Owner: "host:1:abc", Token: 42}
	for _, bc := range []struct {
		name string
		t    *telemetry.Telemetry
	}{{"noop", noopTel}, {"sdk-metrics", metricsTel}, {"sdk", sdkTel}, {"sdk-batch", batchTel}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx := bc.t.AcquireStart(context.Background(), a)
				bc.t.AcquireEnd(ctx, a, observe.AcquireResult{Outcome: observe.OutcomeGranted, Engine: "redis", Token: 42, Waited: time.Millisecond})
				ctx = bc.t.ReleaseStart(context.Background(), h)
				bc.t.ReleaseEnd(ctx, h, nil)
				bc.t.HoldEnd(h, time.Millisecond, observe.LostNone)
			}
		})
	}
}
