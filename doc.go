// Package laboro runs jobs — Unix command lines, scripts and Go functions —
// under flow control, for Go programs that embed a job executor.
//
// An Executor holds submitted jobs in a bounded buffer and runs them on a
// fixed pool of worker goroutines, at most as many at once as the current
// concurrency level allows; the level can change while jobs run. A process
// job's standard output goes straight to a file named <pid>.output, handed
// to the consumer in the Result and removed when the consumer closes it, so
// no output is ever held whole in memory.
//
//	ex, err := laboro.New(laboro.WithBufferSize(8), laboro.WithPoolSize(4))
//	if err != nil {
//		return err
//	}
//	defer ex.Close()
//	h, err := ex.Submit(ctx, laboro.Job{Command: `grep -c "two words" notes.txt`})
//	if err != nil {
//		return err
//	}
//	ex.SetConcurrency(2) // up to two jobs at once from now on
//	res, err := h.Wait(ctx)
//	if err != nil {
//		return err
//	}
//	defer res.Output.Close()
//	fmt.Println(res.Status, res.ExitCode)
//	res.Output.WriteTo(os.Stdout)
//	return ex.Shutdown(ctx) // graceful: queued jobs end, running ones finish
//
// # Guarantees
//
// Every job that Submit accepted ends with exactly one Result, delivered to
// its Handle and, with WithObserver, as an EventFinished:
//
//   - it ran: StatusSucceeded or StatusFailed (a non-zero exit, a signal, a
//     command that could not start, a function's error or panic), or
//     StatusTimedOut when it ran past Job.Timeout;
//   - Stop or Cancel removed it while queued: StatusStopped; Stop never
//     touches a running job;
//   - Cancel ended it while it ran: its whole process group is killed (a
//     remote worker is told to kill it) and it ends with StatusCancelled;
//   - it was still queued when Shutdown or Close began: StatusTerminated
//     ("terminated before execution"); a Submit blocked on a full buffer at
//     that moment returns an error matching ErrTerminated instead;
//   - it was running when Close was called: its whole process group is
//     killed and it ends with StatusKilled. Shutdown lets it finish.
//
// The Executor, not the Runner, applies Job.Timeout, Cancel and Close: each
// running job's context ends with cause ErrTimeout, ErrCancelled or
// ErrKilled, and a job whose context ended and that did not succeed gets
// the matching status whatever its Runner reported. So a Runner of one's
// own only has to stop when its context ends.
//
// A remote Runner (a protocol's manager side) keeps the same promise: a job
// whose remote worker dies is run again elsewhere, so it still ends once.
//
// # Processes
//
// The process runner executes a job directly, not through a shell: Command
// is split into words with shell-like quoting but without expansion, Args is
// an argv, Script is written to a file and run by its interpreter. Each job
// runs in its own process group, killed as a whole on timeout or Close.
// If the process that runs the Executor dies, even by SIGKILL, its jobs'
// process groups are killed within milliseconds by a small watcher process
// (a shell, started with the first job, that outlives it: see
// reaper_unix.go), so that a job handed to another worker never runs twice
// at once; a job that leaves its process group (setsid) is not covered.
// Standard error is kept as a short tail in Result.Stderr by default; see
// StderrMode. The package builds on Unix systems.
package laboro
