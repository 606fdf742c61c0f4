// Command pulse runs tasks on a pulse controller and two workers in one
// process, over Unix sockets: the controller is a laboro Runner, each
// worker registers on <dir>/main.sock, listens on <dir>/<worker id>.sock,
// and solves each task by giving its bytes to a command on standard input
// (here tr, which upper-cases them); its standard output is the result.
//
//	go run ./examples/pulse
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/pulse"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pulse example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	dir, err := os.MkdirTemp("", "laboro-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The controller: its sockets in a directory of this user's alone.
	c := &pulse.Controller{Dir: filepath.Join(dir, "ctl"), OutputDir: dir}
	ex, err := laboro.New(laboro.WithRunner(c), laboro.WithPoolSize(4), laboro.WithConcurrency(4))
	if err != nil {
		return err
	}
	defer ex.Close()
	ln, err := c.Listen() // main.sock accepts connections once this returns
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- c.ServeListener(runCtx, ln) }()

	// Two workers with the same command: tasks go to whichever is free.
	ran := make(chan error, 2)
	for range 2 {
		worker := &pulse.Worker{Dir: c.Dir, Command: []string{"tr", "a-z", "A-Z"}, OutputDir: dir}
		go func() { ran <- worker.Run(runCtx) }()
	}
	defer func() { stop(); <-served; <-ran; <-ran }()

	// Three tasks, submitted at once, their results read in order.
	var handles []*laboro.Handle
	for _, text := range []string{"first task\n", "second task\n", "third task\n"} {
		h, err := ex.Submit(ctx, pulse.NewTask([]byte(text)))
		if err != nil {
			return err
		}
		handles = append(handles, h)
	}
	for _, h := range handles {
		res, err := h.Wait(ctx)
		if err != nil {
			return err
		}
		out, err := res.Output.ReadAll()
		res.Output.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s %s: %q\n", res.ID, res.Status, out)
	}
	return nil
}
