// Command runexp serves a folder of experiments to a runner, in one
// process: a runexp.Manager is a laboro Runner, a runexp.Runner connects
// over TCP and runs each job file with its interpreter (a .sh with bash),
// and each result goes to outputs/<name>.res, which the manager skips next
// time.
//
//	go run ./examples/runexp
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/runexp"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "runexp example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	base, err := os.MkdirTemp("", "laboro-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(base)
	// A folder of runs: three experiments; one reports a failure the way
	// the reference's jobs do, with a line starting RES:failed.
	jobs := map[string]string{
		"sweep/a.sh": "echo RES:ok; echo a=1",
		"sweep/b.sh": "echo RES:failed diverged; echo b=2",
		"sweep/c.sh": "echo RES:ok; echo c=3",
	}
	for name, body := range jobs {
		path := filepath.Join(base, "runs", name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(body+"\n"), 0o644); err != nil {
			return err
		}
	}
	folder := runexp.Folder{Runs: filepath.Join(base, "runs"), Outputs: filepath.Join(base, "outputs")}

	// The manager, on a free loopback port, as an Executor's runner.
	m := &runexp.Manager{}
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(8), laboro.WithConcurrency(8))
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
	go func() { served <- m.Serve(runCtx, ln) }()
	defer func() { stop(); <-served }()

	// A runner of two workers, as `runexp-runner 2 -c HOST:PORT` is.
	r := &runexp.Runner{Addr: ln.Addr().String(), Name: "example", Workers: 2}
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()

	// Every job of the folder, each result saved as its .res file.
	todo, _, _, err := folder.Jobs()
	if err != nil {
		return err
	}
	var handles []*laboro.Handle
	for _, j := range todo {
		job, err := folder.Load(j)
		if err != nil {
			return err
		}
		h, err := ex.Submit(ctx, job)
		if err != nil {
			return err
		}
		handles = append(handles, h)
	}
	m.Finish(ex) // no more jobs: the runner is told FINO, and leaves
	for _, h := range handles {
		res, err := h.Wait(ctx)
		if err != nil {
			return err
		}
		if err := folder.Save(res.ID, res.Output); err != nil {
			return err
		}
		res.Output.Close()
		report, _ := os.ReadFile(folder.ResultPath(res.ID))
		first, _, _ := strings.Cut(string(report), "\n")
		fmt.Fprintf(w, "%s %s: %s\n", res.ID, res.Status, first)
	}
	if err := <-ran; err != nil {
		return err
	}
	// Started again, the manager would serve only what did not succeed.
	left, _, _, err := folder.Jobs()
	if err != nil {
		return err
	}
	for _, j := range left {
		fmt.Fprintf(w, "left to run: %s\n", j.Name)
	}
	return nil
}
