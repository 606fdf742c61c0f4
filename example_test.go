package laboro_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/laboro-go/laboro"
)

func ExampleNew() {
	ex, err := laboro.New(
		laboro.WithBufferSize(8),  // up to 8 jobs wait; Submit blocks beyond
		laboro.WithPoolSize(4),    // at most 4 jobs ever run at once
		laboro.WithConcurrency(2), // 2 of them for now
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()
	fmt.Printf("%+v\n", ex.Stats())

	_, err = laboro.New(laboro.WithBufferSize(0))
	fmt.Println(err)
	// Output:
	// {Concurrency:2 PoolSize:4 Parallelism:2 Running:0 Queued:0 Blocked:0 BufferSize:8}
	// laboro: invalid configuration: buffer size must be > 0, got 0
}

func ExampleExecutor_Submit() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := laboro.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()

	h, err := ex.Submit(ctx, laboro.Job{Command: `echo "hello,   world"`})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := h.Wait(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Output.Close() // removes <pid>.output
	fmt.Println(res.ID, res.Status, res.ExitCode)
	res.Output.WriteTo(os.Stdout)
	// Output:
	// job_1 succeeded 0
	// hello,   world
}

func ExampleExecutor_SetConcurrency() {
	ex, err := laboro.New(laboro.WithPoolSize(4), laboro.WithConcurrency(0))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()
	for _, n := range []int{0, 2, 16, -1} {
		if err := ex.SetConcurrency(n); err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("concurrency %d: up to %d jobs at once\n", ex.Concurrency(), ex.Parallelism())
	}
	// Output:
	// concurrency 0: up to 0 jobs at once
	// concurrency 2: up to 2 jobs at once
	// concurrency 16: up to 4 jobs at once
	// laboro: invalid configuration: concurrency must be >= 0, got -1
}

func ExampleExecutor_Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := laboro.New(laboro.WithConcurrency(0)) // paused: jobs stay queued
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()
	h, _ := ex.Submit(ctx, laboro.Job{Command: "sleep 60"})

	fmt.Println(ex.Stop(h.ID()))
	res, _ := h.Wait(ctx)
	fmt.Println(res.ID, res.Status)
	fmt.Println(ex.Stop(h.ID()))
	// Output:
	// <nil>
	// job_1 stopped
	// laboro: job not found in the queue: "job_1"
}

func ExampleExecutor_Queued() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := laboro.New(laboro.WithConcurrency(0))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()
	for _, cmd := range []string{"ls -l /tmp", `grep "keyword" /etc/hosts`, "cat /etc/hostname"} {
		ex.Submit(ctx, laboro.Job{Command: cmd})
	}
	for _, job := range ex.Queued() {
		fmt.Printf("<%s, %s>\n", job.ID, job)
	}
	// Output:
	// <job_1, ls -l /tmp>
	// <job_2, grep "keyword" /etc/hosts>
	// <job_3, cat /etc/hostname>
}

func ExampleExecutor_Shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := laboro.New(laboro.WithPoolSize(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	started := make(chan struct{})
	running, _ := ex.Submit(ctx, laboro.Job{Func: func(context.Context) error {
		close(started)
		time.Sleep(50 * time.Millisecond)
		return nil
	}})
	<-started
	queued, _ := ex.Submit(ctx, laboro.Job{Command: "echo never"})

	// The running job finishes; the queued one never runs.
	if err := ex.Shutdown(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range []*laboro.Handle{running, queued} {
		res, _ := h.Result()
		fmt.Println(res.ID, res.Status)
	}
	_, err = ex.Submit(ctx, laboro.Job{Command: "true"})
	fmt.Println(err)
	// Output:
	// job_1 succeeded
	// job_2 terminated before execution
	// laboro: executor closed
}
