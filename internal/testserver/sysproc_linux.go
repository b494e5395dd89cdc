package testserver

import "syscall"

// sysProcAttr makes the kernel SIGKILL the child when the test process dies,
// so no server outlives a killed or crashed test binary.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
