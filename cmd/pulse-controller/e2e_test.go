package main

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { e2e.Main(m) }

func build(t testing.TB) (controller, worker string) {
	return e2e.Build(t, "github.com/laboro-go/laboro/cmd/pulse-controller"), e2e.Build(t, "github.com/laboro-go/laboro/cmd/pulse-worker")
}

// socketDir is a short directory for Unix sockets (their paths are
// limited to 107 bytes).
func socketDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "pc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "ctl")
}

// writeTasks writes the tasks and returns the md5 of each, by name.
func writeTasks(t *testing.T, dir string, sizes []int) map[string]string {
	require.NoError(t, os.MkdirAll(dir, 0o755))
	sums := map[string]string{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i, n := range sizes {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		name := fmt.Sprintf("task-%04d", i)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
		sum := md5.Sum(b)
		sums[name] = hex.EncodeToString(sum[:]) + "  -\n"
	}
	return sums
}

// checkResults asserts that out holds exactly one correct result per task.
func checkResults(t *testing.T, out string, sums map[string]string) {
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	assert.Len(t, entries, len(sums))
	for name, want := range sums {
		got, err := os.ReadFile(filepath.Join(out, name))
		if assert.NoError(t, err, name) {
			assert.Equal(t, want, string(got), name)
		}
	}
}

// A worker killed with SIGKILL mid-task, and one that stalls (SIGSTOP):
// the controller notices each within its next_pulse, and their tasks,
// once they have not come back within the grace period, are completed by
// the remaining worker.
func TestKilledAndStalledWorkers(t *testing.T) {
	controllerBin, workerBin := build(t)
	dir := socketDir(t)
	base := t.TempDir()
	sums := writeTasks(t, filepath.Join(base, "in"), []int{1000, 2000, 3000, 4000, 5000, 6000})
	for _, later := range []bool{false, true} {
		t.Run(fmt.Sprintf("later=%v", later), func(t *testing.T) {
			flags := []string{"-dir", dir}
			if later {
				flags = append(flags, "-later")
			}
			out := filepath.Join(base, fmt.Sprintf("out-%v", later))
			controller := e2e.Start(t, nil, controllerBin, append(flags, "-in", filepath.Join(base, "in"), "-out", out, "-log", "debug")...)
			require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "main.sock")); return err == nil }, 20*time.Second, 10*time.Millisecond)
			slow := []string{"--", "sh", "-c", "sleep 0.5; md5sum"}
			killed := e2e.Start(t, nil, workerBin, append(append(flags, "-pulse", "2s"), slow...)...)
			stalled := e2e.Start(t, nil, workerBin, append(append(flags, "-pulse", "2s"), slow...)...)
			require.Eventually(t, func() bool {
				return strings.Count(controller.Log(), "worker registered") == 2
			}, 20*time.Second, 10*time.Millisecond)
			require.Eventually(t, func() bool {
				return strings.Count(controller.Log(), "task given") >= 2
			}, 20*time.Second, 10*time.Millisecond, "both have a task")
			require.NoError(t, killed.Cmd.Process.Signal(syscall.SIGKILL))
			require.NoError(t, stalled.Cmd.Process.Signal(syscall.SIGSTOP))
			e2e.Start(t, nil, workerBin, append(append(flags, "-pulse", "2s"), "--", "md5sum")...)

			require.Equal(t, 0, controller.Wait(t, 60*time.Second), controller.Log())
			checkResults(t, out, sums)
			assert.Equal(t, 2, strings.Count(controller.Log(), `"why": "no pulse in time"`), controller.Log())
			assert.Equal(t, 2, strings.Count(controller.Log(), "its task waits for it to register again, then goes to another"), controller.Log())
		})
	}
}

// One task on standard input, its result on standard output.
func TestStdin(t *testing.T) {
	controllerBin, workerBin := build(t)
	dir := socketDir(t)
	cmd := exec.Command(controllerBin, "-dir", dir)
	cmd.Stdin = strings.NewReader("hello, pulse\n")
	var out strings.Builder
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "main.sock")); return err == nil }, 20*time.Second, 10*time.Millisecond)
	e2e.Start(t, nil, workerBin, "-dir", dir, "--", "tr", "a-z", "A-Z")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the controller did not end")
	}
	assert.Equal(t, "HELLO, PULSE\n", out.String())
}

