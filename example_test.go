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
	st := ex.Stats()
	fmt.Printf("buffer %d, pool %d, concurrency %d, parallelism %d\n", st.BufferSize, st.PoolSize, st.Concurrency, st.Parallelism)

	_, err = laboro.New(laboro.WithBufferSize(0))
	fmt.Println(err)
	// Output:
	// buffer 8, pool 4, concurrency 2, parallelism 2
	// laboro: invalid configuration: buffer size must be > 0, got 0
}

// What an Executor counts as its jobs move, read when one likes: a
// console's or a scraper's pace, which costs the jobs nothing.
func ExampleExecutor_Stats() {
	ex, err := laboro.New(laboro.WithHistory(10))
	if err != nil {
		panic(err)
	}
	defer ex.Close()
	ctx := context.Background()
	for _, cmd := range []string{"echo one", "echo two", "exit 3"} {
		h, _ := ex.Submit(ctx, laboro.Job{Script: cmd})
		res, _ := h.Wait(ctx)
		res.Output.Close()
	}
	st := ex.Stats()
	fmt.Println(st.Started, "started,", st.Finished(), "ended:", st.Ended[laboro.StatusSucceeded], "succeeded,", st.Ended[laboro.StatusFailed], "failed;",
		st.OutputBytes, "bytes of output;", st.Runs.Count, "runs timed")
	for _, f := range ex.Recent(2) { // newest first
		fmt.Println(f.Job.Script, "→", f.Result.Status, f.Result.ExitCode)
	}
	// Output:
	// 3 started, 3 ended: 2 succeeded, 1 failed; 8 bytes of output; 3 runs timed
	// exit 3 → failed 3
	// echo two → succeeded 0
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
	// laboro: job not found: "job_1"
}

func ExampleExecutor_Cancel() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := laboro.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()
	h, _ := ex.Submit(ctx, laboro.Job{Command: "sleep 60"})
	for ex.Stats().Running == 0 {
		time.Sleep(time.Millisecond) // (an Observer would tell without polling)
	}

	fmt.Println(ex.Stop(h.ID())) // Stop leaves running jobs alone
	fmt.Println(ex.Cancel(h.ID()))
	res, _ := h.Wait(ctx)
	fmt.Println(res.ID, res.Status, res.Err)
	// Output:
	// laboro: job not found: "job_1"
	// <nil>
	// job_1 cancelled laboro: job cancelled
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

func ExampleExecutor_Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := laboro.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	// A job that would run for a minute, and starts a child of its own.
	h, _ := ex.Submit(ctx, laboro.Job{Script: "sleep 60 & sleep 60; wait"})
	for ex.Stats().Running == 0 {
		time.Sleep(time.Millisecond)
	}

	ex.Close() // kills the job's whole process group
	res, _ := h.Wait(ctx)
	defer res.Output.Close()
	fmt.Println(res.ID, res.Status, res.ExitCode)
	// Output:
	// job_1 killed -1
}

func ExampleWithObserver() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := laboro.New(laboro.WithObserver(func(ev laboro.Event) {
		// Called from one goroutine, in order; it may call the Executor.
		switch ev.Kind {
		case laboro.EventFinished:
			fmt.Println(ev.Kind, ev.Job.ID, ev.Result.Status)
		case laboro.EventConcurrency:
			fmt.Println(ev.Kind, ev.Concurrency)
		default:
			fmt.Println(ev.Kind, ev.Job.ID)
		}
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	h, _ := ex.Submit(ctx, laboro.Job{Func: func(context.Context) error { return nil }})
	h.Wait(ctx)
	ex.SetConcurrency(2)
	ex.Shutdown(ctx) // returns once the observer has seen every event
	// Output:
	// queued job_1
	// started job_1
	// finished job_1 succeeded
	// concurrency 2
}

func ExampleProcessRunner() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	// A runner on its own runs one job in the calling goroutine.
	r := &laboro.ProcessRunner{Dir: dir}
	res := r.Run(ctx, laboro.Job{Command: `sh -c 'echo "no such file: notes.txt" >&2; exit 3'`})
	defer res.Output.Close()
	fmt.Println(res.Status, res.ExitCode)
	fmt.Printf("%s", res.Stderr)
	// Output:
	// failed 3
	// no such file: notes.txt
}

// RemoveAtExit has a directory of temporary files removed when the
// process ends, even if it is killed: here a directory for outputs that a
// program keeps while it runs, and removes itself on a normal exit.
func ExampleRemoveAtExit() {
	dir, err := os.MkdirTemp("", "outputs-")
	if err != nil {
		fmt.Println(err)
		return
	}
	forget := laboro.RemoveAtExit(dir) // gone with the process, however it ends
	defer func() {
		os.RemoveAll(dir)
		forget() // removed already: nothing left for the reaper
	}()
	ex, _ := laboro.New(laboro.WithOutputDir(dir))
	defer ex.Close()
	h, _ := ex.Submit(context.Background(), laboro.Job{Command: "echo kept until exit"})
	res, _ := h.Wait(context.Background())
	defer res.Output.Close()
	out, _ := res.Output.ReadAll()
	fmt.Print(string(out))
	// Output: kept until exit
}
