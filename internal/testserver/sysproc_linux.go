package testserver

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel SIGKILL the child when the test process dies,
// so no server outlives a killed or crashed test binary.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// procStat returns the fields of /proc/<pid>/stat after the command name
// (the state first, then the parent's pid, ...; utime is [11]), nil when
// pid is gone.
func procStat(pid int) []string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// pid (comm) state ...: comm may hold spaces, the fields follow its ')'.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(raw[i+1:]))
}

// stopped reports whether the process pid is stopped by a signal (state
// T): SIGSTOP is delivered when the process next runs, which on a loaded
// machine may be after the kill call returned.
func stopped(pid int) bool {
	f := procStat(pid)
	return len(f) > 0 && (f[0] == "T" || f[0] == "t")
}

// children returns the processes whose parent is pid. (PostgreSQL's
// backends each call setsid, so no process group holds them all.)
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(child); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, child)
		}
	}
	return kids
}

// clockTicks is USER_HZ, the unit of /proc's times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// ticks sums fields of a stat (utime 11, stime 12, cutime 13, cstime 14).
func ticks(f []string, fields ...int) int64 {
	var n int64
	for _, i := range fields {
		if i < len(f) {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			n += v
		}
	}
	return n
}

// ProcessCPU returns the user and system time process pid has used so
// far: benchmarks take the client's (os.Getpid()) before and after.
func ProcessCPU(pid int) (time.Duration, error) {
	f := procStat(pid)
	if f == nil {
		return 0, fmt.Errorf("testserver: CPU of process %d: gone", pid)
	}
	return time.Duration(ticks(f, 11, 12)) * time.Second / clockTicks, nil
}

// treeCPU is the time used by pid, its children that exited (whose time
// the kernel adds to pid's) and its live children: all of a server made of
// several processes (PostgreSQL's backends do its work).
func treeCPU(pid int) (time.Duration, error) {
	f := procStat(pid)
	if f == nil {
		return 0, fmt.Errorf("testserver: CPU of process %d: gone", pid)
	}
	n := ticks(f, 11, 12, 13, 14)
	for _, kid := range children(pid) {
		n += ticks(procStat(kid), 11, 12)
	}
	return time.Duration(n) * time.Second / clockTicks, nil
}
