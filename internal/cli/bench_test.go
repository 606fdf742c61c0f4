package cli

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
)

// BenchmarkStream measures what `laboro run` adds to its jobs' processes,
// in process: b.N shell jobs (`true` as a script, as `laboro run` makes
// each line), two at a time, through
//
//   - batch: Batch.Stream on an Executor whose buffer holds twice its
//     workers, with progress (to nowhere), a goroutine waiting for each
//     job;
//   - ends: the same, learning of ends in batches from the Executor's
//     observer (Batch.Ends), with 128 jobs ahead;
//   - run: ends with one processor to spare (SpareProcessor), as `laboro
//     run -workers 2` runs them;
//   - executor: the same Executor, every job submitted and its result
//     waited for in turn by one goroutine, without the batch driver;
//   - runner: the same ProcessRunner called from two goroutines, without
//     an Executor: each job's process and its promises (its output file,
//     its standard-error tail, its process group), and nothing else.
//
// Run them in interleaved rounds (scripts/bench-rounds.sh with
// PKG=./internal/cli) and compare each to runner in the same round.
func BenchmarkStream(b *testing.B) {
	stream := func(b *testing.B, ex *laboro.Executor, batch Batch) {
		batch.Progress = NewProgress(io.Discard, time.Hour)
		b.ResetTimer()
		sum, err := batch.Stream(benchContext(b), ex, func(yield func(laboro.Job, error) bool) {
			for range b.N {
				if !yield(laboro.Job{Script: "true"}, nil) {
					return
				}
			}
		}, b.N)
		b.StopTimer()
		if err != nil || sum.Succeeded != b.N {
			b.Fatalf("%d of %d jobs succeeded: %v", sum.Succeeded, b.N, err)
		}
	}
	b.Run("batch", func(b *testing.B) {
		stream(b, benchExecutor(b, laboro.WithBufferSize(4)), Batch{})
	})
	ends := func(b *testing.B) {
		ends := &Ends{Ahead: func() int { return 128 }}
		stream(b, benchExecutor(b, laboro.WithBufferSize(128), laboro.WithObserver(ends.Observe)), Batch{Ends: ends})
	}
	b.Run("ends", ends)
	b.Run("run", func(b *testing.B) {
		defer SpareProcessor(2)()
		ends(b)
	})
	b.Run("executor", func(b *testing.B) {
		ex := benchExecutor(b, laboro.WithBufferSize(4))
		ctx := benchContext(b)
		handles := make(chan *laboro.Handle, 4)
		var collected sync.WaitGroup
		var failed int
		collected.Go(func() {
			for h := range handles {
				res, err := h.Wait(ctx)
				if err != nil || res.Status != laboro.StatusSucceeded {
					failed++
				}
				res.Output.Close()
			}
		})
		b.ResetTimer()
		for range b.N {
			h, err := ex.Submit(ctx, laboro.Job{Script: "true"})
			if err != nil {
				b.Fatal(err)
			}
			handles <- h
		}
		close(handles)
		collected.Wait()
		b.StopTimer()
		if failed > 0 {
			b.Fatalf("%d of %d jobs failed", failed, b.N)
		}
	})
	b.Run("runner", func(b *testing.B) {
		r := &laboro.ProcessRunner{Dir: b.TempDir()}
		ctx := benchContext(b)
		jobs := make(chan struct{})
		var workers sync.WaitGroup
		var failed atomic.Int64
		for range 2 {
			workers.Go(func() {
				for range jobs {
					res := r.Run(ctx, laboro.Job{Script: "true"})
					if res.Status != laboro.StatusSucceeded {
						failed.Add(1)
					}
					res.Output.Close()
				}
			})
		}
		b.ResetTimer()
		for range b.N {
			jobs <- struct{}{}
		}
		close(jobs)
		workers.Wait()
		b.StopTimer()
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d of %d jobs failed", n, b.N)
		}
	})
}

// benchExecutor returns an Executor of two workers on process jobs, with
// opts, closed at the end.
func benchExecutor(b *testing.B, opts ...laboro.Option) *laboro.Executor {
	b.Helper()
	ex, err := laboro.New(append([]laboro.Option{laboro.WithRunner(&laboro.ProcessRunner{Dir: b.TempDir()}),
		laboro.WithPoolSize(2), laboro.WithConcurrency(2)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ex.Close() })
	return ex
}

// benchContext returns a context that ends with the benchmark, and after
// ten minutes at most.
func benchContext(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ctx
}
