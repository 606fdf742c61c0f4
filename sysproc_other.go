//go:build unix && !linux

package laboro

import "syscall"

// sysProcAttr puts the child in a process group of its own, so that the
// whole group can be killed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// pinThread is needed only where Pdeathsig is used.
func pinThread() func() { return func() {} }
