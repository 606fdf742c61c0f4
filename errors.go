package laboro

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is; the errors laboro returns
// wrap them with details.
var (
	// ErrInvalidConfig is wrapped by every error New returns for a bad option.
	ErrInvalidConfig = errors.New("laboro: invalid configuration")

	// ErrClosed is returned by Submit once Shutdown or Close has begun.
	ErrClosed = errors.New("laboro: executor closed")

	// ErrNotQueued is wrapped, together with the context's error, by Submit
	// when its context ends while it waits for room in a full buffer. The job
	// was not queued and has no id.
	ErrNotQueued = errors.New("laboro: job not queued")

	// ErrDuplicateID is returned by Submit for a caller-chosen id that a queued
	// or running job already has.
	ErrDuplicateID = errors.New("laboro: duplicate job id")

	// ErrInvalidJob is wrapped by Submit when the runner refuses a job before
	// it is queued (for example an empty command line or unbalanced quotes).
	ErrInvalidJob = errors.New("laboro: invalid job")

	// ErrNotFound is returned by Stop for an id that is not queued (unknown,
	// running or already finished), and by Cancel for an id that is neither
	// queued nor running.
	ErrNotFound = errors.New("laboro: job not found")

	// ErrStopped is the Err of a Result whose job was removed with Stop.
	ErrStopped = errors.New("laboro: job stopped before execution")

	// ErrTerminated is the Err of a Result whose job was still queued when
	// Shutdown or Close began. A Submit that was blocked on a full buffer at
	// that moment returns an error matching both ErrTerminated and ErrClosed.
	ErrTerminated = errors.New("laboro: terminated before execution")

	// ErrKilled is the Err of a Result whose job was running when Close was
	// called and was killed.
	ErrKilled = errors.New("laboro: job killed")

	// ErrTimeout is the Err of a Result whose job ran longer than its
	// Job.Timeout and was killed, and the cause of that job's context.
	ErrTimeout = errors.New("laboro: job timed out")

	// ErrCancelled is the Err of a Result whose job was running when
	// Executor.Cancel was called, and the cause of that job's context.
	ErrCancelled = errors.New("laboro: job cancelled")
)

// PanicError is the Err of a Result whose Go function panicked.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the goroutine's stack at the panic, as runtime/debug.Stack formats it.
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("laboro: job panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error, so errors.Is and
// errors.As see through a panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

func configErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}
