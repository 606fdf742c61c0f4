package laboro

import (
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// scriptInMemory keeps a script that /bin/sh runs in a memfd of this
// process rather than in a file of the output directory: the shell reads it
// through /proc/<pid>/fd/<n>, which this process keeps open until the job
// has ended (close). The descriptor is close-on-exec: no job inherits it.
// A file costs the file system an inode made and removed a job, on some
// file systems more than starting the process; a memfd costs it nothing.
// It reports false where the kernel or /proc do not allow it: the caller
// then writes a file.
func scriptInMemory(script string) (path string, close func(), ok bool) {
	pid, ok := procPID()
	if !ok || !dumpable() {
		return "", nil, false
	}
	fd, err := unix.MemfdCreate("laboro-script", unix.MFD_CLOEXEC)
	if err != nil {
		return "", nil, false
	}
	f := os.NewFile(uintptr(fd), "laboro-script")
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return "", nil, false
	}
	return "/proc/" + pid + "/fd/" + strconv.Itoa(fd), func() { f.Close() }, true
}

// dumpable reports whether this process's /proc files are open to its
// jobs: a program may make itself undumpable (laboro's binaries do when
// they hold a secret from their environment), and then its jobs, unless
// privileged, cannot open its descriptors there ("Permission denied").
// It is asked for each script, as a program may change it at any time.
func dumpable() bool {
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	return err == nil && d == 1
}

// procPID returns this process's id, as /proc names it, if /proc shows
// this process's descriptors.
var procPID = sync.OnceValues(func() (string, bool) {
	pid := strconv.Itoa(os.Getpid())
	_, err := os.Stat("/proc/" + pid + "/fd")
	return pid, err == nil
})