// Interrupted while its standard input is still open with nothing more
// written (cat | pulse-controller), the one-task controller stops at once,
// with the interrupt's status.
func TestStdinStillOpenInterrupted(t *testing.T) {
	controllerBin, _ := build(t)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer w.Close() // held open until the controller has ended
	controller := e2e.StartInput(t, r, nil, controllerBin, "-dir", socketDir(t))
	r.Close()
	_, err = w.WriteString("part of a task")
	require.NoError(t, err)
	controller.Await(t, regexp.MustCompile(`serving`), time.Minute)
	require.NoError(t, controller.Cmd.Process.Signal(os.Interrupt))
	assert.Equal(t, 130, controller.Wait(t, 20*time.Second), controller.Log())
	assert.Contains(t, controller.Log(), "pulse-controller: interrupted")
	assert.Empty(t, controller.Stdout.String())
}

// 20 workers and 1,000 tasks of random sizes up to 8 MiB: every result
// arrives exactly once and is correct.
func TestTwentyWorkersThousandTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test")
	}
	controllerBin, workerBin := build(t)
	dir := socketDir(t)
	base := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := make([]int, 1000)
	for i := range sizes {
		sizes[i] = min(8<<20, int(rng.ExpFloat64()*(64<<10)))
	}
	sizes[0], sizes[500], sizes[999] = 8<<20, 8<<20, 0
	sums := writeTasks(t, filepath.Join(base, "in"), sizes)
	out := filepath.Join(base, "out")
	controller := e2e.Start(t, nil, controllerBin, "-dir", dir, "-in", filepath.Join(base, "in"), "-out", out, "-log", "warn")
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "main.sock")); return err == nil }, 20*time.Second, 10*time.Millisecond)
	for range 20 {
		e2e.Start(t, nil, workerBin, "-dir", dir, "-log", "warn", "--", "md5sum")
	}
	require.Equal(t, 0, controller.Wait(t, 300*time.Second), controller.Log())
	checkResults(t, out, sums)
}

func TestUsage(t *testing.T) {
	controller, worker := build(t)
	file, dir := filepath.Join(t.TempDir(), "file"), t.TempDir()
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, args := range [][]string{{"-in", "x"}, {"extra"}, {"-bogus"},
		{"-in", "/nonexistent/tasks", "-out", "o"}, {"-in", file, "-out", "o"}, {"-in", dir, "-out", dir}, {"-in", dir, "-out", file}} {
		out, err := exec.Command(controller, args...).CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
		assert.NotContains(t, string(out), "serving", "%v: said before serving", args)
		switch {
		case slices.Contains(args, "/nonexistent/tasks"):
			assert.Contains(t, string(out), `pulse-controller: -in "/nonexistent/tasks": no such file or directory`)
		case len(args) < 4:
		case args[1] == file:
			assert.Contains(t, string(out), `-in "`+file+`": not a directory`)
		case args[3] == dir:
			assert.Contains(t, string(out), `-out "`+dir+`": the same directory as -in`)
		case args[3] == file:
			assert.Contains(t, string(out), `-out "`+file+`": not a directory`)
		}
	}
	for _, args := range [][]string{{}, {"-dir", "x"}, {"-bogus", "--", "md5sum"}, {"-pulse", "0s", "--", "md5sum"}, {"--", "/nonexistent/solver"}} {
		out, err := exec.Command(worker, args...).CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
		if len(args) > 0 && args[0] == "-pulse" { // not the default, quietly
			assert.Contains(t, string(out), "pulse-worker: -pulse 0s: must be more than 0")
		}
	}
}

// A controller that cannot serve says why and ends at once with status 1,
// whether it has a folder of tasks or one on standard input: a -dir it
// cannot create, one too long for a socket, a main.sock it cannot bind,
// one where a controller already answers.
func TestCannotServe(t *testing.T) {
	controllerBin, _ := build(t)
	base := t.TempDir()
	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	notSocket := socketDir(t)
	require.NoError(t, os.MkdirAll(filepath.Join(notSocket, "main.sock", "x"), 0o700))
	open := socketDir(t)
	require.NoError(t, os.Mkdir(open, 0o700))
	require.NoError(t, os.Chmod(open, 0o777)) // any user could pose as a worker
	busy := socketDir(t)
	e2e.Start(t, nil, controllerBin, "-dir", busy)
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(busy, "main.sock")); return err == nil }, 20*time.Second, 10*time.Millisecond)
	writeTasks(t, filepath.Join(base, "in"), []int{10})

	for _, tc := range []struct {
		name, dir, says string
	}{
		{"a file in the way", filepath.Join(file, "ctl"), "not a directory"},
		{"too long", filepath.Join(base, strings.Repeat("d", 100)), "too long for Unix sockets"},
		{"main.sock not a socket", notSocket, "main.sock"},
		{"in use", busy, "a controller already answers on this socket"},
		{"open to others", open, "mode 0777; chmod 700"},
	} {
		for _, in := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/in=%v", tc.name, in), func(t *testing.T) {
				args := []string{"-dir", tc.dir}
				if in {
					args = append(args, "-in", filepath.Join(base, "in"), "-out", filepath.Join(t.TempDir(), "out"))
				}
				p := e2e.Start(t, nil, controllerBin, args...)
				require.Equal(t, 1, p.Wait(t, 10*time.Second))
				assert.Contains(t, p.Log(), "pulse-controller: cannot serve workers: ")
				assert.Contains(t, p.Log(), tc.says)
			})
		}
	}
}

