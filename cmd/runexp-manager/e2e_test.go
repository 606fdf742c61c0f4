package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	if binDir, err = os.MkdirTemp("", "runexp-bin"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(binDir)
		os.Exit(code)
	}))
}

// build compiles the manager and the runner once per test run.
func build(t testing.TB) (manager, runner string) {
	t.Helper()
	buildOnce.Do(func() {
		out, err := exec.Command("go", "build", "-o", binDir+"/",
			"github.com/laboro-go/laboro/cmd/runexp-manager",
			"github.com/laboro-go/laboro/cmd/runexp-runner").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("%w: %s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(binDir, "runexp-manager"), filepath.Join(binDir, "runexp-runner")
}

// process is a running binary whose stderr is collected.
type process struct {
	cmd    *exec.Cmd
	stdout strings.Builder
	mu     sync.Mutex
	logs   strings.Builder
	eof    chan struct{}
	addr   chan string // the "serving" address, for a manager
}

func start(t testing.TB, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), eof: make(chan struct{}), addr: make(chan string, 1)}
	p.cmd.Stdout = &p.stdout
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	re := regexp.MustCompile(`serving.*"addr": "([^"]+)"`)
	go func() {
		defer close(p.eof)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				p.addr <- m[1]
			}
		}
	}()
	t.Cleanup(func() {
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

// wait waits for the process to end and returns its exit status.
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

// startManager runs the manager on base with a port of the system's choice.
func startManager(t testing.TB, base string, args ...string) (*process, string) {
	t.Helper()
	manager, _ := build(t)
	p := start(t, manager, append(append([]string{"-p", "0", "-listen", "127.0.0.1"}, args...), base)...)
	select {
	case addr := <-p.addr:
		return p, addr
	case <-p.eof:
		t.Fatalf("the manager did not start:\n%s", p.log())
	case <-time.After(20 * time.Second):
		t.Fatal("the manager did not start")
	}
	return nil, ""
}

func startRunner(t testing.TB, addr, name string, workers int) *process {
	t.Helper()
	_, runner := build(t)
	return start(t, runner, fmt.Sprint(workers), "-c", addr, "-h", name, "--hold", "100ms")
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
	runners := []*process{
		startRunner(t, addr, "r1", 4),
		startRunner(t, addr, "r2", 4),
		startRunner(t, addr, "r3", 4),
	}
	require.Eventually(t, func() bool { return len(results(t, base)) >= n/2 }, 60*time.Second, 10*time.Millisecond)
	require.NoError(t, runners[1].cmd.Process.Signal(syscall.SIGKILL))

	require.Equal(t, 0, manager.wait(t, 120*time.Second), manager.log())
	assert.Equal(t, fmt.Sprintf("%d jobs: %d succeeded, 0 failed\n", n, n), manager.stdout.String())
	got := results(t, base)
	require.Len(t, got, n, "one result file per job, and nothing else")
	for i := range n {
		res := got[fmt.Sprintf("batch-%d/job-%03d.res", i%4, i)]
		assert.True(t, strings.HasPrefix(res, "runexp summary: success\n\n"), "job %d: %q", i, res)
		assert.Contains(t, res, fmt.Sprintf("job %03d on", i))
	}
	assert.Regexp(t, `runner dropped.*"runner": "r2".*"jobs back in line": [1-4]`, manager.log(), "the killed runner's jobs went back in line")
	for _, r := range []*process{runners[0], runners[2]} {
		assert.Equal(t, 0, r.wait(t, 30*time.Second), r.log())
	}
}

// A failed job (RES:failed) makes the manager's status 1; a restarted
// manager serves only what is not done, and --print-jobs lists it.
func TestFailureAndResume(t *testing.T) {
	base := t.TempDir()
	writeJobs(t, base, 4, func(i int) string {
		if i == 2 {
			return "echo RES:failed\n"
		}
		return "echo RES:ok\n"
	})
	manager, addr := startManager(t, base)
	runner := startRunner(t, addr, "r1", 2)
	assert.Equal(t, 1, manager.wait(t, 60*time.Second), manager.log())
	assert.Equal(t, "4 jobs: 3 succeeded, 1 failed\n", manager.stdout.String())
	assert.Equal(t, 0, runner.wait(t, 30*time.Second), runner.log())
	assert.True(t, strings.HasPrefix(results(t, base)["batch-2/job-002.res"], "runexp summary: failure\n\n"))

	managerBin, _ := build(t)
	out, err := exec.Command(managerBin, "--print-jobs", base).Output()
	require.NoError(t, err)
	assert.Equal(t, "batch-2/job-002.sh\n", string(out), "only the failed job is left")

	require.NoError(t, os.WriteFile(filepath.Join(base, "runs", "batch-2", "job-002.sh"), []byte("echo fixed\n"), 0o644))
	manager, addr = startManager(t, base)
	startRunner(t, addr, "r1", 2)
	assert.Equal(t, 0, manager.wait(t, 60*time.Second), manager.log())
	assert.Equal(t, "1 jobs: 1 succeeded, 0 failed\n", manager.stdout.String())
	assert.Contains(t, results(t, base)["batch-2/job-002.res"], "fixed")
}

func TestUsage(t *testing.T) {
	manager, runner := build(t)
	for _, args := range [][]string{{"-p", "x"}, {"a", "b"}, {"-bogus"}} {
		err := exec.Command(manager, args...).Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
	}
	for _, args := range [][]string{{}, {"4"}, {"0", "-c", "h:1"}, {"x", "-c", "h:1"}, {"4", "-c", "h:1", "-t", "py=python3"}} {
		err := exec.Command(runner, args...).Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
	}
}
