package runexp

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/laboro-go/laboro"
)

const trivialScript = "echo RES:ok\n"

// BenchmarkJobs measures trivial .sh jobs (bash, one echo) per second:
// through a Manager and a Runner of N workers over loopback TCP, and, as
// the baseline, the same script run by the core with concurrency N.
func BenchmarkJobs(b *testing.B) {
	for _, workers := range []int{1, 4} {
		b.Run(fmt.Sprintf("core/workers=%d", workers), func(b *testing.B) {
			dir := b.TempDir()
			script := filepath.Join(dir, "job.sh")
			if err := os.WriteFile(script, []byte(trivialScript), 0o644); err != nil {
				b.Fatal(err)
			}
			ex, err := laboro.New(laboro.WithOutputDir(dir), laboro.WithPoolSize(workers),
				laboro.WithConcurrency(workers), laboro.WithBufferSize(1024))
			if err != nil {
				b.Fatal(err)
			}
			defer ex.Close()
			submit := func(i int) (*laboro.Handle, error) {
				return ex.Submit(context.Background(), laboro.Job{Args: []string{"bash", script}})
			}
			warmUp(b, submit)
			b.ReportAllocs()
			b.ResetTimer()
			runAll(b, submit)
		})
		b.Run(fmt.Sprintf("runexp/workers=%d", workers), func(b *testing.B) {
			m := &Manager{Dir: b.TempDir()}
			ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(64),
				laboro.WithConcurrency(64), laboro.WithBufferSize(1024))
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
			wg.Go(func() { m.Serve(ctx, ln) })
			r := &Runner{Addr: ln.Addr().String(), Name: "bench", Workers: workers, Dir: b.TempDir()}
			ran := make(chan error, 1)
			wg.Go(func() { ran <- r.Run(ctx) })
			defer func() { cancel(); wg.Wait() }()
			submit := func(i int) (*laboro.Handle, error) {
				return ex.Submit(context.Background(), NewJob(fmt.Sprintf("job-%d", i), ".sh", trivialScript))
			}
			warmUp(b, submit)
			b.ReportAllocs()
			b.ResetTimer()
			runAll(b, submit)
			b.StopTimer()
			m.Finish(ex)
			if err := <-ran; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// warmUp runs one job before the timer starts, so that the figures are
// the steady rate: for runexp, the runner is connected and past its
// handshake (whose last message, JES, is followed by Runner.Pause, 50 ms,
// once per session).
func warmUp(b *testing.B, submit func(i int) (*laboro.Handle, error)) {
	h, err := submit(-1)
	if err != nil {
		b.Fatal(err)
	}
	res, err := h.Wait(context.Background())
	if err != nil || res.Status != laboro.StatusSucceeded {
		b.Fatalf("warm-up job: %v %v", res.Status, err)
	}
	res.Output.Close()
}

// runAll submits b.N jobs and waits for every result.
func runAll(b *testing.B, submit func(i int) (*laboro.Handle, error)) {
	var wg sync.WaitGroup
	for i := range b.N {
		h, err := submit(i)
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			res, err := h.Wait(context.Background())
			if err != nil || res.Status != laboro.StatusSucceeded {
				b.Errorf("job %d: %v %v", i, res.Status, err)
			}
			res.Output.Close()
		})
	}
	wg.Wait()
}
