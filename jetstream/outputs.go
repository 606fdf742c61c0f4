package jetstream

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// outputPattern names the output files a Manager or a Client assembles:
// laboro-js-<pid>-<random>.output, so that the files of a process that
// died before their owners closed them can be told from the others, and
// removed (sweepOutputs).
var outputPattern = "laboro-js-" + strconv.Itoa(os.Getpid()) + "-*.output"

var swept sync.Map // directories swept by this process

// sweepOutputs removes, once per directory and process, the output files
// that processes which have ended left in dir: an Output's owner removes
// it when it closes it, but a process killed first cannot.
func sweepOutputs(dir string) {
	if _, done := swept.LoadOrStore(dir, true); done {
		return
	}
	names, _ := filepath.Glob(filepath.Join(dir, "laboro-js-*-*.output"))
	for _, name := range names {
		rest := strings.TrimPrefix(filepath.Base(name), "laboro-js-")
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			os.Remove(name)
		}
	}
}
