//go:build unix

package laboro

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kballard/go-shellquote"
	"go.uber.org/zap"
)

// StderrMode says what the process runner does with a job's standard error.
type StderrMode uint8

const (
	// StderrTail keeps the last ProcessRunner.StderrTail bytes of standard
	// error in Result.Stderr, so that a failed job can say why. It is the
	// default. Standard error is read while the job runs, so memory stays
	// bounded however much the job writes; a descendant left running in
	// the background that keeps it open does not hold back the result (on
	// Linux without pidfds, by 50 ms at most).
	StderrTail StderrMode = iota
	// StderrToOutput sends standard error into the output file with
	// standard output, as a terminal shows them. Like StderrDiscard, it
	// needs no reader while the job runs, which makes spawning slightly
	// faster (see BENCHMARKS.md). A job that does not succeed has the end
	// of its output file (ProcessRunner.StderrTail bytes at most) in
	// Result.Stderr, so that it still says why.
	StderrToOutput
	// StderrDiscard sends standard error to /dev/null.
	StderrDiscard
)

// Defaults of ProcessRunner's zero value.
const (
	DefaultStderrTail = 4 << 10
	DefaultWaitDelay  = 2 * time.Second
)

// ProcessRunner runs jobs as operating-system processes. The child's
// standard output goes straight into a file named <pid>.output (pid being
// the child's process id) in Dir, with no copying in this process, and
// Result.Output hands that file to the consumer, whose Output.Close removes
// it. Should a file of that name already exist (process ids wrap quickly
// under load, and an earlier output may not have been consumed yet), the
// output is named <pid>_2.output, <pid>_3.output and so on; nothing is
// overwritten.
//
// A program named without a slash ("grep") is found in $PATH as
// exec.Command finds it; where it was found is kept for a second (all is
// forgotten when $PATH changes), so that jobs running the same programs do
// not each search $PATH again.
//
// Each job runs in a process group of its own. When its context ends (a
// timeout, or the Executor's Close) the whole group is killed with SIGKILL,
// so the job's own children die with it. On Linux the direct child also gets
// SIGKILL should this process die; that is a backstop, not the mechanism.
//
// The zero value is ready to use: outputs go to os.TempDir, standard error
// is kept as a tail of 4 KiB. A ProcessRunner is safe for concurrent use;
// its fields must not change once it is in use.
type ProcessRunner struct {
	// Dir is the directory for output and script files; "" means os.TempDir.
	Dir string
	// Stderr says what happens to standard error; see StderrMode.
	Stderr StderrMode
	// StderrTail is how many bytes of standard error StderrTail mode
	// keeps; 0 means DefaultStderrTail.
	StderrTail int
	// WaitDelay bounds how long Run waits, once the process has exited or
	// been killed, for the copying of a Job.Stdin that is not an *os.File
	// to end; 0 means DefaultWaitDelay.
	WaitDelay time.Duration
	// Logger receives debug lines about each process; nil means none.
	Logger *zap.Logger
	// Named, when set, is told the path of each output file as soon as the
	// file has its name, while its job runs; the function it returns, if
	// not nil, is called once, as Output.Close removes the file, just
	// before (so that a record kept of the files on disk never names one
	// that is gone, whose name a later process's output may take). A program
	// keeps with it a record of its outputs on disk, for example to find
	// those it left behind when it was killed. It is called from the jobs'
	// goroutines at once, so it must be safe for concurrent use.
	Named func(path string) (removing func())

	// held, when set, counts the outputs left in an Executor's own run
	// directory, so that the directory goes with the last of them.
	held *runDir
}

var (
	_ Runner    = (*ProcessRunner)(nil)
	_ Validator = (*ProcessRunner)(nil)
)

// Validate refuses a job the runner cannot start: a Func, an empty job, or
// a command line with unbalanced quotes.
func (r *ProcessRunner) Validate(job Job) error {
	_, err := commandArgs(job)
	return err
}

// commandArgs returns the argv of a Command or Args job; nil for a script.
func commandArgs(job Job) ([]string, error) {
	switch {
	case job.Func != nil:
		return nil, errors.New("ProcessRunner cannot run Job.Func")
	case job.Script != "":
		return nil, nil
	case job.Command != "":
		words, err := shellquote.Split(job.Command)
		if err != nil {
			return nil, fmt.Errorf("command line %q: %w", job.Command, err)
		}
		if len(words) == 0 {
			return nil, fmt.Errorf("command line %q has no words", job.Command)
		}
		return words, nil
	case len(job.Args) > 0 && job.Args[0] != "":
		return job.Args, nil
	default:
		return nil, errors.New("job has nothing to run: set Command, Args or Script")
	}
}

