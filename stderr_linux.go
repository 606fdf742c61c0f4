package laboro

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// stderrTail keeps the last bytes of a process's standard error, read from a
// pipe by the job's own goroutine while it waits for the process: one poll(2)
// waits both for output on the pipe and for the process's exit, through a
// pidfd. Memory stays bounded however much the process writes, the process
// never blocks on a full pipe, and no other goroutine or the network poller
// is involved.
type stderrTail struct {
	tailBuf
	r   int      // read end, non-blocking, ours
	w   *os.File // write end, the child's standard error
	pid int
}

func newStderrTail(max int) (*stderrTail, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	// Only our end is non-blocking: the child writes as to any pipe.
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, os.NewSyscallError("fcntl", err)
	}
	return &stderrTail{tailBuf: tailBuf{max: max}, r: p[0], w: os.NewFile(uintptr(p[1]), "|stderr")}, nil
}

// writer is the child's standard error.
func (t *stderrTail) writer() *os.File { return t.w }

// start notes the child's pid once it holds the write end.
func (t *stderrTail) start(pid int) {
	t.w.Close()
	t.pid = pid
}

// collect reads the pipe until the process has exited and the pipe is empty,
// or until every writer has closed it. It returns without reaping the
// process. A descendant left running in the background that keeps the pipe
// open does not hold it back, beyond stderrGrace when no pidfd can be had.
func (t *stderrTail) collect() {
	pidfd, err := pidfdOpen(t.pid, 0)
	timeout := -1
	if err != nil {
		pidfd, timeout = -1, int(stderrGrace.Milliseconds())
	} else {
		defer unix.Close(pidfd)
	}
	fds := []unix.PollFd{{Fd: int32(t.r), Events: unix.POLLIN}, {Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, timeout)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if fds[0].Revents != 0 && t.drain() {
			return // every writer closed the pipe
		}
		if fds[1].Revents != 0 || (pidfd < 0 && t.exited()) {
			t.drain() // what the process wrote before it exited
			return
		}
	}
}

// pidfdOpen is unix.PidfdOpen; tests replace it to take the path of kernels
// without pidfds (before Linux 5.3).
var pidfdOpen = unix.PidfdOpen

// drain reads what the pipe holds now and reports whether it reached its end.
func (t *stderrTail) drain() (eof bool) {
	var chunk [4096]byte
	for {
		n, err := unix.Read(t.r, chunk[:])
		if n > 0 {
			t.keep(chunk[:n])
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil // n == 0 without an error is the end of the stream
	}
}

// exited reports, without reaping it, whether the process has ended.
func (t *stderrTail) exited() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, t.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != nil || info.Signo != 0 // zero while the process runs
}

// finish, called once the process has been reaped, returns the tail.
func (t *stderrTail) finish() []byte {
	unix.Close(t.r)
	return t.bytes()
}

// abort releases the pipe when the child never started.
func (t *stderrTail) abort() {
	t.w.Close()
	unix.Close(t.r)
}
