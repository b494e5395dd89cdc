package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/telemetry"
)

// metricsServer serves the drill's metrics in the Prometheus format on
// /metrics, through the OpenTelemetry SDK and its Prometheus exporter.
type metricsServer struct {
	tel *telemetry.Telemetry
	mp  *sdkmetric.MeterProvider
	srv *http.Server
	ln  net.Listener
	err chan error
}

// serveMetrics listens on addr (":9464", "127.0.0.1:0") at once, so that a
// port in use fails the drill before it starts.
func serveMetrics(addr string, stdout io.Writer) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	m := &metricsServer{mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), err: make(chan error, 1)}
	if m.tel, err = telemetry.New(telemetry.WithMeterProvider(m.mp)); err != nil {
		return nil, errors.Join(err, m.mp.Shutdown(context.Background()))
	}
	if m.ln, err = net.Listen("tcp", addr); err != nil {
		return nil, errors.Join(fmt.Errorf("--metrics-addr: %w", err), m.mp.Shutdown(context.Background()))
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { m.err <- m.srv.Serve(m.ln) }()
	fmt.Fprintf(stdout, "metrics: http://%s/metrics\n", m.ln.Addr())
	return m, nil
}

// configOptions instruments what config.Open builds; none without a server.
func (m *metricsServer) configOptions() []config.Option {
	if m == nil {
		return nil
	}
	return []config.Option{config.WithMeterProvider(m.mp)}
}

// close stops the server, waiting at most a few seconds for a scrape in
// flight, then the meter provider.
func (m *metricsServer) close() {
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
	<-m.err
	_ = m.mp.Shutdown(ctx)
}
