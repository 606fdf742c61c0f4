package laborotest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// System is a Runner under test, with whatever serves it: for a remote
// Runner, its manager side and the workers, over real sockets.
type System struct {
	// Runner is the Runner under test.
	Runner laboro.Runner
	// Stop ends the system: manager, workers, and every goroutine and
	// process they started. The checks call it once, after closing the
	// Executor over Runner; nil means nothing to stop.
	Stop func()
	// LoseWorker ends one worker as a crash would, while it runs a job (its
	// connection cut, its process killed), and starts another one in its
	// place. nil for a Runner without remote workers; the check of a lost
	// worker is then skipped.
	LoseWorker func()
}

// Harness tells Runner how to start a system and how to make its jobs.
type Harness struct {
	// Start starts a fresh system for one check. Every check calls it once.
	Start func(t *testing.T) System
	// Job returns the job that runs script, a /bin/sh script, with id as
	// its Job.ID. Scripts use absolute paths, and report failure both by
	// their exit status and by a line "RES:failed" (for runners that judge
	// a job by its output).
	Job func(id, script string) laboro.Job
	// Slots is how many jobs the system runs at once; 0 means 4.
	Slots int
	// CannotCancel says that the Runner has no way to stop a job on its
	// worker (its protocol has none): after Close, a timeout or Cancel, the
	// job must still end at once, but its process is only required to be
	// gone once the system has stopped.
	CannotCancel bool
}

// Runner checks a laboro.Runner, run by an Executor, against the contract
// of laboro.Runner:
//
//   - many jobs at once each end with exactly one Result, with their own
//     output when the Runner captures output, failed when they fail;
//   - Close ends a running job at once as killed, Job.Timeout as timed
//     out, Executor.Cancel as cancelled; and no process of the job
//     survives (at once, or, with CannotCancel, once the system stopped);
//   - a worker lost mid-job (System.LoseWorker) has its job run again, and
//     the job still ends once, succeeded;
//   - no check leaves a goroutine behind.
func Runner(t *testing.T, h Harness) {
	t.Helper()
	if h.Slots <= 0 {
		h.Slots = 4
	}
	c := checker{h: h}
	t.Run("each job ends once", c.run(c.manyJobs))
	t.Run("close kills", c.run(c.closeKills))
	t.Run("timeout", c.run(c.timeout))
	t.Run("cancel", c.run(c.cancel))
	t.Run("lost worker", c.run(c.lostWorker))
}

type checker struct{ h Harness }

// check is one check on a started system and an Executor over it.
type check func(t *testing.T, sys System, ex *laboro.Executor, dir string)

func (c checker) run(f check) func(*testing.T) {
	return func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		dir := t.TempDir()
		sys := c.h.Start(t)
		stopped := false
		stop := func() {
			if !stopped && sys.Stop != nil {
				sys.Stop()
			}
			stopped = true
		}
		defer stop()
		ex, err := laboro.New(laboro.WithRunner(sys.Runner), laboro.WithPoolSize(c.h.Slots),
			laboro.WithConcurrency(c.h.Slots), laboro.WithBufferSize(256))
		require.NoError(t, err)
		defer ex.Close()
		f(t, System{Runner: sys.Runner, Stop: stop, LoseWorker: sys.LoseWorker}, ex, dir)
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (c checker) manyJobs(t *testing.T, sys System, ex *laboro.Executor, dir string) {
	ctx := ctxFor(t)
	const n = 40
	hs := make([]*laboro.Handle, n)
	for i := range hs {
		id := fmt.Sprintf("many-%d", i)
		script := fmt.Sprintf("echo out-%s\n", id)
		if i%5 == 4 {
			script += "echo RES:failed\necho oops >&2\nexit 3\n"
		}
		var err error
		hs[i], err = ex.Submit(ctx, c.h.Job(id, script))
		require.NoError(t, err)
	}
	for i, h := range hs {
		res, err := h.Wait(ctx)
		require.NoError(t, err, "job %d never ended", i)
		want := laboro.StatusSucceeded
		if i%5 == 4 {
			want = laboro.StatusFailed
		}
		assert.Equal(t, want, res.Status, "job %s: %v", h.ID(), res.Err)
		assert.Equal(t, h.ID(), res.ID)
		if res.Output != nil {
			b, err := res.Output.ReadAll()
			assert.NoError(t, err)
			assert.Contains(t, string(b), "out-"+h.Job().ID, "job %s has its own output", h.ID())
			assert.NoError(t, res.Output.Close())
		}
	}
}

// longJob returns a job that writes its shell's pid and its child's pid
// to a file, then waits for the child, a sleep of 300 s.
func (c checker) longJob(id, dir string) (laboro.Job, string) {
	pids := filepath.Join(dir, id+".pids")
	script := fmt.Sprintf("sleep 300 &\necho $$ $! > %[1]s.tmp\nmv %[1]s.tmp %[1]s\nwait\necho RES:failed\nexit 9\n", pids)
	return c.h.Job(id, script), pids
}

// started waits until the long job of pid file path has started, and
// returns its process ids.
func started(t *testing.T, path string) []int {
	t.Helper()
	var b []byte
	require.Eventually(t, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil
	}, time.Minute, 5*time.Millisecond, "the job did not start on a worker")
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

// ended waits for h's result, which must come at once (within 10 s).
func ended(t *testing.T, h *laboro.Handle) laboro.Result {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("job %s did not end at once", h.ID())
	}
	res, _ := h.Result()
	res.Output.Close()
	return res
}

