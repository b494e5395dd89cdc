package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// testFamilyOps holds a read-write lock and semaphore permits on engine e
// in this process, then checks what holders --kind shows and that permits
// changes the stored count on e.
func testFamilyOps(t *testing.T, path string, e locker.Engine) {
	name := fmt.Sprintf("ops-family/%s/%d", e.Name(), time.Now().UnixNano())
	rw, err := e.NewRWLock(name, locker.WithOwner("ops-reader"), locker.WithTTL(opsTTL))
	if err != nil {
		t.Fatalf("NewRWLock() = %v", err)
	}
	if err := rw.ReadLock().Lock(); err != nil {
		t.Fatalf("read Lock() = %v", err)
	}
	defer rw.ReadLock().Unlock()
	code, out, errOut := lockctlRun(t, "", "holders", "--config", path, "--engine", e.Name(), "--kind", "rw", name)
	want := fmt.Sprintf("%s reader ops-reader %d", e.Name(), rw.ReadLock().Token())
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
		t.Errorf("holders --kind rw: exit %d, stderr %q\n%s\nwant 0 and a row %q", code, errOut, out, want)
	}

	testFamilyUnlock(t, path, e, name)

	sem, err := e.NewSemaphore(name, 2, locker.WithOwner("ops-worker"), locker.WithTTL(opsTTL))
	if err != nil {
		t.Fatalf("NewSemaphore() = %v", err)
	}
	p, ok, err := sem.TryAcquire(2)
	if err != nil || !ok {
		t.Fatalf("TryAcquire(2) = %v, %v", ok, err)
	}
	defer p.Unlock()
	if code, _, errOut := lockctlRun(t, "", "permits", "--config", path, "--engine", e.Name(), name, "0"); code == 0 || !strings.Contains(errOut, "N:") {
		t.Errorf("permits N=0: exit %d, stderr %q; want non-zero naming N", code, errOut)
	}
	if code, out, errOut := lockctlRun(t, "", "permits", "--config", path, "--engine", e.Name(), name, "3"); code != 0 || !strings.Contains(out, "now has 3 permits") {
		t.Fatalf("permits 3: exit %d, stdout %q, stderr %q; want 0", code, out, errOut)
	}
	code, out, errOut = lockctlRun(t, "", "holders", "--config", path, "--engine", e.Name(), "--kind", "semaphore", name)
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"permits 3 stored, 2 in use", "2 permit(s) ops-worker " + strconv.FormatUint(p.Token(), 10)} {
		if code != 0 || !strings.Contains(flat, want) {
			t.Errorf("holders --kind semaphore: exit %d, stderr %q\n%s\nwant 0 and %q", code, errOut, out, want)
		}
	}
	// The stored count now admits a third permit.
	if q, ok, err := sem.TryAcquire(1); err != nil || !ok {
		t.Errorf("TryAcquire(1) after permits 3 = %v, %v; want granted", ok, err)
	} else {
		_ = q.Unlock()
	}
	// Every permit hold of the name, forced out.
	code, out, errOut = lockctlRun(t, "", "unlock", "--force", "--yes", "--config", path, "--engine", e.Name(), "--kind", "semaphore", name)
	if want := fmt.Sprintf("removed the hold (2 permit(s) ops-worker, engine token %d)", p.Token()); code != 0 || !strings.Contains(out, want) {
		t.Errorf("unlock --kind semaphore: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errOut, want)
	}
	awaitLost(t, p)
}

// testFamilyUnlock has a second reader join ops-reader on the read-write
// lock name, and forces only it out by its token.
func testFamilyUnlock(t *testing.T, path string, e locker.Engine, name string) {
	other, err := e.NewRWLock(name, locker.WithOwner("ops-reader-2"), locker.WithTTL(opsTTL))
	if err != nil {
		t.Fatalf("NewRWLock() = %v", err)
	}
	if err := other.ReadLock().Lock(); err != nil {
		t.Fatalf("read Lock() = %v", err)
	}
	if code, _, errOut := lockctlRun(t, "", "unlock", "--force", "--yes", "--config", path, "--token", "7", name); code == 0 || !strings.Contains(errOut, "--token") {
		t.Errorf("unlock --token of a mutex: exit %d, stderr %q; want non-zero naming --token", code, errOut)
	}
	tok := other.ReadLock().Token()
	code, out, errOut := lockctlRun(t, "", "unlock", "--force", "--yes", "--config", path, "--engine", e.Name(), "--kind", "rw", "--token", strconv.FormatUint(tok, 10), name)
	if want := fmt.Sprintf("removed the hold (reader ops-reader-2, engine token %d)", tok); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("unlock --kind rw --token: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errOut, want)
	}
	awaitLost(t, other.ReadLock())
	code, out, _ = lockctlRun(t, "", "holders", "--config", path, "--engine", e.Name(), "--kind", "rw", name)
	if code != 0 || strings.Contains(out, "ops-reader-2") || !strings.Contains(out, "ops-reader") {
		t.Errorf("holders --kind rw after forcing ops-reader-2 out: exit %d\n%s\nwant ops-reader alone", code, out)
	}
}

// awaitLost waits for the Lost of a hold forced out by lockctl.
func awaitLost(t *testing.T, h locker.Handle) {
	t.Helper()
	select {
	case <-h.Lost():
	case <-time.After(2 * opsTTL):
		t.Fatalf("Lost() of the forced-out hold not closed within %v", 2*opsTTL)
	}
	if err := h.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() of the forced-out hold = %v; want ErrLockLost", err)
	}
}

// testNoFamily checks that holders and permits on e, an engine that
// refuses read-write locks and semaphores (redlock), say so and why.
func testNoFamily(t *testing.T, path string, e locker.Engine) {
	_, err := e.NewSemaphore("ops-family", 1)
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("NewSemaphore() = %v; want ErrUnsupported", err)
	}
	code, out, errOut := lockctlRun(t, "", "permits", "--config", path, "--engine", e.Name(), "ops-family", "3")
	if want := e.Name() + ": cannot change semaphores on this engine: " + err.Error(); code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("permits on %s: exit %d, stdout %q, stderr %q; want non-zero and %q", e.Name(), code, out, errOut, want)
	}
	code, out, errOut = lockctlRun(t, "", "holders", "--config", path, "--engine", e.Name(), "--kind", "semaphore", "ops-family")
	if want := "cannot inspect read-write locks or semaphores on this engine: " + err.Error(); code != 0 || !strings.Contains(out, want) {
		t.Errorf("holders --kind semaphore on %s: exit %d, stderr %q\n%s\nwant 0 and a row %q", e.Name(), code, errOut, out, want)
	}
}
