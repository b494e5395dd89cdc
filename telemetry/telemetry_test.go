package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	goredis "github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/observe"
	"github.com/orthrus-go/orthrus/switcher"
	"github.com/orthrus-go/orthrus/telemetry"
)

// Two Redis servers shared by the tests and examples: two engines of a
// switcher.
var redisA, redisB string

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		a, err := testserver.NewRedis()
		if err != nil {
			return nil, err
		}
		b, err := testserver.NewRedis()
		if err != nil {
			_ = a.Stop()
			return nil, err
		}
		redisA, redisB = a.Addr(), b.Addr()
		return func() { _ = a.Stop(); _ = b.Stop() }, nil
	})
}

// rig is a Telemetry wired to the OTel SDK: metrics to a Prometheus
// exporter on a registry of its own, spans to a recorder.
type rig struct {
	*telemetry.Telemetry
	reg   *prometheus.Registry
	spans *tracetest.SpanRecorder
	tp    *sdktrace.TracerProvider

	// Events the tests wait for, sent without blocking.
	renewed  chan observe.HoldInfo
	started  chan observe.Acquisition
	switched chan switcher.Event
}

func newRig(t *testing.T, opts ...telemetry.Option) *rig {
	t.Helper()
	r := &rig{
		reg:      prometheus.NewRegistry(),
		spans:    tracetest.NewSpanRecorder(),
		renewed:  make(chan observe.HoldInfo, 64),
		started:  make(chan observe.Acquisition, 64),
		switched: make(chan switcher.Event, 64),
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(r.reg))
	if err != nil {
		t.Fatalf("prometheus.New() = %v", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	r.tp = tp
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	r.Telemetry, err = telemetry.New(append([]telemetry.Option{telemetry.WithMeterProvider(mp), telemetry.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatalf("telemetry.New() = %v", err)
	}
	return r
}

func signal[T any](c chan T, v T) {
	select {
	case c <- v:
	default:
	}
}

func (r *rig) Renewed(h observe.HoldInfo, err error) {
	r.Telemetry.Renewed(h, err)
	if err == nil {
		signal(r.renewed, h)
	}
}

func (r *rig) AcquireStart(ctx context.Context, a observe.Acquisition) context.Context {
	ctx = r.Telemetry.AcquireStart(ctx, a)
	signal(r.started, a)
	return ctx
}

func (r *rig) Switched(sw string, ev switcher.Event) {
	r.Telemetry.Switched(sw, ev)
	signal(r.switched, ev)
}

func await[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
		var zero T
		return zero
	}
}

func newClient(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newEngine(t *testing.T, c goredis.UniversalClient, name string, o observe.Observer) *redis.Engine {
	t.Helper()
	e, err := redis.New(c, redis.WithName(name), redis.WithPrefix("telemetry-"+t.Name()), redis.WithObserver(o))
	if err != nil {
		t.Fatalf("redis.New() = %v", err)
	}
	return e
}

func newLocker(t *testing.T, e locker.Engine, name string, opts ...locker.Option) locker.Locker {
	t.Helper()
	l, err := e.NewLocker(name, opts...)
	if err != nil {
		t.Fatalf("NewLocker(%q) = %v", name, err)
	}
	return l
}

// series flattens metric families into "name{label="value",...}" ->
// value, histograms as their _count, _sum and _bucket series, without the
// OTel scope labels.
func series(fams []*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if !strings.HasPrefix(l.GetName(), "otel_scope_") {
					labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
			}
			key := func(suffix string, extra ...string) string {
				all := append(slices.Clone(labels), extra...)
				sort.Strings(all)
				return f.GetName() + suffix + "{" + strings.Join(all, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key("_count")] = float64(h.GetSampleCount())
				out[key("_sum")] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[key("_bucket", fmt.Sprintf("le=%q", fmt.Sprint(b.GetUpperBound())))] = float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out
}

// scrape fetches url over HTTP and parses the text exposition format.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d, %v", url, resp.StatusCode, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	list := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		list = append(list, f)
	}
	return series(list)
}

func (r *rig) gather(t *testing.T) map[string]float64 {
	t.Helper()
	fams, err := r.reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	return series(fams)
}

// checkFamily compares every series of the metric family name (histograms:
// their _count series) with want, exactly.
func checkFamily(t *testing.T, got map[string]float64, name string, want map[string]float64) {
	t.Helper()
	for k, v := range got {
		if !strings.HasPrefix(k, name+"{") {
			continue
		}
		if w, ok := want[k]; !ok {
			t.Errorf("unexpected series %s = %v", k, v)
		} else if v != w {
			t.Errorf("%s = %v; want %v", k, v, w)
		}
	}
	for k, w := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("missing series %s (want %v)", k, w)
		}
	}
}

func dump(got map[string]float64) string {
	keys := make([]string, 0, len(got))
	for k := range got {
		if strings.HasPrefix(k, "orthrus_") && !strings.Contains(k, "_bucket{") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %v\n", k, got[k])
	}
	return b.String()
}

// TestPrometheusScrape runs a known sequence through a switcher over two
// Redis engines — 3 grants, 1 timeout, 1 lost hold, 1 switch — and checks
// every series of a real /metrics endpoint.
func TestPrometheusScrape(t *testing.T) {
	r := newRig(t)
	srv := httptest.NewServer(promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	cb := newClient(t, redisB)
	a := newEngine(t, newClient(t, redisA), "redis-a", r)
	b := newEngine(t, cb, "redis-b", r)
	sw, err := switcher.New([]locker.Engine{a, b}, switcher.WithName("sw"), switcher.WithObserver(r))
	if err != nil {
		t.Fatalf("switcher.New() = %v", err)
	}
	defer sw.Close()

	// 1 grant on redis-a, then 1 timeout behind it.
	l1, l2 := newLocker(t, sw, "job"), newLocker(t, sw, "job")
	if err := l1.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	if ok, err := l2.TryLockTimeout(50 * time.Millisecond); ok || err != nil {
		t.Fatalf("TryLockTimeout(50ms) = %v, %v; want false, nil", ok, err)
	}
	if err := l1.Unlock(); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}

	// 1 switch, by hand.
	if to, err := sw.SwitchEngine(); to != "redis-b" || err != nil {
		t.Fatalf("SwitchEngine() = %q, %v; want redis-b, nil", to, err)
	}

	// 1 grant on redis-b, renewed once, then lost: its key is deleted.
	l3 := newLocker(t, sw, "lease", locker.WithTTL(600*time.Millisecond))
	if err := l3.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	await(t, r.renewed, "renewal")
	if err := cb.Del(context.Background(), b.LockKey("lease")).Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	await(t, l3.(locker.Lease).Lost(), "lost hold")
	if err := l3.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Fatalf("Unlock() = %v; want ErrLockLost", err)
	}

	// 1 grant on redis-b, still held at the scrape.
	l4 := newLocker(t, sw, "report")
	if err := l4.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	defer l4.Unlock()

	got := scrape(t, srv.URL)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scraped:\n%s", dump(got))
		}
	})

	const ea, eb = `engine="redis-a"`, `engine="redis-b"`
	checkFamily(t, got, "orthrus_lock_acquisitions_total", map[string]float64{
		`orthrus_lock_acquisitions_total{` + ea + `,result="granted"}`: 1,
		// Through the switcher, a waiter makes one acquisition, as on the
		// bare engine: no try before it waits.
		`orthrus_lock_acquisitions_total{` + ea + `,result="timeout"}`: 1,
		`orthrus_lock_acquisitions_total{` + eb + `,result="granted"}`: 2,
	})
	checkFamily(t, got, "orthrus_lock_wait_duration_seconds_count", map[string]float64{
		`orthrus_lock_wait_duration_seconds_count{` + ea + `,result="granted"}`: 1,
		`orthrus_lock_wait_duration_seconds_count{` + ea + `,result="timeout"}`: 1,
		`orthrus_lock_wait_duration_seconds_count{` + eb + `,result="granted"}`: 2,
	})
	// The timeout waited 50ms, a little less on the engine (the deadline
	// started with the caller's call): above 25ms, below 100ms.
	timeout := `{` + ea + `,le="%s",result="timeout"}`
	for le, want := range map[string]float64{"0.0001": 0, "0.025": 0, "0.1": 1, "30": 1} {
		if k := "orthrus_lock_wait_duration_seconds_bucket" + fmt.Sprintf(timeout, le); got[k] != want {
			t.Errorf("%s = %v; want %v", k, got[k], want)
		}
	}
	// Measured from just after the deadline was set: less than 50ms by
	// however long the caller was descheduled in between, which a CPU hog
	// makes milliseconds.
	if s := got[`orthrus_switcher_wait_duration_seconds_sum{result="timeout",switcher="sw"}`]; s < 0.025 || s > 5 {
		t.Errorf("the caller's timeout wait = %vs; want about 0.05s (measured from just after its deadline was set)", s)
	}
	checkFamily(t, got, "orthrus_lock_hold_duration_seconds_count", map[string]float64{
		`orthrus_lock_hold_duration_seconds_count{end="released",` + ea + `}`: 1,
		`orthrus_lock_hold_duration_seconds_count{end="lost",` + eb + `}`:     1,
	})
	checkFamily(t, got, "orthrus_lock_holds", map[string]float64{
		`orthrus_lock_holds{` + ea + `}`: 0,
		`orthrus_lock_holds{` + eb + `}`: 1,
	})
	checkFamily(t, got, "orthrus_lock_waiters", map[string]float64{
		`orthrus_lock_waiters{` + ea + `}`: 0,
		`orthrus_lock_waiters{` + eb + `}`: 0,
	})
	if n := got[`orthrus_lock_renewals_total{`+eb+`,result="ok"}`]; n < 1 {
		t.Errorf("renewals ok on redis-b = %v; want at least 1", n)
	}
	if n := got[`orthrus_lock_renewals_total{`+eb+`,result="failed"}`]; n != 1 {
		t.Errorf("renewals failed on redis-b = %v; want 1 (the one that found the key gone)", n)
	}
	checkFamily(t, got, "orthrus_lock_lost_total", map[string]float64{
		`orthrus_lock_lost_total{cause="gone",` + eb + `}`: 1,
	})
	checkFamily(t, got, "orthrus_lock_engine_errors_total", nil)

	const s = `switcher="sw"`
	checkFamily(t, got, "orthrus_switcher_acquisitions_total", map[string]float64{
		`orthrus_switcher_acquisitions_total{` + ea + `,result="granted",` + s + `}`: 1,
		`orthrus_switcher_acquisitions_total{` + ea + `,result="timeout",` + s + `}`: 1,
		`orthrus_switcher_acquisitions_total{` + eb + `,result="granted",` + s + `}`: 2,
	})
	checkFamily(t, got, "orthrus_switcher_wait_duration_seconds_count", map[string]float64{
		`orthrus_switcher_wait_duration_seconds_count{result="granted",` + s + `}`: 3,
		`orthrus_switcher_wait_duration_seconds_count{result="timeout",` + s + `}`: 1,
	})
	checkFamily(t, got, "orthrus_switcher_switches_total", map[string]float64{
		`orthrus_switcher_switches_total{from="redis-a",reason="manual",` + s + `,to="redis-b"}`: 1,
	})
	checkFamily(t, got, "orthrus_switcher_deferred_total", nil)
	checkFamily(t, got, "orthrus_switcher_engine_current", map[string]float64{
		`orthrus_switcher_engine_current{` + ea + `,` + s + `}`: 0,
		`orthrus_switcher_engine_current{` + eb + `,` + s + `}`: 1,
	})
	checkFamily(t, got, "orthrus_switcher_epoch", map[string]float64{`orthrus_switcher_epoch{` + s + `}`: 1})
	checkFamily(t, got, "orthrus_switcher_retries_total", map[string]float64{`orthrus_switcher_retries_total{` + s + `}`: 0})
	breakers := map[string]float64{}
	for _, e := range []string{ea, eb} {
		for _, st := range []string{"closed", "half_open", "open"} {
			v := 0.0
			if st == "closed" {
				v = 1
			}
			breakers[`orthrus_switcher_breaker_state{`+e+`,state="`+st+`",`+s+`}`] = v
		}
	}
	checkFamily(t, got, "orthrus_switcher_breaker_state", breakers)
}

