// Quickstart is the first laboro program to run. It needs nothing but Go on
// a Unix system:
//
//	go run ./examples/quickstart
//
// It starts an Executor with a pool of four workers at concurrency 1 and
// submits a few ordinary Unix commands: a slow one, one that prints, one
// that fails, one whose program does not exist, and one that is stopped
// while it waits. It lists the jobs still waiting, raises the concurrency
// while they run, prints how each job ended (status, exit code, duration)
// with its output, and shuts the Executor down.
//
// Everything happens in run, which writes to any io.Writer, so that
// main_test.go can check what a user sees.
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/laboro-go/laboro"
)

func main() {
	// Ctrl-C cancels ctx: run returns, and its deferred Close kills what runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	// Up to 8 jobs wait in the buffer, 4 worker goroutines run them, and the
	// concurrency level, which says how many of the 4 may run a job at
	// once, starts at 1.
	ex, err := laboro.New(
		laboro.WithBufferSize(8),
		laboro.WithPoolSize(4),
		laboro.WithConcurrency(1),
	)
	if err != nil {
		return err
	}
	var handles []*laboro.Handle
	defer func() {
		// The hard stop, for an early return; after Shutdown it does nothing.
		ex.Close()
		// Every Result's Output is a file that its reader must close. This
		// closes those that an early return left unread.
		for _, h := range handles {
			if res, ok := h.Result(); ok {
				res.Output.Close()
			}
		}
	}()
	fmt.Fprintf(w, "executor: buffer 8, pool 4, concurrency %d\n\n", ex.Concurrency())

	// A Command is split into words with shell-like quoting and run
	// directly, without a shell: for pipes, globs or $VARIABLES, run a
	// shell yourself, as job_1 does, or use Job.Script.
	jobs := []laboro.Job{
		{Command: `sh -c "sleep 0.3; echo slept for 0.3s"`},
		{Command: "echo hello from laboro"},
		{Command: "ls /nonexistent/laboro"},
		{Command: "uname -a"},
		{Command: "no-such-command --help"},
		{ID: "sleeper", Command: "sleep 30"}, // stopped below, before it runs
	}
	for _, job := range jobs {
		// Submit returns as soon as the job is in the buffer. A job without
		// an ID gets one: job_1, job_2, …
		h, err := ex.Submit(ctx, job)
		if err != nil {
			return fmt.Errorf("submit %q: %w", job, err)
		}
		handles = append(handles, h)
		fmt.Fprintf(w, "submitted %-7s  %s\n", h.ID(), job)
	}

	// At concurrency 1, one worker takes job_1 and the others wait. Let it
	// start, so that the listing below is the same on every run.
	if err := waitRunning(ctx, ex, 1); err != nil {
		return err
	}
	// Queued lists the jobs that wait, in the order they will start.
	fmt.Fprintf(w, "\nwhile job_1 runs, waiting to start:\n")
	for _, job := range ex.Queued() {
		fmt.Fprintf(w, "  %-7s  %s\n", job.ID, job)
	}

	// Stop takes a job out of the buffer before it runs. It never touches
	// a running job: for that one it returns an error matching ErrNotFound.
	if err := ex.Stop("sleeper"); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nstopped sleeper: it will not run\n")

	// Raise the concurrency while job_1 runs: the waiting jobs start at once.
	if err := ex.SetConcurrency(3); err != nil {
		return err
	}
	fmt.Fprintf(w, "concurrency 1 -> %d: up to %d jobs run at once\n", ex.Concurrency(), ex.Parallelism())

	// Every job ends with exactly one Result. A failed job is not an error
	// of Wait: it is in the Result's Status and Err.
	for _, h := range handles {
		res, err := h.Wait(ctx)
		if err != nil {
			return err
		}
		if err := report(w, h.Job(), res); err != nil {
			return err
		}
	}

	// Shutdown takes no new jobs, ends the waiting ones as "terminated
	// before execution", lets the running ones finish, and returns when the
	// workers are gone, or with an error when its context ends first.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ex.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintf(w, "\nexecutor shut down\n")
	return nil
}

// report prints one line on how the job ended, then its standard output,
// its standard error and its error, each only when there is one. It closes
// the output, which removes its file.
func report(w io.Writer, job laboro.Job, res laboro.Result) error {
	defer res.Output.Close()
	fmt.Fprintf(w, "\n%-7s  %-9s  exit %-2s  %7s  %s\n", res.ID, res.Status, exitCode(res), duration(res), job)
	// The output is a file (named after the process id); WriteTo streams it
	// without loading it into memory, however large it is.
	if res.Output != nil && res.Output.Size() > 0 {
		title := fmt.Sprintf("stdout, %d bytes", res.Output.Size())
		if err := framed(w, title, res.Output); err != nil {
			return err
		}
	}
	// Result.Stderr keeps the last few KiB of standard error, to explain a failure.
	if len(res.Stderr) > 0 {
		if err := framed(w, "stderr", bytes.NewReader(res.Stderr)); err != nil {
			return err
		}
	}
	if res.Status != laboro.StatusSucceeded {
		fmt.Fprintf(w, "%serror: %v\n", indent, res.Err)
	}
	return res.Output.Close() // safe on a nil Output, and to call twice
}

// exitCode returns the process's exit status, or "-" for -1, which means no
// exit status: the process did not start or did not exit by itself.
func exitCode(res laboro.Result) string {
	if res.ExitCode < 0 {
		return "-"
	}
	return fmt.Sprint(res.ExitCode)
}

// duration returns how long the job ran, or "-" if it never started.
func duration(res laboro.Result) string {
	if res.Started.IsZero() {
		return "-"
	}
	return res.Duration().Round(100 * time.Microsecond).String()
}

// waitRunning polls the Executor's counters until n jobs run.
func waitRunning(ctx context.Context, ex *laboro.Executor, n int) error {
	for ex.Stats().Running < n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

const indent = "         "

// framed writes body to w inside a frame titled title, one "│ " per line.
func framed(w io.Writer, title string, body io.WriterTo) error {
	fmt.Fprintf(w, "%s┌─ %s\n", indent, title)
	lw := &lineWriter{w: w, prefix: indent + "│ ", atStart: true}
	if _, err := body.WriteTo(lw); err != nil {
		return err
	}
	if !lw.atStart { // the body did not end with a newline
		io.WriteString(w, "\n")
	}
	_, err := fmt.Fprintf(w, "%s└─\n", indent)
	return err
}

// lineWriter writes prefix before every line it passes on to w.
type lineWriter struct {
	w       io.Writer
	prefix  string
	atStart bool
}

func (lw *lineWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if lw.atStart {
			if _, err := io.WriteString(lw.w, lw.prefix); err != nil {
				return n, err
			}
			lw.atStart = false
		}
		line := p
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			line, lw.atStart = p[:i+1], true
		}
		m, err := lw.w.Write(line)
		n += m
		if err != nil {
			return n, err
		}
		p = p[len(line):]
	}
	return n, nil
}
