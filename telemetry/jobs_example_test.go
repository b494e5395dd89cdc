package telemetry_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sort"
	"strings"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/orthrus-go/orthrus/elect"
	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/runonce"
	"github.com/orthrus-go/orthrus/telemetry"
)

// The metrics of a leader election and of a run-once job on two hosts:
// one observer for both packages. A manual reader stands in for the
// application's exporter.
func ExampleTelemetry_Jobs() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	tel, err := telemetry.New(telemetry.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	obs, err := tel.Jobs()
	if err != nil {
		log.Fatal(err)
	}

	store, _ := mem.NewStore() // one simulated server for both hosts
	hostA, _ := mem.New(mem.WithStore(store), mem.WithName("host-a"))
	hostB, _ := mem.New(mem.WithStore(store), mem.WithName("host-b"))
	defer hostA.Close()
	defer hostB.Close()
	ctx := context.Background()

	leader, _ := elect.New(hostA, "billing", elect.WithObserver(obs))
	if _, err := leader.Campaign(ctx); err != nil {
		log.Fatal(err)
	}
	_ = leader.Resign()

	a, _ := runonce.New(hostA, runonce.WithObserver(obs), runonce.AtLeastFor(50*time.Millisecond))
	b, _ := runonce.New(hostB, runonce.WithObserver(obs))
	report := func(context.Context) error { return nil }
	_, _ = a.Run(ctx, "nightly-report", report) // runs, and keeps the name for AtLeastFor
	_, _ = b.Run(ctx, "nightly-report", report) // skips
	_ = a.Close()
	_ = b.Close()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, line := range counters(rm, "orthrus.elect.terms", "orthrus.elect.leading", "orthrus.runonce.runs") {
		fmt.Println(line)
	}
	// Output:
	// orthrus.elect.leading{engine=host-a} 0
	// orthrus.elect.terms{engine=host-a} 1
	// orthrus.runonce.runs{engine=host-a,outcome=ran} 1
	// orthrus.runonce.runs{engine=host-b,outcome=skipped} 1
}

// counters lists the points of the integer sums named, sorted.
func counters(rm metricdata.ResourceMetrics, names ...string) []string {
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !slices.Contains(names, m.Name) {
				continue
			}
			for _, dp := range sum.DataPoints {
				var kv []string
				for _, a := range dp.Attributes.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.String())
				}
				lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, strings.Join(kv, ","), dp.Value))
			}
		}
	}
	sort.Strings(lines)
	return lines
}
