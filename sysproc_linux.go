package laboro

import (
	"context"
	"errors"
	"os/exec"
	"runtime"
	"sync"
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

// command is the command of a job run with ctx: without the context, which
// a groupWatch follows instead. exec.CommandContext would start a goroutine
// for each process to watch it, whose start and end wake threads while the
// job's own goroutine is locked to its thread (pinThread): each such wake-up
// then hands a processor from thread to thread.
func command(_ context.Context, file string, args ...string) *exec.Cmd {
	return exec.Command(file, args...)
}

// groupWatch kills the process group of a started child when the job's
// context ends, until the child has exited and is about to be reaped: a
// child reaped, its id may be another's.
type groupWatch struct {
	mu      sync.Mutex
	pid     int
	settled bool
	stop    func() bool
}

// watchGroup watches the group of child pid, started with ctx.
func watchGroup(ctx context.Context, pid int) *groupWatch {
	w := &groupWatch{pid: pid}
	w.stop = context.AfterFunc(ctx, w.kill)
	return w
}

func (w *groupWatch) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.settled {
		// The negative pid names the process group the child leads.
		syscall.Kill(-w.pid, syscall.SIGKILL)
	}
}

// settle waits until the child has exited, without reaping it, and ends the
// watch: once it returns, the child may be reaped.
func (w *groupWatch) settle() {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, w.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	w.mu.Lock()
	w.settled = true
	w.mu.Unlock()
	w.stop()
}
