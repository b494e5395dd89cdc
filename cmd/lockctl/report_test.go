package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	if !strings.Contains(page, "planned: switch to the next engine") || strings.Contains(page, "fault: switch") {
		t.Errorf("the page does not label the planned switch as planned")
	}
}
