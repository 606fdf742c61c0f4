package cli

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newEndsExecutor returns an Executor of pool workers whose ends go to a
// new Ends that keeps ahead jobs in it, each event to the observers in
// also first.
func newEndsExecutor(t *testing.T, pool, ahead int, also ...func(laboro.Event)) (*laboro.Executor, *Ends) {
	t.Helper()
	ends := &Ends{Ahead: func() int { return ahead }}
	ex, err := laboro.New(laboro.WithPoolSize(pool), laboro.WithConcurrency(pool), laboro.WithBufferSize(ahead),
		laboro.WithObserver(func(ev laboro.Event) {
			for _, fn := range also {
				fn(ev)
			}
			ends.Observe(ev)
		}))
	require.NoError(t, err)
	t.Cleanup(func() { ex.Close() })
	return ex, ends
}

// gatedJobs returns n function jobs, "1" to "n", each of which ends when
// its gate is closed, with an error for the ids in failing.
func gatedJobs(n int, failing ...string) ([]laboro.Job, map[string]chan struct{}) {
	jobs := make([]laboro.Job, n)
	gates := make(map[string]chan struct{}, n)
	for i := range jobs {
		id := strconv.Itoa(i + 1)
		gate := make(chan struct{})
		gates[id] = gate
		fail := false
		for _, f := range failing {
			fail = fail || f == id
		}
		jobs[i] = laboro.Job{ID: id, Func: func(ctx context.Context) error {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
			if fail {
				return errors.New("job " + id + " failed")
			}
			return nil
		}}
	}
	return jobs, gates
}

