//go:build unix

package laboro

import (
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
)

// The reaper ends the jobs of a process that dies, however it dies.
//
// A job runs in a process group of its own, which Close, Cancel and
// timeouts kill whole; and on Linux the kernel kills a job's first
// process when ours dies (Pdeathsig). But what that process started (the
// commands of a shell script, a pipeline) would run on, re-parented to
// init, after a SIGKILL of ours: a job handed to another worker would then
// run twice at once. So the first job started by a process also starts
// the reaper: a small shell that reads, on a pipe whose only writer is
// this process, "+ PGID" when a job starts and "- PGID" when it has been
// reaped. When the pipe ends (this process is gone, whatever the signal),
// it kills every group still registered, at once, and exits. It ignores
// the terminal's signals (it is in a group of its own, and traps them), so
// that it outlives the process it watches.
//
// What it cannot cover: a job that leaves its process group (setsid,
// setpgid: daemons do), and the microseconds between a job's start and its
// registration (its first process is still killed by Pdeathsig on Linux).
// A job's group is unregistered once its leader is reaped: the kernel
// does not reuse a group's id while any process of the group lives, so the
// reaper never kills a group that is not a job's.
const reaperScript = `trap '' INT TERM HUP QUIT
while read -r op id; do
	case $op in
	+) eval "g_$id=1" ;;
	-) unset "g_$id" ;;
	esac
done
for g in $(set | sed -n 's/^g_\([0-9][0-9]*\)=.*/\1/p'); do
	kill -KILL -"$g" 2>/dev/null
done`

var reaper struct {
	once sync.Once
	mu   sync.Mutex
	w    *os.File // the pipe to the reaper; nil if it could not start
}

// startReaper starts the reaper, once per process.
func startReaper() {
	r, w, err := os.Pipe()
	if err != nil {
		return
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", reaperScript)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return
	}
	// Not waited for: it exits only once this process is gone (or if
	// someone kills it, when it stays a zombie until this process ends).
	cmd.Process.Release()
	reaper.w = w
}

// reap registers (+) or unregisters (-) a job's process group with the
// reaper. Errors are dropped: a reaper that died leaves jobs to
// Pdeathsig, as before there was one.
func reap(op byte, pgid int) {
	reaper.once.Do(startReaper)
	if reaper.w == nil {
		return
	}
	b := strconv.AppendInt([]byte{op, ' '}, int64(pgid), 10)
	b = append(b, '\n')
	reaper.mu.Lock()
	reaper.w.Write(b) // one write under PIPE_BUF: never interleaved
	reaper.mu.Unlock()
}
