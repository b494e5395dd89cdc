package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/switcher"
)

// startupTime measures how long this test binary takes to start as
// lockctl and exit: the limits of the tests are lockctl's own.
func startupTime(t *testing.T) time.Duration {
	t.Helper()
	startup := time.Hour
	for range 3 {
		t0 := time.Now()
		lockctlRun(t, "", "help")
		startup = min(startup, time.Since(t0))
	}
	t.Logf("process start-up: %v", startup.Round(time.Millisecond))
	return startup
}

// openWatching opens a switcher on the config at path, as an application
// would, and returns it with a channel of its switch events.
func openWatching(t *testing.T, path string) (*config.Failover, <-chan switcher.Event) {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	events := make(chan switcher.Event, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sw, err := config.Open(ctx, cfg, config.WithLogger(slog.New(slog.DiscardHandler)),
		config.WithSwitcherOptions(switcher.OnSwitch(func(ev switcher.Event) {
			select {
			case events <- ev:
			default:
			}
		})))
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	t.Cleanup(func() { _ = sw.Close() })
	return sw, events
}

// awaitSwitch waits for a switch to engine to (not a deferral) for at
// most limit.
func awaitSwitch(t *testing.T, events <-chan switcher.Event, to string, limit time.Duration) (switcher.Event, bool) {
	t.Helper()
	timeout := time.After(limit)
	for {
		select {
		case ev := <-events:
			t.Logf("switch event: %s → %s (%s), epoch %d", ev.From, ev.To, ev.Reason, ev.Epoch)
			if ev.To == to && ev.Reason != switcher.ReasonDeferred {
				return ev, true
			}
		case <-timeout:
			return switcher.Event{}, false
		}
	}
}

// With the primary frozen (SIGSTOP) and default settings (start_timeout
// 5s), status answers within 2s and names the engine that does not
// answer; the fleet of an etcd source is listed where it runs.
func TestStatusWithAnEngineFrozen(t *testing.T) {
	primary := testserver.Redis(t)
	backup := testserver.Etcd(t)
	path := filepath.Join(t.TempDir(), "locks.yaml")
	writeFile(t, path, fmt.Sprintf(`active: redis-main
engines:
  - {name: redis-main, type: redis, addrs: [%q], prefix: frozen}
  - {name: etcd-backup, type: etcd, endpoints: [%q], prefix: frozen}
source: {type: etcd, endpoints: [%q], key: /frozen/active}
`, primary.Addr(), backup.Addr(), backup.Addr()))
	_, events := openWatching(t, path)
	if err := primary.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = primary.Resume() }()
	if _, ok := awaitSwitch(t, events, "etcd-backup", 10*time.Second); !ok {
		t.Fatal("the switcher did not move to etcd-backup within 10s of the freeze")
	}
	startup := startupTime(t)

	start := time.Now()
	code, out, errOut := lockctlRun(t, "", "status", "--config", path)
	took := time.Since(start)
	t.Logf("lockctl status: exit %d in %v\nstdout:\n%s\nstderr:\n%s", code, took.Round(time.Millisecond), out, errOut)
	if limit := 2*time.Second + startup; took > limit {
		t.Errorf("lockctl status took %v with an engine frozen; want at most 2s and the process start-up (%v)", took, startup)
	}
	if code == 0 {
		t.Errorf("lockctl status exited 0 with an engine frozen; want non-zero")
	}
	rows := statusRows(t, out)
	if r := rows["redis-main"]; !strings.Contains(r, "not answering within 1s") {
		t.Errorf("redis-main row %q; want \"not answering within 1s\"", r)
	}
	if r := rows["etcd-backup"]; !strings.Contains(r, " ok (") {
		t.Errorf("etcd-backup row %q; want ok", r)
	}
	if f := strings.Fields(rows["etcd-backup"]); len(f) < 3 || f[2] != "1" {
		t.Errorf("etcd-backup row %q; want 1 process running there", rows["etcd-backup"])
	}
	if f := strings.Fields(rows["redis-main"]); len(f) < 3 || f[2] != "0" {
		t.Errorf("redis-main row %q; want 0 processes running there", rows["redis-main"])
	}
	if !strings.Contains(errOut, "redis-main") {
		t.Errorf("stderr %q; want it to name redis-main", errOut)
	}

	// switch says who moves: here the one switcher, already there.
	code, out, errOut = lockctlRun(t, "", "switch", "--config", path, "etcd-backup")
	t.Logf("lockctl switch etcd-backup: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	for _, want := range []string{"already named etcd-backup", "epoch 2", "the 1 switcher(s) announced: 1 already on etcd-backup take the new epoch"} {
		if !strings.Contains(out, want) {
			t.Errorf("switch output lacks %q", want)
		}
	}
}

