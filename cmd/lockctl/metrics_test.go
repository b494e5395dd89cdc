package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/internal/testserver"
)

// TestDrillMetrics scrapes --metrics-addr while a drill runs: grants on
// both engines and the switch the drill made.
func TestDrillMetrics(t *testing.T) {
	redis := testserver.Redis(t).Addr()
	path := filepath.Join(t.TempDir(), "app.yaml")
	writeFile(t, path, fmt.Sprintf(`active: a
engines:
  - {name: a, type: redis, addrs: [%[1]q], prefix: metrics-a}
  - {name: b, type: redis, addrs: [%[1]q], prefix: metrics-b}
`, redis))
	cmd := exec.Command(os.Args[0], "drill", "--config", path, "--duration", "30s", "--switch-at", "500ms",
		"--workers", "2", "--names", "4", "--metrics-addr", "127.0.0.1:0")
	cmd.Env = lockctlEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	var out strings.Builder
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			out.WriteString(line + "\n")
			if u, ok := strings.CutPrefix(line, "metrics: "); ok {
				urls <- u
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	// Ctrl-C ends the drill early, and the metrics server with it.
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-read:
		case <-time.After(20 * time.Second):
			t.Errorf("the drill did not end within 20s of Ctrl-C")
			_ = cmd.Process.Kill()
			<-read
		}
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), stderr.String())
		}
	}()

	var url string
	select {
	case url = <-urls:
	case <-read:
		t.Fatalf("lockctl drill ended without serving metrics")
	case <-time.After(20 * time.Second):
		t.Fatalf("no metrics address printed within 20s")
	}
	want := []string{
		`orthrus_lock_acquisitions_total{engine="a",`,
		`orthrus_lock_acquisitions_total{engine="b",`,
		`orthrus_switcher_switches_total{from="a",`,
		`orthrus_switcher_breaker_state{engine="b",`,
		`orthrus_lock_wait_duration_seconds_bucket{engine="b",`,
	}
	var body string
	for deadline := time.Now().Add(20 * time.Second); ; {
		body = get(t, url)
		missing := 0
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s, /metrics still lacks some of %q:\n%s", want, body)
		}
		time.Sleep(100 * time.Millisecond) // polling a live endpoint, with a deadline
	}
	if !strings.Contains(body, `to="b"`) {
		t.Errorf("the switch series does not name b:\n%s", body)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d, %v", url, resp.StatusCode, err)
	}
	return string(b)
}
