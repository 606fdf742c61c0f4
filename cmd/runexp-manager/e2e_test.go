package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { e2e.Main(m) }

func build(t testing.TB) (manager, runner string) {
	return e2e.Build(t, "github.com/laboro-go/laboro/cmd/runexp-manager"), e2e.Build(t, "github.com/laboro-go/laboro/cmd/runexp-runner")
}

var serving = regexp.MustCompile(`serving.*"addr": "([^"]+)"`)

// startManager runs the manager on base with a port of the system's choice.
func startManager(t testing.TB, base string, args ...string) (*e2e.Process, string) {
	t.Helper()
	manager, _ := build(t)
	p := e2e.Start(t, nil, manager, append(append([]string{"-p", "0", "-listen", "127.0.0.1"}, args...), base)...)
	return p, p.Await(t, serving, 20*time.Second)
}

func startRunner(t testing.TB, addr, name string, workers int) *e2e.Process {
	t.Helper()
	_, runner := build(t)
	return e2e.Start(t, nil, runner, fmt.Sprint(workers), "-c", addr, "-h", name, "--hold", "100ms")
}

// writeJobs writes n job files runs/batch-<i%4>/job-<i>.sh.
func writeJobs(t testing.TB, base string, n int, body func(i int) string) {
	t.Helper()
	for i := range n {
		path := filepath.Join(base, "runs", fmt.Sprintf("batch-%d", i%4), fmt.Sprintf("job-%03d.sh", i))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(body(i)), 0o644))
	}
}