// gone checks that no process of pids survives, now or (with
// CannotCancel) once the system has stopped.
func (c checker) gone(t *testing.T, sys System, pids []int) {
	t.Helper()
	if c.h.CannotCancel {
		sys.Stop()
	}
	for _, pid := range pids {
		require.Eventually(t, func() bool { return dead(pid) }, 10*time.Second, 5*time.Millisecond,
			"process %d of the job still runs", pid)
	}
}

// dead reports whether a process no longer runs: it is gone, or a zombie.
func dead(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return true
		}
		return syscall.Kill(pid, 0) != nil
	}
	// The state follows the parenthesised command name.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

func (c checker) closeKills(t *testing.T, sys System, ex *laboro.Executor, dir string) {
	job, pidFile := c.longJob("close-me", dir)
	h, err := ex.Submit(ctxFor(t), job)
	require.NoError(t, err)
	pids := started(t, pidFile)
	closed := make(chan struct{})
	go func() { ex.Close(); close(closed) }()
	res := ended(t, h)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrKilled)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	c.gone(t, sys, pids)
}

func (c checker) timeout(t *testing.T, sys System, ex *laboro.Executor, dir string) {
	job, pidFile := c.longJob("time-me-out", dir)
	job.Timeout = 2 * time.Second
	h, err := ex.Submit(ctxFor(t), job)
	require.NoError(t, err)
	pids := started(t, pidFile)
	res := ended(t, h)
	assert.Equal(t, laboro.StatusTimedOut, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrTimeout)
	c.gone(t, sys, pids)
}

func (c checker) cancel(t *testing.T, sys System, ex *laboro.Executor, dir string) {
	job, pidFile := c.longJob("cancel-me", dir)
	h, err := ex.Submit(ctxFor(t), job)
	require.NoError(t, err)
	pids := started(t, pidFile)
	require.NoError(t, ex.Cancel(h.ID()))
	res := ended(t, h)
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrCancelled)
	require.ErrorIs(t, ex.Cancel(h.ID()), laboro.ErrNotFound, "a job cancelled is over")

	// The Runner still runs jobs after a cancel.
	after, err := ex.Submit(ctxFor(t), c.h.Job("after-cancel", "echo out-after-cancel\n"))
	require.NoError(t, err)
	res, err = after.Wait(ctxFor(t))
	require.NoError(t, err)
	res.Output.Close()
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	c.gone(t, sys, pids)
}

func (c checker) lostWorker(t *testing.T, sys System, ex *laboro.Executor, dir string) {
	if sys.LoseWorker == nil {
		t.Skip("no remote workers")
	}
	runs, gate := filepath.Join(dir, "runs"), filepath.Join(dir, "gate")
	script := fmt.Sprintf("echo $$ >> %s\nwhile [ ! -e %s ]; do sleep 0.02; done\necho out-lost\n", runs, gate)
	h, err := ex.Submit(ctxFor(t), c.h.Job("lost", script))
	require.NoError(t, err)
	lines := func() int {
		b, _ := os.ReadFile(runs)
		return bytes.Count(b, []byte("\n"))
	}
	require.Eventually(t, func() bool { return lines() == 1 }, time.Minute, 5*time.Millisecond, "the job did not start")
	sys.LoseWorker()
	require.Eventually(t, func() bool { return lines() >= 2 }, time.Minute, 5*time.Millisecond,
		"the job of the lost worker did not run again")
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	res, err := h.Wait(ctxFor(t))
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	res.Output.Close()
	require.NoError(t, ex.Shutdown(ctxFor(t)))
	_, again := h.Result()
	assert.True(t, again, "the job ended once, and stays ended")
}
