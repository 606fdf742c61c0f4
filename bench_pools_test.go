package laboro_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alitto/pond/v2"
	"github.com/panjf2000/ants/v2"
)

// BenchmarkPools runs §1's work — b.N no-op function jobs, c at a time,
// each result waited for in submission order by one collector goroutine —
// on laboro and on two worker pools that Go programs use for it:
// github.com/alitto/pond/v2 (SubmitErr, then the task's Wait) and
// github.com/panjf2000/ants/v2 (Submit of a closure that closes a done
// channel). Each holds at most 1,024 jobs waiting, as laboro's buffer does.
// One op is one job.
func BenchmarkPools(b *testing.B) {
	impls := []struct {
		name string
		run  func(b *testing.B, c int)
	}{
		{"laboro", benchOverheadLaboro},
		{"pond", benchPond},
		{"ants", benchAnts},
	}
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			for _, c := range []int{1, 2, 8} {
				b.Run("c="+strconv.Itoa(c), func(b *testing.B) { impl.run(b, c) })
			}
		})
	}
}

// benchPond: a pond pool of c workers and a queue of 1,024 that blocks the
// submitter while full; the collector waits for each task in order.
func benchPond(b *testing.B, c int) {
	b.ReportAllocs()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool := pond.NewPool(c, pond.WithQueueSize(1024))
	defer pool.StopAndWait()
	tasks := make(chan pond.Task, 1024)
	var failed atomic.Int64
	collected := make(chan struct{})
	b.ResetTimer()
	go func() {
		defer close(collected)
		for t := range tasks {
			if t.Wait() != nil {
				failed.Add(1)
			}
		}
	}()
	job := func() error { return benchNop(ctx) }
	for range b.N {
		tasks <- pool.SubmitErr(job)
	}
	close(tasks)
	<-collected
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d jobs failed", n)
	}
}

// benchAnts: an ants pool of c workers, which blocks the submitter while
// every worker is busy and 1,024 submitters wait; each job is a closure
// that runs the function, keeps its error and closes a done channel (the
// ticket of the floor), and the collector waits for each in order.
func benchAnts(b *testing.B, c int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool, err := ants.NewPool(c, ants.WithMaxBlockingTasks(1024))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Release()
	benchTickets(b, ctx, func(t *benchTicket) error {
		return pool.Submit(func() {
			t.err = t.f(ctx)
			close(t.done)
		})
	})
}
