package laboro

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Handle follows one submitted job to its result. It is safe for concurrent
// use; it stays valid after the Executor is closed.
type Handle struct {
	j       storedJob
	state   jobState // guarded by the Executor's lock
	indexed bool     // in the Executor's live map; guarded by its lock
	closed  bool     // done is closed; guarded by mu
	status  Status   // of res

	// flags holds finished, set once res is final (a reader that sees it
	// may read res without a lock, as res never changes again: res is
	// written once, under the Executor's lock, before), and waited, set
	// once done is made (only then does the job's end take mu, to close
	// it). Each side sets its bit and reads the other's in one operation,
	// so one side at least sees both; closed, under mu, has done closed
	// once.
	flags atomic.Uint32
	mu    sync.Mutex
	done  chan struct{} // made on demand, under mu: most results are read after the fact
	res   storedResult

	// When the job entered the buffer, on the Executor's monotonic clock
	// (since its epoch); guarded by the Executor's lock.
	queued time.Duration
	// run is what Executor.Running shows beyond the job: set as the job
	// starts with an observer, or as its Runner reports its process;
	// guarded by the Executor's lock. (Fields of a Handle that most jobs
	// leave unset stay apart: 208 bytes is a size class, and the Handle is
	// a job's one allocation.)
	run *runInfo
}

// Bits of Handle.flags.
const (
	flagFinished uint32 = 1 << iota
	flagWaited
)

// storedJob is a Job as its Handle keeps it: the fields most jobs use
// inline, the others behind a pointer set only when one of them is set.
// A function or command job's Handle is then 120 bytes smaller, a size
// class down: it is the job's one allocation, and its bytes set how often
// the garbage collector runs.
type storedJob struct {
	ID      string
	Command string
	Args    []string
	Func    func(ctx context.Context) error
	Timeout time.Duration
	rest    *jobRest // nil when each of its fields is zero
}

// jobRest holds the fields of a Job that storedJob keeps apart.
type jobRest struct {
	Script      string
	Interpreter []string
	Dir         string
	Env         []string
	Stdin       io.Reader
	Meta        any
	Payload     any
}

// storeJob returns j as a Handle keeps it. (nil and empty slices stay
// apart: an empty Env is an empty environment.)
func storeJob(j Job) storedJob {
	s := storedJob{ID: j.ID, Command: j.Command, Args: j.Args, Func: j.Func, Timeout: j.Timeout}
	if j.Script != "" || j.Interpreter != nil || j.Dir != "" || j.Env != nil || j.Stdin != nil ||
		j.Meta != nil || j.Payload != nil {
		s.rest = &jobRest{Script: j.Script, Interpreter: j.Interpreter, Dir: j.Dir, Env: j.Env,
			Stdin: j.Stdin, Meta: j.Meta, Payload: j.Payload}
	}
	return s
}

// job returns the Job that s keeps.
func (s *storedJob) job() Job {
	j := Job{ID: s.ID, Command: s.Command, Args: s.Args, Func: s.Func, Timeout: s.Timeout}
	if r := s.rest; r != nil {
		j.Script, j.Interpreter, j.Dir, j.Env = r.Script, r.Interpreter, r.Dir, r.Env
		j.Stdin, j.Meta, j.Payload = r.Stdin, r.Meta, r.Payload
	}
	return j
}

// storedResult is a Result as its Handle keeps it: without the ID, which is
// the job's, or the Status, which the Handle keeps beside its other small
// fields, and with the fields most results leave unset behind a pointer.
// A Handle is then 48 bytes smaller, a size class down (see storedJob).
type storedResult struct {
	exitCode, pid  int
	started, ended time.Time
	output         *Output
	rest           *resultRest // nil when each of its fields is zero
}

// resultRest holds the fields of a Result that storedResult keeps apart.
type resultRest struct {
	err    error
	stderr []byte
}

// keepResult stores res in h. (A nil and an empty Stderr stay apart.)
func (h *Handle) keepResult(res *Result) {
	h.status = res.Status
	h.res = storedResult{exitCode: res.ExitCode, pid: res.PID, started: res.Started, ended: res.Ended, output: res.Output}
	if res.Err != nil || res.Stderr != nil {
		h.res.rest = &resultRest{err: res.Err, stderr: res.Stderr}
	}
}

// result returns the Result h keeps.
func (h *Handle) result() Result {
	r := &h.res
	res := Result{ID: h.j.ID, Status: h.status, ExitCode: r.exitCode, PID: r.pid, Started: r.started, Ended: r.ended,
		Output: r.output}
	if r.rest != nil {
		res.Err, res.Stderr = r.rest.err, r.rest.stderr
	}
	return res
}

// runInfo is what Executor.Running shows of a running job beyond the job:
// when a worker took it (with an observer), and what its Runner reported of
// its process.
type runInfo struct {
	started time.Time
	proc    *reported
}

// reported is what a Runner reported of a job's process (ReportProcess):
// its pid, its output file, and when.
type reported struct {
	pid    int
	output string
	at     time.Time
}

type jobState uint8

const (
	stateWaiting jobState = iota // blocked in Submit for room in the buffer
	stateQueued
	stateRunning
	stateDone
)

// closedChan is handed out by Done for jobs that finished before anyone
// asked, which spares a channel per job.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// NewHandle returns a Handle for job that no Executor knows, for testing a
// Queue implementation on its own. Its result never arrives.
func NewHandle(job Job) *Handle { return &Handle{j: storeJob(job)} }

// ID returns the job's id, for example "job_7".
func (h *Handle) ID() string { return h.j.ID }

// Job returns the job as submitted, with its id.
func (h *Handle) Job() Job { return h.j.job() }

// Done returns a channel that is closed when the job's result is ready.
func (h *Handle) Done() <-chan struct{} {
	if h.flags.Load()&flagFinished != 0 {
		return closedChan
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done == nil {
		h.done = make(chan struct{})
		if h.flags.Or(flagWaited)&flagFinished != 0 && !h.closed {
			// The job ended meanwhile, and complete may not have seen
			// waited set.
			h.closed = true
			close(h.done)
		}
	}
	return h.done
}

// Result returns the job's result and true once the job has ended, or a
// zero Result and false before.
func (h *Handle) Result() (Result, bool) {
	if h.flags.Load()&flagFinished == 0 {
		return Result{}, false
	}
	return h.result(), true
}

// Wait blocks until the job ends and returns its result, or returns
// ctx.Err() if ctx ends first (the job goes on). A job that failed is not
// an error of Wait: read Result.Status and Result.Err.
func (h *Handle) Wait(ctx context.Context) (Result, error) {
	if h.flags.Load()&flagFinished != 0 {
		return h.result(), nil
	}
	select {
	case <-h.Done():
		return h.result(), nil
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// complete makes the result that retire kept final and wakes the waiters.
// It is called once per job, after retire, without the Executor's lock.
// Without waiters (a result read after the fact) it takes no lock.
func (h *Handle) complete() {
	if h.flags.Or(flagFinished)&flagWaited != 0 {
		h.mu.Lock()
		if !h.closed {
			h.closed = true
			close(h.done)
		}
		h.mu.Unlock()
	}
}
