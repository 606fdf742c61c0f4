// Command workerserver-worker runs the jobs of a workerserver master.
//
//	workerserver-worker -url URL -id ID -codes DIR -cache DIR [-c N] [-ping D] [-progress D] [-reconnect D]
//
// The password is read from WORKERSERVER_PASSWORD. A job for worker code
// CODE runs the executable DIR/CODE with the job's params as JSON on its
// standard input; its standard output (JSON) is the job's result. Statuses
// that cannot reach the master wait in the cache directory, and are sent,
// in order, once it is back. Exit status: 0 after an interrupt, 1 on an
// error, 2 for a usage error.
package main

import (
	"context"
	"errors"
	"os"
	"runtime"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/workerserver"
	"go.uber.org/zap"
)

func main() {
	c := cli.New("workerserver-worker", "-url URL -id ID -codes DIR -cache DIR [-c N] [-ping D] [-progress D] [-reconnect D]",
		"Runs the jobs of a workerserver master, N at a time. The password is read from WORKERSERVER_PASSWORD. A job "+
			"for worker code CODE runs the executable DIR/CODE with the job's params as JSON on its standard input; its "+
			"standard output (JSON) is the job's result. Statuses that cannot reach the master wait in the cache "+
			"directory, and are sent, in order, once it is back. Exit status: 0 after an interrupt, 1 on an error, 2 "+
			"for a usage error.")
	w := &workerserver.Worker{Password: os.Getenv("WORKERSERVER_PASSWORD"), Version: "1"}
	c.Flags.StringVar(&w.URL, "url", "", "the master's base URL, like http://master:8080")
	c.Flags.StringVar(&w.ServerID, "id", "", "this worker's id at the master")
	c.Flags.StringVar(&w.CodeDir, "codes", "", "folder of executables, one per worker code")
	c.Flags.StringVar(&w.CacheDir, "cache", "", "folder where statuses wait for the master")
	c.Flags.IntVar(&w.Concurrency, "c", runtime.NumCPU(), "jobs at once")
	c.Flags.DurationVar(&w.Ping, "ping", 0, "ping interval when no job came (default 30s)")
	c.Flags.DurationVar(&w.Progress, "progress", 0, "progress re-sent after (default 10s)")
	c.Flags.DurationVar(&w.Reconnect, "reconnect", 0, "wait before connecting again (default 10s)")
	logFlag := c.LogFlag(zap.InfoLevel)
	c.Main(os.Args[1:], func(ctx context.Context, args []string) error {
		for _, req := range []struct{ flag, value string }{{"-url", w.URL}, {"-id", w.ServerID}, {"-codes", w.CodeDir}, {"-cache", w.CacheDir}} {
			if req.value == "" {
				return cli.Usagef("%s is required", req.flag)
			}
		}
		switch {
		case len(args) > 0:
			return cli.Usagef("unexpected argument %q", args[0])
		case w.Concurrency < 1:
			return cli.Usagef("-c %d: must be at least 1", w.Concurrency)
		}
		w.Logger = logFlag.Logger()
		if err := w.Run(ctx); !errors.Is(err, context.Canceled) {
			return err
		}
		w.Logger.Info("stopped by a signal")
		return nil
	})
}