// A controller killed with SIGKILL mid-batch and started again resumes:
// the tasks whose results it wrote are not given again, the others are,
// and every result is whole.
func TestControllerKilledResumes(t *testing.T) {
	controllerBin, workerBin := build(t)
	dir := socketDir(t)
	base := t.TempDir()
	in, out := filepath.Join(base, "in"), filepath.Join(base, "out")
	sums := writeTasks(t, in, []int{100, 200, 300, 400, 500, 600, 700, 800})
	gate := filepath.Join(base, "gate")
	runs := filepath.Join(base, "runs")
	// Each task notes itself, then the fifth task and those after wait at
	// the gate, which opens once the controller has been killed.
	work := fmt.Sprintf(`n=$(wc -l < %[1]s 2>/dev/null || echo 0); echo run >> %[1]s; if [ "$n" -ge 4 ]; then while [ ! -e %[2]s ]; do sleep 0.02; done; fi; md5sum`, runs, gate)
	controller := e2e.Start(t, nil, controllerBin, "-dir", dir, "-in", in, "-out", out, "-log", "debug")
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "main.sock")); return err == nil }, 20*time.Second, 10*time.Millisecond)
	w1 := e2e.Start(t, nil, workerBin, "-dir", dir, "-pulse", "2s", "-log", "debug", "--", "sh", "-c", work)
	var w2 *e2e.Process
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the first worker:\n%s", w1.Log())
			if w2 != nil {
				t.Logf("the second worker:\n%s", w2.Log())
			}
		}
	})
	require.Eventually(t, func() bool {
		entries, _ := os.ReadDir(out)
		n := 0
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".") { // not one being written
				n++
			}
		}
		return n == 4
	}, 30*time.Second, 10*time.Millisecond, "four results")
	require.NoError(t, controller.Cmd.Process.Signal(syscall.SIGKILL))
	controller.Wait(t, 10*time.Second)
	require.NoError(t, os.WriteFile(gate, nil, 0o600))

	again := e2e.Start(t, nil, controllerBin, "-dir", dir, "-in", in, "-out", out, "-log", "debug")
	w2 = e2e.Start(t, nil, workerBin, "-dir", dir, "-pulse", "2s", "-log", "debug", "--", "sh", "-c", work)
	require.Equal(t, 0, again.Wait(t, 60*time.Second), again.Log())
	checkResults(t, out, sums)
	assert.Contains(t, again.Log(), `"tasks": 4`, "the four done before are skipped")
	// The first worker, alive on 1.sock, is never taken for a new one.
	assert.NotContains(t, again.Log(), "worker registered\t{\"worker\": 1,", "id 1 given again while its worker lives")
	assert.Contains(t, again.Stdout.String(), "4 jobs: 4 succeeded, 0 failed", "the batch is the four left: %s", again.Log())
}

