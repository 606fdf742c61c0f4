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
// the reaper: a small shell that waits for the end of a pipe whose only
// writer is this process, and so learns that this process is gone,
// whatever the signal. This process notes "+ PGID" in a file when a job
// starts and "- PGID" once it is reaped (one write each, no wake-up of the
// reaper); at the pipe's end the reaper reads the file, kills every group
// still noted, at once, and exits. The file has no name (it is removed as
// soon as it is made: the two processes hold it open, the reaper as its
// descriptor 3, from its start, since this process writes it with pwrite
// and leaves their shared offset there), so nothing is left of it on disk,
// however either ends. It is rewritten with the live groups alone when it
// grows past reaperCompact. The reaper ignores the terminal's signals (it
// is in a group of its own, and traps them), so that it outlives the
// process it watches.
//
// What it cannot cover: a job that leaves its process group (setsid,
// setpgid: daemons do), and the microseconds between a job's start and its
// note (its first process is still killed by Pdeathsig on Linux). A job's
// group is struck off once its leader is reaped: the kernel does not reuse
// a group's id while any process of the group lives, so the reaper never
// kills a group that is not a job's.
const reaperScript = `trap '' INT TERM HUP QUIT
cat >/dev/null
while read -r op id; do
	case $op in
	+) eval "g_$id=1" ;;
	-) unset "g_$id" ;;
	esac
done <&3
for g in $(set | sed -n 's/^g_\([0-9][0-9]*\)=.*/\1/p'); do
	kill -KILL -"$g" 2>/dev/null
done`

// reaperCompact is the size past which the file of groups is rewritten.
const reaperCompact = 64 << 10

var reaper struct {
	once sync.Once
	mu   sync.Mutex
	pipe *os.File // its write end, never written; nil if the reaper could not start
	f    *os.File // the file of groups, written with pwrite at size
	size int64
	live map[int]struct{}
}

// startReaper starts the reaper, once per process.
func startReaper() {
	f, err := os.CreateTemp("", "laboro-reaper-")
	if err != nil {
		return
	}
	os.Remove(f.Name()) // held open by both: nothing to clean up
	r, w, err := os.Pipe()
	if err != nil {
		f.Close()
		return
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", reaperScript)
	cmd.Stdin = r
	cmd.ExtraFiles = []*os.File{f} // its descriptor 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		f.Close()
		return
	}
	// Not waited for: it exits only once this process is gone (or if
	// someone kills it, when it stays a zombie until this process ends).
	cmd.Process.Release()
	reaper.pipe, reaper.f, reaper.live = w, f, map[int]struct{}{}
}

// reap notes that a job's process group started (+) or was reaped (-).
// Errors are dropped: without the reaper, jobs are left to Pdeathsig, as
// before there was one.
func reap(op byte, pgid int) {
	reaper.once.Do(startReaper)
	if reaper.pipe == nil {
		return
	}
	var buf [24]byte
	b := strconv.AppendInt(append(buf[:0], op, ' '), int64(pgid), 10)
	b = append(b, '\n')
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if op == '+' {
		reaper.live[pgid] = struct{}{}
	} else {
		delete(reaper.live, pgid)
	}
	n, _ := reaper.f.WriteAt(b, reaper.size)
	reaper.size += int64(n)
	if reaper.size > reaperCompact {
		compactReaper()
	}
}

// compactReaper rewrites the file of groups with the live ones alone. The
// reaper reads it only once this process is gone, so never while it
// changes. reaper.mu is held.
func compactReaper() {
	var b []byte
	for g := range reaper.live {
		b = strconv.AppendInt(append(b, '+', ' '), int64(g), 10)
		b = append(b, '\n')
	}
	if reaper.f.Truncate(0) != nil {
		return
	}
	n, _ := reaper.f.WriteAt(b, 0)
	reaper.size = int64(n)
}
