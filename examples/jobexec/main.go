// Command jobexec runs the job executor server and its commander in one
// process: a jobexec.Server over a laboro.Executor, listening on a free
// loopback port with a token, and a jobexec.Client that sends it the
// commands the jobCommander binary sends: issueJob, setConcurrency, poll,
// and exit, which drains the server.
//
//	go run ./examples/jobexec
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/jobexec"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "jobexec example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	dir, err := os.MkdirTemp("", "laboro-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The server: 8 jobs may wait, 5 may run, 1 at a time for now; each
	// job's output goes to <pid>.output in dir until it is sent.
	ex, err := laboro.New(laboro.WithBufferSize(8), laboro.WithPoolSize(5), laboro.WithConcurrency(1),
		laboro.WithOutputDir(dir))
	if err != nil {
		return err
	}
	defer ex.Close()
	const token = "an example token: make yours with crypto/rand"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- (&jobexec.Server{Executor: ex, Token: token}).Serve(ctx, ln) }()

	// The commander: each Do is one connection and one command, whose
	// answer is written to w as jobCommander prints it.
	client := &jobexec.Client{Addr: ln.Addr().String(), Token: token, Stderr: w}
	do := func(command string, args ...string) error {
		fmt.Fprintf(w, "$ jobCommander %s %v\n", command, args)
		code, err := client.Do(ctx, command, args, w)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "(exit status %d)\n", code)
		return nil
	}
	for _, step := range [][]string{
		{"issueJob", "echo", "hello", "from", "the", "server"},
		{"setConcurrency", "2"},
		{"issueJob", "sh", "-c", "echo 'why it failed' >&2; exit 3"}, // its stderr's end comes to Stderr
		{"poll"},
		{"exit"},
	} {
		if err := do(step[0], step[1:]...); err != nil {
			return err
		}
	}
	// After exit, Serve returns once the server has drained.
	if err := <-served; !errors.Is(err, jobexec.ErrServerTerminated) {
		return fmt.Errorf("the server ended with %v", err)
	}
	return nil
}
