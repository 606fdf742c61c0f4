package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/pulse"
	"go.uber.org/zap"
)

// progressEvery is the period of the lines of counts when standard error
// is not a terminal (or of the log records, with a JSON log).
const progressEvery = 10 * time.Second

// noWorker is said when tasks have waited cli.NoWorkerAfter with no
// worker registered.
func noWorker(dir string) string {
	return "no worker has registered: the tasks wait for one (start pulse-worker -dir " + dir + " -- COMMAND)"
}

// run serves workers until every task has its result, showing how they
// go on progress. It fails at once when it cannot serve them, and as
// soon as serving fails.
func run(ctx context.Context, c *pulse.Controller, in, out string, progress *cli.Progress) (err error) {
	ln, err := c.Listen()
	if err != nil {
		return fmt.Errorf("cannot serve workers: %w", err)
	}
	ex, err := laboro.New(laboro.WithRunner(c), laboro.WithPoolSize(1024), laboro.WithConcurrency(1024),
		laboro.WithBufferSize(1024), laboro.WithLogger(c.Logger))
	if err != nil {
		ln.Close()
		return err
	}
	defer ex.Close()
	// The work ends when serving does, with serving's error.
	work, failed := context.WithCancelCause(ctx)
	defer failed(nil)
	serveCtx, stopServing := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := c.ServeListener(serveCtx, ln); serveCtx.Err() == nil {
			failed(fmt.Errorf("serving workers failed: %w", err))
		}
	}()
	defer func() {
		stopServing()
		<-served
		if ctx.Err() == nil && context.Cause(work) != work.Err() {
			err = context.Cause(work) // not an interruption
		}
	}()

	batch := cli.Batch{
		Progress: progress,
		Workers:  func() int { return c.Stats().Workers },
		NoWorker: noWorker(c.Dir),
		Out:      func() (int, int) { st := c.Stats(); return st.Out, st.Pending },
	}
	if in == "" {
		return one(work, ex, batch)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(in)
	if err != nil {
		return err
	}
	// A task whose result is in out was done by an earlier run (results
	// are written whole or not at all): a controller started again after
	// a crash resumes where it was.
	var jobs []laboro.Job
	done := 0
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if _, err := os.Stat(filepath.Join(out, e.Name())); err == nil {
			done++
			continue
		}
		job := pulse.NewTaskFile(filepath.Join(in, e.Name()))
		job.ID = e.Name()
		jobs = append(jobs, job)
	}
	if done > 0 {
		c.Logger.Info("tasks done before, skipped: their results are in "+out, zap.Int("tasks", done))
	}
	batch.OnResult = func(job laboro.Job, res laboro.Result) error {
		if res.Status != laboro.StatusSucceeded {
			return nil
		}
		return save(res.Output, filepath.Join(out, job.ID))
	}
	batch.Command = func(job laboro.Job) string { return filepath.Join(in, job.ID) }
	sum, err := batch.Run(work, ex, jobs)
	if err != nil {
		if work.Err() != nil {
			// Interrupted: what was done; a controller started again on
			// the same -in and -out runs the rest.
			sum.Write(os.Stdout)
		}
		return err
	}
	sum.Write(os.Stdout)
	return sum.Err()
}

// one runs the task on standard input and writes its result to standard
// output. It runs as a batch of one, which shows its progress as a batch
// does (waiting for a worker, or running on one, and for how long): a
// single task may take long too. There is no summary: standard output is
// the result.
func one(ctx context.Context, ex *laboro.Executor, batch cli.Batch) error {
	f, err := os.CreateTemp("", "pulse-task-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	// An interrupt stops the copy at once, however long stdin stays open.
	err = copyInput(ctx, f, os.Stdin)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	job := pulse.NewTaskFile(f.Name())
	job.ID = "stdin"
	var result error
	batch.OnResult = func(_ laboro.Job, res laboro.Result) error {
		if res.Status != laboro.StatusSucceeded {
			result = fmt.Errorf("the task %s: %w", res.Status, res.Err)
			return nil
		}
		// Off the bar's line, should standard output be the terminal.
		batch.Progress.Above(func() { _, result = res.Output.WriteTo(os.Stdout) })
		return result
	}
	if _, err := batch.Run(ctx, ex, []laboro.Job{job}); err != nil {
		return err
	}
	return result
}

// save writes a result to path, whole or not at all: into a temporary
// file of the same folder, renamed path once written, so that a result
// found in the folder is a whole one.
func save(out *laboro.Output, path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = out.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