// results reads every file under outputs (a result being written may
// vanish as it is renamed: it is skipped).
func results(t testing.TB, base string) map[string]string {
	got := map[string]string{}
	filepath.WalkDir(filepath.Join(base, "outputs"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil {
			rel, _ := filepath.Rel(filepath.Join(base, "outputs"), path)
			got[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	return got
}

// 200 jobs over 3 runners of 4 workers; one runner is killed with SIGKILL
// halfway. Every job ends with exactly one result, and the manager's status
// says that all succeeded.
func TestTwoHundredJobsOneRunnerKilled(t *testing.T) {
	base := t.TempDir()
	const n = 200
	writeJobs(t, base, n, func(i int) string {
		return fmt.Sprintf("echo job %03d on $(hostname)\nsleep 0.05\necho RES:ok\n", i)
	})
	manager, addr := startManager(t, base, "--sort")
	runners := []*e2e.Process{
		startRunner(t, addr, "r1", 4),
		startRunner(t, addr, "r2", 4),
		startRunner(t, addr, "r3", 4),
	}
	require.Eventually(t, func() bool { return len(results(t, base)) >= n/2 }, 60*time.Second, 10*time.Millisecond)
	require.NoError(t, runners[1].Cmd.Process.Signal(syscall.SIGKILL))

	require.Equal(t, 0, manager.Wait(t, 120*time.Second), manager.Log())
	assert.Equal(t, fmt.Sprintf("%d jobs: %d succeeded, 0 failed\n", n, n), manager.Stdout.String())
	got := results(t, base)
	require.Len(t, got, n, "one result file per job, and nothing else")
	for i := range n {
		res := got[fmt.Sprintf("batch-%d/job-%03d.res", i%4, i)]
		assert.True(t, strings.HasPrefix(res, "runexp summary: success\n\n"), "job %d: %q", i, res)
		assert.Contains(t, res, fmt.Sprintf("job %03d on", i))
	}
	assert.Regexp(t, `runner dropped.*"runner": "r2".*"jobs back in line": [1-4]`, manager.Log(), "the killed runner's jobs went back in line")
	for _, r := range []*e2e.Process{runners[0], runners[2]} {
		assert.Equal(t, 0, r.Wait(t, 30*time.Second), r.Log())
	}
}

// A second manager on a folder already served is refused: each would run
// every job.
func TestSecondManagerRefused(t *testing.T) {
	base := t.TempDir()
	writeJobs(t, base, 1, func(int) string { return "echo RES:ok\n" })
	startManager(t, base)
	manager, _ := build(t)
	out, err := exec.Command(manager, "-p", "0", base).CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, string(out), "another manager serves this folder")
}

// An interrupted manager says what was done and what is left, and ends
// with status 130; a restart resumes the rest.
func TestInterruptedManagerSums(t *testing.T) {
	base := t.TempDir()
	// Job 0 is done at once; the others run until they are killed.
	writeJobs(t, base, 4, func(i int) string {
		if i == 0 {
			return "echo RES:ok\n"
		}
		return "while :; do sleep 0.05; done\n"
	})
	manager, addr := startManager(t, base)
	startRunner(t, addr, "r1", 4)
	require.Eventually(t, func() bool { return len(results(t, base)) == 1 }, 60*time.Second, 10*time.Millisecond)
	require.NoError(t, manager.Cmd.Process.Signal(os.Interrupt))
	assert.Equal(t, 130, manager.Wait(t, 30*time.Second), manager.Log())
	summary, left, _ := strings.Cut(manager.Stdout.String(), "\n")
	assert.Equal(t, "4 jobs: 1 succeeded, 0 failed, 3 not done", summary)
	// It names them, in the order it served them (shuffled).
	names, ok := strings.CutPrefix(strings.TrimSuffix(left, "\n"), "not done, run by a manager started again on the folder: ")
	require.True(t, ok, "%q", left)
	assert.ElementsMatch(t, []string{"batch-1/job-001", "batch-2/job-002", "batch-3/job-003"}, strings.Split(names, ", "))
	assert.Contains(t, manager.Log(), "runexp-manager: interrupted")

	managerBin, _ := build(t)
	out, err := exec.Command(managerBin, "--print-jobs", base).Output()
	require.NoError(t, err)
	assert.Len(t, strings.Fields(string(out)), 3, "the jobs not done are left for a restart: %s", out)
}

// A failed job (RES:failed) makes the manager's status 1, and is named
// with its files, its exit status, why it failed and the end of its
// output; a restarted manager serves only what is not done, and
// --print-jobs lists it.
func TestFailureAndResume(t *testing.T) {
	base := t.TempDir()
	writeJobs(t, base, 4, func(i int) string {
		if i == 2 {
			return "echo RES:failed\necho 'out of memory' >&2\n"
		}
		return "echo RES:ok\n"
	})
	manager, addr := startManager(t, base)
	runner := startRunner(t, addr, "r1", 2)
	assert.Equal(t, 1, manager.Wait(t, 60*time.Second), manager.Log())
	assert.Regexp(t, `^4 jobs: 3 succeeded, 1 failed\n`+
		`batch-2/job-002 failed, exit status 0: .*runs/batch-2/job-002.sh \(report in .*outputs/batch-2/job-002.res\)\n`+
		`    runexp: runner r1 reported failure: its output says so \(a line starting with RES:failed\)\n`+
		`    \| RES:failed\n    \| out of memory\n$`, manager.Stdout.String(), "the failed job is named, with its files")
	assert.Equal(t, 0, runner.Wait(t, 30*time.Second), runner.Log())
	assert.True(t, strings.HasPrefix(results(t, base)["batch-2/job-002.res"], "runexp summary: failure\n\n"))

	managerBin, _ := build(t)
	out, err := exec.Command(managerBin, "--print-jobs", base).Output()
	require.NoError(t, err)
	assert.Equal(t, "batch-2/job-002.sh\n", string(out), "only the failed job is left")

	require.NoError(t, os.WriteFile(filepath.Join(base, "runs", "batch-2", "job-002.sh"), []byte("echo fixed\n"), 0o644))
	manager, addr = startManager(t, base)
	startRunner(t, addr, "r1", 2)
	assert.Equal(t, 0, manager.Wait(t, 60*time.Second), manager.Log())
	assert.Equal(t, "1 job: 1 succeeded, 0 failed\n", manager.Stdout.String())
	assert.Contains(t, results(t, base)["batch-2/job-002.res"], "fixed")
}

// The manager's log line for a failed job names the job's file, not its
// script.
func TestFailureLoggedByItsFile(t *testing.T) {
	base := t.TempDir()
	writeJobs(t, base, 1, func(int) string {
		return "#!/bin/sh\n# the setup of a long experiment\necho RES:failed\n"
	})
	manager, addr := startManager(t, base)
	startRunner(t, addr, "r1", 1)
	assert.Equal(t, 1, manager.Wait(t, 60*time.Second), manager.Log())
	file := filepath.Join(base, "runs", "batch-0", "job-000.sh")
	assert.Regexp(t, `job failed.*"job": "batch-0/job-000", "command": "`+regexp.QuoteMeta(file)+`"`, manager.Log())
	assert.NotContains(t, manager.Log(), "the setup of a long experiment", "the script is not dumped")
}

// A manager on a port of the system's choice says where it serves
// whatever -log says (warn is its default on a terminal): a runner reaches
// it, and the batch runs.
func TestServingAddressIsSaidAtEveryLogLevel(t *testing.T) {
	for _, level := range []string{"warn", "error"} {
		t.Run(level, func(t *testing.T) {
			base := t.TempDir()
			writeJobs(t, base, 1, func(int) string { return "#!/bin/sh\necho RES:ok\n" })
			manager, addr := startManager(t, base, "-log", level)
			startRunner(t, addr, "r1", 1)
			assert.Equal(t, 0, manager.Wait(t, 60*time.Second), manager.Log())
			assert.Len(t, results(t, base), 1, manager.Log())
		})
	}
}

func TestUsage(t *testing.T) {
	manager, runner := build(t)
	for _, args := range [][]string{{"-p", "x"}, {"a", "b"}, {"-bogus"}, {"-listen", "0.0.0.0", t.TempDir()},
		{"-listen", "", t.TempDir()}, {"-listen", "0.0.0.0", "-allow", "10.0.0.0/33", t.TempDir()}} {
		out, err := exec.Command(manager, args...).CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
		if len(args) > 2 && args[0] == "-listen" {
			assert.Contains(t, string(out), "-allow", "%v: the usage error names the flag", args)
		}
	}
	out, _ := exec.Command(manager, "-listen", "127.0.0.1:5000", t.TempDir()).CombinedOutput()
	assert.Contains(t, string(out), `--listen "127.0.0.1:5000": give the host alone; the port is -p`)
	for _, host := range []string{"localhost", "[::1]", "::1"} { // the loopback: no -allow wanted
		out, _ := exec.Command(manager, "-listen", host, filepath.Join(t.TempDir(), "none")).CombinedOutput()
		assert.Contains(t, string(out), "no folder of runs at", host)
	}
	// Started where there are no runs, it says so, and serves nothing.
	cmd := exec.Command(manager)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Contains(t, string(out), "no folder of runs at runs: give BASEDIR")
	for args, says := range map[string]string{
		"": "N, the number of workers, is required", "4": "-c HOST:PORT is required",
		"0 -c h:1": `N "0": must be a number from 1 to 10000`, "x -c h:1": `N "x"`,
		"100000000 -c h:1":       `N "100000000": must be a number from 1 to 10000`,
		"4 -c h:1 -t py=python3": "want .TYPE=PROGRAM",
		"4 extra":                `unexpected argument "extra"`, "4 -c h:1 extra": `unexpected argument "extra"`,
		"4 -c h:1 -hold 0s": "-hold 0s: must be more than 0",
	} {
		out, err := exec.Command(runner, strings.Fields(args)...).CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
		assert.Contains(t, string(out), says, "%v", args)
	}
}

// Jobs that wait with no runner connected say so after a while, with how
// to start one; a runner that comes then runs them.
func TestSaysNoRunner(t *testing.T) {
	base := t.TempDir()
	writeJobs(t, base, 2, func(int) string { return "echo RES:ok\n" })
	manager, addr := startManager(t, base)
	manager.Await(t, regexp.MustCompile(`no runner is connected: the jobs wait for one \(start runexp-runner N -c `+
		regexp.QuoteMeta(addr)+`\)`), 2*time.Minute)
	startRunner(t, addr, "r1", 1)
	assert.Equal(t, 0, manager.Wait(t, 60*time.Second), manager.Log())
	assert.Equal(t, "2 jobs: 2 succeeded, 0 failed\n", manager.Stdout.String())
}

// A runner that joined and then says nothing, with no job of its own,
// does not keep the manager from exiting once every job has ended: it is
// let go after --goodbye, and the manager sums up as usual.
func TestSilentRunnerLetGo(t *testing.T) {
	base := t.TempDir()
	writeJobs(t, base, 2, func(int) string { return "echo RES:ok\n" })
	manager, addr := startManager(t, base, "--goodbye", "500ms")
	silent, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer silent.Close()
	// Each message is one write, as a runner sends it.
	buf := make([]byte, 256)
	for _, step := range [][2]string{{"SALUTON; MI silent", "VERSIO"}, {"KOMPRENAS", "ALIGI"}} {
		_, err := silent.Write([]byte(step[0]))
		require.NoError(t, err)
		n, err := silent.Read(buf)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(buf[:n]), step[1]), "%q", buf[:n])
	}
	_, err = silent.Write([]byte("JES"))
	require.NoError(t, err)
	manager.Await(t, regexp.MustCompile(`runner joined.*"runner": "silent"`), 20*time.Second)

	startRunner(t, addr, "r1", 1)
	assert.Equal(t, 0, manager.Wait(t, 60*time.Second), manager.Log())
	assert.Equal(t, "2 jobs: 2 succeeded, 0 failed\n", manager.Stdout.String())
	assert.Contains(t, manager.Log(), `runners silent since the last job let go (-goodbye)	{"runners": 1`)
	assert.Contains(t, manager.Log(), "did not say goodbye (FINO ANKAU) within -goodbye")
	_, err = silent.Read(buf)
	assert.ErrorIs(t, err, io.EOF, "the silent runner's connection is closed")
}

// With -log-format json, every line the manager writes to standard error
// is a JSON object, on a terminal as on a pipe: no bar, no line of
// counts; how the batch ended is a record of the logger "progress".
func TestJSONLogHasOnlyJSON(t *testing.T) {
	managerBin, _ := build(t)
	for _, where := range []string{"terminal", "pipe"} {
		t.Run(where, func(t *testing.T) {
			base := t.TempDir()
			writeJobs(t, base, 3, func(i int) string {
				if i == 1 {
					return "echo RES:failed\n"
				}
				return "echo RES:ok\n"
			})
			start := e2e.StartOnTerminal
			if where == "pipe" {
				start = e2e.StartInput
			}
			// At -log info: on a terminal the manager logs only warnings
			// by default, and its address is said at info.
			manager := start(t, nil, nil, managerBin, "-p", "0", "-listen", "127.0.0.1", "-log", "info",
				"-log-format", "json", base)
			addr := manager.Await(t, regexp.MustCompile(`"msg":"serving".*"addr":"([^"]+)"`), 20*time.Second)
			startRunner(t, addr, "r1", 2)
			require.Equal(t, 1, manager.Wait(t, 60*time.Second), manager.Log())
			assert.True(t, strings.HasPrefix(manager.Stdout.String(), "3 jobs: 2 succeeded, 1 failed\n"), manager.Stdout.String())
			var last map[string]any
			for _, r := range e2e.JSONRecords(t, manager.Log()) {
				if r["logger"] == "progress" {
					last = r
				}
			}
			require.NotNil(t, last, "no progress record:\n%s", manager.Log())
			assert.Equal(t, "info", last["level"])
			for field, want := range map[string]float64{"done": 3, "total": 3, "failed": 1, "cancelled": 0} {
				assert.Equal(t, want, last[field], "%s in %v", field, last)
			}
		})
	}
}
