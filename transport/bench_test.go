package transport_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport"
)

// BenchmarkDispatch measures what the Dispatcher costs per job: b.N jobs,
// each Run from a goroutine of a pool of `runs`, handed to `workers`
// goroutines that take them (pull, Next) and complete them at once. One op
// is one job, from Add to its Run's return.
func BenchmarkDispatch(b *testing.B) {
	for _, workers := range []int{1, 4} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			b.ReportAllocs()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			d := transport.NewDispatcher[string, int](transport.Config{})
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = fmt.Sprint("job_", i)
			}
			stop := make(chan struct{})
			var serving sync.WaitGroup
			for n := range workers {
				w := d.Join(fmt.Sprint("w", n), nil)
				serving.Go(func() {
					for {
						ts := w.Take(8, nil)
						for _, t := range ts {
							w.Complete(t.Key, laboro.Result{Status: laboro.StatusSucceeded})
						}
						if len(ts) == 8 {
							continue // maybe more: only a worker that found too few is woken
						}
						select {
						case <-w.Wake():
						case <-stop:
							return
						}
					}
				})
			}
			const runs = 64
			var running sync.WaitGroup
			b.ResetTimer()
			for r := range runs {
				running.Go(func() {
					for i := r; i < b.N; i += runs {
						if res := d.Run(ctx, keys[i], i); res.Status != laboro.StatusSucceeded {
							b.Errorf("%s: %v", keys[i], res.Err)
						}
					}
				})
			}
			running.Wait()
			b.StopTimer()
			close(stop)
			serving.Wait()
		})
	}
}
