package main

import (
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

	sem, err := e.NewSemaphore(name, 2, locker.WithOwner("ops-worker"), locker.WithTTL(opsTTL))
	if err != nil {
		t.Fatalf("NewSemaphore() = %v", err)
	}
	p, err := sem.TryAcquire(2)
	if err != nil || p == nil {
		t.Fatalf("TryAcquire(2) = %v, %v", p, err)
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
	if q, err := sem.TryAcquire(1); err != nil || q == nil {
		t.Errorf("TryAcquire(1) after permits 3 = %v, %v; want granted", q, err)
	} else {
		_ = q.Unlock()
	}
}
