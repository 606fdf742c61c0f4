package transport_test

import (
	"context"
	"fmt"
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
