package laboro_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOutputFileIsNamedAfterThePID(t *testing.T) {
	dir := t.TempDir()
	ex := newExecutor(t, laboro.WithOutputDir(dir))
	// $$ is the shell's own pid: the child's.
	res := wait(t, submit(t, ex, laboro.Job{Args: []string{"sh", "-c", "echo $$"}}))
	require.Equal(t, laboro.StatusSucceeded, res.Status)
	require.Positive(t, res.PID)
	assert.Equal(t, filepath.Join(dir, strconv.Itoa(res.PID)+".output"), res.Output.Path())
	assert.FileExists(t, res.Output.Path())
	assert.Equal(t, int64(len(strconv.Itoa(res.PID))+1), res.Output.Size())
	assert.Equal(t, strconv.Itoa(res.PID)+"\n", output(t, res))
	assert.NoFileExists(t, res.Output.Path(), "Close removes the file")
	_, err := res.Output.ReadAll()
	require.ErrorIs(t, err, fs.ErrClosed)
	require.NoError(t, res.Output.Close(), "twice")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "no temporary file is left behind")
}

func TestNamedIsToldOfEachOutputWhileItsJobRuns(t *testing.T) {
	dir := t.TempDir()
	named, removed := make(chan string, 1), make(chan string, 1)
	r := &laboro.ProcessRunner{Dir: dir, Named: func(path string) func() {
		named <- path
		return func() { removed <- path }
	}}
	ex := newExecutor(t, laboro.WithRunner(r))
	h := submit(t, ex, laboro.Job{Args: []string{"sh", "-c", "echo $$; read line"}, Stdin: strings.NewReader("")})
	var path string
	select {
	case path = <-named:
	case <-h.Done():
		t.Fatal("the job ended before Named was told of its output")
	}
	res := wait(t, h)
	require.Equal(t, res.Output.Path(), path)
	assert.FileExists(t, path, "named once the file has its name")
	assert.Empty(t, removed, "not removed before Close")
	require.NoError(t, res.Output.Close())
	require.Equal(t, path, <-removed)
	require.NoError(t, res.Output.Close(), "twice")
	assert.Empty(t, removed, "told once")
}

func TestRunDirectoryIsRemovedAtShutdown(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ex, err := laboro.New()
	require.NoError(t, err)
	res := wait(t, submit(t, ex, laboro.Job{Command: "echo hi"}))
	runDir := filepath.Dir(res.Output.Path())
	assert.Equal(t, os.TempDir(), filepath.Dir(runDir))
	assert.Equal(t, "hi\n", output(t, res))
	require.NoError(t, ex.Shutdown(testCtx(t)))
	assert.NoDirExists(t, runDir)
}

func TestCommandLineQuoting(t *testing.T) {
	ex := newExecutor(t)
	res := wait(t, submit(t, ex, laboro.Job{Command: `printf '%s|' "two words" it\'s 'a   b' $HOME`}))
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "two words|it's|a   b|$HOME|", output(t, res), "words split like a shell's, nothing expanded")
}

func TestExitCodesAndStartFailures(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\necho no\n"), 0o644))
	ex := newExecutor(t, laboro.WithConcurrency(4), laboro.WithPoolSize(4))

	tests := []struct {
		name     string
		job      laboro.Job
		exitCode int
		check    func(t *testing.T, err error)
	}{
		{"exit status", laboro.Job{Command: "sh -c 'exit 7'"}, 7, func(t *testing.T, err error) {
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, 7, ee.ExitCode())
		}},
		{"false", laboro.Job{Command: "false"}, 1, nil},
		{"not found", laboro.Job{Command: "laboro-no-such-command --flag"}, -1, func(t *testing.T, err error) {
			require.ErrorIs(t, err, exec.ErrNotFound)
			assert.Contains(t, err.Error(), "laboro-no-such-command")
		}},
		{"no such path", laboro.Job{Args: []string{filepath.Join(dir, "missing")}}, -1, func(t *testing.T, err error) {
			require.ErrorIs(t, err, fs.ErrNotExist)
		}},
		{"permission denied", laboro.Job{Args: []string{notExec}}, -1, func(t *testing.T, err error) {
			require.ErrorIs(t, err, fs.ErrPermission)
		}},
		{"killed by a signal", laboro.Job{Command: "sh -c 'kill -KILL $$'"}, -1, func(t *testing.T, err error) {
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			ws := ee.Sys().(syscall.WaitStatus)
			assert.Equal(t, syscall.SIGKILL, ws.Signal())
		}},
		{"missing working directory", laboro.Job{Command: "true", Dir: filepath.Join(dir, "nope")}, -1, func(t *testing.T, err error) {
			require.ErrorIs(t, err, fs.ErrNotExist)
			// The directory is named, not the program, which is there.
			assert.Contains(t, err.Error(), `working directory "`+filepath.Join(dir, "nope")+`": no such file or directory`)
		}},
		{"working directory a file", laboro.Job{Command: "true", Dir: notExec}, -1, func(t *testing.T, err error) {
			require.ErrorIs(t, err, syscall.ENOTDIR)
			assert.Contains(t, err.Error(), `working directory "`+notExec+`": not a directory`)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := wait(t, submit(t, ex, tt.job))
			assert.Equal(t, laboro.StatusFailed, res.Status)
			assert.Equal(t, tt.exitCode, res.ExitCode)
			require.Error(t, res.Err)
			if tt.check != nil {
				tt.check(t, res.Err)
			}
			assert.False(t, res.Ended.Before(res.Started))
		})
	}
}

