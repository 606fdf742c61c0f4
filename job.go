package laboro

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Job describes one unit of work. Exactly one of Func, Script, Args and
// Command says what to run; the runner decides which it accepts (the
// executor's default runner accepts all four). A Job is a value: the
// executor keeps its own copy, so the caller may reuse the variable.
type Job struct {
	// ID names the job. Leave it empty and Submit assigns "job_1", "job_2",
	// … in submission order; set it and Submit refuses it with
	// ErrDuplicateID while another queued or running job has the same id.
	ID string

	// Command is a Unix command line, split into words with shell-like
	// quoting (`grep "two words" file` has three words) and executed
	// directly, without a shell: no variable expansion, globbing, pipes or
	// redirection. Use Script for those.
	Command string

	// Args is an argv: Args[0] is the program, looked up in PATH when it
	// has no slash. Used when Command is empty; with Script it holds the
	// script's own arguments.
	Args []string

	// Script is a script body. It is written to a file and run with
	// Interpreter, or executed directly when Interpreter is empty and the
	// body starts with "#!", or else run with /bin/sh. A script for
	// /bin/sh is kept, on Linux, in memory instead (a memfd the shell
	// reads through /proc, its $0): no file is made for it.
	Script string

	// Interpreter is the program (and its leading arguments) that runs
	// Script, for example []string{"python3", "-u"}.
	Interpreter []string

	// Func is a Go function to run instead of a process. Its error, or a
	// panic, fails the job. It should return when ctx ends.
	Func func(ctx context.Context) error

	// Dir is the working directory; empty means the current one.
	Dir string

	// Env is the environment in os.Environ form; nil inherits this process's.
	Env []string

	// Stdin, if not nil, is the process's standard input. Leave it nil for
	// /dev/null. A Job with a Stdin should be submitted once.
	Stdin io.Reader

	// Timeout, if positive, bounds the run. The Executor applies it: the
	// context it gives the Runner has a deadline Timeout after the job
	// starts, with cause ErrTimeout; the process runner then kills the
	// job's whole process group, a remote Runner tells the worker, and the
	// result has StatusTimedOut. A Runner called without an Executor
	// applies no timeout of its own.
	Timeout time.Duration

	// Meta is the caller's data carried with the job; neither the Executor
	// nor any Runner of this module reads it. A custom Queue may use it, for
	// example as a priority, in front of any Runner.
	Meta any

	// Payload is what a Runner needs beyond the fields above, of a type
	// that Runner defines: a protocol's job description, task or code and
	// parameters (see the constructors of each protocol package, such as
	// fuq.NewJob). The Executor never reads it; the default runner needs
	// none.
	Payload any
}

// String returns the job as a user would type it: the command line, the
// argv with each word shell-quoted when it needs to be, or a short note for
// scripts and functions; for a job that is only a Payload, the Payload's
// String when it has one (a protocol's job: its command, its task file).
func (j Job) String() string {
	if j.Func == nil && j.Script == "" && j.Command != "" {
		return j.Command
	}
	b, _ := j.AppendText(nil)
	return string(b)
}

// AppendText appends String's text to b, without allocating when b has
// room (but for a Payload's String); it implements encoding.TextAppender
// and never fails.
func (j Job) AppendText(b []byte) ([]byte, error) {
	switch {
	case j.Func != nil:
		return append(b, "func"...), nil
	case j.Script != "":
		return append(b, "script"...), nil
	case j.Command != "":
		return append(b, j.Command...), nil
	case len(j.Args) == 0 && j.Payload != nil:
		if s, ok := j.Payload.(fmt.Stringer); ok {
			return append(b, s.String()...), nil
		}
		return b, nil
	default:
		return appendArgs(b, j.Args), nil
	}
}

func appendArgs(b []byte, args []string) []byte {
	for i, a := range args {
		if i > 0 {
			b = append(b, ' ')
		}
		if a != "" && !needsQuote(a) {
			b = append(b, a...)
			continue
		}
		b = append(b, '\'')
		for _, c := range []byte(a) {
			if c == '\'' {
				b = append(b, `'\''`...)
				continue
			}
			b = append(b, c)
		}
		b = append(b, '\'')
	}
	return b
}

func needsQuote(s string) bool {
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == '/', c == ',', c == ':', c == '=', c == '+', c == '@', c == '%':
		default:
			return true
		}
	}
	return false
}

// Status is how a job ended.
type Status uint8

// The statuses a Result can have. Every submitted job ends with exactly one.
const (
	// StatusSucceeded: the process exited with status 0, or the function returned nil.
	StatusSucceeded Status = iota + 1
	// StatusFailed: a non-zero exit, a signal not sent by laboro, a failure
	// to start (command not found, permission denied), a function's error or panic.
	StatusFailed
	// StatusStopped: removed from the queue by Stop before it ran.
	StatusStopped
	// StatusTerminated: still queued when Shutdown or Close began; never ran.
	StatusTerminated
	// StatusKilled: running when Close was called; its process group was killed.
	StatusKilled
	// StatusTimedOut: ran past Job.Timeout; its process group was killed.
	StatusTimedOut
	// StatusCancelled: running when Executor.Cancel was called; its
	// process group was killed (or its remote worker told to kill it).
	StatusCancelled
)

var statusNames = [...]string{
	StatusSucceeded:  "succeeded",
	StatusFailed:     "failed",
	StatusStopped:    "stopped",
	StatusTerminated: "terminated before execution",
	StatusKilled:     "killed",
	StatusTimedOut:   "timed out",
	StatusCancelled:  "cancelled",
}

// String returns the status in words, for example "terminated before execution".
func (s Status) String() string {
	if int(s) < len(statusNames) && statusNames[s] != "" {
		return statusNames[s]
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Result is the one report every job ends with.
type Result struct {
	// ID is the job's id.
	ID string
	// Status says how the job ended.
	Status Status
	// ExitCode is the process's exit status, or -1 when it did not exit
	// normally (signal, failure to start) or the job was not a process.
	ExitCode int
	// Err explains every status but StatusSucceeded: an *exec.ExitError for
	// a non-zero exit or a signal, an *exec.Error or *fs.PathError for a
	// failure to start, ErrStopped, ErrTerminated, ErrKilled, ErrTimeout,
	// ErrCancelled, a function's error, or a *PanicError.
	Err error
	// PID is the process id, 0 when no process was started.
	PID int
	// Started and Ended bound the run. Both are zero for a job that never
	// reached its runner (stopped or terminated); for a process that could
	// not start they mark the attempt. A function job that a worker of
	// the default runner takes as the job before it ends starts when that
	// one ended, to within the Executor's bookkeeping (one clock read per
	// job).
	Started, Ended time.Time
	// Output is the job's standard output, kept in a file; nil when nothing
	// ran or the runner captures no output. The consumer must Close it.
	Output *Output
	// Stderr holds the last bytes the process wrote to its standard error
	// (see ProcessRunner.Stderr), so that a failure can be explained; when
	// more was written than it holds, from the start of a line on.
	Stderr []byte
}

// Duration is how long the job ran.
func (r Result) Duration() time.Duration { return r.Ended.Sub(r.Started) }
