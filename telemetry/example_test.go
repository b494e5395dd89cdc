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

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/telemetry"
)

// Prometheus metrics of a Redis engine: the application's OpenTelemetry
// SDK with the Prometheus exporter, and two lines for orthrus.
func Example_prometheus() {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	// A service would http.Handle("/metrics", ...) on its own server.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	client := goredis.NewClient(&goredis.Options{Addr: redisA})
	defer client.Close()
	tel, err := telemetry.New(telemetry.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	engine, err := redis.New(client, redis.WithName("redis-main"), redis.WithPrefix("example"), redis.WithObserver(tel))
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()

	l, err := engine.NewLocker("orders/42")
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Lock(); err != nil {
		log.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
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
		for _, name := range []string{"orthrus_lock_acquisitions_total", "orthrus_lock_holds", "orthrus_lock_hold_duration_seconds_count"} {
			if strings.HasPrefix(line, name+"{") {
				fmt.Println(line)
			}
		}
	}
	// Output:
	// orthrus_lock_acquisitions_total{engine="redis-main",result="granted"} 1
	// orthrus_lock_hold_duration_seconds_count{end="released",engine="redis-main"} 1
	// orthrus_lock_holds{engine="redis-main"} 0
}
