package laboro_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/laboro-go/laboro"
)

// blockingRunner runs no process: each Run reports the Executor's Stats
// as it is entered, then waits for release.
type blockingRunner struct {
	ex      *laboro.Executor
	entered chan laboro.Stats
	release chan struct{}
}

func (r *blockingRunner) Run(ctx context.Context, job laboro.Job) laboro.Result {
	r.entered <- r.ex.Stats()
	<-r.release
	return laboro.Result{}
}

// Started counts a job before its Runner's Run is called, once: a Runner
// that counts its own Run calls learns from it how many jobs the Executor
// has taken from the buffer but not yet given it (Running cannot tell
// them, since it still counts a job for a moment after its Run returns).
func TestStatsStartedBeforeRun(t *testing.T) {
	r := &blockingRunner{entered: make(chan laboro.Stats), release: make(chan struct{})}
	ex, err := laboro.New(laboro.WithRunner(r), laboro.WithConcurrency(1))
	require.NoError(t, err)
	defer ex.Close()
	r.ex = ex
	ctx := context.Background()
	var handles []*laboro.Handle
	for _, id := range []string{"first", "second"} {
		h, err := ex.Submit(ctx, laboro.Job{ID: id, Command: "true"})
		require.NoError(t, err)
		handles = append(handles, h)
	}
	for i, h := range handles {
		st := <-r.entered
		assert.EqualValues(t, i+1, st.Started, "as Run of job %d is entered", i+1)
		assert.Equal(t, 1, st.Running)
		r.release <- struct{}{}
		_, err := h.Wait(ctx)
		require.NoError(t, err)
	}
	st := ex.Stats()
	assert.EqualValues(t, 2, st.Started)
	assert.EqualValues(t, 2, st.Finished())
}

// What Stats counts as jobs end, whatever way they end, and what a poller
// learns from Changes.
func TestStatsCountEveryEnd(t *testing.T) {
	ex, err := laboro.New(laboro.WithPoolSize(1), laboro.WithBufferSize(4), laboro.WithOutputDir(t.TempDir()))
	require.NoError(t, err)
	defer ex.Close()
	ctx := context.Background()
	before := ex.Stats()
	assert.Zero(t, before.Finished())

	require.NoError(t, ex.SetConcurrency(0))
	afterLevel := ex.Stats().Changes
	assert.Greater(t, afterLevel, before.Changes, "a new level is a change")
	var handles []*laboro.Handle
	for _, job := range []laboro.Job{
		{ID: "ok", Command: "echo hello"},         // 6 bytes of output
		{ID: "bad", Script: "printf abc; exit 3"}, // 3
		{ID: "fn", Func: func(context.Context) error { return errors.New("no") }},
		{ID: "held", Command: "echo never"},
	} {
		h, err := ex.Submit(ctx, job)
		require.NoError(t, err)
		handles = append(handles, h)
	}
	queued := ex.Stats()
	assert.Equal(t, 4, queued.Queued)
	assert.Equal(t, afterLevel+4, queued.Changes, "each job queued is a change")
	require.NoError(t, ex.Stop("held"))
	require.NoError(t, ex.SetConcurrency(1))
	for _, h := range handles {
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		res.Output.Close()
	}

	st := ex.Stats()
	// Each job's counts are in before its Handle has its result.
	assert.EqualValues(t, 4, st.Finished())
	assert.EqualValues(t, 1, st.Ended[laboro.StatusSucceeded])
	assert.EqualValues(t, 2, st.Ended[laboro.StatusFailed])
	assert.EqualValues(t, 1, st.Ended[laboro.StatusStopped])
	assert.EqualValues(t, 9, st.OutputBytes)
	assert.EqualValues(t, 3, st.Runs.Count, "the stopped job never ran")
	assert.EqualValues(t, 3, st.Started, "the stopped job never started")
	assert.EqualValues(t, 3, st.Waits.Count)
	assert.Zero(t, st.Running+st.Queued+st.Blocked)
	// 4 queued, 1 stopped, the level, 3 started, 3 ended: 12 changes.
	assert.Equal(t, afterLevel+12, st.Changes)
	sum := func(h laboro.Histogram) (n int64) {
		for _, b := range h.Buckets {
			n += b
		}
		return n
	}
	assert.Equal(t, st.Runs.Count, sum(st.Runs))
	assert.Equal(t, st.Waits.Count, sum(st.Waits))
}

