//go:build !linux

package testserver

import "syscall"

// sysProcAttr: only Linux has a parent-death signal; elsewhere Stop (or the
// test's cleanup) must end the children.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// stopped cannot be told without /proc: Pause trusts the signal.
func stopped(int) bool { return true }

// children cannot be listed without /proc.
func children(int) []int { return nil }
