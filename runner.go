package laboro

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.uber.org/zap"
)

// Runner runs one job and reports how it ended. The Executor calls Run from
// its worker goroutines, so an implementation must be safe for concurrent
// use. Run must return soon after ctx ends, having stopped the job, and
// must not panic. The context ends with cause ErrKilled on Close,
// ErrCancelled on Cancel, and ErrTimeout once Job.Timeout has passed (its
// deadline); whatever Run returns then, the job's Result has the matching
// status (see Interruption), unless it succeeded. The context is the job's
// only while Run runs: Run must not keep it, or anything derived from it,
// once it returns.
//
// The process runner, the func runner and every protocol's manager side
// (which hands jobs to remote workers) implement Runner.
type Runner interface {
	Run(ctx context.Context, job Job) Result
}

// Validator is implemented by runners that can refuse a job before it is
// queued. Submit calls Validate and wraps its error with ErrInvalidJob.
type Validator interface {
	Validate(job Job) error
}

// FuncRunner runs jobs whose Job.Func is set, in the calling goroutine. A
// returned error fails the job; a panic fails it with a *PanicError and its
// stack is logged. The zero value is ready to use and logs nothing.
type FuncRunner struct {
	// Logger receives panics; nil means no logging.
	Logger *zap.Logger
}

var (
	_ Runner    = FuncRunner{}
	_ Validator = FuncRunner{}
)

// Validate refuses a job without a Func.
func (FuncRunner) Validate(job Job) error {
	if job.Func == nil {
		return errors.New("FuncRunner needs Job.Func")
	}
	return nil
}

// Run calls job.Func with ctx.
func (r FuncRunner) Run(ctx context.Context, job Job) Result {
	return r.run(ctx, job.Func, job.ID, time.Time{})
}

// run is Run of the job id whose Func is fn, with the job's start given
// when the caller knows it: the Executor's function jobs take this way
// without a copy of their Job.
func (r FuncRunner) run(ctx context.Context, fn func(context.Context) error, id string, started time.Time) (res Result) {
	res.ExitCode = -1
	if fn == nil {
		res.Status, res.Err = StatusFailed, fmt.Errorf("%w: FuncRunner needs Job.Func", ErrInvalidJob)
		return res
	}
	res.Started = started
	if started.IsZero() {
		res.Started = time.Now()
	}
	err := r.call(ctx, fn, id)
	res.Ended = time.Now()
	res.Status, res.Err = StatusSucceeded, err
	if err != nil {
		res.Status = StatusFailed
		if st, cause := Interruption(ctx); st != 0 {
			res.Status, res.Err = st, cause
		}
	}
	return res
}

func (r FuncRunner) call(ctx context.Context, fn func(context.Context) error, id string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			if r.Logger != nil {
				r.Logger.Error("job panicked", zap.String("job", id), zap.Any("panic", v),
					zap.ByteString("stack", pe.Stack))
			}
			err = pe
		}
	}()
	return fn(ctx)
}

// Interruption tells how a job ends whose context ended, from the
// context's cause: StatusTimedOut with ErrTimeout after its Job.Timeout,
// StatusCancelled with ErrCancelled after Executor.Cancel, else
// StatusKilled with an error matching ErrKilled (and the cause, when it is
// another). It returns 0 and nil while ctx is live. The Executor applies
// it to every job whose context ended and that did not succeed, so that
// every Runner reports an interruption the same way.
func Interruption(ctx context.Context) (Status, error) {
	if ctx.Err() == nil {
		return 0, nil
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrTimeout):
		return StatusTimedOut, ErrTimeout
	case errors.Is(cause, ErrCancelled):
		return StatusCancelled, ErrCancelled
	case errors.Is(cause, ErrKilled):
		return StatusKilled, ErrKilled
	}
	return StatusKilled, fmt.Errorf("%w: %w", ErrKilled, cause)
}

// mixedRunner is the Executor's default runner: Go functions through
// FuncRunner, everything else through ProcessRunner.
type mixedRunner struct {
	proc *ProcessRunner
	fn   FuncRunner
}

func (r mixedRunner) Run(ctx context.Context, job Job) Result {
	if job.Func != nil {
		return r.fn.Run(ctx, job)
	}
	return r.proc.Run(ctx, job)
}

func (r mixedRunner) Validate(job Job) error {
	if job.Func != nil {
		return nil
	}
	return r.proc.Validate(job)
}
