package laboro_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A running process job holds no goroutine but its worker's: nothing
// watches each process apart (os/exec's watch of a command's context would
// be one a process, and its start and end wake threads).
func TestRunningProcessJobsHoldNoGoroutineOfTheirOwn(t *testing.T) {
	const n = 4
	dir := t.TempDir()
	ex := newExecutor(t, laboro.WithPoolSize(n), laboro.WithConcurrency(n))
	var hs []*laboro.Handle
	var fifos []string
	for i := range n {
		fifo := filepath.Join(dir, fmt.Sprint(i))
		require.NoError(t, syscall.Mkfifo(fifo, 0o600))
		fifos = append(fifos, fifo)
		hs = append(hs, submit(t, ex, laboro.Job{Script: fmt.Sprintf("echo started > %s; exec sleep 300", fifo)}))
	}
	for _, fifo := range fifos {
		b, err := os.ReadFile(fifo) // until the job has written it
		require.NoError(t, err)
		require.Equal(t, "started\n", string(b))
	}

	// A job's own worker may still be in os/exec, finishing the start of
	// the process that has just written its fifo; no goroutine is os/exec's.
	buf := make([]byte, 1<<20)
	stacks := buf[:runtime.Stack(buf, true)]
	for _, g := range bytes.Split(stacks, []byte("\n\n")) {
		assert.NotContains(t, string(g), "created by os/exec.", "a goroutine of os/exec's while the jobs run")
	}

	for _, h := range hs {
		require.NoError(t, ex.Cancel(h.ID()))
		assert.Equal(t, laboro.StatusCancelled, wait(t, h).Status)
	}
}

// A job that closed its standard error and runs on is still ended by
// Cancel: its end is waited for past the end of that stream.
func TestCancelAJobThatClosedItsStandardError(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	ex := newExecutor(t)
	h := submit(t, ex, laboro.Job{Script: fmt.Sprintf("exec 2>&-; echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 300", pidFile)})
	eventually(t, func() bool { _, err := os.Stat(pidFile); return err == nil }, "the job runs")
	pid := readPID(t, pidFile)
	require.NoError(t, ex.Cancel(h.ID()))
	res := wait(t, h)
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	assert.Equal(t, pid, res.PID)
	assertGone(t, pid)
}
