package laboro

import (
	"runtime"
	"syscall"
)

// sysProcAttr puts the child in a process group of its own, so that the
// whole group can be killed, and asks the kernel to kill the child should
// this process die. Pdeathsig fires on the death of the OS thread that forked
// the child, not of the process: pinThread keeps that thread alive until the
// child is reaped. Even so it is only a backstop: the group kill on Close and
// on timeouts is what ends a job.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// pinThread locks the calling goroutine to its OS thread, so that the thread
// that forks a child outlives it (the Go runtime ends a thread when a
// goroutine locked to it exits), and returns the unlock.
func pinThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
