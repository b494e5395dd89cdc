package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/cmd/lockctl/internal/cfgops"
	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// outageStart is the start_timeout of the outage configs: status must
// answer within it plus half a second.
const outageStart = 1500 * time.Millisecond

// The operator's tools while the primary hangs (SIGSTOP): every command
// that does not need the primary answers within 2s, status within
// start_timeout + 0.5s, and none logs switcher events.
func TestOpsWithPrimaryPaused(t *testing.T) {
	primary := testserver.Redis(t)
	backup := testserver.Etcd(t)
	engines := fmt.Sprintf(`start_timeout: %v
engines:
  - {name: redis-main, type: redis, addrs: [%q], prefix: outage}
  - {name: etcd-backup, type: etcd, endpoints: [%q], prefix: outage}
`, outageStart, primary.Addr(), backup.Addr())
	dir := t.TempDir()
	fileCfg := filepath.Join(dir, "file.yaml")
	etcdCfg := filepath.Join(dir, "etcd.yaml")
	writeFile(t, fileCfg, "active: redis-main\n"+engines) // no source section: the file is the source
	writeFile(t, etcdCfg, "active: redis-main\n"+engines+
		fmt.Sprintf("source: {type: etcd, endpoints: [%q], key: /outage/active}\n", backup.Addr()))

	// A hold on the healthy engine, to inspect and clear.
	cfg, err := config.Load(fileCfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	es, err := cfgops.Dial(ctx, cfg, []string{"etcd-backup"}, config.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	name := "outage/held"
	l, err := es.Dialed[0].Engine.NewLocker(name, locker.WithOwner("outage-test"), locker.WithTTL(opsTTL))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock() }()

	if err := primary.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = primary.Resume() }()

	// The limits are lockctl's own: the start of this (race-instrumented,
	// perhaps busy) test binary as a process is measured and added.
	startup := time.Hour
	for range 3 {
		t0 := time.Now()
		lockctlRun(t, "", "help")
		startup = min(startup, time.Since(t0))
	}
	t.Logf("process start-up: %v", startup.Round(time.Millisecond))
	timed := func(t *testing.T, limit time.Duration, stdin string, args ...string) (int, string, string) {
		t.Helper()
		start := time.Now()
		code, out, errOut := lockctlRun(t, stdin, args...)
		took := time.Since(start)
		t.Logf("lockctl %s: exit %d in %v", strings.Join(args, " "), code, took.Round(time.Millisecond))
		if took > limit+startup {
			t.Errorf("lockctl %s took %v; want at most %v and the process start-up (%v)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), took, limit, startup, out, errOut)
		}
		if strings.Contains(errOut, "switcher:") || strings.Contains(out, "switcher:") {
			t.Errorf("lockctl %s logged switcher lines:\n%s%s", strings.Join(args, " "), out, errOut)
		}
		return code, out, errOut
	}

	for _, path := range []string{fileCfg, etcdCfg} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			code, out, errOut := timed(t, 2*time.Second, "", "switch", "--config", path, "etcd-backup")
			if code != 0 || !strings.Contains(out, "now names etcd-backup") {
				t.Errorf("switch etcd-backup: exit %d, stdout %q, stderr %q; want 0", code, out, errOut)
			}
			code, _, errOut = timed(t, outageStart+500*time.Millisecond, "", "switch", "--config", path, "redis-main")
			if code == 0 || !strings.Contains(errOut, "--force") {
				t.Errorf("switch to the paused redis-main: exit %d, stderr %q; want non-zero, pointing at --force", code, errOut)
			}
			code, out, errOut = timed(t, outageStart+500*time.Millisecond, "", "status", "--config", path)
			if code == 0 {
				t.Errorf("status with redis-main paused: exit 0; want non-zero")
			}
			rows := statusRows(t, out)
			if r := rows["redis-main"]; !strings.Contains(r, "DOWN") {
				t.Errorf("status row of redis-main = %q; want DOWN\n%s", r, out)
			}
			if r := rows["etcd-backup"]; !strings.Contains(r, " ok (") || !strings.Contains(r, " named ") {
				t.Errorf("status row of etcd-backup = %q; want ok and named by the source\n%s", r, out)
			}
			if !strings.Contains(errOut, "redis-main") {
				t.Errorf("status stderr %q; want it to name the engine down", errOut)
			}
		})
	}

	code, out, errOut := timed(t, 2*time.Second, "", "holders", "--config", etcdCfg, "--engine", "etcd-backup", name)
	if f := strings.Fields(rowOf(out, "etcd-backup")); code != 0 || len(f) < 3 || f[1] != "holder" || f[2] != "outage-test" {
		t.Errorf("holders --engine etcd-backup: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 0 and the hold of outage-test", code, out, errOut)
	}
	code, out, _ = timed(t, outageStart+500*time.Millisecond, "", "holders", "--config", etcdCfg, name)
	if code == 0 || !strings.Contains(rowOf(out, "redis-main"), "unreachable") || !strings.Contains(rowOf(out, "etcd-backup"), "outage-test") {
		t.Errorf("holders without --engine: exit %d\n%s\nwant non-zero, redis-main unreachable, the hold on etcd-backup", code, out)
	}
	code, _, errOut = timed(t, 500*time.Millisecond, "", "holders", "--config", etcdCfg, "--engine", "nope", name)
	if code == 0 || !strings.Contains(errOut, `"nope"`) {
		t.Errorf("holders --engine nope: exit %d, stderr %q; want non-zero naming it", code, errOut)
	}
	code, _, errOut = timed(t, outageStart+500*time.Millisecond, "", "unlock", "--force", "--yes", "--config", etcdCfg, name)
	if code == 0 || !strings.Contains(errOut, "--engine") {
		t.Errorf("unlock without --engine while redis-main is down: exit %d, stderr %q; want non-zero asking for --engine", code, errOut)
	}
	code, out, errOut = timed(t, 2*time.Second, "", "unlock", "--force", "--yes", "--config", etcdCfg, "--engine", "etcd-backup", name)
	if code != 0 || !strings.Contains(out, "removed the hold") {
		t.Errorf("unlock --engine etcd-backup: exit %d, stdout %q, stderr %q; want 0", code, out, errOut)
	}
	select {
	case <-l.Lost():
	case <-time.After(2 * opsTTL):
		t.Errorf("the forced-out hold was not lost within %v", 2*opsTTL)
	}

	// The etcd key names etcd-backup now; the file too.
	if got := (servers{etcd: backup.Addr()}).etcdGet(t, "/outage/active", false)["/outage/active"]; got != "etcd-backup" {
		t.Errorf("etcd key after switch = %q; want etcd-backup", got)
	}
	if got := readFile(t, fileCfg); !strings.HasPrefix(got, "active: etcd-backup\n") {
		t.Errorf("file after switch:\n%s\nwant active: etcd-backup", got)
	}
}

// statusRows returns the engine rows of lockctl status by engine name.
func statusRows(t *testing.T, out string) map[string]string {
	t.Helper()
	rows := map[string]string{}
	in := false
	for line := range strings.SplitSeq(out, "\n") {
		switch {
		case strings.HasPrefix(line, "ENGINE"):
			in = true
		case line == "":
			in = false
		case in:
			rows[strings.Fields(line)[0]] = line
		}
	}
	return rows
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
