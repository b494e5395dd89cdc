package redlock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// Scenario (c): the holder, another process, is frozen (SIGSTOP) past its
// TTL. Client 2 takes the name with a higher token and writes; the frozen
// holder, thawed, finds its Lost closed, and the resource refuses its
// write.
func TestPausedHolder(t *testing.T) {
	if helperMode() {
		pausedHolderHelper(t)
		return
	}
	ss := servers(t, nodeCount)
	name := "scenario-c"
	cmd := exec.Command(os.Args[0], "-test.run=^TestPausedHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(addrsOf(ss), ","), "REDLOCK_TEST_NAME="+name)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	expect := func(word string) uint64 {
		t.Helper()
		for lines.Scan() {
			var got string
			var n uint64
			if _, err := fmt.Sscan(lines.Text(), &got, &n); err == nil && got == word {
				return n
			}
		}
		t.Fatalf("helper: no %q line: %v", word, lines.Err())
		return 0
	}
	t1 := expect("held")
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	l2 := secondClient(t, ss, name)
	ctx, cancel := context.WithTimeout(context.Background(), 3*scenarioTTL)
	defer cancel()
	if err := l2.LockCtx(ctx); err != nil { // once the frozen holder's keys expire
		t.Fatalf("client 2: LockCtx() = %v", err)
	}
	var r fenced
	if l2.Token() <= t1 || !r.write(l2.Token()) {
		t.Fatalf("client 2's token %d; want above the frozen holder's %d, and its write taken", l2.Token(), t1)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	_, _ = fmt.Fprintln(stdin, "go")
	if got := expect("lost"); got != 1 {
		t.Errorf("the thawed holder's Lost() not closed within %v", scenarioTTL)
	}
	if w := expect("write"); r.write(w) {
		t.Errorf("the resource took the thawed holder's write with token %d after client 2's %d", w, l2.Token())
	}
}