func TestStderr(t *testing.T) {
	script := "echo out; printf 'x%.0s' $(seq 1 10000) >&2; echo ' tail of the error' >&2; exit 3"
	t.Run("tail by default", func(t *testing.T) {
		ex := newExecutor(t)
		res := wait(t, submit(t, ex, laboro.Job{Args: []string{"sh", "-c", script}}))
		assert.Equal(t, laboro.StatusFailed, res.Status)
		assert.Equal(t, 3, res.ExitCode)
		assert.Len(t, res.Stderr, laboro.DefaultStderrTail)
		assert.True(t, bytes.HasSuffix(res.Stderr, []byte("xxx tail of the error\n")), "%q", res.Stderr[len(res.Stderr)-40:])
		assert.Equal(t, "out\n", output(t, res))
	})
	t.Run("cut at a line's start", func(t *testing.T) {
		// 8,893 bytes of lines "1" to "2000": the tail starts with a whole
		// line, not with the end of one.
		ex := newExecutor(t)
		res := wait(t, submit(t, ex, laboro.Job{Args: []string{"sh", "-c", "seq 1 2000 >&2; exit 1"}}))
		require.Equal(t, laboro.StatusFailed, res.Status)
		lines := strings.Split(strings.TrimSuffix(string(res.Stderr), "\n"), "\n")
		first, err := strconv.Atoi(lines[0])
		require.NoError(t, err, "%q", lines[0])
		assert.Equal(t, 2000, first+len(lines)-1, "whole lines, up to the last")
		assert.Greater(t, len(res.Stderr), laboro.DefaultStderrTail-10, "at most one line fewer than the tail holds")
		assert.LessOrEqual(t, len(res.Stderr), laboro.DefaultStderrTail)
	})
	t.Run("more than a pipe holds", func(t *testing.T) {
		ex := newExecutor(t)
		res := wait(t, submit(t, ex, laboro.Job{Args: []string{"sh", "-c", "head -c 1000000 /dev/zero >&2; echo end >&2"}}))
		require.Equal(t, laboro.StatusSucceeded, res.Status)
		assert.Len(t, res.Stderr, laboro.DefaultStderrTail)
		assert.True(t, bytes.HasSuffix(res.Stderr, []byte("\x00\x00end\n")))
	})
	for _, tt := range []struct {
		mode laboro.StderrMode
		out  string
	}{
		{laboro.StderrToOutput, "out\nerr\n"},
		{laboro.StderrDiscard, "out\n"},
	} {
		t.Run(fmt.Sprint(tt.mode), func(t *testing.T) {
			ex := newExecutor(t, laboro.WithRunner(&laboro.ProcessRunner{Dir: t.TempDir(), Stderr: tt.mode}))
			res := wait(t, submit(t, ex, laboro.Job{Args: []string{"sh", "-c", "echo out; echo err >&2"}}))
			assert.Equal(t, laboro.StatusSucceeded, res.Status)
			assert.Nil(t, res.Stderr)
			assert.Equal(t, tt.out, output(t, res))
		})
	}
	// With standard error in the output, a failed job's Stderr is the end
	// of its output, from a line's start: it still says why.
	t.Run("StderrToOutput/failed", func(t *testing.T) {
		ex := newExecutor(t, laboro.WithRunner(&laboro.ProcessRunner{Dir: t.TempDir(), Stderr: laboro.StderrToOutput, StderrTail: 64}))
		res := wait(t, submit(t, ex, laboro.Job{Args: []string{"sh", "-c", "seq 1000; echo no such input >&2; exit 3"}}))
		assert.Equal(t, laboro.StatusFailed, res.Status)
		assert.Equal(t, 3, res.ExitCode)
		assert.Equal(t, "989\n990\n991\n992\n993\n994\n995\n996\n997\n998\n999\n1000\nno such input\n", string(res.Stderr))
		assert.True(t, strings.HasSuffix(output(t, res), "1000\nno such input\n"), "the output is whole")
	})
}

