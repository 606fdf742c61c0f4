// Command pulse-controller hands tasks to pulse workers and collects their
// results.
//
//	pulse-controller [-dir DIR] [-later] [-attempts N] -in TASKS -out RESULTS
//	pulse-controller [-dir DIR] [-later] [-attempts N] < task > result
//
// Workers register on DIR/main.sock (/run/controller by default). With -in,
// every file of the folder TASKS is a task, and its result is written to
// RESULTS under the same name; without it, standard input is one task and
// its result goes to standard output. Progress goes to standard error, for
// one task as for many: a bar on a terminal, a line of counts every 10 s
// otherwise, log records (every 10 s and as the batch ends) with
// -log-format json. The controller ends when
// every task has its result: status 0 when all succeeded, 1 otherwise, 2
// for a usage error. It ends at once with status 1 when it cannot serve on
// DIR (the directory cannot be created, the socket cannot be bound, or
// another controller answers there).
package main

import (
	"context"
	"errors"
	"os"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/pulse"
	"go.uber.org/zap"
)

func main() {
	c := cli.New("pulse-controller", "[-dir DIR] [-later] [-attempts N] [-in TASKS -out RESULTS]",
		"Hands tasks to pulse workers and collects their results. Workers register on DIR/main.sock. With -in, "+
			"every file of the folder TASKS is a task, and its result is written to RESULTS under the same name; "+
			"without it, standard input is one task and its result goes to standard output. Progress goes to standard "+
			"error (log records with -log-format json). Exit status: 0 when "+
			"every task succeeded, 1 otherwise (and at once when it cannot serve on DIR), 2 for a usage error, "+
			"130 when interrupted (Ctrl-C or SIGTERM: the batch's summary is printed, and the controller started "+
			"again with the same -in and -out runs the tasks left).")
	ctl := &pulse.Controller{}
	c.Flags.StringVar(&ctl.Dir, "dir", pulse.DefaultDir, "directory of the sockets")
	later := c.Flags.Bool("later", false, "speak the reference's later enum numbering (INVALID = 0)")
	c.Flags.IntVar(&ctl.Attempts, "attempts", pulse.DefaultAttempts, "times a task may be given to workers without a result")
	in := c.Flags.String("in", "", "folder of task files (default: one task on stdin)")
	out := c.Flags.String("out", "", "folder for the results (with -in)")
	logFlag := c.LogFlag(zap.InfoLevel)
	c.Main(os.Args[1:], func(ctx context.Context, args []string) error {
		switch {
		case len(args) > 0:
			return cli.Usagef("unexpected argument %q", args[0])
		case (*in == "") != (*out == ""):
			return cli.Usagef("-in and -out go together")
		case ctl.Attempts < 1:
			return cli.Usagef("-attempts %d: must be at least 1", ctl.Attempts)
		}
		if *in != "" {
			// Said before serving: no worker is kept waiting for tasks
			// that cannot be read.
			fi, err := os.Stat(*in)
			if err != nil {
				return cli.Usagef("-in %q: %v", *in, errors.Unwrap(err))
			} else if !fi.IsDir() {
				return cli.Usagef("-in %q: not a directory", *in)
			}
			if o, err := os.Stat(*out); err == nil {
				switch {
				case os.SameFile(fi, o): // its results would be taken for tasks done before
					return cli.Usagef("-out %q: the same directory as -in: the results go elsewhere", *out)
				case !o.IsDir():
					return cli.Usagef("-out %q: not a directory", *out)
				}
			}
		}
		if *later {
			ctl.Codec.Numbering = pulse.LaterNumbering
		}
		ctl.Logger = logFlag.Logger()
		return run(ctx, ctl, *in, *out, logFlag.Progress(progressEvery))
	})
}
