package telemetry_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// checkJobMetrics compares the series of each family of want with those
// r gathers, checks the docs' queries of the metrics named with prefix,
// and returns what was gathered, which a failed test logs.
func checkJobMetrics(t *testing.T, r *rig, prefix string, want map[string]map[string]float64) map[string]float64 {
	t.Helper()
	got := r.gather(t)
	for family, series := range want {
		checkFamily(t, got, family, series)
	}
	checkJobDocs(t, got, prefix)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gathered:\n%s", dump(got))
		}
	})
	return got
}

// checkJobDocs checks that the dashboard and the alerts query metrics
// named with prefix, and only families gathered (a histogram may be
// named by itself).
func checkJobDocs(t *testing.T, got map[string]float64, prefix string) {
	t.Helper()
	exported := map[string]bool{}
	for k := range got {
		family, _, _ := strings.Cut(k, "{")
		exported[family] = true
		exported[strings.TrimSuffix(family, "_count")] = true // a histogram by its name
	}
	queried := regexp.MustCompile(prefix + `[a-z_]+`)
	for _, doc := range []string{"../docs/grafana-dashboard.json", "../docs/prometheus-alerts.yaml"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		names := queried.FindAllString(string(text), -1)
		if len(names) == 0 {
			t.Errorf("%s queries no %s metric; want them", doc, prefix)
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("%s queries %s, which the telemetry does not export", doc, n)
			}
		}
	}
}
