package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/jetstream"
	"github.com/laboro-go/laboro/transport"
	"go.uber.org/zap"
)

// runJobs runs jobs on this machine alone, through an embedded server, a
// service and a worker of its own that live as long as the command, and
// follows them to their end.
func runJobs(args []string) int {
	c := newCommon("run", "[flags] (-f FILE | COMMAND…)")
	c.level = zap.WarnLevel
	jf := c.jobFlags()
	workers := c.fs.Int("workers", runtime.NumCPU(), "jobs run at once")
	if code, ok := c.parse(args); !ok {
		return code
	}
	jobs, code, ok := c.jobs(jf)
	if !ok {
		return code
	}
	// Its server is its own, with a token that only this process knows;
	// the user's token leaves the environment, so that no job sees it.
	secret.FromEnv("LABORO_TOKEN")
	c.token, c.tokenSet = secret.New(), true
	if *workers <= 0 {
		return c.usageError("-workers %d: must be at least 1", *workers)
	}
	defer c.log.Sync()
	ctx, stop := interruptible()
	defer stop()
	dir, err := os.MkdirTemp("", "laboro-run-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "laboro run:", err)
		return exitFailed
	}
	defer os.RemoveAll(dir)
	srv, err := jetstream.StartEmbedded(filepath.Join(dir, "nats"), "127.0.0.1", -1, jetstream.WithToken(c.token))
	if err != nil {
		fmt.Fprintln(os.Stderr, "laboro run:", err)
		return exitFailed
	}
	defer srv.Shutdown()
	nc, err := c.connect(srv.URL(), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "laboro run:", err)
		return exitFailed
	}
	defer nc.Close()
	cfg := c.config()
	cfg.Dir = dir

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- (&jetstream.Service{Conn: nc, Config: cfg}).Run(runCtx) }()
	go func() {
		done <- (&jetstream.Worker{Conn: nc, Config: cfg, Concurrency: *workers, OutputDir: dir}).Run(runCtx)
	}()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				fmt.Fprintln(os.Stderr, "laboro run:", err)
			}
		}
	}()

	cl := &jetstream.Client{Conn: nc, Config: cfg}
	ask := transport.Backoff{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond}
	for { // until the service answers
		if _, err := cl.Status(ctx, jetstream.StatusRequest{}); !errors.Is(err, jetstream.ErrNoService) {
			break
		}
		select {
		case <-ctx.Done():
			return failed(ctx, "run", ctx.Err())
		case err := <-done: // the service or the worker could not start
			done <- err // the deferred wait reports it
			return exitFailed
		case <-time.After(ask.Next()):
		}
	}
	batch := jetstream.NewBatch()
	ids, err := cl.Submit(ctx, batch, jobs)
	if err != nil {
		return failed(ctx, "run", err)
	}
	if len(ids) == 1 && *jf.file == "" {
		res, err := cl.Result(ctx, ids[0])
		if err != nil {
			return failed(ctx, "run", err)
		}
		return printResult(res, true, jobs[0].Script)
	}
	return watch(ctx, cl, batch, len(ids))
}
