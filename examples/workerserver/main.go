// Command workerserver runs jobs through a workerserver master and a
// worker in one process, over HTTP: the master is a laboro Runner that
// keeps every job and status in a bbolt file, the worker pings it for
// work and runs each job's worker code (an executable in its codes
// folder) with the job's params as JSON on standard input; the code's
// standard output, JSON, is the job's result.
//
//	go run ./examples/workerserver
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/workerserver"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "workerserver example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	dir, err := os.MkdirTemp("", "laboro-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Two worker codes: shout upper-cases its params; picky refuses them.
	codes := filepath.Join(dir, "codes")
	if err := os.Mkdir(codes, 0o755); err != nil {
		return err
	}
	for name, script := range map[string]string{
		"shout": "#!/bin/sh\ntr a-z A-Z\n",
		"picky": "#!/bin/sh\necho 'picky: no params I like' >&2\nexit 4\n",
	} {
		if err := os.WriteFile(filepath.Join(codes, name), []byte(script), 0o755); err != nil {
			return err
		}
	}

	// The master: the workers allowed in, with their passwords, and its
	// job table, which a restarted master reads back.
	m := &workerserver.Master{Servers: map[string]string{"w1": "an example password"}, OutputDir: dir}
	if err := m.Open(filepath.Join(dir, "jobs.db")); err != nil {
		return err
	}
	defer m.Close()
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(8), laboro.WithConcurrency(8))
	if err != nil {
		return err
	}
	defer ex.Close()
	srv := httptest.NewServer(m.Handler()) // a real master serves on the loopback, or with TLS
	defer srv.Close()

	// A worker that runs the codes of its folder, asking for work every
	// 100 ms while it is idle.
	worker := &workerserver.Worker{URL: srv.URL, ServerID: "w1", Password: "an example password",
		CodeDir: codes, CacheDir: filepath.Join(dir, "cache"), Ping: 100 * time.Millisecond}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(runCtx) }()
	defer func() { stop(); <-ran }()

	// Two jobs, with numbers for ids as the reference worker needs.
	for _, code := range []string{"shout", "picky"} {
		id, err := m.NewID()
		if err != nil {
			return err
		}
		params := map[string]json.RawMessage{"word": json.RawMessage(`"hello"`)}
		h, err := ex.Submit(ctx, workerserver.NewJob(id, code, params))
		if err != nil {
			return err
		}
		res, err := h.Wait(ctx)
		if err != nil {
			return err
		}
		var out []byte
		if res.Output != nil { // a failed job has none
			out, _ = res.Output.ReadAll()
			res.Output.Close()
		}
		rec, ok := m.Job(id)
		if !ok {
			return fmt.Errorf("job %s is not in the master's table", id)
		}
		fmt.Fprintf(w, "job %s (%s): %s on %s\n", id, code, rec.Status, rec.Server)
		if res.Err != nil {
			fmt.Fprintf(w, "  why: %v\n", res.Err)
		} else {
			fmt.Fprintf(w, "  result: %s\n", bytes.TrimSpace(out))
		}
	}
	return nil
}
