package testserver

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
)

// sysProcAttr makes the kernel SIGKILL the child when the test process dies,
// so no server outlives a killed or crashed test binary.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// stopped reports whether the process pid is stopped by a signal (state
// T in /proc/pid/stat): SIGSTOP is delivered when the process next runs,
// which on a loaded machine may be after the kill call returned.
func stopped(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, the state follows its ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'T' || stat[i+2] == 't')
}
