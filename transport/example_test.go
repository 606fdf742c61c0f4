package transport_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport"
)

// A manager's Runner hands each job to a Dispatcher; a worker's connection
// takes jobs from it and reports their results. Here the worker is a
// goroutine; in a protocol it is the code that speaks to a remote worker.
func ExampleDispatcher() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := transport.NewDispatcher[string, string](transport.Config{Grace: time.Second})

	w := d.Join("worker-1", func(ids []string) { fmt.Println("cancel", ids) })
	go func() {
		defer w.Leave(nil)
		for range 2 {
			t := w.Next(ctx, 5*time.Second, nil) // the worker asked for a job
			if t == nil {
				return
			}
			w.Complete(t.Key, laboro.Result{ExitCode: len(t.Value)}) // its report
		}
	}()

	for _, cmd := range []string{"make", "make test"} {
		res := d.Run(ctx, "job-"+cmd, cmd) // as the Runner's Run does
		fmt.Println(res.Status, res.ExitCode)
	}
	// Output:
	// succeeded 4
	// succeeded 9
}

// A session that waits for its peer's next message clears its read
// deadline; a server that ends cuts it all the same, even when the cut
// comes just before the deadline is cleared.
func ExampleInterruptible() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	defer peer.Close()
	raw, err := ln.Accept()
	if err != nil {
		panic(err)
	}
	defer raw.Close()

	ctx, shutdown := context.WithCancel(context.Background())
	conn, stop := transport.Interruptible(ctx, raw)
	defer stop()
	shutdown()                        // the server ends
	conn.SetReadDeadline(time.Time{}) // the session waits for the next message
	_, err = conn.Read(make([]byte, 1))
	fmt.Println("cut:", errors.Is(err, os.ErrDeadlineExceeded))
	// Output: cut: true
}