// Tasks that wait with no worker registered say so after a while, with
// how to start one, as a batch and as a single task; a worker that comes
// then runs them.
func TestSaysNoWorker(t *testing.T) {
	controllerBin, workerBin := build(t)
	says := regexp.MustCompile(`no worker has registered: the tasks wait for one \(start pulse-worker -dir \S+ -- COMMAND\)`)

	dir := socketDir(t)
	base := t.TempDir()
	sums := writeTasks(t, filepath.Join(base, "in"), []int{10, 20})
	batch := e2e.Start(t, nil, controllerBin, "-dir", dir, "-in", filepath.Join(base, "in"), "-out", filepath.Join(base, "out"))
	batch.Await(t, says, 2*time.Minute)
	e2e.Start(t, nil, workerBin, "-dir", dir, "--", "md5sum")
	assert.Equal(t, 0, batch.Wait(t, time.Minute), batch.Log())
	checkResults(t, filepath.Join(base, "out"), sums)
	// The worker is not blamed for the controller's end.
	assert.NotContains(t, batch.Log(), "worker removed")
	assert.Contains(t, batch.Log(), `stopped serving; the workers still running register again with the next controller on this directory	{"workers": 1}`)

	dir = socketDir(t)
	one := e2e.StartInput(t, strings.NewReader("hello\n"), nil, controllerBin, "-dir", dir)
	one.Await(t, says, 2*time.Minute)
	e2e.Start(t, nil, workerBin, "-dir", dir, "--", "cat")
	assert.Equal(t, 0, one.Wait(t, time.Minute), one.Log())
	assert.Equal(t, "hello\n", one.Stdout.String())
}

// An interrupted batch says what was done before it exits 130: a
// controller started again with the same -in and -out runs the rest.
func TestInterruptedBatchSums(t *testing.T) {
	controllerBin, _ := build(t)
	dir := socketDir(t)
	base := t.TempDir()
	writeTasks(t, filepath.Join(base, "in"), []int{10, 20, 30})
	batch := e2e.Start(t, nil, controllerBin, "-dir", dir, "-in", filepath.Join(base, "in"), "-out", filepath.Join(base, "out"))
	batch.Await(t, regexp.MustCompile(`serving`), time.Minute)
	require.NoError(t, batch.Cmd.Process.Signal(os.Interrupt))
	assert.Equal(t, 130, batch.Wait(t, time.Minute), batch.Log())
	assert.Equal(t, "3 jobs: 0 succeeded, 0 failed, 3 not done\n", batch.Stdout.String())
}

// awaitSocket waits for the controller's main.sock in dir.
func awaitSocket(t *testing.T, dir string) {
	t.Helper()
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "main.sock")); return err == nil }, 20*time.Second, 10*time.Millisecond)
}

// gated is a worker's command that notes each run in runs, waits for the
// file gate, then prints the MD5 of its input as md5sum does.
func gated(runs, gate string) []string {
	return []string{"--", "sh", "-c", fmt.Sprintf(`echo run >> %s; while [ ! -e %s ]; do sleep 0.02; done; md5sum`, runs, gate)}
}

