package main

import (
	"context"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/internal/drill"
)

// chromium returns the headless browser, or skips (fails with CI=true).
func chromium(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(bin); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install chromium)")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

var (
	checkRE  = regexp.MustCompile(`<body data-check="([^"]*)"`)
	scriptRE = regexp.MustCompile(`(?s)<script>.*?</script>`)
)

// browse loads the report page in headless chromium and returns the
// verdict its script wrote into body's data-check; it fails the test when
// the verdict is anywhere else, where a reader would see it, and saves a
// screenshot as report.png next to the page.
func browse(t *testing.T, page string) string {
	t.Helper()
	bin := chromium(t)
	run := func(extra ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir=" + t.TempDir()}, extra...)
		cmd := exec.CommandContext(ctx, bin, append(args, "file://"+page)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
		}
		return out
	}
	dom := string(run("--dump-dom"))
	m := checkRE.FindStringSubmatchIndex(dom)
	if m == nil {
		t.Fatalf("no self-check in the page chromium loaded:\n%.2000s", dom)
	}
	verdict := html.UnescapeString(dom[m[2]:m[3]])
	shown := html.UnescapeString(scriptRE.ReplaceAllString(dom[:m[0]]+dom[m[1]:], ""))
	if verdict == "" || strings.Contains(shown, verdict) {
		t.Errorf("the self-check %q is visible to readers", verdict)
	}
	shot := filepath.Join(filepath.Dir(page), "report.png")
	run("--window-size=1100,1500", "--hide-scrollbars", "--screenshot="+shot)
	t.Logf("screenshot: %s", shot)
	return verdict
}

// checkInBrowser fails the test unless the page's own check passes in a
// real browser: no two labels overlap, every series has points, no NaN.
func checkInBrowser(t *testing.T, page string) {
	t.Helper()
	if v := browse(t, page); !strings.HasPrefix(v, "OK") {
		t.Errorf("report page in chromium: %s", v)
	}
}

// syntheticReport is a crowded fleet drill: three engines, three
// processes, faults and switches close together.
func syntheticReport() *drill.Report {
	engines := []string{"redis-main", "zk-backup", "etcd-third"}
	tick := 250 * time.Millisecond
	lane := func(p string, switchAt time.Duration) *drill.Report {
		r := &drill.Report{Process: p, Engines: engines, Tick: tick, Duration: 20 * time.Second, Initial: engines[0]}
		for k := range 80 {
			at := time.Duration(k) * tick
			cur, br := engines[0], []string{"closed", "closed", "closed"}
			if at >= switchAt {
				cur, br = engines[1], []string{"open", "closed", "closed"}
			}
			if at >= switchAt+4*time.Second {
				br[0] = "half-open"
			}
			r.Timeline = append(r.Timeline, drill.Bucket{At: at, Current: cur, Breakers: br})
		}
		r.Marks = []drill.Mark{{At: switchAt, Kind: "switch", Label: engines[0] + " → " + engines[1], To: engines[1]}}
		return r
	}
	r := &drill.Report{
		Started: time.Now(), Duration: 20 * time.Second, Engines: engines, Workers: 48, Names: 64, Tick: tick,
		Acquired: map[string]int64{}, SwitchLatency: 412 * time.Millisecond,
		Marks: []drill.Mark{
			{At: 10 * time.Second, Kind: "fault", Label: "stop redis-main"},
			{At: 10*time.Second + 412*time.Millisecond, Kind: "switch", Label: "redis-main → zk-backup", Detail: "3 of 3 processes within 9ms"},
			{At: 10*time.Second + 600*time.Millisecond, Kind: "fault", Label: "pause zk-backup"},
			{At: 19*time.Second + 900*time.Millisecond, Kind: "switch", Label: "zk-backup → etcd-third (breaker)"},
		},
		Fleet: &drill.Fleet{},
	}
	for k := range 80 {
		at := time.Duration(k) * tick
		b := drill.Bucket{At: at, Acquired: map[string]int64{}, P50: time.Duration(k%7+1) * time.Millisecond, P99: time.Duration(k%5+3) * 10 * time.Millisecond}
		if at < 10*time.Second {
			b.Acquired[engines[0]] = 250
		} else {
			b.Acquired[engines[1]] = 180
			b.Failed = int64(k % 3)
		}
		r.Timeline = append(r.Timeline, b)
	}
	for i, at := range []time.Duration{10412, 10415, 10421} {
		r.Fleet.Processes = append(r.Fleet.Processes, lane(fmt.Sprintf("p%d", i+1), at*time.Millisecond))
	}
	return r
}

