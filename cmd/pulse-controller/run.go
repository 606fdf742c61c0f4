package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/pulse"
)

// run serves workers until every task has its result.
func run(ctx context.Context, c *pulse.Controller, in, out string) error {
	ex, err := laboro.New(laboro.WithRunner(c), laboro.WithPoolSize(1024), laboro.WithConcurrency(1024),
		laboro.WithBufferSize(1024), laboro.WithLogger(c.Logger))
	if err != nil {
		return err
	}
	defer ex.Close()
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- c.Serve(serveCtx) }()
	defer func() { stopServing(); <-served }()

	if in == "" {
		return one(ctx, ex)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(in)
	if err != nil {
		return err
	}
	var jobs []laboro.Job
	for _, e := range entries {
		if e.Type().IsRegular() {
			job := pulse.NewTaskFile(filepath.Join(in, e.Name()))
			job.ID = e.Name()
			jobs = append(jobs, job)
		}
	}
	batch := cli.Batch{
		Progress: cli.NewProgress(os.Stderr, 10*time.Second),
		OnResult: func(job laboro.Job, res laboro.Result) error {
			if res.Status != laboro.StatusSucceeded {
				return nil
			}
			return save(res.Output, filepath.Join(out, job.ID))
		},
		Workers: func() int { return len(c.Workers()) },
		Command: func(job laboro.Job) string { return filepath.Join(in, job.ID) },
	}
	sum, err := batch.Run(ctx, ex, jobs)
	if err != nil {
		return err
	}
	sum.Write(os.Stdout)
	return sum.Err()
}

// one runs the task on standard input and writes its result to standard
// output.
func one(ctx context.Context, ex *laboro.Executor) error {
	f, err := os.CreateTemp("", "pulse-task-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, os.Stdin)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	h, err := ex.Submit(ctx, pulse.NewTaskFile(f.Name()))
	if err != nil {
		return err
	}
	res, err := h.Wait(ctx)
	if err != nil {
		return err
	}
	defer res.Output.Close()
	if res.Status != laboro.StatusSucceeded {
		return fmt.Errorf("the task %s: %w", res.Status, res.Err)
	}
	_, err = res.Output.WriteTo(os.Stdout)
	return err
}

// save writes a result to path.
func save(out *laboro.Output, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = out.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
