package secret

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// seal makes the process undumpable (see Protect).
func seal() { unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }

// scrub overwrites, with NUL bytes, the values of the variables env in the
// environment the process started with: the copy the kernel shows in
// /proc/<pid>/environ, which unsetting a variable does not change, and
// which an undumpable process still shows to root. Go's runtime copied
// that block as the program started, and nothing reads it afterwards. It
// is done through /proc/self/mem, which a process may always write; where
// that fails, the values stay, behind the seal.
func scrub(env ...string) {
	start, ok := environStart()
	if !ok {
		return
	}
	block, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		return
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer mem.Close()
	off := 0
	for _, kv := range bytes.Split(block, []byte{0}) {
		for _, name := range env {
			if value, found := bytes.CutPrefix(kv, []byte(name+"=")); found && len(value) > 0 {
				at := int64(start) + int64(off+len(name)+1)
				mem.WriteAt(make([]byte, len(value)), at) //nolint:errcheck // best effort, as above
			}
		}
		off += len(kv) + 1
	}
}

// environStart returns the address where the process's environment block
// starts: field 50 of /proc/self/stat (env_start, Linux 3.5 and later).
func environStart() (uint64, bool) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	// The command's name, in parentheses, may hold spaces: the fields
	// counted from 3 follow the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	fields := bytes.Fields(stat[i+1:])
	const envStart = 50 - 3
	if len(fields) <= envStart {
		return 0, false
	}
	start, err := strconv.ParseUint(string(fields[envStart]), 10, 64)
	return start, err == nil && start != 0
}
