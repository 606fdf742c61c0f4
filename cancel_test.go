package laboro_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Cancel of a running process job kills its whole process group, and the
// job ends cancelled; Stop would have refused it.
func TestCancelKillsARunningJobsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	ex := newExecutor(t)
	h := submit(t, ex, laboro.Job{Script: fmt.Sprintf("sleep 300 & echo $! > %s.tmp; mv %[1]s.tmp %[1]s; wait", pidFile)})
	eventually(t, func() bool { _, err := os.Stat(pidFile); return err == nil }, "the job starts its child")
	child := readPID(t, pidFile)
	require.NoError(t, syscall.Kill(child, 0), "the child runs")

	require.ErrorIs(t, ex.Stop(h.ID()), laboro.ErrNotFound, "Stop touches queued jobs only")
	require.NoError(t, ex.Cancel(h.ID()))
	res := wait(t, h)
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrCancelled)
	assert.Equal(t, "cancelled", res.Status.String())
	assertGone(t, child)

	require.ErrorIs(t, ex.Cancel(h.ID()), laboro.ErrNotFound, "a finished job")
	require.ErrorIs(t, ex.Cancel("job_999"), laboro.ErrNotFound, "an unknown assigned id")
	require.ErrorIs(t, ex.Cancel("nope"), laboro.ErrNotFound, "an unknown id")
}

// Cancel of a queued job removes it as Stop does, and a blocked Submit
// takes its place.
func TestCancelQueuedJob(t *testing.T) {
	g := newGate()
	ex := newExecutor(t, laboro.WithBufferSize(1))
	running := submit(t, ex, g.job("running"))
	g.expectStarts(t, 1)
	queued := submit(t, ex, withID(g.job("queued"), "mine"))
	blocked := make(chan *laboro.Handle)
	go func() {
		h, err := ex.Submit(context.Background(), g.job("blocked"))
		assert.NoError(t, err)
		blocked <- h
	}()
	eventually(t, func() bool { return ex.Stats().Blocked == 1 }, "the third Submit blocks")

	require.NoError(t, ex.Cancel("mine"))
	res := wait(t, queued)
	assert.Equal(t, laboro.StatusStopped, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrStopped)
	third := <-blocked
	assert.Equal(t, []string{third.ID()}, queuedIDs(ex))

	close(g.release)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, running).Status)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, third).Status)
}

// Jobs with assigned ids are found among the running ones, and with ids of
// the caller's choosing too; cancelling one leaves the others running.
func TestCancelFindsEveryRunningJob(t *testing.T) {
	g := newGate()
	ex := newExecutor(t, laboro.WithPoolSize(3), laboro.WithConcurrency(3))
	a := submit(t, ex, g.job("a"))
	b := submit(t, ex, withID(g.job("b"), "chosen"))
	c := submit(t, ex, g.job("c"))
	g.expectStarts(t, 3)

	require.NoError(t, ex.Cancel(c.ID()))
	require.NoError(t, ex.Cancel("chosen"))
	assert.Equal(t, laboro.StatusCancelled, wait(t, c).Status)
	assert.Equal(t, laboro.StatusCancelled, wait(t, b).Status)
	_, done := a.Result()
	assert.False(t, done, "the job not cancelled runs on")
	close(g.release)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, a).Status)
}

// A Cancel that comes while the job is being handed to its runner is not
// lost: the runner finds its context ended. A job is queued or running at
// every moment until it ends, so Cancel always finds it.
func TestCancelRacingTheStart(t *testing.T) {
	ex := newExecutor(t, laboro.WithPoolSize(4), laboro.WithConcurrency(4))
	for range 200 {
		h := submit(t, ex, laboro.Job{Func: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}})
		require.NoError(t, ex.Cancel(h.ID()))
		res := wait(t, h)
		assert.Contains(t, []laboro.Status{laboro.StatusCancelled, laboro.StatusStopped}, res.Status)
	}
}

// ctxRunner is a Runner that knows nothing of timeouts or cancels: it
// waits for its context and reports the bare context error as a failure.
type ctxRunner struct{ deadline chan time.Time }

func (r ctxRunner) Run(ctx context.Context, job laboro.Job) laboro.Result {
	d, _ := ctx.Deadline()
	r.deadline <- d
	<-ctx.Done()
	return laboro.Result{Status: laboro.StatusFailed, Err: ctx.Err()}
}

// The Executor applies Job.Timeout itself: a Runner that only watches its
// context sees the deadline and ends timed out; one cancelled ends
// cancelled; and one killed by Close ends killed.
func TestInterruptionsOfACustomRunner(t *testing.T) {
	r := ctxRunner{deadline: make(chan time.Time, 3)}
	ex, err := laboro.New(laboro.WithRunner(r), laboro.WithPoolSize(3), laboro.WithConcurrency(3))
	require.NoError(t, err)
	before := time.Now()
	timed := submit(t, ex, laboro.Job{ID: "timed", Timeout: 50 * time.Millisecond})
	d := <-r.deadline
	assert.WithinRange(t, d, before.Add(50*time.Millisecond), time.Now().Add(50*time.Millisecond), "the deadline reaches the runner")
	res := wait(t, timed)
	assert.Equal(t, laboro.StatusTimedOut, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrTimeout)

	cancelled := submit(t, ex, laboro.Job{ID: "cancelled"})
	killed := submit(t, ex, laboro.Job{ID: "killed"})
	for range 2 {
		d := <-r.deadline
		assert.True(t, d.IsZero(), "no deadline without a Timeout")
	}
	require.NoError(t, ex.Cancel("cancelled"))
	res = wait(t, cancelled)
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrCancelled)

	require.NoError(t, ex.Close())
	res = wait(t, killed)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrKilled)
}

// A job that succeeds although its context ended keeps its success.
func TestSuccessOutlivesTheInterruption(t *testing.T) {
	ex := newExecutor(t, laboro.WithRunner(laboro.FuncRunner{}))
	h := submit(t, ex, laboro.Job{Timeout: time.Millisecond, Func: func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	}})
	res := wait(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	assert.NoError(t, res.Err)
}
