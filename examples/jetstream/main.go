// Command jetstream runs a few shell jobs through laboro on NATS JetStream,
// with every part in this one process: an embedded NATS server with a
// token, the Service that dispatches jobs, a Worker that runs them, and a
// Client that submits a batch, waits for it and reads each job's outcome.
// On many machines, the same parts run in different processes (see the
// laboro command), each connected with the token of its role.
//
//	go run ./examples/jetstream
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/jetstream"
	"github.com/nats-io/nats.go"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "jetstream example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	dir, err := os.MkdirTemp("", "laboro-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// 1. A NATS server with JetStream inside this process, on a free
	// loopback port, admitting only the clients that hold the token.
	const token = "an example token: make yours with crypto/rand"
	srv, err := jetstream.StartEmbedded(dir+"/nats", "127.0.0.1", -1, jetstream.WithToken(token))
	if err != nil {
		return err
	}
	defer srv.Shutdown()

	// 2. Three connections, one per role: the service has every right
	// but deleting; the worker and the client only what they need.
	connect := func(tok string) (*nats.Conn, error) { return nats.Connect(srv.URL(), jetstream.Token(tok)) }
	serviceConn, err := connect(token)
	if err != nil {
		return err
	}
	defer serviceConn.Close()
	workerConn, err := connect(jetstream.RoleToken(token, jetstream.RoleWorker, ""))
	if err != nil {
		return err
	}
	defer workerConn.Close()
	clientConn, err := connect(jetstream.RoleToken(token, jetstream.RoleClient, ""))
	if err != nil {
		return err
	}
	defer clientConn.Close()

	// 3. The service and a worker running two jobs at a time, until ctx
	// ends (stop, below).
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- (&jetstream.Service{Conn: serviceConn, Concurrency: 4}).Run(runCtx) }()
	go func() {
		done <- (&jetstream.Worker{Conn: workerConn, Concurrency: 2, OutputDir: dir}).Run(runCtx)
	}()
	defer func() {
		stop()
		<-done
		<-done
	}()

	// 4. A batch of three jobs, one of which fails.
	client := &jetstream.Client{Conn: clientConn, Config: jetstream.Config{Dir: dir}}
	ids, err := client.Submit(ctx, "example", []laboro.Job{
		{Command: "echo hello from a worker"},
		{Script: "echo 'no input file' >&2; exit 3"},
		{Args: []string{"printf", "%s\\n", "args, boundaries kept"}},
	})
	if err != nil {
		return err
	}
	batch, err := client.Wait(ctx, "example", len(ids), 50*time.Millisecond, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "batch %s: %d jobs, %d succeeded, %d failed\n", batch.Batch, batch.Jobs, batch.Succeeded, batch.Failed)

	// 5. Each job's outcome, output included, from the RESULTS stream.
	for _, id := range ids {
		res, err := client.Result(ctx, id)
		if err != nil {
			return err
		}
		out, err := res.Output.ReadAll()
		res.Output.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s %s, exit %d: %q", id, res.Status, res.ExitCode, out)
		if len(res.Stderr) > 0 {
			fmt.Fprintf(w, ", stderr %q", res.Stderr)
		}
		fmt.Fprintln(w)
	}
	return nil
}
