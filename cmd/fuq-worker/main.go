// Command fuq-worker runs the tasks a fuq foreman pushes to it.
//
//	fuq-worker -connect HOST:PORT [-np N] [-spool DIR] [-log LEVEL]
//
// N processors are offered (the number of CPUs by default); each task runs
// "Command <task number>" in its job's working directory, with its output
// in LoggingDir/<Name>_<Task>.log. When the connection drops, the tasks
// run on and the worker connects again; the outcomes of tasks that ended
// meanwhile wait in the spool directory until the foreman has them. Exit
// status: 0 when the foreman stopped the worker, 1 on an error or an
// interrupt, 2 for a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/laboro-go/laboro/protocols/fuq"
	"go.uber.org/zap"
)

func main() {
	fs := flag.NewFlagSet("fuq-worker", flag.ContinueOnError)
	w := &fuq.Worker{}
	fs.StringVar(&w.Addr, "connect", "", "the foreman's HOST:PORT")
	fs.IntVar(&w.Procs, "np", runtime.NumCPU(), "processors to offer")
	fs.StringVar(&w.SpoolDir, "spool", defaultSpool(), "directory for outcomes not yet delivered")
	fs.DurationVar(&w.Reconnect, "reconnect", fuq.DefaultReconnect, "first wait before connecting again")
	level := zap.InfoLevel
	fs.Var(&level, "log", "log level: debug, info, warn, error")
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() > 0 || w.Addr == "" || w.Procs < 1 {
		fmt.Fprintln(os.Stderr, "usage: fuq-worker -connect HOST:PORT [-np N] [-spool DIR] [-log LEVEL]")
		os.Exit(2)
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level, cfg.DisableStacktrace = zap.NewAtomicLevelAt(level), true
	w.Logger, _ = cfg.Build()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := w.Run(ctx)
	if errors.Is(err, fuq.ErrStopped) {
		return
	}
	w.Logger.Error("worker ended", zap.Error(err))
	os.Exit(1)
}

// defaultSpool is a directory of this user's that survives a restart.
func defaultSpool() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "fuq-worker")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("fuq-worker-%d", os.Getuid()))
}