// TestLockNames: the opt-in name label, mapped to a small set.
func TestLockNames(t *testing.T) {
	r := newRig(t, telemetry.WithLockNames(func(name string) string {
		if kind, _, ok := strings.Cut(name, "/"); ok {
			return kind
		}
		return "" // no label
	}))
	e := newEngine(t, newClient(t, redisA), "redis-a", r)
	defer e.Close()
	for _, name := range []string{"orders/1", "orders/2", "misc"} {
		l := newLocker(t, e, name)
		if err := l.Lock(); err != nil {
			t.Fatalf("Lock() = %v", err)
		}
		if err := l.Unlock(); err != nil {
			t.Fatalf("Unlock() = %v", err)
		}
	}
	checkFamily(t, r.gather(t), "orthrus_lock_acquisitions_total", map[string]float64{
		`orthrus_lock_acquisitions_total{engine="redis-a",name="orders",result="granted"}`: 2,
		`orthrus_lock_acquisitions_total{engine="redis-a",result="granted"}`:               1,
	})
}

func TestOptionsInvalid(t *testing.T) {
	for name, opt := range map[string]telemetry.Option{
		"WithMeterProvider":  telemetry.WithMeterProvider(nil),
		"WithTracerProvider": telemetry.WithTracerProvider(nil),
		"WithLockNames":      telemetry.WithLockNames(nil),
		"nil":                nil,
	} {
		if _, err := telemetry.New(opt); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), strings.TrimPrefix(name, "nil")) {
			t.Errorf("New(%s) = %v; want ErrInvalidArgument naming it", name, err)
		}
	}
	for name, err := range map[string]error{
		"redis.WithObserver(nil)":    func() error { _, err := redis.New(newClient(t, redisA), redis.WithObserver(nil)); return err }(),
		"switcher.WithObserver(nil)": func() error { _, err := switcher.New(nil, switcher.WithObserver(nil)); return err }(),
	} {
		if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithObserver") {
			t.Errorf("%s: %v; want ErrInvalidArgument naming WithObserver", name, err)
		}
	}
}
