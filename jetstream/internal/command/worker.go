package command

import (
	"os"
	"runtime"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/jetstream"
	"go.uber.org/zap"
)

// worker runs jobs here, -c at a time, until interrupted: the first
// interrupt lets the running jobs finish and deliver their results, a
// second one kills them (they run again elsewhere).
func worker(args []string) int {
	c := newCommon("worker", "[flags]",
		"Runs the service's jobs on this machine, -c at a time, until interrupted. It waits for the server when "+
			"it is not up yet, and reconnects when it goes away. The first interrupt lets the running jobs finish "+
			"and deliver their results; a second one kills them, and they run again elsewhere.\n\n"+
			"Exit status: 0 when stopped by an interrupt, 1 on an error, 2 for a usage error.")
	c.deliveryFlags()
	n := c.fs.Int("c", runtime.NumCPU(), "jobs run at once")
	dir := c.fs.String("dir", "", "directory for the jobs' <pid>.output files, made if missing")
	name := c.fs.String("name", "", "the worker's name in the service's console and status (default: host-pid)")
	if code, ok := c.parse(args); !ok {
		return code
	}
	switch {
	case c.fs.NArg() > 0:
		return c.usageError("unexpected argument %q", c.fs.Arg(0))
	case *n <= 0 || *n > cli.MaxAtOnce:
		return c.usageError("-c %d: must be from 1 to %d", *n, cli.MaxAtOnce)
	}
	if *dir != "" {
		// Made if missing, as an output directory is expected to be;
		// private, as the jobs' outputs may be.
		if err := os.MkdirAll(*dir, 0o700); err != nil {
			return c.usageError("-dir %q: %v", *dir, err)
		}
	}
	defer c.log.Sync()
	w := &jetstream.Worker{Config: c.config(), Concurrency: *n, OutputDir: *dir, Name: *name}
	drained := make(chan struct{})
	ctx, stop := interruptTwice(func() {
		c.log.Info("finishing the running jobs; interrupt again to stop at once (they would run again elsewhere)")
		w.Drain()
		close(drained)
	})
	defer stop()
	nc, err := c.connect(c.url, true)
	if err != nil {
		c.log.Error("connect", zap.Error(err))
		return exitFailed
	}
	defer nc.Close()
	// It runs only the jobs signed with its token's key, and gives its
	// results only to a server where serve proves it holds that key: a
	// program posing as the server can neither have it run commands nor
	// take what they print.
	key, ok := c.jobKey(ctx, drained)
	if !ok {
		c.log.Info("worker stopped before it connected")
		return 0
	}
	w.Conn, w.Config.JobKey, w.Config.ProveServer = nc, key, true
	url := c.url
	if url == "" {
		url = defaultURL
	}
	c.log.Info("worker", zap.String("nats", shown(url)), zap.Int("concurrency", *n))
	if err := w.Run(ctx); err != nil {
		c.log.Error("worker stopped", zap.Error(err))
		return exitFailed
	}
	if ctx.Err() != nil {
		c.log.Info("worker stopped; its unfinished jobs go to other workers")
	} else {
		c.log.Info("worker stopped after finishing its jobs")
	}
	return 0
}
