// Command pulse-worker registers with a pulse controller and solves the
// tasks it is given with a command: each task's bytes on the command's
// standard input, its standard output the result.
//
//	pulse-worker [-dir DIR] [-later] [-pulse D] -- COMMAND [ARGS…]
//
// For example: pulse-worker -dir /tmp/ctl -- md5sum. It pulses the
// controller on DIR/main.sock and listens on DIR/<worker id>.sock. A
// RESTART from the controller kills the running task, and the worker
// registers again. Exit status: 0 after an interrupt, 1 on an error, 2 for
// a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/laboro-go/laboro/protocols/pulse"
	"go.uber.org/zap"
)

func main() {
	fs := flag.NewFlagSet("pulse-worker", flag.ContinueOnError)
	w := &pulse.Worker{}
	fs.StringVar(&w.Dir, "dir", pulse.DefaultDir, "the controller's directory")
	later := fs.Bool("later", false, "speak the reference's later enum numbering (INVALID = 0)")
	fs.DurationVar(&w.NextPulse, "pulse", pulse.DefaultNextPulse, "next_pulse announced; pulses come every 1/2 to 3/4 of it")
	level := zap.InfoLevel
	fs.Var(&level, "log", "log level: debug, info, warn, error")
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: pulse-worker [-dir DIR] [-later] [-pulse D] -- COMMAND [ARGS…]")
		os.Exit(2)
	}
	if *later {
		w.Codec.Numbering = pulse.LaterNumbering
	}
	w.Command = fs.Args()
	cfg := zap.NewDevelopmentConfig()
	cfg.Level, cfg.DisableStacktrace = zap.NewAtomicLevelAt(level), true
	w.Logger, _ = cfg.Build()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); !errors.Is(err, context.Canceled) {
		w.Logger.Error("worker stopped", zap.Error(err))
		os.Exit(1)
	}
	w.Logger.Info("stopped by a signal")
}
