package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/internal/testserver"
)

// A fleet that follows its config file (the default source, which has no
// versions) switches twice by edits of the file; a process added
// afterwards has the fleet's epoch from its first grant, so the fenced
// resource accepts its writes.
func TestFileSourceAddedProcessHasFleetEpoch(t *testing.T) {
	primary, secondary, resource := testserver.Redis(t), testserver.Etcd(t), testserver.Redis(t)
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	write := func(active string) {
		yaml := fmt.Sprintf("active: %s\nengines:\n%s%s", active, engineYAML("redis", primary.Addr()), engineYAML("etcd", secondary.Addr()))
		if err := os.WriteFile(path+".tmp", []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil { // one event, a whole file
			t.Fatal(err)
		}
	}
	write("redis")
	procs := startFleet(t, []string{path, path, path}, resource.Addr())
	for _, active := range []string{"etcd", "redis"} {
		write(active)
		for i, p := range procs {
			awaitLine(t, p, fmt.Sprintf("switch-%d", i), func(l string) bool {
				f := strings.Fields(l)
				return len(f) > 2 && f[0] == "switch" && f[2] == active
			})
		}
	}
	added := startFleet(t, []string{path}, resource.Addr())
	awaitLine(t, added[0], "a write", func(l string) bool { return strings.HasPrefix(l, "write") })
	time.Sleep(500 * time.Millisecond) // more writes, beside the fleet's
	lines := stopFleet(append(procs, added...))
	writes, refused := 0, 0
	for _, l := range lines[3] {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "write" {
			writes++
			if f[2] == "0" {
				refused++
			}
		}
	}
	t.Logf("the added process: %d writes, %d refused", writes, refused)
	if refused != 0 {
		t.Errorf("%d of the added process's %d fenced writes were refused; want 0", refused, writes)
	}
}

// awaitLine waits until p reports a line that match accepts.
func awaitLine(t *testing.T, p *fleetProc, what string, match func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !p.matches(match) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Three processes start while the primary is down, on a switch key never
// written: they move as one to the secondary, with no caller error; when
// the primary is back, nothing fails back (none is configured), and a
// process started then joins the fleet on the secondary instead of
// granting on the primary beside it.
func TestFleetStartedDuringOutage(t *testing.T) {
	primary, secondary, resource := testserver.Redis(t), testserver.Etcd(t), testserver.Redis(t)
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	cfg := fleetConfig(t, primary.Addr(), secondary.Addr())
	began := time.Now()
	procs := startFleet(t, []string{cfg, cfg, cfg}, resource.Addr())
	t.Logf("3 processes ready %v after their start", time.Since(began))
	for i, p := range procs {
		awaitLine(t, p, fmt.Sprintf("process %d's write", i), func(l string) bool { return strings.HasPrefix(l, "write") })
	}
	if err := primary.Restart(); err != nil {
		t.Fatal(err)
	}
	late := startFleet(t, []string{cfg}, resource.Addr())
	awaitLine(t, late[0], "the late process's write", func(l string) bool { return strings.HasPrefix(l, "write") })
	time.Sleep(500 * time.Millisecond) // writes beside the fleet's
	for i, lines := range stopFleet(append(procs, late...)) {
		byEngine, errs := map[string]int{}, 0
		for _, l := range lines {
			f := strings.Fields(l)
			switch {
			case len(f) > 3 && f[0] == "write":
				byEngine[f[3]]++
			case len(f) > 0 && f[0] == "error":
				errs++
				t.Logf("process %d: %s", i, l)
			}
		}
		if byEngine["redis"] != 0 || byEngine["etcd"] == 0 || errs != 0 {
			t.Errorf("process %d: writes by engine %v, %d caller errors; want all on etcd, no error", i, byEngine, errs)
		}
	}
}