// quickSwitchReport is the common drill now: the switch 2ms after the
// fault, then a planned switch back with its switch 1ms later.
func quickSwitchReport() *drill.Report {
	engines := []string{"etcd-primary", "etcd-secondary"}
	tick := 250 * time.Millisecond
	r := &drill.Report{
		Started: time.Now(), Duration: 9 * time.Second, Engines: engines, Workers: 16, Names: 64, Tick: tick,
		Acquired: map[string]int64{engines[0]: 4479, engines[1]: 2971}, SwitchLatency: 2 * time.Millisecond, Retried: 1, UnlockErrors: 12,
		Marks: []drill.Mark{
			{At: 2 * time.Second, Kind: "fault", Label: "stop etcd-primary"},
			{At: 2*time.Second + 2*time.Millisecond, Kind: "switch", Label: "etcd-primary → etcd-secondary", Detail: "breaker", To: engines[1]},
			{At: 6 * time.Second, Kind: "planned", Label: "switch to etcd-primary"},
			{At: 6*time.Second + time.Millisecond, Kind: "switch", Label: "etcd-secondary → etcd-primary", Detail: "manual", To: engines[0]},
		},
		Setup: drill.Setup{Targets: []drill.Target{
			{Name: engines[0], Type: "etcd", Addrs: []string{"http://127.0.0.1:43159"}, Security: "no tls"},
			{Name: engines[1], Type: "etcd", Addrs: []string{"http://127.0.0.1:45579"}, Security: "no tls"},
		}},
	}
	for k := range 36 {
		at := time.Duration(k) * tick
		b := drill.Bucket{At: at, Acquired: map[string]int64{}, P50: 2 * time.Millisecond, P99: time.Duration(k%5+8) * time.Millisecond,
			Current: engines[0], Breakers: []string{"closed", "closed"}}
		if at >= 2*time.Second && at < 6*time.Second {
			b.Current, b.Breakers[0] = engines[1], "open"
		}
		b.Acquired[b.Current] = 600
		r.Timeline = append(r.Timeline, b)
	}
	return r
}

func TestReportInBrowser(t *testing.T) {
	for name, r := range map[string]*drill.Report{"fleet": syntheticReport(), "quick switch": quickSwitchReport()} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := writeReport(dir, r); err != nil {
				t.Fatal(err)
			}
			checkInBrowser(t, filepath.Join(dir, "report.html"))
			checkReportPage(t, filepath.Join(dir, "report.html"), r.Engines)
		})
	}
}

// The page's check can fail: a label drawn over another, and an empty
// series, are caught.
func TestReportCheckCatchesOverlap(t *testing.T) {
	dir := t.TempDir()
	if _, err := writeReport(dir, syntheticReport()); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "report.html")
	raw, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(raw), "</svg>",
		`<text x="150" y="30" font-size="11">overlapping one</text><text x="160" y="30" font-size="11">overlapping two</text><polyline class="series" data-name="empty" points="" />`+
			`<text x="300" y="60" font-size="11">crossed out</text><line class="mark" x1="320" y1="40" x2="320" y2="80" stroke="#000" /></svg>`, 1)
	if err := os.WriteFile(page, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	v := browse(t, page)
	for _, want := range []string{"FAIL", `labels overlap: "overlapping one" and "overlapping two"`, "empty series: empty", `line over label: "crossed out"`} {
		if !strings.Contains(v, want) {
			t.Errorf("verdict %q; want it to contain %q", v, want)
		}
	}
}