// A job's wait runs from entering the buffer, for a submitter that waited
// for room too, to its start; its run from its start to its end. Both are
// counted in the buckets their durations fall in.
func TestStatsTimeWaitsAndRuns(t *testing.T) {
	ex, err := laboro.New(laboro.WithPoolSize(1), laboro.WithBufferSize(1), laboro.WithConcurrency(0))
	require.NoError(t, err)
	defer ex.Close()
	ctx := context.Background()
	const run = 30 * time.Millisecond
	sleep := laboro.Job{Func: func(context.Context) error { time.Sleep(run); return nil }}
	first, err := ex.Submit(ctx, sleep)
	require.NoError(t, err)
	admitted := make(chan *laboro.Handle)
	go func() { // blocked: the buffer is full
		h, err := ex.Submit(ctx, sleep)
		assert.NoError(t, err)
		admitted <- h
	}()
	for ex.Stats().Blocked == 0 {
		time.Sleep(time.Millisecond) // until the second submitter is in line
	}
	const held = 40 * time.Millisecond
	start := time.Now()
	time.Sleep(held) // the first job waits this long at least
	require.NoError(t, ex.SetConcurrency(1))
	res1, err := first.Wait(ctx)
	require.NoError(t, err)
	firstWait := res1.Started.Sub(start)
	res2, err := (<-admitted).Wait(ctx)
	require.NoError(t, err)

	st := ex.Stats()
	require.EqualValues(t, 2, st.Waits.Count)
	require.EqualValues(t, 2, st.Runs.Count)
	assert.GreaterOrEqual(t, st.Runs.Sum, 2*run)
	assert.Equal(t, res1.Duration()+res2.Duration(), st.Runs.Sum)
	// The first waited from before start; the second entered the buffer
	// when the first left it, and waited for it to run.
	require.GreaterOrEqual(t, firstWait, held)
	assert.GreaterOrEqual(t, st.Waits.Sum, firstWait+run)
	assert.Less(t, st.Waits.Sum, time.Hour)
	bounds := laboro.HistogramBounds()
	bucket := func(d time.Duration) int {
		i := 0
		for i < len(bounds) && d > bounds[i] {
			i++
		}
		return i
	}
	runs := [len(st.Runs.Buckets)]int64{}
	runs[bucket(res1.Duration())]++
	runs[bucket(res2.Duration())]++
	assert.Equal(t, runs, st.Runs.Buckets)
	assert.Zero(t, st.Waits.Buckets[0], "no wait under a millisecond")
}

// Recent keeps the last WithHistory jobs, newest first, with their
// results; Ended finds one of them; without WithHistory, none is kept.
func TestRecentKeepsTheLastJobs(t *testing.T) {
	ex, err := laboro.New(laboro.WithPoolSize(1), laboro.WithConcurrency(1), laboro.WithHistory(3))
	require.NoError(t, err)
	defer ex.Close()
	ctx := context.Background()
	for i := range 5 {
		h, err := ex.Submit(ctx, laboro.Job{ID: fmt.Sprint("j", i), Func: func(context.Context) error {
			if i%2 == 1 {
				return fmt.Errorf("odd %d", i)
			}
			return nil
		}})
		require.NoError(t, err)
		_, err = h.Wait(ctx)
		require.NoError(t, err)
	}
	recent := ex.Recent(10)
	require.Len(t, recent, 3)
	for k, want := range []string{"j4", "j3", "j2"} {
		assert.Equal(t, want, recent[k].Job.ID)
		assert.Equal(t, want, recent[k].Result.ID)
	}
	assert.Equal(t, laboro.StatusFailed, recent[1].Result.Status)
	assert.EqualError(t, recent[1].Result.Err, "odd 3")
	assert.Len(t, ex.Recent(1), 1)

	f, ok := ex.Ended("j2")
	require.True(t, ok)
	assert.Equal(t, laboro.StatusSucceeded, f.Result.Status)
	_, ok = ex.Ended("j1")
	assert.False(t, ok, "beyond the history")

	bare, err := laboro.New()
	require.NoError(t, err)
	defer bare.Close()
	h, err := bare.Submit(ctx, laboro.Job{Func: func(context.Context) error { return nil }})
	require.NoError(t, err)
	_, err = h.Wait(ctx)
	require.NoError(t, err)
	assert.Empty(t, bare.Recent(10))
	_, ok = bare.Ended(h.ID())
	assert.False(t, ok)
}
