package pulse

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
)

// BenchmarkTasks measures tasks through a Controller and 4 Workers over
// Unix sockets, each task's bytes on the command's stdin and its stdout
// the result, against the same command and input spawned by the core at
// concurrency 4: a trivial task (cat of 100 bytes), and 8 MiB tasks
// (md5sum), whose throughput is reported in MB/s.
func BenchmarkTasks(b *testing.B) {
	for _, tc := range []struct {
		name    string
		size    int
		command []string
	}{
		{"trivial", 100, []string{"cat"}},
		{"8MiB", 8 << 20, []string{"md5sum"}},
	} {
		input := filepath.Join(b.TempDir(), "input")
		data := make([]byte, tc.size)
		for i := range data {
			data[i] = byte(i * 7)
		}
		if err := os.WriteFile(input, data, 0o644); err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name+"/core", func(b *testing.B) {
			ex, err := laboro.New(laboro.WithOutputDir(b.TempDir()), laboro.WithPoolSize(4),
				laboro.WithConcurrency(4), laboro.WithBufferSize(1024))
			if err != nil {
				b.Fatal(err)
			}
			defer ex.Close()
			b.SetBytes(int64(tc.size))
			b.ReportAllocs()
			runAll(b, func() (*laboro.Handle, error) {
				f, err := os.Open(input)
				if err != nil {
					return nil, err
				}
				h, err := ex.Submit(context.Background(), laboro.Job{Args: tc.command, Stdin: f})
				go func() {
					if h != nil {
						h.Wait(context.Background())
					}
					f.Close()
				}()
				return h, err
			})
		})
		b.Run(tc.name+"/pulse", func(b *testing.B) {
			dir, err := os.MkdirTemp("", "pb")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			c := &Controller{Dir: filepath.Join(dir, "ctl"), OutputDir: b.TempDir()}
			ex, err := laboro.New(laboro.WithRunner(c), laboro.WithPoolSize(64), laboro.WithConcurrency(64))
			if err != nil {
				b.Fatal(err)
			}
			defer ex.Close()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { c.Serve(ctx) })
			defer func() { cancel(); wg.Wait() }()
			for !fileExists(filepath.Join(c.Dir, "main.sock")) {
				time.Sleep(time.Millisecond)
			}
			for range 4 {
				w := &Worker{Dir: c.Dir, Command: tc.command}
				wg.Go(func() { w.Run(ctx) })
			}
			// The four workers registered before the timer: the figure
			// is the steady rate.
			for len(c.Workers()) < 4 {
				time.Sleep(time.Millisecond)
			}
			b.SetBytes(int64(tc.size))
			b.ReportAllocs()
			b.ResetTimer()
			runAll(b, func() (*laboro.Handle, error) {
				return ex.Submit(ctx, NewTaskFile(input))
			})
		})
	}
}

// runAll submits b.N jobs and waits for every result.
func runAll(b *testing.B, submit func() (*laboro.Handle, error)) {
	var wg sync.WaitGroup
	for range b.N {
		h, err := submit()
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			res, err := h.Wait(context.Background())
			if err != nil || res.Status != laboro.StatusSucceeded {
				b.Error(fmt.Sprint(res.Status, err, res.Err))
			}
			res.Output.Close()
		})
	}
	wg.Wait()
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
