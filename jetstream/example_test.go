package jetstream_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
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

// A Client submits a batch to a Service (what `laboro serve` runs), waits
// for it, and reads a job's output from the stream. The Client needs only a
// connection to NATS: the Service and the Workers may run anywhere.
func ExampleClient() {
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

	// The service and a worker, until the example ends.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- (&jetstream.Service{Conn: nc}).Run(runCtx) }()
	go func() { done <- (&jetstream.Worker{Conn: nc, Concurrency: 2}).Run(runCtx) }()
	defer func() { stop(); <-done; <-done }()

	cl := &jetstream.Client{Conn: nc, Config: jetstream.Config{Dir: dir}}
	ids, err := cl.Submit(ctx, "example", []laboro.Job{
		{Script: "echo one"},
		{Script: "echo two"},
		{Script: "exit 3"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ids)
	b, err := cl.Wait(ctx, "example", len(ids), 50*time.Millisecond, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d jobs, %d succeeded, %d failed\n", b.Jobs, b.Succeeded, b.Failed)

	res, err := cl.Result(ctx, ids[1])
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Output.Close()
	res.Output.WriteTo(os.Stdout)
	// Output:
	// [example-1 example-2 example-3]
	// 3 jobs, 2 succeeded, 1 failed
	// two
}

// SubmitAll submits the lines of a file (or a pipe) as a batch, without
// holding them in memory: here, a generator of a thousand commands. No
// Service needs to run for the jobs to be stored; they wait in the stream.
func ExampleClient_SubmitAll() {
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

	cl := &jetstream.Client{Conn: nc}
	jobs := func(yield func(laboro.Job, error) bool) {
		for i := range 1000 {
			if !yield(laboro.Job{Script: fmt.Sprintf("echo %d", i)}, nil) {
				return
			}
		}
	}
	n, err := cl.SubmitAll(ctx, "generated", jobs)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(n, "jobs submitted")
	// Output:
	// 1000 jobs submitted
}

// A machine that only runs workers gets a worker's token, derived from the
// server's: with it, a connection may take jobs and store results, and
// nothing else.
func ExampleRoleToken() {
	dir, _ := os.MkdirTemp("", "laboro-nats-")
	defer os.RemoveAll(dir)
	const token = "the server's token"
	srv, err := jetstream.StartEmbedded(dir, "127.0.0.1", -1, jetstream.WithToken(token))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()

	workerToken := jetstream.RoleToken(token, jetstream.RoleWorker, "")
	nc, err := nats.Connect(srv.URL(), jetstream.Token(workerToken))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	fmt.Println(jetstream.TokenRole(workerToken), jetstream.TokenRole(token) == "")

	_, err = nats.Connect(srv.URL(), jetstream.Token(jetstream.RoleToken("another server's", jetstream.RoleWorker, "")))
	fmt.Println(err != nil)
	// Output:
	// worker true
	// true
}

// A worker started before its token exists (the server makes it at its
// first start) looks for it at each attempt to connect, and waits.
func ExampleRoleTokenFrom() {
	dir, _ := os.MkdirTemp("", "laboro-nats-")
	defer os.RemoveAll(dir)
	const token = "the server's token"
	srv, err := jetstream.StartEmbedded(dir, "127.0.0.1", -1, jetstream.WithToken(token))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()

	var current atomic.Value // where the worker finds its token: a file, say
	current.Store("")
	connected := make(chan struct{})
	nc, err := nats.Connect(srv.URL(),
		jetstream.RoleTokenFrom(jetstream.RoleWorker, "", func() string { return current.Load().(string) }),
		nats.RetryOnFailedConnect(true), nats.IgnoreAuthErrorAbort(), nats.MaxReconnects(-1),
		nats.ReconnectWait(10*time.Millisecond),
		nats.ConnectHandler(func(*nats.Conn) { close(connected) }))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	fmt.Println(nc.IsConnected())
	current.Store(jetstream.RoleToken(token, jetstream.RoleWorker, ""))
	<-connected
	fmt.Println(nc.IsConnected())
	// Output:
	// false
	// true
}

// The Manager signs its jobs with the key of the server's token, and a
// worker holding a worker's token of that server checks them: it runs no
// job that anyone else put in the stream.
func ExampleJobKey() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, _ := os.MkdirTemp("", "laboro-nats-")
	defer os.RemoveAll(dir)
	const token = "the server's token"
	srv, err := jetstream.StartEmbedded(dir, "127.0.0.1", -1, jetstream.WithToken(token))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	owner, err := nats.Connect(srv.URL(), jetstream.Token(token))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer owner.Close()
	workerToken := jetstream.RoleToken(token, jetstream.RoleWorker, "")
	wc, err := nats.Connect(srv.URL(), jetstream.Token(workerToken))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer wc.Close()

	m, err := jetstream.NewManager(ctx, owner, jetstream.Config{JobKey: jetstream.JobKey(token, "")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	workerCtx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() {
		// It runs only signed jobs, and gives its results only where the
		// Manager proves that it holds the key.
		w := &jetstream.Worker{Conn: wc, Config: jetstream.Config{JobKey: jetstream.JobKey(workerToken, ""), ProveServer: true}}
		workerDone <- w.Run(workerCtx)
	}()
	defer func() { stopWorker(); <-workerDone }()

	res := m.Run(ctx, laboro.Job{ID: "signed", Command: "echo signed by the manager"})
	fmt.Println(res.Status)
	if res.Output != nil {
		res.Output.WriteTo(os.Stdout)
		res.Output.Close()
	}
	// Output:
	// succeeded
	// signed by the manager
}

// A Client that has the Service prove itself before it submits: a program
// posing as the server would get no job from it.
func ExampleClientKey() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, _ := os.MkdirTemp("", "laboro-nats-")
	defer os.RemoveAll(dir)
	const token = "the server's token"
	srv, err := jetstream.StartEmbedded(dir, "127.0.0.1", -1, jetstream.WithToken(token))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	owner, err := nats.Connect(srv.URL(), jetstream.Token(token))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer owner.Close()
	clientToken := jetstream.RoleToken(token, jetstream.RoleClient, "")
	cc, err := nats.Connect(srv.URL(), jetstream.Token(clientToken))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()

	serviceCtx, stopService := context.WithCancel(ctx)
	serviceDone := make(chan error, 1)
	go func() {
		s := &jetstream.Service{Conn: owner, Config: jetstream.Config{Dir: dir, ClientKey: jetstream.ClientKey(token, "")}}
		serviceDone <- s.Run(serviceCtx)
	}()
	defer func() { stopService(); <-serviceDone }()

	client := &jetstream.Client{Conn: cc, Config: jetstream.Config{Dir: dir,
		ClientKey: jetstream.ClientKey(clientToken, ""), ProveServer: true}}
	ids, err := client.Submit(ctx, "nightly", []laboro.Job{{Command: "make test"}})
	fmt.Println(ids, err)
	// Output:
	// [nightly-1] <nil>
}

// The program that runs the embedded server reaches it without a socket:
// a server speaking TLS, whose certificate names the host the workers
// reach, needs none of it for its own process.
func ExampleEmbedded_InProcess() {
	dir, _ := os.MkdirTemp("", "laboro-nats-")
	defer os.RemoveAll(dir)
	srv, err := jetstream.StartEmbedded(dir, "127.0.0.1", -1, jetstream.WithToken("the server's token"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	nc, err := nats.Connect("", srv.InProcess(), jetstream.Token("the server's token"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	fmt.Println(nc.IsConnected())
	// Output:
	// true
}
