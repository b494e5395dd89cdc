package config_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/locker"
)

// TestOpenTelemetry: with the providers given, every engine Open builds
// and its switcher report to them.
func TestOpenTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer mp.Shutdown(context.Background())
	defer tp.Shutdown(context.Background())
	c := loadYAML(t, fmt.Sprintf(`
name: tel
engines:
  - {name: redis, type: redis, addrs: [%q], prefix: config-tel}
  - {name: zk, type: zk, servers: [%q], prefix: /config-tel, session_timeout: 2s}
  - {name: etcd, type: etcd, endpoints: [%q], prefix: config-tel}
source: {type: none}
`, redisAddr, zkAddr, etcdAddr))
	sw := open(t, c, quiet, config.WithMeterProvider(mp), config.WithTracerProvider(tp))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, name := range []string{"redis", "zk", "etcd"} {
		if _, err := sw.SwitchEngineTo(name); err != nil {
			t.Fatalf("SwitchEngineTo(%q) = %v", name, err)
		}
		l, err := sw.NewLocker("job")
		if err != nil {
			t.Fatalf("NewLocker() = %v", err)
		}
		if err := l.LockCtx(ctx); err != nil {
			t.Fatalf("%s: LockCtx() = %v", name, err)
		}
		if err := l.Unlock(); err != nil {
			t.Fatalf("%s: Unlock() = %v", name, err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatalf("Collect() = %v", err)
	}
	granted := map[string]int64{}
	var current string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "orthrus.lock.acquisitions":
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					e, _ := dp.Attributes.Value("engine")
					if r, _ := dp.Attributes.Value("result"); r.AsString() == "granted" {
						granted[e.AsString()] += dp.Value
					}
				}
			case "orthrus.switcher.engine.current":
				for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
					if dp.Value == 1 {
						e, _ := dp.Attributes.Value(attribute.Key("engine"))
						current = e.AsString()
					}
				}
			}
		}
	}
	for _, name := range []string{"redis", "zk", "etcd"} {
		if granted[name] != 1 {
			t.Errorf("orthrus.lock.acquisitions{engine=%q,result=granted} = %d; want 1", name, granted[name])
		}
	}
	if current != "etcd" {
		t.Errorf("orthrus.switcher.engine.current = %q; want etcd", current)
	}
	count := map[string]int{}
	for _, s := range spans.Ended() {
		count[s.Name()]++
	}
	// Per engine: the switcher's acquisition, the engine's, the release.
	if count["orthrus.lock.acquire"] != 6 || count["orthrus.lock.release"] != 3 || count["orthrus.switch"] != 2 {
		t.Errorf("spans = %v; want 6 acquisitions, 3 releases, 2 switches", count)
	}
}

func TestTelemetryOptionsInvalid(t *testing.T) {
	c := loadYAML(t, twoRedis())
	for name, opt := range map[string]config.Option{
		"WithMeterProvider":  config.WithMeterProvider(nil),
		"WithTracerProvider": config.WithTracerProvider(nil),
	} {
		_, err := config.Open(context.Background(), c, opt)
		if !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("Open(%s(nil)) = %v; want ErrInvalidArgument", name, err)
		}
	}
}
