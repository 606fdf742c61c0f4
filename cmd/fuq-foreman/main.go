// Command fuq-foreman runs fuq jobs on the workers that connect to it, and
// is also how a user submits jobs to it and follows them.
//
//	fuq-foreman [serve] [-listen ADDR] [-control SOCKET] [-grace D] [-log LEVEL]
//	fuq-foreman submit [-wait] -name NAME -command CMD -tasks N [-wd DIR] [-logdir DIR]
//	fuq-foreman status [-tasks] [JOB]
//	fuq-foreman cancel JOB
//	fuq-foreman stop N|now                                                   STOP(N) to every worker
//
// The running foreman serves the other commands on a Unix socket
// (-control, $XDG_RUNTIME_DIR/fuq-foreman.sock or /tmp/fuq-foreman-UID.sock
// by default), readable by its user only. submit prints the job's id
// (job_1, …); with -wait it waits for the job and exits 0 only if every task
// succeeded. Exit status 2 is a usage error.
package main

import (
	"context"
	"os"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/fuq"
	"go.uber.org/zap"
)

func main() {
	s := &cli.Suite{
		Name: "fuq-foreman",
		Doc: "Runs fuq jobs on the workers that connect to it, and is also how a user submits jobs to it and follows " +
			"them: the running foreman serves the other commands on a Unix socket readable by its user only.",
		Default: "serve",
		Commands: []cli.Subcommand{
			{Name: "serve", Synopsis: "[-listen ADDR] [-control SOCKET] [-grace D] [-log LEVEL]",
				Doc: "Serves workers on -listen and the other commands on -control, until interrupted.", Setup: serveCommand},
			{Name: "submit", Synopsis: "[-wait] -name NAME -command CMD -tasks N [-wd DIR] [-logdir DIR]",
				Doc: "Submits a job of N tasks, each running CMD <task number>, and prints its id; with -wait, waits for " +
					"it and exits 0 only if every task succeeded.", Setup: submitCommand},
			{Name: "status", Synopsis: "[-tasks] [JOB]", Doc: "Prints every job, or JOB; -tasks lists the tasks.", Setup: statusCommand},
			{Name: "cancel", Synopsis: "JOB", Doc: "Cancels a job: its pending tasks are dropped and its running ones killed.", Setup: cancelCommand},
			{Name: "stop", Synopsis: "N|now", Doc: "Sends STOP(N) to every worker: each gives up N processors (0: all, once " +
				"its tasks end); now makes them exit at once.", Setup: stopCommand},
		},
	}
	s.Main(os.Args[1:])
}

// controlFlag defines -control, the foreman's control socket.
func controlFlag(c *cli.Command) *string {
	return c.Flags.String("control", defaultSocket(), "the control socket")
}

func serveCommand(c *cli.Command) func(context.Context, []string) error {
	control := controlFlag(c)
	listen := c.Flags.String("listen", ":7720", "address workers connect to")
	grace := c.Flags.Duration("grace", fuq.DefaultGrace, "how long a vanished worker's tasks wait for it")
	logFlag := c.LogFlag(zap.InfoLevel)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return cli.Usagef("unexpected argument %q", args[0])
		}
		return serve(ctx, *listen, *control, *grace, logFlag.Logger())
	}
}
