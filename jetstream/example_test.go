package jetstream_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/jetstream"
	"github.com/nats-io/nats.go"
)

// An embedded server, a Manager as an Executor's runner, and a Worker: the
// whole system in one process, as when no NATS URL is given.
func ExampleStartEmbedded() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "laboro-nats-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	srv, err := jetstream.StartEmbedded(dir, "127.0.0.1", -1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()

	m, err := jetstream.NewManager(ctx, nc, jetstream.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()

	workerCtx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() {
		w := &jetstream.Worker{Conn: nc, Concurrency: 2}
		workerDone <- w.Run(workerCtx)
	}()
	defer func() { stopWorker(); <-workerDone }()

	ex, err := laboro.New(laboro.WithRunner(m))
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := ex.Submit(ctx, laboro.Job{Command: "echo hello from a worker"})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := h.Wait(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Output.Close()
	fmt.Println(res.ID, res.Status)
	res.Output.WriteTo(os.Stdout)
	if err := ex.Shutdown(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// job_1 succeeded
	// hello from a worker
}
