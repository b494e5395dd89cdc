//go:build !linux

package testserver

import (
	"errors"
	"syscall"
	"time"
)

// sysProcAttr: only Linux has a parent-death signal; elsewhere Stop (or the
// test's cleanup) must end the children.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// stopped cannot be told without /proc: Pause trusts the signal.
func stopped(int) bool { return true }

// children cannot be listed without /proc.
func children(int) []int { return nil }

// errNoProc: CPU times are read from /proc.
var errNoProc = errors.New("testserver: CPU times need Linux's /proc")

// ProcessCPU needs /proc.
func ProcessCPU(int) (time.Duration, error) { return 0, errNoProc }

func treeCPU(int) (time.Duration, error) { return 0, errNoProc }