func TestJobEnvironmentDirAndStdin(t *testing.T) {
	dir := t.TempDir()
	ex := newExecutor(t)
	res := wait(t, submit(t, ex, laboro.Job{
		Args:  []string{"sh", "-c", `echo "$GREETING from $(pwd)"; tr a-z A-Z`},
		Env:   []string{"GREETING=hello", "PATH=" + os.Getenv("PATH")},
		Dir:   dir,
		Stdin: strings.NewReader("from stdin\n"),
	}))
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v %s", res.Err, res.Stderr)
	real, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	assert.Equal(t, "hello from "+real+"\nFROM STDIN\n", output(t, res))
}

// A process job without a Stdin reads the null device: end of input at
// once, and a standard input that cannot be written to; StderrDiscard's
// standard error is the null device open for writing. So for every job of
// many running at once.
func TestJobWithoutStdinReadsNullDevice(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd/0"); err != nil {
		t.Skip("no /proc/self/fd here")
	}
	const script = `cat; readlink /proc/self/fd/0 /proc/self/fd/2; echo x >&0 2>/dev/null || echo read-only; echo gone >&2`
	for name, mode := range map[string]laboro.StderrMode{"StderrTail": laboro.StderrTail, "StderrDiscard": laboro.StderrDiscard} {
		t.Run(name, func(t *testing.T) {
			ex := newExecutor(t, laboro.WithConcurrency(4), laboro.WithPoolSize(4),
				laboro.WithRunner(&laboro.ProcessRunner{Dir: t.TempDir(), Stderr: mode}))
			hs := make([]*laboro.Handle, 12)
			for i := range hs {
				hs[i] = submit(t, ex, laboro.Job{Args: []string{"sh", "-c", script}})
			}
			for _, h := range hs {
				res := wait(t, h)
				require.Equal(t, laboro.StatusSucceeded, res.Status, "%v %s", res.Err, res.Stderr)
				lines := strings.Split(output(t, res), "\n")
				require.Len(t, lines, 4, "%q", lines)
				assert.Equal(t, "/dev/null", lines[0], "standard input")
				assert.Equal(t, "read-only", lines[2])
				if mode == laboro.StderrDiscard {
					assert.Equal(t, "/dev/null", lines[1], "standard error")
					assert.Nil(t, res.Stderr)
				} else {
					assert.Equal(t, "gone\n", string(res.Stderr))
				}
			}
		})
	}
}

func TestScriptJobs(t *testing.T) {
	ex := newExecutor(t, laboro.WithConcurrency(2), laboro.WithPoolSize(2))
	tests := []struct {
		name string
		job  laboro.Job
		want string
	}{
		{"default shell", laboro.Job{Script: "for i in 1 2; do echo $i $1; done", Args: []string{"arg"}}, "1 arg\n2 arg\n"},
		{"interpreter", laboro.Job{Script: "echo $0 | grep -c script; echo \"$@\"", Interpreter: []string{"sh", "-e"}, Args: []string{"a b", "c"}}, "1\na b c\n"},
		{"shebang", laboro.Job{Script: "#!/bin/sh\necho direct \"$1\"\n", Args: []string{"x y"}}, "direct x y\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := wait(t, submit(t, ex, tt.job))
			require.Equal(t, laboro.StatusSucceeded, res.Status, "%v %s", res.Err, res.Stderr)
			assert.Equal(t, tt.want, output(t, res))
		})
	}
}

// Scripts executed directly while other goroutines fork: a freshly written
// script can be briefly open for writing in another child (ETXTBSY).
func TestManyShebangScriptsAtOnce(t *testing.T) {
	ex := newExecutor(t, laboro.WithConcurrency(8), laboro.WithPoolSize(8), laboro.WithBufferSize(200))
	var hs []*laboro.Handle
	for i := range 200 {
		hs = append(hs, submit(t, ex, laboro.Job{Script: fmt.Sprintf("#!/bin/sh\necho %d\n", i)}))
	}
	for i, h := range hs {
		res := wait(t, h)
		require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
		assert.Equal(t, fmt.Sprintf("%d\n", i), output(t, res))
	}
}

func TestTimeoutKillsTheProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	ex := newExecutor(t)
	start := time.Now()
	res := wait(t, submit(t, ex, laboro.Job{
		Script:  fmt.Sprintf("sleep 300 & echo $! > %s; wait", pidFile),
		Timeout: 300 * time.Millisecond,
	}))
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Equal(t, laboro.StatusTimedOut, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrTimeout)
	assertGone(t, readPID(t, pidFile))
}