// Run starts the job's process, waits for it and returns its result.
// Failures to start (command not found, permission denied) are results
// with StatusFailed, never panics or hangs.
func (r *ProcessRunner) Run(ctx context.Context, job Job) Result {
	res := Result{ID: job.ID, ExitCode: -1}
	fail := func(err error) Result {
		res.Status, res.Err = StatusFailed, err
		if res.Ended.IsZero() {
			res.Ended = time.Now()
		}
		if res.Started.IsZero() {
			res.Started = res.Ended
		}
		return res
	}
	dir := r.dir()
	argv, err := commandArgs(job)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInvalidJob, err))
	}
	var inMemory string // the path the shell reads an in-memory script by
	if job.Script != "" {
		var cleanup func()
		argv, inMemory, cleanup, err = writeScript(dir, job)
		if err != nil {
			return fail(err)
		}
		defer cleanup()
	}

	out, tmp, err := openOutput(dir)
	if err != nil {
		return fail(fmt.Errorf("laboro: create output file: %w", err))
	}
	defer out.Close()
	dropTemp := func() {
		if tmp != "" {
			os.Remove(tmp)
		}
	}
	var tail *stderrTail
	if r.Stderr == StderrTail {
		if tail, err = newStderrTail(r.tailSize()); err != nil {
			dropTemp()
			return fail(fmt.Errorf("laboro: create standard error pipe: %w", err))
		}
	}

	unpin := pinThread()
	res.Started = time.Now()
	cmd, err := r.start(ctx, job, argv, out, tail)
	if err != nil {
		unpin()
		dropTemp()
		if tail != nil {
			tail.abort()
		}
		if st, cause := Interruption(ctx); st != 0 {
			res.Ended = time.Now()
			res.Status, res.Err = st, cause
			return res
		}
		return fail(err)
	}
	res.PID = cmd.Process.Pid
	watch := watchGroup(ctx, res.PID)
	reap('+', res.PID) // its group's id is its pid
	if tail != nil {
		tail.start(res.PID)
	}
	path, nameErr := r.nameOutput(out, tmp, dir, res.PID)
	var removing func()
	if nameErr == nil {
		ReportProcess(ctx, res.PID, path)
		if r.Named != nil {
			removing = r.Named(path)
		}
	}

	if tail != nil {
		tail.collect()
	}
	watch.settle()
	err = cmd.Wait()
	// Reaped: the forking thread may go. Unpinned, the waits below do not
	// need that very thread to wake up.
	unpin()
	reap('-', res.PID)
	res.Ended = time.Now()
	res.ExitCode = cmd.ProcessState.ExitCode()
	if nameErr == nil {
		res.Output = &Output{path: path}
		if fi, statErr := out.Stat(); statErr == nil {
			res.Output.size = fi.Size()
		}
		res.Output.removing = removing
		if r.held != nil {
			r.held.hold()
			res.Output.release = r.held.release
		}
	}
	if tail != nil {
		res.Stderr = tail.finish()
	}
	switch st, cause := Interruption(ctx); {
	case st != 0:
		res.Status, res.Err = st, cause
	case nameErr != nil:
		res.Status, res.Err = StatusFailed, nameErr // the output is lost
	case err == nil, errors.Is(err, exec.ErrWaitDelay) && res.ExitCode == 0:
		res.Status = StatusSucceeded
	default:
		res.Status, res.Err = StatusFailed, err
	}
	if r.Stderr == StderrToOutput && res.Status != StatusSucceeded && res.Output != nil {
		res.Stderr = fileTail(res.Output.path, r.tailSize())
	}
	if inMemory != "" {
		// The shell names the script by its path in its messages
		// ("/proc/12/fd/9: 1: x: not found"), a path the job's reader
		// never saw: they read as those of sh -c ("sh: 1: x: not found").
		res.Stderr = bytes.ReplaceAll(res.Stderr, []byte(inMemory), []byte("sh"))
	}
	if r.Logger != nil {
		r.Logger.Debug("process ended", zap.String("job", job.ID), zap.Int("pid", res.PID),
			zap.Int("exit", res.ExitCode), zap.Stringer("status", res.Status), zap.Error(res.Err))
	}
	return res
}

// tailSize is how much of standard error a Result keeps: StderrTail or its
// default.
func (r *ProcessRunner) tailSize() int {
	if r.StderrTail <= 0 {
		return DefaultStderrTail
	}
	return r.StderrTail
}

func (r *ProcessRunner) dir() string {
	if r.Dir != "" {
		return r.Dir
	}
	return os.TempDir()
}

// start builds and starts the command, retrying while the kernel reports
// ETXTBSY: a script file just written here may still be open for writing in
// a child that another goroutine is forking at the same moment, until that
// child's exec closes it. The retry window is short and bounded.
func (r *ProcessRunner) start(ctx context.Context, job Job, argv []string, out *os.File, tail *stderrTail) (*exec.Cmd, error) {
	delay := time.Millisecond
	file := programs.find(argv[0])
	for attempt := 0; ; attempt++ {
		cmd := command(ctx, file, argv[1:]...)
		cmd.Args[0] = argv[0] // as the job named it, as exec.Command would
		cmd.Dir, cmd.Env, cmd.Stdin, cmd.Stdout = job.Dir, job.Env, job.Stdin, out
		if job.Stdin == nil {
			if f := nullIn(); f != nil {
				cmd.Stdin = f
			}
		}
		switch r.Stderr {
		case StderrToOutput:
			cmd.Stderr = out
		case StderrTail:
			cmd.Stderr = tail.writer()
		case StderrDiscard:
			if f := nullOut(); f != nil {
				cmd.Stderr = f
			}
		}
		cmd.SysProcAttr = sysProcAttr()
		cmd.WaitDelay = r.WaitDelay
		if cmd.WaitDelay <= 0 {
			cmd.WaitDelay = DefaultWaitDelay
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("laboro: start %q: %w", argv[0], err)
		}
		err := cmd.Start()
		if err == nil {
			return cmd, nil
		}
		if !errors.Is(err, syscall.ETXTBSY) || attempt == 10 || ctx.Err() != nil {
			if derr := dirError(job.Dir, err); derr != nil {
				err = derr
			}
			return nil, fmt.Errorf("laboro: start %q: %w", argv[0], err)
		}
		time.Sleep(delay)
		delay *= 2
	}
}

