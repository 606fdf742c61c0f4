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
// Exit status: 0 when the manager had no more jobs, 130 when an interrupt
// stopped it once its running jobs had reported, 1 on an error or a second
// interrupt, 2 for a usage error, 3 when the manager banned this runner.
package main

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/runexp"
	"go.uber.org/zap"
)

func main() {
	c := cli.New("runexp-runner", "N -c HOST:PORT [-h NAME] [-g GROUP] [-t .TYPE=PROGRAM]... [--exit-status] [--hold D]",
		"Runs the jobs of a runexp manager in N parallel workers. As in the reference runner, -h is the host name to "+
			"announce; --help shows this help. The first interrupt stops asking for jobs and lets the running ones "+
			"finish and report; a second one kills them and quits. Exit status: 0 when the manager had no more jobs, "+
			"130 when an interrupt stopped it once its running jobs had reported, 1 on an error or a second interrupt, "+
			"2 for a usage error, 3 when the manager banned this runner.")
	r := &runexp.Runner{Interpreters: map[string][]string{}}
	for t, argv := range runexp.DefaultInterpreters {
		r.Interpreters[t] = argv
	}
	c.Flags.StringVar(&r.Addr, "c", "", "the manager's HOST:PORT")
	c.Flags.StringVar(&r.Name, "h", "", "host name to announce (default: the short host name)")
	c.Flags.StringVar(&r.Group, "g", runexp.DefaultGroup, "group")
	c.Flags.Func("t", "job type and the program that runs it, like .py=python3 (repeatable)", func(s string) error {
		typ, prog, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(typ, ".") || len(strings.Fields(prog)) == 0 {
			return errors.New("want .TYPE=PROGRAM")
		}
		r.Interpreters[typ] = strings.Fields(prog)
		return nil
	})
	c.Flags.BoolVar(&r.UseExitStatus, "exit-status", false, "decide success by exit status 0")
	c.Flags.DurationVar(&r.HoldWait, "hold", runexp.DefaultHoldWait, "wait after ATENDI before asking again (at most 1s while other jobs run, less when another worker receives or reports a job, none when the manager held the request waiting for work)")
	c.Positive("hold")
	logFlag := c.LogFlag(zap.InfoLevel)

	args := os.Args[1:]
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") { // "runexp N -c …", as the reference
		args = append(args[1:], args[0])
	}
	c.Main(args, func(_ context.Context, args []string) error {
		switch {
		case len(args) == 0:
			return cli.Usagef("N, the number of workers, is required")
		case len(args) > 1:
			// N was moved to the end (above): the others are extra.
			return cli.Usagef("unexpected argument %q", args[0])
		}
		n, err := strconv.Atoi(args[0])
		switch {
		case err != nil || n < 1 || n > cli.MaxAtOnce:
			return cli.Usagef("N %q: must be a number from 1 to %d", args[0], cli.MaxAtOnce)
		case r.Addr == "":
			return cli.Usagef("-c HOST:PORT is required")
		}
		if err := cli.CheckAddr("c", r.Addr); err != nil {
			return err
		}
		r.Workers, r.Logger = n, logFlag.Logger()
		drain, kill, stop := cli.Interrupts(context.Background(), func() {
			r.Logger.Warn("interrupted: finishing the running jobs (interrupt again to kill them and quit)")
		}, func() {
			r.Logger.Warn("interrupted again: killing the running jobs")
		})
		defer stop()
		switch err := r.RunDrain(kill, drain); {
		case err == nil:
			return nil
		case errors.Is(err, runexp.ErrBanned):
			return &cli.ExitError{Code: 3, Err: err}
		case kill.Err() != nil:
			return cli.Exit(cli.ExitFailed) // the jobs were killed, as asked
		default:
			return err
		}
	})
}
