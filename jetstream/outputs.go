package jetstream

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/laboro-go/laboro"
)

// The output files that a Manager or a Client assembles are in a
// directory of this process's own in Config.Dir,
// laboro-js-<pid>-<random>, which goes with the process however it ends
// (laboro.RemoveAtExit); each file goes before, when its owner closes its
// Output. A directory that outlived its process (one that could not start
// the reaper) is removed by the next Manager or Client of Config.Dir
// (sweepOutputs), as are the files of earlier versions,
// laboro-js-<pid>-<random>.output.
var outputPrefix = "laboro-js-" + strconv.Itoa(os.Getpid()) + "-"

// outputDirs are this process's output directories, by Config.Dir.
var outputDirs sync.Map

type outputDir struct {
	once sync.Once
	path string
	err  error
}

// outputsIn returns this process's output directory in dir, made at its
// first use, once the leftovers of ended processes are swept.
func outputsIn(dir string) (string, error) {
	v, _ := outputDirs.LoadOrStore(dir, &outputDir{})
	d := v.(*outputDir)
	d.once.Do(func() {
		sweepOutputs(dir)
		d.path, d.err = os.MkdirTemp(dir, outputPrefix)
		if d.err != nil {
			d.err = fmt.Errorf("jetstream: directory for outputs: %w", d.err)
			return
		}
		laboro.RemoveAtExit(d.path)
	})
	return d.path, d.err
}

// sweepOutputs removes the output directories and files that processes
// which have ended left in dir.
func sweepOutputs(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, "laboro-js-*-*"))
	for _, name := range names {
		rest := strings.TrimPrefix(filepath.Base(name), "laboro-js-")
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			os.RemoveAll(name)
		}
	}
}
