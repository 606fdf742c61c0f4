package workerserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/workerserver"
)

// A Master is an Executor's runner: its jobs go to the workers that ping
// it. Here one Worker, in the same process, runs a job with an executable
// that upper-cases its params.
func ExampleMaster() {
	dir, _ := os.MkdirTemp("", "ws-example")
	defer os.RemoveAll(dir)
	codes := filepath.Join(dir, "codes")
	os.Mkdir(codes, 0o755)
	os.WriteFile(filepath.Join(codes, "shout"), []byte("#!/bin/sh\ntr a-z A-Z\n"), 0o755)

	m := &workerserver.Master{Servers: map[string]string{"w1": "secret"}, OutputDir: dir}
	if err := m.Open(filepath.Join(dir, "jobs.db")); err != nil {
		fmt.Println(err)
		return
	}
	ex, _ := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(8), laboro.WithConcurrency(8))
	srv := httptest.NewServer(m.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	w := &workerserver.Worker{URL: srv.URL, ServerID: "w1", Password: "secret", CodeDir: codes,
		CacheDir: filepath.Join(dir, "cache"), Ping: 20 * time.Millisecond}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	defer func() { cancel(); <-ran; srv.Close(); m.Close(); ex.Close() }()

	params := map[string]json.RawMessage{"word": json.RawMessage(`"hello"`)}
	id, _ := m.NewID() // a number, which the reference worker needs too
	h, _ := ex.Submit(ctx, workerserver.NewJob(id, "shout", params))
	res, _ := h.Wait(ctx)
	defer res.Output.Close()
	out, _ := res.Output.ReadAll()
	rec, _ := m.Job(id)
	fmt.Println(id, res.Status, rec.Status, rec.Server)
	fmt.Println(string(out))
	// Output:
	// 1 succeeded Done w1
	// {"WORD":"HELLO"}
}
