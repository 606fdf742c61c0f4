// Command fuq-worker runs the tasks a fuq foreman pushes to it.
//
//	fuq-worker -connect HOST:PORT [-np N] [-spool DIR] [-log LEVEL]
//
// N processors are offered (the number of CPUs by default); each task runs
// "Command <task number>" in its job's working directory, with its output
// in LoggingDir/<Name>_<Task>.log. When the connection drops, the tasks
// run on and the worker connects again; the outcomes of tasks that ended
// meanwhile wait in the spool directory until the foreman has them. Exit
// status: 0 when the foreman stopped the worker, 1 on an error, 2 for a
// usage error, 130 when interrupted.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/fuq"
	"go.uber.org/zap"
)

func main() {
	c := cli.New("fuq-worker", "-connect HOST:PORT [-np N] [-spool DIR] [-reconnect D] [-log LEVEL]",
		"Runs the tasks a fuq foreman pushes to it, N at a time: each runs \"Command <task number>\" in its job's "+
			"working directory, with its output in LoggingDir/<Name>_<Task>.log. When the connection drops, the tasks "+
			"run on and the worker connects again; the outcomes of tasks that ended meanwhile wait in the spool "+
			"directory. Exit status: 0 when the foreman stopped the worker, 1 on an error, 2 for a usage error, "+
			"130 when interrupted.")
	w := &fuq.Worker{}
	c.Flags.StringVar(&w.Addr, "connect", "", "the foreman's HOST:PORT")
	c.Flags.IntVar(&w.Procs, "np", runtime.NumCPU(), "processors to offer")
	c.Flags.StringVar(&w.SpoolDir, "spool", defaultSpool(), "directory for outcomes not yet delivered")
	c.Flags.DurationVar(&w.Reconnect, "reconnect", fuq.DefaultReconnect, "first wait before connecting again")
	logFlag := c.LogFlag(zap.InfoLevel)
	c.Main(os.Args[1:], func(ctx context.Context, args []string) error {
		switch {
		case len(args) > 0:
			return cli.Usagef("unexpected argument %q", args[0])
		case w.Addr == "":
			return cli.Usagef("-connect HOST:PORT is required")
		case w.Procs < 1:
			return cli.Usagef("-np %d: must be at least 1", w.Procs)
		}
		w.Logger = logFlag.Logger()
		err := w.Run(ctx)
		if errors.Is(err, fuq.ErrStopped) {
			return nil
		}
		return err
	})
}

// defaultSpool is a directory of this user's that survives a restart.
func defaultSpool() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "fuq-worker")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("fuq-worker-%d", os.Getuid()))
}
