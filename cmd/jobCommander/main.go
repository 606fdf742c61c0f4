// Command jobCommander sends one command to a jobExecutorServer and prints
// its answer.
//
//	jobCommander serverName portNum issueJob|setConcurrency|stop|poll|exit [args…]
//
// Its exit status is the job's own for issueJob (1 when the job did not run
// or did not exit normally), 0 for a command carried out, 1 when the server
// refused the command or could not be reached, 2 for a usage error, 130
// when interrupted (the server is not disturbed: a job already submitted
// runs on). Set LABORO_TOKEN when the server requires one.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"

	"github.com/laboro-go/laboro/protocols/jobexec"
)

const usage = "usage: jobCommander serverName portNum issueJob <job>|setConcurrency <N>|stop <jobID>|poll|exit"

var commands = map[string]bool{"issueJob": true, "setConcurrency": true, "stop": true, "poll": true, "exit": true}

func main() {
	args := os.Args[1:]
	if len(args) < 3 || !commands[args[2]] {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if port, err := strconv.Atoi(args[1]); err != nil || port <= 0 || port > 65535 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c := &jobexec.Client{Addr: net.JoinHostPort(args[0], args[1]), Token: os.Getenv("LABORO_TOKEN")}
	code, err := c.Do(ctx, args[2], args[3:], os.Stdout)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "jobCommander: interrupted")
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobCommander:", err)
		os.Exit(1)
	}
	os.Exit(code)
}
