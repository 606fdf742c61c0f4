package jetstream

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laboro-go/laboro"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The output files and directories left by a process that ended before
// closing them (one without a reaper) are removed by the next Manager or
// Client of the same directory; those of a live process, and other files,
// stay.
func TestSweepOutputs(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	live := exec.Command("sleep", "60")
	require.NoError(t, live.Start())
	defer func() { live.Process.Kill(); live.Wait() }()
	name := func(pid int) string {
		return filepath.Join(dir, "laboro-js-"+strconv.Itoa(pid)+"-123.output")
	}
	procDir := func(pid int) string {
		return filepath.Join(dir, "laboro-js-"+strconv.Itoa(pid)+"-456")
	}
	files := map[string]bool{
		name(dead.Process.Pid):                     false, // removed
		name(live.Process.Pid):                     true,
		name(os.Getpid()):                          true,
		filepath.Join(dir, "laboro-js-x-1.output"): true,
		filepath.Join(dir, "other.output"):         true,
		procDir(dead.Process.Pid):                  false,
		procDir(live.Process.Pid):                  true,
	}
	for f := range files {
		if filepath.Ext(f) == ".output" {
			require.NoError(t, os.WriteFile(f, nil, 0o600))
		} else {
			require.NoError(t, os.Mkdir(f, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(f, "1.output"), nil, 0o600))
		}
	}
	sweepOutputs(dir)
	for f, stays := range files {
		_, err := os.Stat(f)
		assert.Equal(t, stays, err == nil, f)
	}
}

// A Manager's outputs are in a directory of its process's own, which goes
// with the process (laboro.RemoveAtExit, tested with the reaper).
func TestOutputsInProcessDir(t *testing.T) {
	nc := setup(t)
	dir := t.TempDir()
	m := newManager(t, nc, Config{Dir: dir})
	startWorker(t, nc, Config{}, 1)
	res := m.Run(testCtx(t, 30*time.Second), laboro.Job{ID: "o", Command: "echo out"})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	own := filepath.Dir(res.Output.Path())
	assert.Equal(t, dir, filepath.Dir(own))
	assert.True(t, strings.HasPrefix(filepath.Base(own), "laboro-js-"+strconv.Itoa(os.Getpid())+"-"), own)
	require.NoError(t, res.Output.Close())
	assert.NoFileExists(t, res.Output.Path())

	// Removed under the Manager, the directory is made again.
	require.NoError(t, os.RemoveAll(own))
	res = m.Run(testCtx(t, 30*time.Second), laboro.Job{ID: "p", Command: "echo again"})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "again\n", string(output(t, res)))
}
