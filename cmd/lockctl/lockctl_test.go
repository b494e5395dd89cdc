package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orthrus-go/orthrus/internal/testmain"
)

// The tests run the real command: this test binary re-executed with
// LOCKCTL_MAIN=1 is lockctl.
func TestMain(m *testing.M) {
	if os.Getenv("LOCKCTL_MAIN") == "1" {
		main()
		return
	}
	testmain.Run(m, func() (func(), error) { return func() {}, nil })
}

// lockctlEnv is the environment of lockctl run by the tests: the race
// detector's one-second pause at a successful exit is not lockctl's.
func lockctlEnv() []string {
	race := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	return append(os.Environ(), "LOCKCTL_MAIN=1", "GORACE="+race)
}

// lockctlRun runs lockctl with args and returns its exit code and output.
func lockctlRun(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = lockctlEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func TestDrillEmbedded(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := lockctlRun(t, "", "drill", "--duration", "6s", "--kill-at", "2s", "--workers", "8", "--names", "16", "--report", dir)
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if code != 0 {
		t.Fatalf("lockctl drill exited %d; want 0", code)
	}
	for _, want := range []string{"stop etcd-primary", "switch etcd-primary → etcd-secondary (breaker)", "violations:      0", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("drill output lacks %q", want)
		}
	}

	r := readReportJSON(t, filepath.Join(dir, "report.json"))
	if r.Failed != 0 || len(r.Violations) != 0 || r.Acquired["etcd-secondary"] == 0 || r.SwitchLatency <= 0 {
		t.Errorf("report.json: failed %d, violations %v, acquired %v, switch latency %v", r.Failed, r.Violations, r.Acquired, r.SwitchLatency)
	}
	checkReportPage(t, filepath.Join(dir, "report.html"), r.Engines)
	checkInBrowser(t, filepath.Join(dir, "report.html"))
}