// Close kills a job's whole process tree: a job that started a child of its
// own leaves no orphan.
func TestCloseKillsTheProcessTree(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	ex, err := laboro.New()
	require.NoError(t, err)
	h := submit(t, ex, laboro.Job{Script: fmt.Sprintf("sleep 300 & echo $! > %s.tmp; mv %[1]s.tmp %[1]s; wait", pidFile)})
	eventually(t, func() bool { _, err := os.Stat(pidFile); return err == nil }, "the job starts its child")
	child := readPID(t, pidFile)
	require.NoError(t, syscall.Kill(child, 0), "the child runs")

	require.NoError(t, ex.Close())
	res := wait(t, h)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrKilled)
	assertGone(t, child)
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// assertGone checks that a process has died: it no longer exists, or is a
// zombie waiting for init to reap it.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	eventually(t, func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return errors.Is(err, fs.ErrNotExist)
		}
		// The state follows the parenthesised command name.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		return len(fields) > 0 && fields[0] == "Z"
	}, "process %d still runs", pid)
}

// A large output goes to the file and is streamed from it.
func TestLargeOutputIsStreamed(t *testing.T) {
	const size = 64 << 20
	ex := newExecutor(t)
	res := wait(t, submit(t, ex, laboro.Job{Command: fmt.Sprintf("head -c %d /dev/zero", size)}))
	require.Equal(t, laboro.StatusSucceeded, res.Status)
	assert.Equal(t, int64(size), res.Output.Size())
	var w countingWriter
	n, err := res.Output.WriteTo(&w)
	require.NoError(t, err)
	assert.Equal(t, int64(size), n)
	assert.Equal(t, int64(size), w.n)
	assert.LessOrEqual(t, w.largest, 1<<20, "copied in bounded pieces, not read whole")

	f, err := res.Output.Open()
	require.NoError(t, err)
	n, err = io.Copy(io.Discard, f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.Equal(t, int64(size), n)
	require.NoError(t, res.Output.Close())
}

type countingWriter struct {
	n       int64
	largest int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	w.largest = max(w.largest, len(p))
	return len(p), nil
}

func TestProcessRunnerOnItsOwn(t *testing.T) {
	r := &laboro.ProcessRunner{Dir: t.TempDir()}
	res := r.Run(testCtx(t), laboro.Job{ID: "solo", Command: "echo alone"})
	require.Equal(t, laboro.StatusSucceeded, res.Status)
	assert.Equal(t, "solo", res.ID)
	assert.Equal(t, "alone\n", output(t, res))

	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	res = r.Run(ctx, laboro.Job{Command: "sleep 10"})
	assert.Equal(t, laboro.StatusKilled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrKilled)
	assert.ErrorIs(t, res.Err, context.Canceled)
	res.Output.Close()

	res = r.Run(testCtx(t), laboro.Job{Func: func(context.Context) error { return nil }})
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrInvalidJob)
}

// The run directory goes with the last output, even one closed after the
// Executor has finished.
func TestRunDirectoryOutlivesShutdownUntilOutputsClose(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ex, err := laboro.New()
	require.NoError(t, err)
	early := wait(t, submit(t, ex, laboro.Job{Command: "echo early"}))
	late := submit(t, ex, laboro.Job{Command: "sleep 0.1"})
	eventually(t, func() bool { return ex.Stats().Running == 1 }, "the job starts")
	require.NoError(t, ex.Shutdown(testCtx(t)))
	lateRes := wait(t, late)
	runDir := filepath.Dir(lateRes.Output.Path())
	assert.Equal(t, "early\n", output(t, early))
	assert.DirExists(t, runDir, "an output is still open")
	require.NoError(t, lateRes.Output.Close())
	assert.NoDirExists(t, runDir)
}

// A background child that keeps standard error open does not hold back the
// job's result.
func TestBackgroundChildDoesNotDelayTheResult(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	ex := newExecutor(t)
	start := time.Now()
	res := wait(t, submit(t, ex, laboro.Job{Script: fmt.Sprintf("sleep 30 & echo $! > %s; echo bye >&2", pidFile)}))
	elapsed := time.Since(start)
	require.Equal(t, laboro.StatusSucceeded, res.Status)
	assert.Equal(t, "bye\n", string(res.Stderr))
	assert.Less(t, elapsed, laboro.DefaultWaitDelay, "the result came without waiting for the child")
	require.NoError(t, syscall.Kill(readPID(t, pidFile), syscall.SIGKILL))
}
