// Command runexp-runner runs the jobs of a runexp manager in N parallel
// workers.
//
//	runexp-runner N -c HOST:PORT [-h NAME] [-g GROUP] [-t .TYPE=PROGRAM]... [--exit-status] [--hold D]
//
// A job of type .sh runs as "bash <script>"; -t .py=python3 (repeatable,
// the program may have arguments: -t ".R=Rscript --vanilla") adds types.
// A job succeeds unless its output has a line starting with RES:failed, as
// in the reference runner; --exit-status decides by exit status instead.
// The first interrupt (or SIGTERM) stops asking for jobs and lets the
// running ones finish and report; a second one kills the running jobs,
// with their process groups, and quits. A lost manager kills them too.
// Exit status: 0 when the manager had no more jobs, 1 on an error or when
// stopped, 2 for a usage error, 3 when the manager banned this runner.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/laboro-go/laboro/protocols/runexp"
	"go.uber.org/zap"
)

const usage = "usage: runexp-runner N -c HOST:PORT [-h NAME] [-g GROUP] [-t .TYPE=PROGRAM]... [--exit-status] [--hold D]"

func main() {
	r := &runexp.Runner{Interpreters: map[string][]string{}}
	for t, argv := range runexp.DefaultInterpreters {
		r.Interpreters[t] = argv
	}
	fs := flag.NewFlagSet("runexp-runner", flag.ContinueOnError)
	fs.StringVar(&r.Addr, "c", "", "the manager's HOST:PORT")
	fs.StringVar(&r.Name, "h", "", "host name to announce (default: the short host name)")
	fs.StringVar(&r.Group, "g", runexp.DefaultGroup, "group")
	fs.Func("t", "job type and the program that runs it, like .py=python3", func(s string) error {
		typ, prog, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(typ, ".") || len(strings.Fields(prog)) == 0 {
			return errors.New("want .TYPE=PROGRAM")
		}
		r.Interpreters[typ] = strings.Fields(prog)
		return nil
	})
	fs.BoolVar(&r.UseExitStatus, "exit-status", false, "decide success by exit status 0")
	fs.DurationVar(&r.HoldWait, "hold", runexp.DefaultHoldWait, "wait after ATENDI before asking again")
	level := zap.InfoLevel
	fs.Var(&level, "log", "log level: debug, info, warn, error")

	args := os.Args[1:]
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") { // "runexp N -c …", as the reference
		args = append(args[1:], args[0])
	}
	err := fs.Parse(args)
	if err == nil && fs.NArg() == 1 {
		r.Workers, err = strconv.Atoi(fs.Arg(0))
	}
	if err != nil || fs.NArg() != 1 || r.Workers < 1 || r.Addr == "" {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level, cfg.DisableStacktrace = zap.NewAtomicLevelAt(level), true
	r.Logger, _ = cfg.Build()

	drain, stopAsking := context.WithCancel(context.Background())
	ctx, quit := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		r.Logger.Warn("interrupted: finishing the running jobs (interrupt again to kill them and quit)")
		stopAsking()
		<-signals
		r.Logger.Warn("interrupted again: killing the running jobs")
		quit()
	}()
	switch err := r.RunDrain(ctx, drain); {
	case err == nil:
	case errors.Is(err, runexp.ErrBanned):
		r.Logger.Error("banned by the manager", zap.Error(err))
		os.Exit(3)
	default:
		r.Logger.Error("runner stopped", zap.Error(err))
		os.Exit(1)
	}
}
