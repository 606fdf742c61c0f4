package jobexec_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/jobexec"
)

// A server on a loopback port, one job sent by a Client, then exit.
func ExampleServer() {
	dir, _ := os.MkdirTemp("", "jobexec-example")
	defer os.RemoveAll(dir)
	ex, err := laboro.New(laboro.WithOutputDir(dir), laboro.WithBufferSize(8), laboro.WithPoolSize(2))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := &jobexec.Server{Executor: ex}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), ln) }()

	ctx := context.Background()
	c := &jobexec.Client{Addr: ln.Addr().String()}
	code, err := c.Do(ctx, "issueJob", []string{"echo", "hello"}, os.Stdout)
	fmt.Println("status", code, err)
	c.Do(ctx, "exit", nil, os.Stdout)
	fmt.Println(errors.Is(<-served, jobexec.ErrServerTerminated))
	// Output:
	// JOB <job_1, echo hello> SUBMITTED
	// -----job_1 output start-----
	// hello
	// -----job_1 output end-----
	// status 0 <nil>
	// SERVER TERMINATED
	// true
}

// Do prints what the server answers, as jobCommander does, and returns the
// commander's exit status; a refused command is an error matching
// ErrRefused.
func ExampleClient_Do() {
	dir, _ := os.MkdirTemp("", "jobexec-example")
	defer os.RemoveAll(dir)
	ex, _ := laboro.New(laboro.WithOutputDir(dir))
	defer ex.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- (&jobexec.Server{Executor: ex, Token: "s3cret"}).Serve(ctx, ln) }()
	defer func() { cancel(); <-served }()

	c := &jobexec.Client{Addr: ln.Addr().String(), Token: "s3cret"}
	code, err := c.Do(ctx, "setConcurrency", []string{"3"}, os.Stdout)
	fmt.Println("status", code, err)
	_, err = c.Do(ctx, "setConcurrency", []string{"-1"}, os.Stdout)
	fmt.Println(errors.Is(err, jobexec.ErrRefused))
	// Output:
	// CONCURRENCY SET AT 3
	// status 0 <nil>
	// true
}
