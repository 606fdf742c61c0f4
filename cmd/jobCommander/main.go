// Command jobCommander sends one command to a jobExecutorServer and prints
// its answer.
//
//	jobCommander [-ack-timeout D] serverName portNum issueJob|setConcurrency|stop|poll|exit [args…]
//
// Its exit status is the job's own for issueJob (1 when the job did not run
// or did not exit normally), 0 for a command carried out, 1 for a stop
// that found no such queued job (NOTFOUND) and when the server refused the
// command, could not be reached, or is not a laboro
// jobExecutorServer (no acknowledgement within -ack-timeout, or an answer
// in another protocol), 2 for a usage error, 130
// when interrupted (the server is not disturbed: a job already submitted
// runs on). The server's token is read from $LABORO_TOKEN, else from
// jobexec.token in the user's state directory, where a server started by
// the same user keeps it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/protocols/jobexec"
)

// stderrTail writes the end of a failed job's standard error on standard
// error, under a heading: standard output keeps the server's answer as the
// protocol frames it.
type stderrTail struct{}

func (stderrTail) Write(b []byte) (int, error) {
	fmt.Fprintln(os.Stderr, "jobCommander: the job's standard error (its end):")
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Fprintln(os.Stderr, "  "+l)
	}
	return len(b), nil
}

// jobWhy writes, on standard error, how an issued job ended when it did
// not exit by itself: killed, timed out, or never started.
type jobWhy struct{ said bool }

func (w *jobWhy) Write(b []byte) (int, error) {
	w.said = true
	fmt.Fprintf(os.Stderr, "jobCommander: job %s\n", b) // "job failed: signal: killed"
	return len(b), nil
}

// printQueued prints poll's lines, <job_N, command>, as a JSON array.
func printQueued(lines string) error {
	type queued struct {
		ID      string `json:"id"`
		Command string `json:"command"`
	}
	jobs := []queued{}
	for _, l := range strings.Split(strings.TrimRight(lines, "\n"), "\n") {
		if l == "" {
			continue
		}
		id, command, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(l, "<"), ">"), ", ")
		if !ok {
			return fmt.Errorf("poll answered %q, which is not <job, command>", l)
		}
		jobs = append(jobs, queued{ID: id, Command: command})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(jobs)
}

var commands = map[string]bool{"issueJob": true, "setConcurrency": true, "stop": true, "poll": true, "exit": true}

// checkArgs refuses a command's arguments that the server would refuse,
// before anything is sent: a usage error that names what is wrong.
func checkArgs(command string, args []string) error {
	switch command {
	case "issueJob":
		if len(args) == 0 || strings.TrimSpace(strings.Join(args, " ")) == "" {
			return cli.Usagef("issueJob needs a job: the command line to run")
		}
	case "setConcurrency":
		if len(args) != 1 {
			return cli.Usagef("setConcurrency takes one number, the concurrency level; got %d arguments", len(args))
		}
		if n, err := strconv.Atoi(args[0]); err != nil || n < 0 {
			return cli.Usagef("setConcurrency %q: must be a whole number, 0 or more", args[0])
		}
	case "stop":
		if len(args) != 1 {
			return cli.Usagef("stop takes one job id (as issueJob printed it); got %d arguments", len(args))
		}
	default: // poll, exit
		if len(args) != 0 {
			return cli.Usagef("%s takes no arguments; got %q", command, strings.Join(args, " "))
		}
	}
	return nil
}

func main() {
	c := cli.New("jobCommander", "[-ack-timeout D] [-json] serverName portNum issueJob <job>|setConcurrency <N>|stop <jobID>|poll|exit",
		"Sends one command to a jobExecutorServer and prints its answer. The exit status of issueJob is the job's own; "+
			"stop's is 1 when no such job is queued (NOTFOUND). "+
			"The server's token comes from $LABORO_TOKEN, else from jobexec.token in the user's state directory "+
			"(~/.local/state/laboro), where a server of the same user keeps it.")
	ackTimeout := c.Flags.Duration("ack-timeout", jobexec.DefaultAckTimeout,
		"how long the server may take to acknowledge the command (and to answer any command but issueJob)")
	c.Positive("ack-timeout")
	asJSON := c.Flags.Bool("json", false, "for poll: print the queued jobs as a JSON array of {id, command}, for programs")
	// Flags end at serverName: what follows is the command's, flags included.
	c.Main(os.Args[1:], func(ctx context.Context, cmd []string) error {
		switch {
		case len(cmd) < 3:
			return cli.Usagef("serverName, portNum and a command are required")
		case strings.HasPrefix(cmd[2], "-"):
			return cli.Usagef("%s after serverName and portNum: flags go before them (jobCommander %s %s %s …)",
				cmd[2], cmd[2], cmd[0], cmd[1])
		case !commands[cmd[2]]:
			return cli.Usagef("unknown command %q", cmd[2])
		case *asJSON && cmd[2] != "poll":
			return cli.Usagef("-json is for poll, not %s", cmd[2])
		}
		if port, err := strconv.Atoi(cmd[1]); err != nil || port < 1 || port > 65535 {
			return cli.Usagef("portNum %q: must be a number from 1 to 65535", cmd[1])
		}
		if err := checkArgs(cmd[2], cmd[3:]); err != nil {
			return err
		}
		token, tokenErr := secret.Find("jobexec", "LABORO_TOKEN")
		var why jobWhy
		client := &jobexec.Client{Addr: net.JoinHostPort(cmd[0], cmd[1]), Token: token, AckTimeout: *ackTimeout,
			Stderr: stderrTail{}, Why: &why}
		var out io.Writer = os.Stdout
		var polled bytes.Buffer
		if *asJSON {
			out = &polled
		}
		code, err := client.Do(ctx, cmd[2], cmd[3:], out)
		if err == nil && *asJSON {
			if err := printQueued(polled.String()); err != nil {
				return err
			}
		}
		switch {
		case ctx.Err() != nil:
			return cli.ErrInterrupted
		case errors.Is(err, jobexec.ErrRefused) && strings.HasSuffix(err.Error(), "wrong token"):
			if tokenErr != nil {
				return fmt.Errorf("%w: %w; copy the server's jobexec.token there, or set LABORO_TOKEN", err, tokenErr)
			}
			return fmt.Errorf("%w: this token is not the server's (from $LABORO_TOKEN or jobexec.token)", err)
		case errors.Is(err, jobexec.ErrServerUnproven):
			return fmt.Errorf("%w; this token is from $LABORO_TOKEN or jobexec.token", err)
		case errors.Is(err, syscall.ECONNREFUSED):
			return fmt.Errorf("no jobExecutorServer answers at %s (is it running, on this port?): %w", client.Addr, err)
		case err != nil:
			return err
		case cmd[2] == "issueJob" && code != 0 && !why.said:
			// Said, as the exit status alone is ambiguous: a job's 1 or
			// 2 is also this command's own for a refusal or a usage error.
			fmt.Fprintf(os.Stderr, "jobCommander: the job exited with status %d\n", code)
		}
		return cli.Exit(code)
	})
}
