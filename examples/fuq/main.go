// Command fuq runs a fuq job of several tasks on a foreman and a worker in
// one process: the foreman is a laboro Runner (jobs go to it through an
// Executor), the worker connects over TCP, proves it holds the shared
// secret, and runs each task as COMMAND <task number>, its output in
// <name>_<task>.log.
//
//	go run ./examples/fuq
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/fuq"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fuq example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	dir, err := os.MkdirTemp("", "laboro-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The program each task runs: task 3 fails.
	sim := filepath.Join(dir, "sim")
	script := "#!/bin/sh\nif [ \"$1\" = 3 ]; then echo \"no input for task $1\" >&2; exit 3; fi\necho \"task $1 computed $(($1 * $1))\"\n"
	if err := os.WriteFile(sim, []byte(script), 0o755); err != nil {
		return err
	}

	// The foreman, on a free loopback port, and the Executor that feeds it.
	secret := []byte("an example secret: make yours with crypto/rand")
	foreman := &fuq.Foreman{Secret: secret}
	ex, err := laboro.New(laboro.WithRunner(foreman))
	if err != nil {
		return err
	}
	defer ex.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- foreman.Serve(runCtx, ln) }()

	// A worker with two processors; it keeps the outcomes of its tasks in
	// its spool while the foreman is away.
	worker := &fuq.Worker{Addr: ln.Addr().String(), Secret: secret, Procs: 2, SpoolDir: filepath.Join(dir, "spool")}
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(runCtx) }()
	defer func() { stop(); <-served; <-ran }()

	// One job of four tasks, its logs in dir.
	h, err := ex.Submit(ctx, fuq.NewJob("sweep", sim, 4, dir, dir))
	if err != nil {
		return err
	}
	res, err := h.Wait(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "job %s %s\n", res.ID, res.Status)
	info, _ := foreman.JobByRef(h.ID())
	for _, t := range info.Tasks {
		log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("sweep_%d.log", t.Task)))
		fmt.Fprintf(w, "task %d %s (%s): log %q\n", t.Task, t.State, t.Status, log)
	}
	return nil
}
