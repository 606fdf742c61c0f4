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
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/laboro-go/laboro/protocols/workerserver"
	"go.uber.org/zap"
)

func main() {
	fs := flag.NewFlagSet("workerserver-worker", flag.ContinueOnError)
	w := &workerserver.Worker{Password: os.Getenv("WORKERSERVER_PASSWORD"), Version: "1"}
	fs.StringVar(&w.URL, "url", "", "the master's base URL, like http://master:8080")
	fs.StringVar(&w.ServerID, "id", "", "this worker's id at the master")
	fs.StringVar(&w.CodeDir, "codes", "", "folder of executables, one per worker code")
	fs.StringVar(&w.CacheDir, "cache", "", "folder where statuses wait for the master")
	fs.IntVar(&w.Concurrency, "c", runtime.NumCPU(), "jobs at once")
	fs.DurationVar(&w.Ping, "ping", 0, "ping interval when no job came (default 30s)")
	fs.DurationVar(&w.Progress, "progress", 0, "progress re-sent after (default 10s)")
	fs.DurationVar(&w.Reconnect, "reconnect", 0, "wait before connecting again (default 10s)")
	level := zap.InfoLevel
	fs.Var(&level, "log", "log level: debug, info, warn, error")
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() > 0 || w.URL == "" || w.ServerID == "" || w.CodeDir == "" || w.CacheDir == "" || w.Concurrency < 1 {
		fmt.Fprintln(os.Stderr, "usage: workerserver-worker -url URL -id ID -codes DIR -cache DIR [-c N] [-ping D] [-progress D] [-reconnect D]")
		os.Exit(2)
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level, cfg.DisableStacktrace = zap.NewAtomicLevelAt(level), true
	w.Logger, _ = cfg.Build()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); !errors.Is(err, context.Canceled) {
		w.Logger.Error("worker stopped", zap.Error(err))
		os.Exit(1)
	}
}