// dirError names the working directory dir when the start failed for
// want of it: the kernel's word for a missing directory is the one for a
// missing program ("fork/exec /bin/sh: no such file or directory"), and
// the job's command would take the blame. nil when dir is not the cause.
func dirError(dir string, err error) error {
	if dir == "" || !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	fi, serr := os.Stat(dir)
	switch {
	case serr != nil:
		var pe *fs.PathError
		if errors.As(serr, &pe) {
			serr = pe.Err
		}
		return fmt.Errorf("working directory %q: %w", dir, serr)
	case !fi.IsDir():
		return fmt.Errorf("working directory %q: %w", dir, syscall.ENOTDIR)
	}
	return nil
}

// The null device, opened once for reading and once for writing: the
// standard input of every process job that has none, and the standard error
// StderrDiscard throws away. os/exec would open it for each process and
// close it after the start: seven system calls a job, its trial on Go's
// poller included.
var (
	nullIn  = sync.OnceValue(func() *os.File { return openNull(os.O_RDONLY) })
	nullOut = sync.OnceValue(func() *os.File { return openNull(os.O_WRONLY) })
)

// openNull opens the null device with flag; nil if it cannot (os/exec
// then opens it for each process, and says why it cannot).
func openNull(flag int) *os.File {
	f, err := os.OpenFile(os.DevNull, flag, 0)
	if err != nil {
		return nil
	}
	return f
}

// nameOutput names the output file <pid>.output in dir, or <pid>_N.output
// when that name is taken, and returns its path. The check and the naming
// cannot race with another laboro runner: while the child lives, no other
// process has its pid, so no other runner is naming a file after it. A
// named temporary file that cannot be named keeps its temporary name; an
// unnamed one is an error: its output cannot be kept.
func (r *ProcessRunner) nameOutput(out *os.File, tmp, dir string, pid int) (string, error) {
	base := strconv.Itoa(pid)
	var err error
	for n := 1; n < 1000; n++ {
		name := base
		if n > 1 {
			name += "_" + strconv.Itoa(n)
		}
		path := filepath.Join(dir, name+".output")
		if err = placeOutput(out, tmp, path); err == nil {
			return path, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if tmp == "" {
		return "", fmt.Errorf("laboro: naming the output file of process %d: %w", pid, err)
	}
	if r.Logger != nil {
		r.Logger.Warn("output kept under its temporary name", zap.Int("pid", pid), zap.String("path", tmp), zap.Error(err))
	}
	return tmp, nil
}

// renameNew renames tmp to path unless path exists (an error matching
// fs.ErrExist).
func renameNew(tmp, path string) error {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return &os.LinkError{Op: "rename", Old: tmp, New: path, Err: fs.ErrExist}
	}
	return os.Rename(tmp, path)
}

// writeScript writes job.Script to a file in dir and returns the argv that
// runs it, and a function that removes the file. A script for /bin/sh is
// kept in memory where the system allows it (scriptInMemory); inMemory is
// then the path the shell reads it by.
func writeScript(dir string, job Job) (argv []string, inMemory string, cleanup func(), err error) {
	if len(job.Interpreter) == 0 && !strings.HasPrefix(job.Script, "#!") {
		if path, close, ok := scriptInMemory(job.Script); ok {
			return append([]string{"/bin/sh", path}, job.Args...), path, close, nil
		}
	}
	f, err := os.CreateTemp(dir, ".laboro-*.script")
	if err != nil {
		return nil, "", nil, fmt.Errorf("laboro: create script file: %w", err)
	}
	cleanup = func() { os.Remove(f.Name()) }
	_, err = f.WriteString(job.Script)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
	case len(job.Interpreter) > 0:
		argv = append(append(append([]string(nil), job.Interpreter...), f.Name()), job.Args...)
	case strings.HasPrefix(job.Script, "#!"):
		err = os.Chmod(f.Name(), 0o700)
		argv = append([]string{f.Name()}, job.Args...)
	default:
		argv = append([]string{"/bin/sh", f.Name()}, job.Args...)
	}
	if err != nil {
		cleanup()
		return nil, "", nil, fmt.Errorf("laboro: write script file: %w", err)
	}
	return argv, "", cleanup, nil
}