// checkReportPage parses the HTML report as XML (it is written well-formed)
// and finds one series per engine and the fault and switch marks.
func checkReportPage(t *testing.T, path string, engines []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	dec.Strict = true
	dec.Entity = xml.HTMLEntity
	series, kinds := map[string]int{}, map[string]int{}
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("report.html is not well-formed: %v", err)
		}
		if cd, ok := tok.(xml.CharData); ok && inText {
			if label, _, ok := strings.Cut(string(cd), ": "); ok {
				kinds[strings.Fields(label)[0]]++ // "fault at 2s", "switch 2ms after the fault"
			}
		}
		if _, ok := tok.(xml.EndElement); ok {
			inText = false
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		inText = el.Name.Local == "text"
		for _, a := range el.Attr {
			switch {
			case el.Name.Local == "polyline" && a.Name.Local == "data-engine":
				series[a.Value]++
			case a.Name.Local == "src" || a.Name.Local == "href":
				t.Errorf("report.html loads %q: want a self-contained page", a.Value)
			}
		}
	}
	for _, e := range engines {
		if series[e] != 1 {
			t.Errorf("report.html has %d series for %s; want 1", series[e], e)
		}
	}
	if kinds["fault"]+kinds["planned"] == 0 || kinds["switch"] == 0 {
		t.Errorf("report.html marks %v; want a fault or planned switch, and a switch", kinds)
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"drill", "--workers", "0"}, "--workers"},
		{[]string{"drill", "--duration", "-1s"}, "--duration"},
		{[]string{"drill", "--ttl", "0"}, "--ttl"},
		{[]string{"drill", "--duration", "soon"}, "-duration"},
		{[]string{"drill", "--config", "x.yaml", "--kill-at", "3s"}, "--kill-at"},
		{[]string{"drill", "extra"}, "no arguments"},
		{[]string{"drill", "--config", "x.yaml", "--processes", "2", "--metrics-addr", ":0"}, "--metrics-addr"},
		{[]string{"nope"}, "unknown command"},
	} {
		code, _, errOut := lockctlRun(t, "", tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("lockctl %s: exit %d, stderr %q; want non-zero naming %s", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, c := range commands() {
		code, _, errOut := lockctlRun(t, "", c.name, "-h")
		if code != 0 || !strings.Contains(errOut, "Examples:") || !strings.Contains(errOut, "Flags:\n  -") || !strings.Contains(errOut, "-config") {
			t.Errorf("lockctl %s -h: exit %d; want 0, the flags and examples, got %q", c.name, code, errOut)
		}
		for _, bad := range []string{"-1ns", "(default 0s)", "-worker\n", "-drill-id"} {
			if strings.Contains(errOut, bad) {
				t.Errorf("lockctl %s -h shows %q:\n%s", c.name, bad, errOut)
			}
		}
	}
}

// The drill with no server at all: two in-memory engines, the primary made
// to refuse every call at --kill-at.
func TestDrillInMemory(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := lockctlRun(t, "", "drill", "--engine", "mem", "--duration", "2s", "--kill-at", "1s", "--workers", "4", "--names", "8", "--report", dir)
	if code != 0 {
		t.Fatalf("lockctl drill --engine mem exited %d; want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"in-memory pair (no server)", "stop mem-primary", "switch mem-primary → mem-secondary (breaker)", "failed 0", "violations:      0", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The closing line names every file the report wrote.
	written, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, line, _ := strings.Cut(out, "\nreport: ")
	line, _, _ = strings.Cut(line, "\n")
	for _, f := range written {
		if !strings.Contains(line, filepath.Join(dir, f.Name())) {
			t.Errorf("report line %q does not name %s", line, f.Name())
		}
	}
	if code, _, errOut := lockctlRun(t, "", "drill", "--engine", "foo"); code == 0 || !strings.Contains(errOut, "--engine: want etcd or mem") {
		t.Errorf("drill --engine foo = exit %d, %q; want an error naming --engine", code, errOut)
	}
}

// Flags may follow the positional arguments: every command reads them
// wherever they are, and "--" ends them.
func TestFlagsAfterArguments(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, args := range [][]string{
		{"holders", "orders/42", "--config", missing, "--engine", "e1"},
		{"holders", "--config", missing, "orders/42", "--engine", "e1"},
		{"unlock", "orders/42", "--force", "--config", missing},
		{"permits", "exports", "8", "--config", missing},
		{"switch", "e2", "--config", missing, "--force"},
		{"idem", "lookup", "order-42", "--config", missing, "--app", "billing"},
		{"status", "--config", missing},
	} {
		code, _, errOut := lockctlRun(t, "", args...)
		// The config is read, so every flag was: the error is the file's.
		if code == 0 || !strings.Contains(errOut, missing) || strings.Contains(errOut, "arguments") {
			t.Errorf("lockctl %s: exit %d, stderr %q; want an error about %s", strings.Join(args, " "), code, errOut, missing)
		}
	}
	// After "--", a flag-like word is an argument: one NAME too many.
	code, _, errOut := lockctlRun(t, "", "holders", "--config", missing, "orders/42", "--", "--engine")
	if want := "want exactly one lock NAME, got 2 arguments"; code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("holders ... -- --engine: exit %d, stderr %q; want %q", code, errOut, want)
	}
}

// A fault or switch planned at or after the end of the drill would never
// happen: refused, naming both flags.
func TestDrillRefusesEventsAfterTheEnd(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"drill", "--engine", "mem", "--kill-at", "30s", "--duration", "2s"}, "--kill-at"},
		{[]string{"drill", "--engine", "mem", "--duration", "2s", "--kill-at", "2s"}, "--kill-at"},
		{[]string{"drill", "--engine", "mem", "--kill-at", "0", "--switch-at", "3s", "--duration", "2s"}, "--switch-at"},
		{[]string{"drill", "--config", "x.yaml", "--switch-at", "1m", "--duration", "20s"}, "--switch-at"},
	} {
		code, _, errOut := lockctlRun(t, "", tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.flag) || !strings.Contains(errOut, "--duration") {
			t.Errorf("lockctl %s: exit %d, stderr %q; want an error naming %s and --duration", strings.Join(tc.args, " "), code, errOut, tc.flag)
		}
	}
}
