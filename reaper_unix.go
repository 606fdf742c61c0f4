//go:build unix

package laboro

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
//
// The reaper also removes the directories of temporary files that this
// process names with RemoveAtExit ("d PATH", struck off with "u PATH"),
// once the groups are killed.
const reaperScript = `trap '' INT TERM HUP QUIT
cat >/dev/null
awk '
$1 == "+" { g[$2] = 1 }
$1 == "-" { delete g[$2] }
$1 == "d" { d[substr($0, 3)] = 1 }
$1 == "u" { delete d[substr($0, 3)] }
END { for (k in g) print "g " k; for (k in d) print "d " k }' <&3 |
while IFS= read -r line; do
	case $line in
	"g "*) kill -KILL -"${line#g }" 2>/dev/null ;;
	"d "*) rm -rf -- "${line#d }" ;;
	esac
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
	dirs map[string]struct{}
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
	reaper.pipe, reaper.f, reaper.live, reaper.dirs = w, f, map[int]struct{}{}, map[string]struct{}{}
}

// reap notes that a job's process group started (+) or was reaped (-).
// Errors are dropped: without the reaper, jobs are left to Pdeathsig, as
// before there was one.
func reap(op byte, pgid int) {
	var buf [24]byte
	b := strconv.AppendInt(append(buf[:0], op, ' '), int64(pgid), 10)
	note(append(b, '\n'), func() {
		if op == '+' {
			reaper.live[pgid] = struct{}{}
		} else {
			delete(reaper.live, pgid)
		}
	})
}

// note writes line in the reaper's file, and updates what it holds with
// update, under reaper.mu; it reports whether the reaper runs.
func note(line []byte, update func()) bool {
	reaper.once.Do(startReaper)
	if reaper.pipe == nil {
		return false
	}
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	update()
	n, _ := reaper.f.WriteAt(line, reaper.size)
	reaper.size += int64(n)
	if reaper.size > reaperCompact {
		compactReaper()
	}
	return true
}

// removeAtExit notes dir for the reaper, and returns what strikes it off.
func removeAtExit(dir string) (forget func()) {
	abs, err := filepath.Abs(dir)
	if err != nil || strings.ContainsAny(abs, "\n") || abs == "/" {
		return func() {}
	}
	if !note([]byte("d "+abs+"\n"), func() { reaper.dirs[abs] = struct{}{} }) {
		return func() {}
	}
	return sync.OnceFunc(func() {
		note([]byte("u "+abs+"\n"), func() { delete(reaper.dirs, abs) })
	})
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
	for d := range reaper.dirs {
		b = append(append(append(b, "d "...), d...), '\n')
	}
	if reaper.f.Truncate(0) != nil {
		return
	}
	n, _ := reaper.f.WriteAt(b, 0)
	reaper.size = int64(n)
}
