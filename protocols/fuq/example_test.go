package fuq_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/fuq"
)

// A Foreman runs an Executor's fuq jobs on the workers that connect to it;
// here one Worker of two processors, in the same process, runs a job of
// three tasks.
func ExampleForeman() {
	dir, _ := os.MkdirTemp("", "fuq-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	f := &fuq.Foreman{}
	ex, _ := laboro.New(laboro.WithRunner(f))
	defer ex.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	served := make(chan error, 1)
	go func() { served <- f.Serve(ctx, ln) }()
	w := &fuq.Worker{Addr: ln.Addr().String(), Procs: 2, SpoolDir: filepath.Join(dir, "spool")}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	defer func() { cancel(); <-served; <-ran }()

	h, _ := ex.Submit(ctx, fuq.NewJob("greet", "/bin/echo", 3, dir, dir))
	res, _ := h.Wait(ctx)
	fmt.Println(res.Status)
	info, _ := f.JobByRef(h.ID())
	for _, t := range info.Tasks {
		log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("greet_%d.log", t.Task)))
		fmt.Printf("task %d: %s, log %q\n", t.Task, t.State, log)
	}
	// Output:
	// succeeded
	// task 1: done, log "1\n"
	// task 2: done, log "2\n"
	// task 3: done, log "3\n"
}

// ServeWeb serves workers as the reference fuq does, over HTTPS and a
// websocket; a Worker with Web joins it so (as it joins the reference's
// fuqsrv). Here, in one process, over plain HTTP: a real foreman gives
// WebConfig.TLS a certificate, and its workers WebDialer.TLS its CA.
func ExampleForeman_ServeWeb() {
	dir, _ := os.MkdirTemp("", "fuq-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	secret := []byte("the secret of fuqsrv.conf's auth line")

	f := &fuq.Foreman{}
	ex, _ := laboro.New(laboro.WithRunner(f))
	defer ex.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	served := make(chan error, 1)
	go func() { served <- f.ServeWeb(ctx, ln, fuq.WebConfig{Auth: secret}) }()
	w := &fuq.Worker{
		Web:   &fuq.WebDialer{URL: "http://" + ln.Addr().String(), Auth: secret, Node: "example"},
		Procs: 2, SpoolDir: filepath.Join(dir, "spool"),
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	defer func() { cancel(); <-served; <-ran }()

	h, _ := ex.Submit(ctx, fuq.NewJob("greet", "/bin/echo", 2, dir, dir))
	res, _ := h.Wait(ctx)
	fmt.Println(res.Status)
	info, _ := f.JobByRef(h.ID())
	for _, t := range info.Tasks {
		fmt.Printf("task %d: %s on %s\n", t.Task, t.State, t.Worker)
	}
	// Output:
	// succeeded
	// task 1: done on worker-1
	// task 2: done on worker-1
}
