package laboro

import (
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
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

// scratchFile returns an unnamed file in dir, gone once closed. O_TMPFILE
// makes it in one call; on file systems without it, a named file is created
// and unlinked at once.
func scratchFile(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), dir+"/(scratch)"), nil
	}
	return namedScratchFile(dir)
}
