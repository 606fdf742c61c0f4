//go:build !linux

package e2e

import "syscall"

// sysProcAttr is nil where the kernel has no parent-death signal: a
// started binary is killed by its test's cleanup alone.
func sysProcAttr() *syscall.SysProcAttr { return nil }
