package telemetry_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	goredis "github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/telemetry"
)

// The metrics of an idempotency gate: an operation run once, then replayed.
func ExampleTelemetry_Idem() {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	tel, err := telemetry.New(telemetry.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	obs, err := tel.Idem()
	if err != nil {
		log.Fatal(err)
	}
	client := goredis.NewClient(&goredis.Options{Addr: redisA, ContextTimeoutEnabled: true})
	defer client.Close()
	store, _ := idem.NewRedisStore(client, idem.WithPrefix("example:telemetry"))
	gate, err := idem.New("example-telemetry", store, idem.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer gate.Close()

	ctx := context.Background()
	tk, _, err := gate.Begin(ctx, "invoice-1")
	if err != nil {
		log.Fatal(err)
	}
	if err := tk.Succeed(ctx, []byte("sent")); err != nil {
		log.Fatal(err)
	}
	if _, _, err := gate.Begin(ctx, "invoice-1"); err != nil { // a retry: replayed
		log.Fatal(err)
	}

	resp, err := http.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range []string{"orthrus_idem_begins_total", "orthrus_idem_store_duration_seconds_count"} {
			if strings.HasPrefix(line, name+"{") {
				fmt.Println(line)
			}
		}
	}
	// Output:
	// orthrus_idem_begins_total{outcome="ran",store="redis"} 1
	// orthrus_idem_begins_total{outcome="replayed",store="redis"} 1
	// orthrus_idem_store_duration_seconds_count{op="create",result="ok",store="redis"} 2
	// orthrus_idem_store_duration_seconds_count{op="replace",result="ok",store="redis"} 1
}
