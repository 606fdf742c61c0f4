package main

import (
	"bufio"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "pulse-bin"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(binDir)
		os.Exit(code)
	}))
}

func build(t testing.TB) (controller, worker string) {
	t.Helper()
	buildOnce.Do(func() {
		out, err := exec.Command("go", "build", "-o", binDir+"/",
			"github.com/laboro-go/laboro/cmd/pulse-controller",
			"github.com/laboro-go/laboro/cmd/pulse-worker").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("%w: %s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(binDir, "pulse-controller"), filepath.Join(binDir, "pulse-worker")
}

// socketDir is a short directory for Unix sockets (their paths are
// limited to 107 bytes).
func socketDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "pc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "ctl")
}

// process is a running binary whose stderr is collected.
type process struct {
	cmd  *exec.Cmd
	out  strings.Builder
	mu   sync.Mutex
	logs strings.Builder
	eof  chan struct{}
}

func start(t testing.TB, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), eof: make(chan struct{})}
	p.cmd.Stdout = &p.out
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		defer close(p.eof)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.eof
		p.cmd.Wait()
	})
	return p
}

func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func (p *process) wait(t testing.TB, within time.Duration) int {
	t.Helper()
	select {
	case <-p.eof:
	case <-time.After(within):
		t.Fatalf("%s did not end:\n%s", filepath.Base(p.cmd.Path), p.log())
	}
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return 0
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
// the controller notices each within its next_pulse, and their tasks are
// completed by the remaining worker.
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
			controller := start(t, controllerBin, append(flags, "-in", filepath.Join(base, "in"), "-out", out)...)
			require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "main.sock")); return err == nil }, 20*time.Second, 10*time.Millisecond)
			slow := []string{"--", "sh", "-c", "sleep 0.5; md5sum"}
			killed := start(t, workerBin, append(append(flags, "-pulse", "2s"), slow...)...)
			stalled := start(t, workerBin, append(append(flags, "-pulse", "2s"), slow...)...)
			require.Eventually(t, func() bool {
				return strings.Count(controller.log(), "worker registered") == 2
			}, 20*time.Second, 10*time.Millisecond)
			time.Sleep(200 * time.Millisecond) // both have a task
			require.NoError(t, killed.cmd.Process.Signal(syscall.SIGKILL))
			require.NoError(t, stalled.cmd.Process.Signal(syscall.SIGSTOP))
			start(t, workerBin, append(append(flags, "-pulse", "2s"), "--", "md5sum")...)

			require.Equal(t, 0, controller.wait(t, 60*time.Second), controller.log())
			checkResults(t, out, sums)
			assert.Equal(t, 2, strings.Count(controller.log(), "no pulse in time"), controller.log())
			assert.Equal(t, 2, strings.Count(controller.log(), "its task goes to another"), controller.log())
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
	start(t, workerBin, "-dir", dir, "--", "tr", "a-z", "A-Z")
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
	controller := start(t, controllerBin, "-dir", dir, "-in", filepath.Join(base, "in"), "-out", out, "-log", "warn")
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "main.sock")); return err == nil }, 20*time.Second, 10*time.Millisecond)
	for range 20 {
		start(t, workerBin, "-dir", dir, "-log", "warn", "--", "md5sum")
	}
	require.Equal(t, 0, controller.wait(t, 300*time.Second), controller.log())
	checkResults(t, out, sums)
}

func TestUsage(t *testing.T) {
	controller, worker := build(t)
	for _, args := range [][]string{{"-in", "x"}, {"extra"}, {"-bogus"}} {
		err := exec.Command(controller, args...).Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
	}
	for _, args := range [][]string{{}, {"-dir", "x"}, {"-bogus", "--", "md5sum"}} {
		err := exec.Command(worker, args...).Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
	}
}