// After a breaker switch with a file source, the file still names the
// primary: lockctl switch to it rewrites the file all the same, and the
// running switcher watching the file goes back. One command.
func TestSwitchFileSourceAfterBreakerSwitch(t *testing.T) {
	primary := testserver.Redis(t)
	backup := testserver.Etcd(t)
	path := filepath.Join(t.TempDir(), "locks.yaml")
	writeFile(t, path, fmt.Sprintf(`active: redis-main
breaker: {open_timeout: 1s}
engines:
  - {name: redis-main, type: redis, addrs: [%q], prefix: failback}
  - {name: etcd-backup, type: etcd, endpoints: [%q], prefix: failback}
`, primary.Addr(), backup.Addr()))
	sw, events := openWatching(t, path)
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if ev, ok := awaitSwitch(t, events, "etcd-backup", 10*time.Second); !ok || ev.Reason != switcher.ReasonBreaker {
		t.Fatalf("switch to etcd-backup = %+v, %v; want a breaker switch within 10s of the kill", ev, ok)
	}
	if err := primary.Restart(); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, path)
	code, out, errOut := lockctlRun(t, "", "switch", "--config", path, "redis-main")
	t.Logf("lockctl switch redis-main: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	if code != 0 {
		t.Fatalf("lockctl switch redis-main exited %d; want 0", code)
	}
	for _, want := range []string{"already named redis-main", "every process watching"} {
		if !strings.Contains(out, want) {
			t.Errorf("switch output lacks %q", want)
		}
	}
	if got := readFile(t, path); got != before {
		t.Errorf("config after switch:\n%s\nwant it as before:\n%s", got, before)
	}
	if ev, ok := awaitSwitch(t, events, "redis-main", 10*time.Second); !ok || ev.Reason != switcher.ReasonSource {
		t.Errorf("switch back to redis-main = %+v, %v; want a source switch within 10s of lockctl switch", ev, ok)
	}
	if got := sw.Current(); got != "redis-main" {
		t.Errorf("Current() = %q; want redis-main", got)
	}
}

// A file source keeps no roster: status says that it cannot see where
// the processes run, and does not mark the file's engine as theirs.
func TestStatusFileSourceCannotSeeTheFleet(t *testing.T) {
	r := testserver.Redis(t)
	e := testserver.Etcd(t)
	path := writeOpsConfig(t, "redis", []string{
		fmt.Sprintf(`{name: redis, type: redis, addrs: [%q]}`, r.Addr()),
		fmt.Sprintf(`{name: etcd, type: etcd, endpoints: [%q]}`, e.Addr()),
	})
	code, out, errOut := lockctlRun(t, "", "status", "--config", path)
	t.Logf("lockctl status: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	if code != 0 {
		t.Errorf("lockctl status exited %d; want 0", code)
	}
	if strings.Contains(out, "ACTIVE") {
		t.Errorf("status output has an ACTIVE column with a file source; want the file's engine shown as what the file names")
	}
	for _, want := range []string{"cannot see", "no roster"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q", want)
		}
	}
	rows := statusRows(t, out)
	for _, name := range []string{"redis", "etcd"} {
		if f := strings.Fields(rows[name]); len(f) < 3 || f[2] != "unknown" {
			t.Errorf("%s row %q; want the processes there unknown", name, rows[name])
		}
	}
}
