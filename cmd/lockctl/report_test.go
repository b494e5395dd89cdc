package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/drill"
)

// readReportJSON reads report.json back into a drill.Report: every
// name_ms becomes name in nanoseconds again.
func readReportJSON(t *testing.T, path string) *drill.Report {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var toNanos func(v any) any
	toNanos = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, x := range v {
				if name, ok := strings.CutSuffix(k, "_ms"); ok {
					out[name] = int64(math.Round(x.(float64) * 1e6))
					continue
				}
				out[k] = toNanos(x)
			}
			return out
		case []any:
			for i := range v {
				v[i] = toNanos(v[i])
			}
		}
		return v
	}
	back, err := json.Marshal(toNanos(tree))
	if err != nil {
		t.Fatal(err)
	}
	var r drill.Report
	if err := json.Unmarshal(back, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &r
}

// report.json gives every duration as a float of milliseconds named
// name_ms, exact to the nanosecond, and an empty list as [], never null.
func TestReportJSON(t *testing.T) {
	dir := t.TempDir()
	want := syntheticReport()
	if _, err := writeReport(dir, want); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"null", `"duration":`, `"at":`, `"tick":`, `"p99":`, `"switch_latency":`, `"spread":`} {
		if strings.Contains(string(raw), bad) {
			t.Errorf("report.json contains %s; want none", bad)
		}
	}
	for _, good := range []string{`"violations": []`, `"duration_ms": 20000`, `"switch_latency_ms": 412`, `"at_ms": 10412`} {
		if !strings.Contains(string(raw), good) {
			t.Errorf("report.json lacks %s", good)
		}
	}
	got := readReportJSON(t, filepath.Join(dir, "report.json"))
	if got.Duration != want.Duration || got.SwitchLatency != want.SwitchLatency || got.Tick != want.Tick ||
		got.Marks[1].At != want.Marks[1].At || got.Timeline[3].P99 != want.Timeline[3].P99 ||
		got.Fleet.Processes[2].Marks[0].At != want.Fleet.Processes[2].Marks[0].At {
		t.Errorf("report.json read back: duration %v, switch latency %v, tick %v, mark %v, p99 %v, lane mark %v; want %v, %v, %v, %v, %v, %v",
			got.Duration, got.SwitchLatency, got.Tick, got.Marks[1].At, got.Timeline[3].P99, got.Fleet.Processes[2].Marks[0].At,
			want.Duration, want.SwitchLatency, want.Tick, want.Marks[1].At, want.Timeline[3].P99, want.Fleet.Processes[2].Marks[0].At)
	}
}

// Every figure on the page says what it counts.
func TestReportExplainsFigures(t *testing.T) {
	dir := t.TempDir()
	if _, err := writeReport(dir, syntheticReport()); err != nil {
		t.Fatal(err)
	}
	page := readFile(t, filepath.Join(dir, "report.html"))
	rows := regexp.MustCompile(`<tr><th>([^<]+)</th><td[^>]*>[^<]*</td>(?:<td class="note">([^<]*)</td>)?</tr>`).FindAllStringSubmatch(page, -1)
	if len(rows) == 0 {
		t.Fatal("no figures on the page")
	}
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r[1]] = true
		if strings.TrimSpace(r[2]) == "" {
			t.Errorf("figure %q is not explained", r[1])
		}
	}
	for _, name := range []string{"retried acquisitions", "unlock errors"} {
		if !seen[name] {
			t.Errorf("no figure %q on the page", name)
		}
	}
}

// The report names the config and every engine's addresses, never a
// secret.
func TestReportNamesWhatWasDrilled(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.yaml")
	writeFile(t, path, `engines:
  - {name: redis-main, type: redis, addrs: ["10.0.0.1:6379", "10.0.0.2:6379"], password: s3cret-redis}
  - {name: etcd-b, type: etcd, endpoints: ["https://etcd-1.internal:2379"], username: app, password: s3cret-etcd, tls: {enabled: true}}
  - {name: zk-c, type: zk, servers: ["zk-1:2181"], auth: {scheme: digest, credentials: "app:s3cret-zk"}}
source: {type: etcd, endpoints: ["https://etcd-1.internal:2379"], key: /app/active, username: app, password: s3cret-source}
`)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r := syntheticReport()
	r.Setup = configSetup(cfg)
	if _, err := writeReport(dir, r); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"report.html", "report.json"} {
		got := readFile(t, filepath.Join(dir, file))
		for _, want := range []string{path, "10.0.0.1:6379", "10.0.0.2:6379", "https://etcd-1.internal:2379", "zk-1:2181", "/app/active", "user app"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s does not name %s", file, want)
			}
		}
		if strings.Contains(got, "s3cret") {
			t.Errorf("%s shows a secret", file)
		}
	}
}

// A switch asked for by --switch-at is a planned switch, not a fault.
func TestDrillPlannedSwitch(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := lockctlRun(t, "", "drill", "--engine", "mem", "--duration", "2s", "--kill-at", "0", "--switch-at", "1s", "--workers", "4", "--names", "8", "--report", dir)
	if code != 0 {
		t.Fatalf("lockctl drill exited %d; want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "planned switch to the next engine") || strings.Contains(out, "fault") {
		t.Errorf("drill output marks the planned switch as a fault, or not at all:\n%s", out)
	}
	r := readReportJSON(t, filepath.Join(dir, "report.json"))
	kinds := map[string]int{}
	for _, m := range r.Marks {
		kinds[m.Kind]++
	}
	if kinds["planned"] != 1 || kinds["switch"] != 1 || kinds["fault"] != 0 {
		t.Errorf("report.json marks %v; want a planned switch and a switch", kinds)
	}
	page := readFile(t, filepath.Join(dir, "report.html"))
	if !regexp.MustCompile(`planned at [^:]+: switch to the next engine`).MatchString(page) || regexp.MustCompile(`fault at [^:]+: switch`).MatchString(page) {
		t.Errorf("the page does not label the planned switch as planned")
	}
	if !strings.Contains(page, "in memory") {
		t.Errorf("the page does not say that the engines were in memory")
	}
}
