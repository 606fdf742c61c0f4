package fuq

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
)

// BenchmarkTasks measures tasks per second for a trivial command
// (/bin/true <task>): one job of b.N tasks through a Foreman and a Worker of
// N processors over loopback TCP, and, as the baseline, the same commands
// spawned by the core at concurrency N, with their outputs kept in files.
func BenchmarkTasks(b *testing.B) {
	for _, procs := range []int{1, 4} {
		b.Run(fmt.Sprintf("core/procs=%d", procs), func(b *testing.B) {
			ex, err := laboro.New(laboro.WithOutputDir(b.TempDir()), laboro.WithPoolSize(procs),
				laboro.WithConcurrency(procs), laboro.WithBufferSize(1024))
			if err != nil {
				b.Fatal(err)
			}
			defer ex.Close()
			// One job before the timer, as for fuq below.
			if h, err := ex.Submit(context.Background(), laboro.Job{Args: []string{"/bin/true"}}); err != nil {
				b.Fatal(err)
			} else if res, _ := h.Wait(context.Background()); res.Status != laboro.StatusSucceeded {
				b.Fatal(res.Status, res.Err)
			} else {
				res.Output.Close()
			}
			b.ResetTimer()
			b.ReportAllocs()
			var wg sync.WaitGroup
			for i := range b.N {
				h, err := ex.Submit(context.Background(), laboro.Job{Args: []string{"/bin/true", strconv.Itoa(i + 1)}})
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() {
					res, _ := h.Wait(context.Background())
					res.Output.Close()
				})
			}
			wg.Wait()
		})
		b.Run(fmt.Sprintf("fuq/procs=%d", procs), func(b *testing.B) {
			f := &Foreman{}
			ex, err := laboro.New(laboro.WithRunner(f))
			if err != nil {
				b.Fatal(err)
			}
			defer ex.Close()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { f.Serve(ctx, ln) })
			w := &Worker{Addr: ln.Addr().String(), Procs: procs, SpoolDir: b.TempDir()}
			wg.Go(func() { w.Run(ctx) })
			defer func() { cancel(); wg.Wait() }()
			// A job of one task before the timer: the worker is connected
			// and the figure is the steady rate.
			warm, err := ex.Submit(ctx, NewJob("warm", "/bin/true", 1, b.TempDir(), b.TempDir()))
			if err != nil {
				b.Fatal(err)
			}
			if res, _ := warm.Wait(ctx); res.Status != laboro.StatusSucceeded {
				b.Fatal(res.Err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			h, err := ex.Submit(ctx, NewJob("bench", "/bin/true", b.N, b.TempDir(), b.TempDir()))
			if err != nil {
				b.Fatal(err)
			}
			if res, _ := h.Wait(ctx); res.Status != laboro.StatusSucceeded {
				b.Fatal(res.Err)
			}
		})
	}
}

// idleForeman is a Foreman with no worker, behind an Executor that runs one
// job at a time, closed when b ends.
func idleForeman(b *testing.B) (*Foreman, *laboro.Executor) {
	f := &Foreman{}
	ex, err := laboro.New(laboro.WithRunner(f), laboro.WithPoolSize(1), laboro.WithConcurrency(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ex.Close() })
	return f, ex
}

// queuedJob waits until the job of h has its tasks queued in f, and returns
// its id. The Foreman adds a job whole, under its lock: once it is there,
// its tasks are in line. (Jobs and Job would build the list of its tasks,
// a million of them, on every look.)
func queuedJob(f *Foreman, h *laboro.Handle, tasks int) uint64 {
	for {
		f.mu.Lock()
		for id, j := range f.jobs {
			if j.ref == h.ID() && len(j.tasks) == tasks {
				f.mu.Unlock()
				return id
			}
		}
		f.mu.Unlock()
		time.Sleep(100 * time.Microsecond) // Run has not queued the tasks yet
	}
}

// BenchmarkForemanSubmitCancel submits a job of 100,000 tasks with no
// worker and cancels it: both are linear in the tasks (a job of 1,000,000,
// DefaultMaxTasks, takes ten times as long).
func BenchmarkForemanSubmitCancel(b *testing.B) {
	const tasks = 100_000
	f, ex := idleForeman(b)
	dir := b.TempDir()
	for b.Loop() {
		h, err := ex.Submit(context.Background(), NewJob("big", "/bin/true", tasks, dir, dir))
		if err != nil {
			b.Fatal(err)
		}
		id := queuedJob(f, h, tasks)
		if err := f.Cancel(id); err != nil {
			b.Fatal(err)
		}
		if _, err := h.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/tasks, "ns/task")
}

// BenchmarkMillionTasks submits one job of 1,000,000 tasks (DefaultMaxTasks)
// to a foreman with no worker and a journal on disk (as fuq-foreman runs),
// and cancels it: submit-s is from Submit until
// every task is queued, cancel-s from Cancel until the job's Run returned,
// heap-MB the Go heap the queued job holds, kept-MB the heap still in use
// once it ended (the foreman keeps the last jobs that ended, without their
// tickets; see Foreman.MaxEndedTasks).
func BenchmarkMillionTasks(b *testing.B) {
	const tasks = 1_000_000
	f, ex := idleForeman(b)
	dir := b.TempDir()
	jn, _, err := OpenJournal(filepath.Join(dir, "journal"))
	if err != nil {
		b.Fatal(err)
	}
	defer jn.Close()
	f.Journal = jn
	var submit, cancel time.Duration
	var heap, kept uint64
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		h, err := ex.Submit(context.Background(), NewJob("big", "/bin/true", tasks, dir, dir))
		if err != nil {
			b.Fatal(err)
		}
		id := queuedJob(f, h, tasks)
		submit += time.Since(start)
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap += after.HeapInuse - min(after.HeapInuse, before.HeapInuse)
		start = time.Now()
		if err := f.Cancel(id); err != nil {
			b.Fatal(err)
		}
		if _, err := h.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
		cancel += time.Since(start)
		runtime.GC()
		runtime.ReadMemStats(&after)
		kept += after.HeapInuse - min(after.HeapInuse, base.HeapInuse)
	}
	b.ReportMetric(float64(kept)/float64(b.N)/(1<<20), "kept-MB")
	b.ReportMetric(submit.Seconds()/float64(b.N), "submit-s")
	b.ReportMetric(cancel.Seconds()/float64(b.N), "cancel-s")
	b.ReportMetric(float64(heap)/float64(b.N)/(1<<20), "heap-MB")
}
