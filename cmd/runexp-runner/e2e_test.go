package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { e2e.Main(m) }

var serving = regexp.MustCompile(`serving.*"addr": "([^"]+)"`)

// longJobRunning starts a manager whose one job writes its shell's pid and
// its child's (a sleep of 300 s) to a file and waits; and a runner of one
// worker, which runs it. It returns the two processes and the job's pids.
func longJobRunning(t *testing.T) (manager, runner *e2e.Process, pids []int) {
	base := t.TempDir()
	pidFile := filepath.Join(base, "pids")
	require.NoError(t, os.MkdirAll(filepath.Join(base, "runs"), 0o755))
	script := fmt.Sprintf("sleep 300 &\necho $$ $! > %[1]s.tmp\nmv %[1]s.tmp %[1]s\nwait\n", pidFile)
	require.NoError(t, os.WriteFile(filepath.Join(base, "runs", "long.sh"), []byte(script), 0o644))

	managerBin := e2e.Build(t, "github.com/laboro-go/laboro/cmd/runexp-manager")
	runnerBin := e2e.Build(t, "github.com/laboro-go/laboro/cmd/runexp-runner")
	manager = e2e.Start(t, nil, managerBin, "-p", "0", "-listen", "127.0.0.1", base)
	addr := manager.Await(t, serving, 20*time.Second)
	runner = e2e.Start(t, nil, runnerBin, "1", "-c", addr, "-h", "r1", "--hold", "100ms")

	var b []byte
	require.Eventually(t, func() bool {
		var err error
		b, err = os.ReadFile(pidFile)
		return err == nil
	}, 30*time.Second, 5*time.Millisecond, "the job did not start: %s", runner.Log())
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	require.Len(t, pids, 2)
	return manager, runner, pids
}

// running reports whether a process runs (exists, and is no zombie).
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func requireGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		require.Eventually(t, func() bool { return !running(pid) }, 10*time.Second, 5*time.Millisecond,
			"process %d of the job still runs", pid)
	}
}

// The first SIGTERM lets the running job go on; the second kills it, with
// its process group, and the runner quits; the manager gets the job back.
func TestSecondSignalKillsTheJobs(t *testing.T) {
	manager, runner, pids := longJobRunning(t)
	require.NoError(t, runner.Cmd.Process.Signal(syscall.SIGTERM))
	runner.Await(t, regexp.MustCompile(`interrupted: finishing the running jobs`), 10*time.Second)
	for _, pid := range pids {
		assert.True(t, running(pid), "the first signal leaves the job running")
	}
	require.NoError(t, runner.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 1, runner.Wait(t, 10*time.Second), runner.Log())
	requireGone(t, pids)
	assert.Contains(t, runner.Log(), "killing the running jobs")
	manager.Await(t, regexp.MustCompile(`runner dropped.*"runner": "r1".*"jobs back in line": 1`), 10*time.Second)
}

// After a first interrupt the runner waits for its running job, which
// reports, and exits 130: stopped before the manager had no more jobs.
func TestFirstSignalExitsOnceTheJobsReported(t *testing.T) {
	manager, runner, pids := longJobRunning(t)
	require.NoError(t, runner.Cmd.Process.Signal(syscall.SIGINT))
	runner.Await(t, regexp.MustCompile(`interrupted: finishing the running jobs`), 10*time.Second)
	require.NoError(t, syscall.Kill(pids[1], syscall.SIGKILL)) // the job's sleep: the job ends
	assert.Equal(t, 130, runner.Wait(t, 30*time.Second), runner.Log())
	assert.NotContains(t, runner.Log(), "killing the running jobs")
	assert.Regexp(t, `job finished.*"job": "long"`, runner.Log(), "the job's result reported")
	manager.Await(t, regexp.MustCompile(`runner done.*"runner": "r1"`), 10*time.Second)
}

// A runner whose manager dies kills its running job and quits, though no
// worker was talking to the manager.
func TestManagerKilledKillsTheJobs(t *testing.T) {
	manager, runner, pids := longJobRunning(t)
	manager.Kill()
	assert.Equal(t, 1, runner.Wait(t, 10*time.Second), runner.Log())
	requireGone(t, pids)
	assert.Contains(t, runner.Log(), "connection lost while jobs ran")
}

// A runner whose manager has no more jobs ends with status 0, and says
// nothing of an interrupt that never came.
func TestRunnerEndsWhenJobsAreDone(t *testing.T) {
	base := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(base, "runs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(base, "runs", "one.sh"), []byte("echo RES:ok\n"), 0o644))
	manager := e2e.Start(t, nil, e2e.Build(t, "github.com/laboro-go/laboro/cmd/runexp-manager"), "-p", "0", "-listen", "127.0.0.1", base)
	addr := manager.Await(t, serving, 20*time.Second)
	runner := e2e.Start(t, nil, e2e.Build(t, "github.com/laboro-go/laboro/cmd/runexp-runner"), "2", "-c", addr)
	assert.Equal(t, 0, runner.Wait(t, 30*time.Second), runner.Log())
	assert.Contains(t, runner.Log(), "no more jobs")
	assert.NotContains(t, runner.Log(), "interrupted")
	assert.Equal(t, 0, manager.Wait(t, 30*time.Second), manager.Log())
}
