// Command pulse-controller hands tasks to pulse workers and collects their
// results.
//
//	pulse-controller [-dir DIR] [-later] -in TASKS -out RESULTS
//	pulse-controller [-dir DIR] [-later] < task > result
//
// Workers register on DIR/main.sock (/run/controller by default). With -in,
// every file of the folder TASKS is a task, and its result is written to
// RESULTS under the same name; without it, standard input is one task and
// its result goes to standard output. The controller ends when every task
// has its result: status 0 when all succeeded, 1 otherwise, 2 for a usage
// error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/pulse"
	"go.uber.org/zap"
)

func main() {
	fs := flag.NewFlagSet("pulse-controller", flag.ContinueOnError)
	c := &pulse.Controller{}
	fs.StringVar(&c.Dir, "dir", pulse.DefaultDir, "directory of the sockets")
	later := fs.Bool("later", false, "speak the reference's later enum numbering (INVALID = 0)")
	fs.IntVar(&c.Attempts, "attempts", pulse.DefaultAttempts, "times a task may be given to workers without a result")
	in := fs.String("in", "", "folder of task files (default: one task on stdin)")
	out := fs.String("out", "", "folder for the results (with -in)")
	level := zap.InfoLevel
	fs.Var(&level, "log", "log level: debug, info, warn, error")
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() > 0 || (*in == "") != (*out == "") {
		fmt.Fprintln(os.Stderr, "usage: pulse-controller [-dir DIR] [-later] [-attempts N] [-in TASKS -out RESULTS]")
		os.Exit(2)
	}
	if *later {
		c.Codec.Numbering = pulse.LaterNumbering
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level, cfg.DisableStacktrace = zap.NewAtomicLevelAt(level), true
	c.Logger, _ = cfg.Build()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, *in, *out); err != nil {
		c.Logger.Error("controller stopped", zap.Error(err))
		os.Exit(1)
	}
}

// run serves workers until every task has its result.
func run(ctx context.Context, c *pulse.Controller, in, out string) error {
	ex, err := laboro.New(laboro.WithRunner(c), laboro.WithPoolSize(1024), laboro.WithConcurrency(1024),
		laboro.WithBufferSize(1024), laboro.WithLogger(c.Logger))
	if err != nil {
		return err
	}
	defer ex.Close()
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
	}
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- c.Serve(serveCtx) }()
	defer func() { stopServing(); <-served }()

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []error
	)
	save := func(name string, h *laboro.Handle, dst func() (io.WriteCloser, error)) {
		wg.Go(func() {
			err := deliver(ctx, h, dst)
			if err != nil {
				mu.Lock()
				failures = append(failures, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
		})
	}
	if in == "" {
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
		save("stdin", h, func() (io.WriteCloser, error) { return nopCloser{os.Stdout}, nil })
	} else {
		entries, err := os.ReadDir(in)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			h, err := ex.Submit(ctx, pulse.NewTaskFile(filepath.Join(in, e.Name())))
			if err != nil {
				return err
			}
			dst := filepath.Join(out, e.Name())
			save(e.Name(), h, func() (io.WriteCloser, error) { return os.Create(dst) })
		}
	}
	wg.Wait()
	for _, err := range failures {
		c.Logger.Error("task failed", zap.Error(err))
	}
	return errors.Join(failures...)
}

// deliver waits for a task's result and writes it.
func deliver(ctx context.Context, h *laboro.Handle, dst func() (io.WriteCloser, error)) error {
	res, err := h.Wait(ctx)
	if err != nil {
		return err
	}
	defer res.Output.Close()
	if res.Status != laboro.StatusSucceeded {
		return fmt.Errorf("%v: %w", res.Status, res.Err)
	}
	w, err := dst()
	if err != nil {
		return err
	}
	_, err = res.Output.WriteTo(w)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
