// Command fuq-foreman runs fuq jobs on the workers that connect to it, and
// is also how a user submits jobs to it and follows them.
//
//	fuq-foreman [serve] [-listen ADDR] [-web ADDR -tls-cert FILE -tls-key FILE [-auth-file FILE]] [-control SOCKET] [-journal FILE] [-grace D] [-max-tasks N] [-keep-tasks N] [-keep-jobs N] [-log LEVEL]
//	fuq-foreman submit [-wait [-stall D]] -name NAME -command CMD -tasks N [-wd DIR] [-logdir DIR] [-log LEVEL] [-log-format FORMAT]
//	fuq-foreman status [-tasks] [-json] [-log-format FORMAT] [JOB]
//	fuq-foreman cancel [-log-format FORMAT] JOB
//	fuq-foreman stop [-log-format FORMAT] N|now                              STOP(N) to every worker
//
// serve takes workers of this project on -listen (plain TCP, the spec's
// conversation; 127.0.0.1:7720 by default), and with -web also the
// reference's workers (fuqsrv -dispatch) over HTTPS and a websocket, with
// the certificate and key of -tls-cert and -tls-key. Either way a worker
// must prove it holds the shared secret: from -auth-file (the secret
// alone, or the reference's fuqsrv.conf), else $FUQ_AUTH, else fuq.token
// in the user's state directory (~/.local/state/laboro), created with a
// new token at the first start. fuq-worker reads the same file when run by
// the same user; elsewhere, give it a copy.
//
// The foreman keeps its jobs and the outcomes of their tasks in a journal
// (-journal, fuq-foreman.journal in the state directory by default): killed
// and started again, it resumes them, job ids and task numbers unchanged,
// and submit -wait waits for it across the restart.
//
// The running foreman serves the other commands on a Unix socket
// (-control, $XDG_RUNTIME_DIR/fuq-foreman.sock or
// /tmp/fuq-foreman-UID/control.sock by default), readable by its user only;
// a client refuses a socket that another user serves. submit prints the job's id
// (job_1, …); with -wait it waits for the job and exits 0 only if every task
// succeeded. A foreman that stops answering meanwhile (stopped, overloaded)
// is waited for as long as it takes, which -wait says on standard error
// once it has not answered for -stall (a minute), then every five times as
// long, and when it answers again. Its progress is a bar on a terminal,
// else a line of counts every 10 s; with -log-format json, standard error
// is one JSON object a line: the progress is records of the logger
// "progress", and what it says, and the error it ends with, are records
// too. status, cancel and stop print what they are asked on standard
// output; with -log-format json, the error one ends with is a record.
// Exit status 2 is a usage error.
package main

import (
	"context"
	"os"
	"time"

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
			{Name: "serve", Synopsis: "[-listen ADDR] [-web ADDR -tls-cert FILE -tls-key FILE [-auth-file FILE]] [-control SOCKET] [-journal FILE] [-grace D] [-max-tasks N] [-keep-tasks N] [-keep-jobs N] [-log LEVEL]",
				Doc: "Serves workers on -listen (plain TCP, the loopback by default) and, with -web, the reference's " +
					"workers over HTTPS and a websocket; and the other commands on -control, until interrupted. Workers " +
					"must prove they hold the shared secret: from -auth-file, else $" + fuq.AuthEnv + ", else fuq.token " +
					"in ~/.local/state/laboro, created at the first start (fuq-worker of the same user reads it).", Setup: serveCommand},
			{Name: "submit", Synopsis: "[-wait [-stall D]] -name NAME -command CMD -tasks N [-wd DIR] [-logdir DIR] [-log LEVEL] [-log-format FORMAT]",
				Doc: "Submits a job of N tasks, each running CMD <task number>, and prints its id; with -wait, waits for " +
					"it and exits 0 only if every task succeeded, however long the foreman takes to answer (said on " +
					"standard error after -stall); with -log-format json, everything on standard error is a log record.", Setup: submitCommand},
			{Name: "status", Synopsis: "[-tasks] [-json] [-log-format FORMAT] [JOB]", Doc: "Prints every job, or JOB; -tasks lists the tasks.", Setup: statusCommand},
			{Name: "cancel", Synopsis: "[-log-format FORMAT] JOB", Doc: "Cancels a job: its pending tasks are dropped and its running ones killed.", Setup: cancelCommand},
			{Name: "stop", Synopsis: "[-log-format FORMAT] N|now", Doc: "Sends STOP(N) to every worker: each gives up N processors (0: all, once " +
				"its tasks end); now makes them exit at once.", Setup: stopCommand},
		},
	}
	s.Main(os.Args[1:])
}

// limits are the foreman's bounds on jobs.
type limits struct {
	tasks                 int // of one job
	endedTasks, endedJobs int // remembered once ended
	// control replaces the control socket's timeouts when not 0 (tests).
	control time.Duration
}

func (l limits) check() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"max-tasks", l.tasks}, {"keep-tasks", l.endedTasks}, {"keep-jobs", l.endedJobs}} {
		if f.v < 1 {
			return cli.Usagef("-%s %d: must be at least 1", f.name, f.v)
		}
	}
	return nil
}

// controlFlag defines -control, the foreman's control socket.
func controlFlag(c *cli.Command) *string {
	return c.Flags.String("control", defaultSocket(), "the control socket")
}

func serveCommand(c *cli.Command) func(context.Context, []string) error {
	control := controlFlag(c)
	listen := c.Flags.String("listen", "127.0.0.1:7720", "address workers connect to (\":7720\" for every interface)")
	grace := c.Flags.Duration("grace", fuq.DefaultGrace, "how long a vanished worker's tasks wait for it")
	c.Positive("grace")
	var lim limits
	c.Flags.IntVar(&lim.tasks, "max-tasks", fuq.DefaultMaxTasks, "the most tasks one job may have")
	c.Flags.IntVar(&lim.endedTasks, "keep-tasks", fuq.DefaultMaxEndedTasks, "the most tasks of ended jobs the foreman remembers (for status); the oldest jobs are forgotten first")
	c.Flags.IntVar(&lim.endedJobs, "keep-jobs", fuq.DefaultMaxEndedJobs, "the most ended jobs the foreman remembers")
	journal := c.Flags.String("journal", "", "the file that keeps the jobs across restarts (default fuq-foreman.journal in ~/.local/state/laboro)")
	var web webFlags
	c.Flags.StringVar(&web.listen, "web", "", "address the reference's workers connect to, over HTTPS (off by default)")
	c.Flags.StringVar(&web.cert, "tls-cert", "", "the HTTPS certificate (PEM), with -web")
	c.Flags.StringVar(&web.key, "tls-key", "", "the HTTPS certificate's key (PEM), with -web")
	c.Flags.StringVar(&web.auth, "auth-file", "", "the workers' shared secret, alone or as fuqsrv.conf's auth line (default $"+fuq.AuthEnv+", else the state directory's fuq.token)")
	logFlag := c.LogFlag(zap.InfoLevel)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return cli.Usagef("unexpected argument %q", args[0])
		}
		if err := web.check(); err != nil {
			return err
		}
		if err := cli.CheckAddr("listen", *listen); err != nil {
			return err
		}
		if err := lim.check(); err != nil {
			return err
		}
		return serve(ctx, *listen, *control, *journal, *grace, lim, web, logFlag.Logger(), logFlag.Records())
	}
}