// With Ends, a batch hands its results on in the order its jobs ended, and
// passes over the jobs another caller runs on the same Executor.
func TestEndsReportsInEndOrder(t *testing.T) {
	ex, ends := newEndsExecutor(t, 4, 8)
	jobs, gates := gatedJobs(3, "1")
	reported := make(chan string, 3)
	b := Batch{Ends: ends, OnResult: func(job laboro.Job, res laboro.Result) error {
		reported <- job.ID
		return nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type outcome struct {
		sum Summary
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		sum, err := b.Run(ctx, ex, jobs)
		done <- outcome{sum, err}
	}()
	// A job of another caller's, which ends first.
	other, err := ex.Submit(ctx, laboro.Job{ID: "other", Func: func(context.Context) error { return nil }})
	require.NoError(t, err)
	_, err = other.Wait(ctx)
	require.NoError(t, err)
	var order []string
	for _, id := range []string{"3", "1", "2"} {
		close(gates[id])
		order = append(order, <-reported) // each ends after the one before is reported
	}
	o := <-done
	require.NoError(t, o.err)
	assert.Equal(t, []string{"3", "1", "2"}, order)
	assert.Equal(t, Counts{Total: 3, Succeeded: 2, Failed: 1}, o.sum.Counts)
	require.Len(t, o.sum.Failures, 1)
	assert.Equal(t, "1", o.sum.Failures[0].ID)
	assert.Contains(t, o.sum.Failures[0].Err, "job 1 failed")
}

// A batch may run a job again under the id of one that has ended before
// the first's end is told: each is reported, in the order they ended.
func TestEndsTellsJobsOfOneIdApart(t *testing.T) {
	firstEnded, secondIn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	ex, ends := newEndsExecutor(t, 1, 4, func(ev laboro.Event) {
		if ev.Kind == laboro.EventFinished && ev.Job.ID == "x" {
			once.Do(func() {
				close(firstEnded)
				<-secondIn // the end is told once the second "x" is in
			})
		}
	})
	var runs atomic.Int64
	job := laboro.Job{ID: "x", Func: func(context.Context) error {
		if runs.Add(1) == 2 {
			return errors.New("second run")
		}
		return nil
	}}
	source := func(yield func(laboro.Job, error) bool) {
		if !yield(job, nil) {
			return
		}
		<-firstEnded
		if !yield(job, nil) {
			return
		}
		// This one is read once the second "x" is submitted.
		ok := yield(laboro.Job{ID: "y", Func: func(context.Context) error { return nil }}, nil)
		close(secondIn)
		if !ok {
			return
		}
	}
	var reported []string
	b := Batch{Ends: ends, OnResult: func(job laboro.Job, res laboro.Result) error {
		reported = append(reported, job.ID+" "+res.Status.String())
		return nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := b.Stream(ctx, ex, source, 3)
	require.NoError(t, err)
	assert.Equal(t, Counts{Total: 3, Succeeded: 2, Failed: 1}, sum.Counts)
	assert.Equal(t, []string{"x succeeded", "x failed", "y succeeded"}, reported)
}

// With Ends, a batch keeps no more than Ahead of its jobs in the Executor,
// and reads the next ones as the first end.
func TestEndsKeepsAheadJobsInTheExecutor(t *testing.T) {
	const ahead = 3
	ex, ends := newEndsExecutor(t, 2, ahead)
	var in, most atomic.Int64 // jobs read and not yet ended; the most at once
	var ran atomic.Int64
	n := 40
	source := func(yield func(laboro.Job, error) bool) {
		for range n {
			now := in.Add(1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			if !yield(laboro.Job{Func: func(context.Context) error { ran.Add(1); return nil }}, nil) {
				return
			}
		}
	}
	b := Batch{Ends: ends, OnResult: func(laboro.Job, laboro.Result) error {
		in.Add(-1)
		return nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := b.Stream(ctx, ex, source, n)
	require.NoError(t, err)
	assert.Equal(t, Counts{Total: n, Succeeded: n}, sum.Counts)
	assert.Equal(t, int64(n), ran.Load())
	// One job more is read than is in the Executor: the one read ahead.
	assert.LessOrEqual(t, most.Load(), int64(ahead+1), "jobs read before others ended")
}

// After a halt (Shutdown), the jobs still queued were not run: with
// TerminatedNotRun they count as neither succeeded nor failed, and
// OnResult does not hear of them.
func TestBatchTerminatedNotRun(t *testing.T) {
	queued, running := make(chan struct{}), make(chan struct{})
	terminated := make(chan struct{}, 6)
	ex, ends := newEndsExecutor(t, 1, 8, func(ev laboro.Event) {
		switch {
		case ev.Kind == laboro.EventQueued && ev.Job.ID == "6":
			close(queued)
		case ev.Kind == laboro.EventStarted && ev.Job.ID == "2":
			close(running)
		case ev.Kind == laboro.EventFinished && ev.Result.Status == laboro.StatusTerminated:
			terminated <- struct{}{}
		}
	})
	jobs, gates := gatedJobs(6, "1")
	stop := make(chan struct{})
	var reported []string
	b := Batch{Ends: ends, TerminatedNotRun: true, Stop: stop,
		OnResult: func(job laboro.Job, res laboro.Result) error {
			reported = append(reported, job.ID)
			return nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	halted := make(chan error, 1)
	go func() {
		// All six in; job 1 fails and job 2 starts; then the halt, which
		// lets job 2 finish and terminates 3 to 6, never run.
		<-queued
		close(gates["1"])
		<-running
		close(stop)
		halted <- ex.Shutdown(ctx)
	}()
	go func() {
		for range 4 {
			<-terminated
		}
		close(gates["2"])
	}()
	sum, err := b.Run(ctx, ex, jobs)
	require.NoError(t, err)
	require.NoError(t, <-halted)
	assert.Equal(t, Counts{Total: 6, Succeeded: 1, Failed: 1}, sum.Counts)
	assert.Equal(t, []string{"1", "2"}, reported)
	require.Len(t, sum.Failures, 1)
	assert.Equal(t, "1", sum.Failures[0].ID)
}

// Interrupted, a batch with Ends returns at once with the context's
// error; the jobs that end afterwards are not reported.
func TestEndsInterrupted(t *testing.T) {
	ex, ends := newEndsExecutor(t, 2, 4)
	jobs, gates := gatedJobs(2)
	started := make(chan struct{}, 2)
	for i, job := range jobs {
		f := job.Func
		jobs[i].Func = func(ctx context.Context) error { started <- struct{}{}; return f(ctx) }
	}
	var mu sync.Mutex
	reported := 0
	b := Batch{Ends: ends, OnResult: func(laboro.Job, laboro.Result) error {
		mu.Lock()
		reported++
		mu.Unlock()
		return nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runCtx, interrupt := context.WithCancel(ctx)
	go func() {
		<-started
		<-started
		interrupt()
	}()
	_, err := b.Run(runCtx, ex, jobs)
	require.ErrorIs(t, err, context.Canceled)
	for _, g := range gates {
		close(g)
	}
	require.NoError(t, ex.Shutdown(ctx)) // and the observer has seen both ends
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, reported)
}

// A halt that comes between a job's read and its submission (laboro run's
// halts in the Executor's worker, as the failing job ends) makes that job
// one not run: the batch still waits for the end of the job that failed,
// told late, and reports it, rather than return at the refused
// submission with the failure missing from its summary.
func TestBatchHaltBeforeSubmit(t *testing.T) {
	finished, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	ex, ends := newEndsExecutor(t, 1, 8, func(ev laboro.Event) {
		if ev.Kind == laboro.EventFinished && ev.Job.ID == "1" {
			close(finished)
			<-release // its end is told late
		}
	})
	jobs, gates := gatedJobs(2, "1")
	close(gates["1"])
	stop := make(chan struct{})
	var reported []string
	b := Batch{Ends: ends, TerminatedNotRun: true, Stop: stop,
		Prepare: func(job laboro.Job) (laboro.Job, error) {
			if job.ID == "2" {
				<-finished // job 1 failed: the halt
				close(stop)
				// Begun, not waited for (as laboro run's halt): the drain
				// waits for the observer, which waits for the batch.
				ended, cancel := context.WithCancel(context.Background())
				cancel()
				ex.Shutdown(ended)
			}
			return job, nil
		},
		OnResult: func(job laboro.Job, res laboro.Result) error {
			reported = append(reported, job.ID)
			return nil
		},
		// Told of the batch's progress while it waits for the ends.
		Progress: NewProgress(io.Discard, time.Hour),
		Out: func() (int, int) {
			releaseOnce.Do(func() { close(release) })
			return 0, 0
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := b.Run(ctx, ex, jobs)
	releaseOnce.Do(func() { close(release) })
	require.NoError(t, err)
	assert.Equal(t, Counts{Total: 2, Failed: 1}, sum.Counts)
	assert.Equal(t, []string{"1"}, reported)
}
