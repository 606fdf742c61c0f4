package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBatchRunsReportsAndSums(t *testing.T) {
	ex, err := laboro.New(laboro.WithConcurrency(2), laboro.WithPoolSize(2), laboro.WithBufferSize(2))
	require.NoError(t, err)
	defer ex.Close()
	var progress bytes.Buffer
	saved := map[string]string{}
	b := Batch{
		Progress: NewProgress(&progress, time.Nanosecond),
		OnResult: func(job laboro.Job, res laboro.Result) error {
			out, err := res.Output.ReadAll()
			saved[job.Command] = string(out)
			if job.Command == "echo unsaved" {
				return errors.New("disk full")
			}
			return err
		},
	}
	jobs := []laboro.Job{
		{Command: "echo one"}, {Command: "echo two"}, {Command: "echo unsaved"},
		{Script: "echo partial; echo 'no such file' >&2; exit 4"}, {Command: "true"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := b.Run(ctx, ex, jobs)
	require.NoError(t, err)
	assert.Equal(t, "one\n", saved["echo one"])
	assert.Equal(t, Counts{Total: 5, Succeeded: 3, Failed: 2}, sum.Counts)
	assert.Equal(t, ExitFailed, sum.Code())
	require.Len(t, sum.Failures, 2)

	var out bytes.Buffer
	sum.Write(&out)
	text := out.String()
	assert.Contains(t, text, "5 jobs: 3 succeeded, 1 failed, 1 not saved\n")
	assert.Contains(t, text, "failed, exit status 4: script\n")
	assert.Contains(t, text, "    | no such file\n", "the stderr tail")
	assert.Contains(t, text, "not saved, exit status 0: echo unsaved\n    disk full\n")
	assert.Contains(t, progress.String(), "5 of 5 done", "plain progress lines when not on a terminal")
}

// A batch on a Runner that hands jobs to remote workers shows, as
// running, the jobs out at a worker, and as queued those that wait for
// one: the Executor counts both as running.
func TestBatchProgressCountsJobsOut(t *testing.T) {
	ex, err := laboro.New(laboro.WithConcurrency(3), laboro.WithPoolSize(3), laboro.WithBufferSize(3))
	require.NoError(t, err)
	defer ex.Close()
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	var progress syncBuffer
	b := Batch{
		Progress: NewProgress(&progress, time.Nanosecond),
		// One of the three jobs the Executor runs is out at a worker,
		// two wait for one.
		Out: func() (int, int) { return 1, 2 },
	}
	job := laboro.Job{Func: func(ctx context.Context) error {
		started <- struct{}{}
		<-release
		return nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := b.Run(ctx, ex, []laboro.Job{job, job, job})
		done <- err
	}()
	for range 3 {
		<-started
	}
	require.Eventually(t, func() bool { return strings.Contains(progress.String(), "running 1, queued 2") }, time.Minute, time.Millisecond,
		"progress: %s", progress.String())
	assert.NotContains(t, progress.String(), "running 3")
	close(release)
	require.NoError(t, <-done)
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestBatchAllSucceeded(t *testing.T) {
	ex, err := laboro.New()
	require.NoError(t, err)
	defer ex.Close()
	sum, err := (&Batch{}).Run(context.Background(), ex, []laboro.Job{{Command: "true"}})
	require.NoError(t, err)
	assert.Equal(t, ExitOK, sum.Code())
	assert.NoError(t, sum.Err())
}

func TestWriteFailuresKeepsTheLastLines(t *testing.T) {
	var out bytes.Buffer
	WriteFailures(&out, []Failure{{ID: "j1", Command: "make\nall", Status: "timed out", ExitCode: -1, Err: "laboro: job timed out",
		Stderr: []byte("1\n2\n3\n4\n5\n6\n7\n")}})
	assert.Equal(t, "j1 timed out: make all\n    laboro: job timed out\n    | 3\n    | 4\n    | 5\n    | 6\n    | 7\n", out.String())
}

// Prepare makes each job as it is submitted, not before: with room for one
// job running and one waiting, at most those and the one being submitted
// have been made and not yet ended. A job it cannot make fails in the
// summary, saying why, and the others run.
func TestBatchPreparesEachJobWhenSubmitted(t *testing.T) {
	ex, err := laboro.New(laboro.WithConcurrency(1), laboro.WithPoolSize(1), laboro.WithBufferSize(1))
	require.NoError(t, err)
	defer ex.Close()
	var mu sync.Mutex
	var made, ended, most int
	b := Batch{
		Prepare: func(job laboro.Job) (laboro.Job, error) {
			if job.ID == "j7" {
				return job, errors.New("open j7.sh: no such file or directory")
			}
			mu.Lock()
			made++
			most = max(most, made-ended)
			mu.Unlock()
			job.Func = func(context.Context) error {
				mu.Lock()
				ended++
				mu.Unlock()
				return nil
			}
			return job, nil
		},
		Command: func(job laboro.Job) string { return job.ID + ".sh" },
	}
	jobs := make([]laboro.Job, 20)
	for i := range jobs {
		jobs[i].ID = fmt.Sprintf("j%d", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := b.Run(ctx, ex, jobs)
	require.NoError(t, err)
	assert.Equal(t, Counts{Total: 20, Succeeded: 19, Failed: 1}, sum.Counts)
	assert.Equal(t, 19, made)
	assert.LessOrEqual(t, most, 3, "jobs made and not yet ended")
	var out bytes.Buffer
	sum.Write(&out)
	assert.Contains(t, out.String(), "j7 not loaded: j7.sh\n    open j7.sh: no such file or directory\n")
}

// Stream reads each job as it submits it: with room for one job running
// and one waiting, at most those, the one being submitted and the one read
// ahead have been read and not yet ended, however many come. Without a total, the
// summary counts the jobs that came.
func TestBatchStreamsJobs(t *testing.T) {
	ex, err := laboro.New(laboro.WithConcurrency(1), laboro.WithPoolSize(1), laboro.WithBufferSize(1))
	require.NoError(t, err)
	defer ex.Close()
	var mu sync.Mutex
	var read, ended, most int
	const n = 2000
	jobs := func(yield func(laboro.Job, error) bool) {
		for i := range n {
			mu.Lock()
			read++
			most = max(most, read-ended)
			mu.Unlock()
			job := laboro.Job{ID: strconv.Itoa(i + 1), Func: func(context.Context) error {
				mu.Lock()
				ended++
				mu.Unlock()
				return nil
			}}
			if !yield(job, nil) {
				return
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := (&Batch{}).Stream(ctx, ex, jobs, -1)
	require.NoError(t, err)
	assert.Equal(t, Counts{Total: n, Succeeded: n}, sum.Counts)
	assert.LessOrEqual(t, most, 4, "jobs read and not yet ended")
}

// An error from the jobs' source stops the batch: nothing more is read,
// the jobs submitted end and count, and Stream returns the error.
func TestBatchStreamStopsOnSourceError(t *testing.T) {
	ex, err := laboro.New(laboro.WithConcurrency(2), laboro.WithPoolSize(2))
	require.NoError(t, err)
	defer ex.Close()
	bad := errors.New("line 4: token too long")
	jobs := func(yield func(laboro.Job, error) bool) {
		for i := range 3 {
			if !yield(laboro.Job{ID: strconv.Itoa(i + 1), Func: func(context.Context) error { return nil }}, nil) {
				return
			}
		}
		if yield(laboro.Job{}, bad) {
			t.Error("the batch read on after an error")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := (&Batch{}).Stream(ctx, ex, jobs, 10)
	require.ErrorIs(t, err, bad)
	assert.Equal(t, Counts{Total: 10, Succeeded: 3}, sum.Counts)
	assert.Equal(t, ExitFailed, sum.Code(), "seven jobs never ran")
}

// Stop and the context's end take effect while Stream waits for its next
// job (a pipe whose writer stalls): Stream returns with what ran, and says
// that it stopped reading; the reading goroutine ends when the source
// yields again.
func TestBatchStreamStopsWhileWaiting(t *testing.T) {
	for _, how := range []string{"stop", "context"} {
		t.Run(how, func(t *testing.T) {
			ex, err := laboro.New(laboro.WithConcurrency(1), laboro.WithPoolSize(1))
			require.NoError(t, err)
			defer ex.Close()
			gate, left := make(chan struct{}), make(chan struct{})
			jobs := func(yield func(laboro.Job, error) bool) {
				defer close(left)
				if !yield(laboro.Job{ID: "1", Func: func(context.Context) error { return nil }}, nil) {
					return
				}
				<-gate // the writer stalls
				if yield(laboro.Job{ID: "2", Func: func(context.Context) error { return nil }}, nil) {
					t.Error("the batch took a job after it stopped")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stop := make(chan struct{})
			streamCtx, interrupt := context.WithCancel(ctx)
			defer interrupt()
			b := &Batch{Stop: stop, OnResult: func(laboro.Job, laboro.Result) error {
				if how == "stop" {
					close(stop)
				} else {
					interrupt()
				}
				return nil
			}}
			sum, err := b.Stream(streamCtx, ex, jobs, -1)
			if how == "stop" {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, context.Canceled)
			}
			assert.True(t, sum.Unread)
			assert.Equal(t, Counts{Total: 1, Succeeded: 1}, sum.Counts)
			close(gate)
			<-left
		})
	}
}

// A batch lists its first MaxFailures failures and counts the others.
func TestBatchBoundsFailures(t *testing.T) {
	ex, err := laboro.New(laboro.WithConcurrency(2), laboro.WithPoolSize(2))
	require.NoError(t, err)
	defer ex.Close()
	jobs := make([]laboro.Job, MaxFailures+5)
	for i := range jobs {
		jobs[i] = laboro.Job{ID: strconv.Itoa(i + 1), Func: func(context.Context) error { return errors.New("no") }}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := (&Batch{}).Run(ctx, ex, jobs)
	require.NoError(t, err)
	assert.Equal(t, MaxFailures+5, sum.Failed)
	assert.Len(t, sum.Failures, MaxFailures)
	assert.Equal(t, 5, sum.Unlisted)
	var out bytes.Buffer
	sum.Write(&out)
	assert.Contains(t, out.String(), fmt.Sprintf("%d jobs: 0 succeeded, %d failed\n", MaxFailures+5, MaxFailures+5))
	assert.True(t, strings.HasSuffix(out.String(), "... and 5 more jobs that did not succeed, not listed (the first 1000 are)\n"), out.String()[max(0, out.Len()-300):])
}

// ReadAhead ends with the context's error at once, though the sequence
// blocks in a read; its goroutine ends when the sequence yields again.
func TestReadAheadEndsWithContext(t *testing.T) {
	gate, left := make(chan struct{}), make(chan struct{})
	seq := func(yield func(int, error) bool) {
		defer close(left)
		if !yield(1, nil) {
			return
		}
		<-gate // a read that blocks
		if yield(2, nil) {
			t.Error("a value came after the context ended")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []int
	var gotErr error
	for v, err := range ReadAhead(ctx, seq) {
		if err != nil {
			gotErr = err
			break
		}
		got = append(got, v)
		cancel() // Ctrl-C while the next read blocks
	}
	assert.Equal(t, []int{1}, got)
	require.ErrorIs(t, gotErr, context.Canceled)
	close(gate)
	<-left
}

// A batch interrupted while its jobs run ends with ctx's error, whatever
// the order in which the jobs' waits and the batch see ctx end (each round
// lets the scheduler pick one): the caller then says the batch was
// interrupted and what is not done.
func TestBatchInterruptedWhileJobsRun(t *testing.T) {
	for range 20 {
		ex, err := laboro.New(laboro.WithConcurrency(4), laboro.WithPoolSize(4))
		require.NoError(t, err)
		started, release := make(chan struct{}, 4), make(chan struct{})
		var jobs []laboro.Job
		for range 4 {
			jobs = append(jobs, laboro.Job{Func: func(context.Context) error {
				started <- struct{}{}
				<-release
				return nil
			}})
		}
		ctx, cancel := context.WithCancel(context.Background())
		type outcome struct {
			sum Summary
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			sum, err := (&Batch{}).Run(ctx, ex, jobs)
			done <- outcome{sum, err}
		}()
		for range 4 {
			<-started
		}
		cancel()
		o := <-done
		require.ErrorIs(t, o.err, context.Canceled)
		assert.Equal(t, Counts{Total: 4}, o.sum.Counts, "nothing done, nothing failed")
		close(release)
		ex.Close()
	}
}

// Jobs that wait with no worker to run them say so, once, after a while:
// why the batch does not move, and what to do.
func TestBatchSaysNoWorker(t *testing.T) {
	defer func(d time.Duration) { NoWorkerAfter = d }(NoWorkerAfter)
	NoWorkerAfter = 50 * time.Millisecond
	ex, err := laboro.New(laboro.WithConcurrency(1), laboro.WithPoolSize(1), laboro.WithBufferSize(4))
	require.NoError(t, err)
	defer ex.Close()
	var workers atomic.Int64
	release := make(chan struct{})
	var progress syncBuffer
	b := Batch{
		Progress: NewProgress(&progress, time.Nanosecond),
		Workers:  func() int { return int(workers.Load()) },
		NoWorker: "no worker: start one",
		// The one job the Executor runs is out, waiting for a worker.
		Out: func() (int, int) { return 0, 1 },
	}
	job := laboro.Job{Func: func(ctx context.Context) error { <-release; return nil }}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := b.Run(ctx, ex, []laboro.Job{job})
		done <- err
	}()
	require.Eventually(t, func() bool { return strings.Contains(progress.String(), "no worker: start one\n") }, time.Minute, time.Millisecond,
		"progress: %s", progress.String())
	workers.Store(1)
	close(release)
	require.NoError(t, <-done)
	assert.Equal(t, 1, strings.Count(progress.String(), "no worker: start one"), "said once")
}

// With a worker there, nothing is said however long the jobs wait.
func TestBatchSaysNothingWithAWorker(t *testing.T) {
	defer func(d time.Duration) { NoWorkerAfter = d }(NoWorkerAfter)
	NoWorkerAfter = time.Nanosecond
	ex, err := laboro.New(laboro.WithConcurrency(1), laboro.WithPoolSize(1), laboro.WithBufferSize(4))
	require.NoError(t, err)
	defer ex.Close()
	var progress syncBuffer
	b := Batch{Progress: NewProgress(&progress, time.Nanosecond), Workers: func() int { return 1 },
		NoWorker: "no worker: start one", Out: func() (int, int) { return 0, 1 }}
	job := laboro.Job{Func: func(context.Context) error { return nil }}
	var jobs []laboro.Job
	for range 50 {
		jobs = append(jobs, job)
	}
	_, err = b.Run(context.Background(), ex, jobs)
	require.NoError(t, err)
	assert.NotContains(t, progress.String(), "no worker")
}

// The summary line says how the jobs that did not succeed ended: failed
// alone, or each way, so that a cancelled or killed job is not counted
// as failed.
func TestSummarySaysHowJobsEnded(t *testing.T) {
	var s Summary
	s.Total, s.Succeeded = 7, 2
	s.fail(Failure{ID: "1", Status: "failed"})
	s.fail(Failure{ID: "2", Status: "failed"})
	var b strings.Builder
	s.Write(&b)
	assert.True(t, strings.HasPrefix(b.String(), "7 jobs: 2 succeeded, 2 failed, 3 not done\n"), b.String())
	s.fail(Failure{ID: "3", Status: "cancelled"})
	s.fail(Failure{ID: "4", Status: "killed"})
	s.fail(Failure{ID: "5", Status: "timed out"})
	assert.Equal(t, "2 failed, 1 timed out, 1 killed, 1 cancelled", s.FailedText())
	b.Reset()
	s.Write(&b)
	assert.True(t, strings.HasPrefix(b.String(), "7 jobs: 2 succeeded, 2 failed, 1 timed out, 1 killed, 1 cancelled\n"), b.String())
	assert.Equal(t, Counts{Total: 7, Succeeded: 2, Failed: 5, Cancelled: 1}, s.Counts, "the progress's counts, cancelled apart")
}

// A batch counted elsewhere (a service's) is said the same way, its
// failures not listed.
func TestSummaryCountFailed(t *testing.T) {
	s := Summary{Counts: Counts{Total: 5, Succeeded: 2}}
	s.CountFailed("failed", 0)
	assert.Equal(t, "0 failed", s.FailedText())
	s.CountFailed("cancelled", 2)
	assert.Equal(t, "2 cancelled", s.FailedText())
	s.CountFailed("failed", 1)
	var b strings.Builder
	s.Write(&b)
	assert.Equal(t, "5 jobs: 2 succeeded, 1 failed, 2 cancelled\n", b.String())
	assert.Equal(t, Counts{Total: 5, Succeeded: 2, Failed: 3, Cancelled: 2}, s.Counts)
	assert.Equal(t, ExitFailed, s.Code())
}
