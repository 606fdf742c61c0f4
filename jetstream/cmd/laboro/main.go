// Command laboro runs shell jobs on NATS JetStream, on one machine or many.
//
//	laboro run    [-workers N] [-results DIR] [-joblog FILE [-resume|-resume-failed]] [-retries N] [-halt now|soon,fail=N] (-f FILE | COMMAND…)
//	laboro serve  [-nats URL,…] [-data DIR] [-listen HOST:PORT] [-tls-cert FILE -tls-key FILE] [-workers N] [-c N]
//	laboro worker [-nats URL,…] [-ca FILE] [-c N] [-dir DIR]
//	laboro submit [-nats URL,…] [-batch NAME] [-wait] (-f FILE | COMMAND…)
//	laboro status [-nats URL,…] [-watch] [-failed] [BATCH|ID…]
//	laboro output [-nats URL,…] ID…
//	laboro cancel [-nats URL,…] ID…
//	laboro token  [-stream NAME] (worker | client)
//
// Jobs are shell command lines: the COMMAND words joined by spaces, or,
// with -f, each non-empty line of FILE ("-" is standard input) that does
// not start with '#'.
//
// run runs jobs on this machine through the core Executor and waits for
// them: nothing to set up, no server. -results keeps each job's stdout,
// stderr, exit status and command in DIR/<seq>/; -joblog appends a line per
// job that ended as GNU parallel does (Seq, Host, Starttime, JobRuntime,
// Send, Receive, Exitval, Signal, Command; Exitval -1 for a job killed or
// never started), from which -resume runs the jobs not in the log and
// -resume-failed those that did not succeed; -retries runs a failing job
// up to N times in all; -halt stops after N failures, now (killing the
// running jobs) or soon (letting them finish). A job that a halt or an
// interrupt kills, or that never starts, is left out of the log: -resume
// runs it again.
//
// serve runs the service that dispatches submitted jobs. With no -nats it
// starts a NATS server with JetStream inside the process, storing its data
// under -data and listening on -listen (127.0.0.1:4222), and runs -workers
// jobs at a time itself (the number of CPUs): one command runs everything
// on one machine, and its jobs survive its restart. With -nats it connects
// to an existing NATS cluster instead, and workers run wherever `laboro
// worker` runs.
//
// worker runs jobs on this machine, -c at a time, until interrupted. It
// waits for the server when it is not up yet, and reconnects when it goes
// away. The first interrupt (SIGINT or SIGTERM) lets the running jobs finish
// and deliver their results, then it exits; a second one kills them, and
// they run again elsewhere. serve stops the same way: its service at once,
// its local jobs after they finish.
//
// submit stores jobs and prints the job's id, or the batch's name, on
// standard output. With -wait it waits for the jobs, as run does.
//
// run and submit -wait print a single job's output and return its exit
// status; for a batch they show progress on a terminal, then print a
// summary line and the jobs that did not succeed, and return 1 if any did
// not: run on standard error, as its standard output carries the jobs'
// outputs; submit -wait on standard output, as the batch's outputs stay
// with the service (laboro output).
//
// status prints every batch, or the batches and jobs named; -watch follows
// one batch until it is done, -failed lists the jobs that did not succeed.
// output prints the output of finished jobs, waiting for those still
// running (it refuses ids the service does not know). cancel has the
// service cancel jobs: one waiting never runs, one running is killed by its
// worker, and both end cancelled; it prints their states after the request.
//
// The commands other than run and serve reach NATS at -nats, $LABORO_NATS,
// or nats://127.0.0.1:4222. serve's embedded server requires a token from
// every client: $LABORO_TOKEN, else laboro.token in the user's state
// directory, which serve makes at its first start and the commands read;
// no job sees it, and it never crosses the wire (each command proves it
// with an HMAC of the server's nonce; a server that offers none is not
// serve's, and is connected to without the token); a worker runs only the
// jobs serve signed with its key. With -tls-cert and -tls-key the embedded
// server speaks TLS (serve warns when it listens beyond the loopback
// without), and the other commands verify it with -ca. Each command
// connects with its role's rights only (a worker's, or a client's for
// submit, status, output and cancel); token prints the token of a role,
// for a machine that is to have only that.
// -creds gives a credentials file for a cluster that wants one; a user and
// password or a token written in a NATS URL are used, but shown nowhere
// (logs, errors) and left out of the jobs' $LABORO_NATS. Logs go to
// standard error. Exit status: 0 on success, 1 when a job failed (or, for
// status and cancel, is unknown) or NATS or the service cannot be reached,
// 2 for a usage error, 130 when interrupted.
//
// The subcommands live in package jetstream/internal/command.
package main

import (
	"os"

	"github.com/laboro-go/laboro/jetstream/internal/command"
)

func main() {
	os.Exit(command.Main(os.Args[1:]))
}