// lines counts the lines of the file at path (0 when it is missing).
func lines(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

// A controller stopped (SIGSTOP) past its workers' next_pulse while they
// run its tasks drops them; when it goes on (SIGCONT), they register
// again and offer the outcomes they hold: those are taken, and each task
// runs once.
func TestStalledControllerRunsEachTaskOnce(t *testing.T) {
	controllerBin, workerBin := build(t)
	dir := socketDir(t)
	base := t.TempDir()
	in, out, runs, gate := filepath.Join(base, "in"), filepath.Join(base, "out"), filepath.Join(base, "runs"), filepath.Join(base, "gate")
	sums := writeTasks(t, in, []int{100, 200})
	controller := e2e.Start(t, nil, controllerBin, "-dir", dir, "-in", in, "-out", out, "-log", "debug")
	awaitSocket(t, dir)
	var workers []*e2e.Process
	for range 2 {
		workers = append(workers, e2e.Start(t, nil, workerBin, append([]string{"-dir", dir, "-pulse", "1s"}, gated(runs, gate)...)...))
	}
	require.Eventually(t, func() bool { return controller.Logged("task given") == 2 }, 20*time.Second, 10*time.Millisecond)
	t.Cleanup(func() {
		if t.Failed() {
			for i, w := range workers {
				t.Logf("worker %d:\n%s", i+1, w.Log())
			}
		}
	})

	require.NoError(t, controller.Cmd.Process.Signal(syscall.SIGSTOP))
	// A pulse unanswered within the workers' Timeout (10 s): the
	// controller has missed their next_pulse (1 s). Meanwhile the tasks
	// end, and their outcomes wait to be fetched.
	for _, w := range workers {
		w.Await(t, regexp.MustCompile(`pulse failed`), time.Minute)
	}
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	for _, w := range workers {
		w.Await(t, regexp.MustCompile(`task done`), time.Minute)
	}
	require.NoError(t, controller.Cmd.Process.Signal(syscall.SIGCONT))

	require.Equal(t, 0, controller.Wait(t, time.Minute), controller.Log())
	checkResults(t, out, sums)
	assert.Equal(t, 2, lines(t, runs), "the tasks ran again:\n%s", controller.Log())
	assert.NotContains(t, controller.Log(), "fetched outcome discarded")
}

// A peer that connects to main.sock and says nothing does not hold the
// controller up when it is told to stop (it did until the controller's
// 10 s Timeout).
func TestSilentPeerDoesNotDelayTheEnd(t *testing.T) {
	controllerBin, workerBin := build(t)
	dir := socketDir(t)
	base := t.TempDir()
	writeTasks(t, filepath.Join(base, "in"), []int{10})
	controller := e2e.Start(t, nil, controllerBin, "-dir", dir, "-in", filepath.Join(base, "in"), "-out", filepath.Join(base, "out"))
	awaitSocket(t, dir)
	silent, err := net.Dial("unix", filepath.Join(dir, "main.sock"))
	require.NoError(t, err)
	defer silent.Close()
	// Connections are taken in turn: once the worker that dials after it
	// has registered, the silent one is being served.
	e2e.Start(t, nil, workerBin, append([]string{"-dir", dir}, gated(filepath.Join(base, "runs"), filepath.Join(base, "gate"))...)...)
	controller.Await(t, regexp.MustCompile(`worker registered`), time.Minute)
	require.NoError(t, controller.Cmd.Process.Signal(os.Interrupt))
	assert.Equal(t, 130, controller.Wait(t, 5*time.Second), controller.Log())
}

// A single task (on standard input) shows how it goes while it runs, as a
// batch does: on a terminal, a bar that says it runs on a worker.
func TestOneTaskShowsProgress(t *testing.T) {
	controllerBin, workerBin := build(t)
	dir := socketDir(t)
	base := t.TempDir()
	gate := filepath.Join(base, "gate")
	controller := e2e.StartOnTerminal(t, strings.NewReader("hello, pulse\n"), nil, controllerBin, "-dir", dir)
	awaitSocket(t, dir)
	e2e.Start(t, nil, workerBin, append([]string{"-dir", dir}, gated(filepath.Join(base, "runs"), gate)...)...)
	controller.Await(t, regexp.MustCompile(regexp.QuoteMeta("running 1, queued 0, failed 0, workers 1")), time.Minute)
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	require.Equal(t, 0, controller.Wait(t, time.Minute), controller.Log())
	sum := md5.Sum([]byte("hello, pulse\n"))
	assert.Equal(t, hex.EncodeToString(sum[:])+"  -\n", controller.Stdout.String())
}

// With -log-format json, every line on standard error is a JSON object,
// on a terminal as on a pipe: no bar, no line of counts among them; how
// the batch ended is a record of the logger "progress".
func TestJSONLogHasOnlyJSON(t *testing.T) {
	controllerBin, workerBin := build(t)
	for _, where := range []string{"terminal", "pipe"} {
		t.Run(where, func(t *testing.T) {
			dir := socketDir(t)
			base := t.TempDir()
			sums := writeTasks(t, filepath.Join(base, "in"), []int{10, 20})
			gate := filepath.Join(base, "gate")
			start := e2e.StartOnTerminal
			if where == "pipe" {
				start = e2e.StartInput
			}
			controller := start(t, nil, nil, controllerBin, "-dir", dir, "-log-format", "json",
				"-in", filepath.Join(base, "in"), "-out", filepath.Join(base, "out"))
			awaitSocket(t, dir)
			e2e.Start(t, nil, workerBin, append([]string{"-dir", dir}, gated(filepath.Join(base, "runs"), gate)...)...)
			controller.Await(t, regexp.MustCompile(`"msg":"worker registered"`), time.Minute)
			require.NoError(t, os.WriteFile(gate, nil, 0o600))
			require.Equal(t, 0, controller.Wait(t, time.Minute), controller.Log())
			checkResults(t, filepath.Join(base, "out"), sums)
			var last map[string]any
			for _, r := range e2e.JSONRecords(t, controller.Log()) {
				if r["logger"] == "progress" {
					last = r
				}
			}
			require.NotNil(t, last, "no progress record:\n%s", controller.Log())
			for field, want := range map[string]float64{"done": 2, "total": 2, "failed": 0} {
				assert.Equal(t, want, last[field], "%s in %v", field, last)
			}
			assert.Equal(t, "2 jobs: 2 succeeded, 0 failed\n", controller.Stdout.String())
		})
	}
}
