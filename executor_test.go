package laboro_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestNewValidatesConfig(t *testing.T) {
	notEmpty := new(laboro.FIFO)
	notEmpty.Push(&laboro.Handle{})
	file := t.TempDir() + "/file"
	require.NoError(t, writeFile(file, ""))
	tests := []struct {
		name string
		opts []laboro.Option
	}{
		{"zero buffer", []laboro.Option{laboro.WithBufferSize(0)}},
		{"negative buffer", []laboro.Option{laboro.WithBufferSize(-3)}},
		{"zero pool", []laboro.Option{laboro.WithPoolSize(0)}},
		{"negative concurrency", []laboro.Option{laboro.WithConcurrency(-1)}},
		{"missing output dir", []laboro.Option{laboro.WithOutputDir(t.TempDir() + "/nope")}},
		{"output dir is a file", []laboro.Option{laboro.WithOutputDir(file)}},
		{"output dir with own runner", []laboro.Option{laboro.WithOutputDir(t.TempDir()), laboro.WithRunner(laboro.FuncRunner{})}},
		{"queue not empty", []laboro.Option{laboro.WithQueue(notEmpty)}},
		{"negative history", []laboro.Option{laboro.WithHistory(-1)}},
		{"history beyond its bound", []laboro.Option{laboro.WithHistory(laboro.MaxHistory + 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, err := laboro.New(tt.opts...)
			require.ErrorIs(t, err, laboro.ErrInvalidConfig)
			require.Nil(t, ex)
		})
	}
}

func TestDefaults(t *testing.T) {
	ex := newExecutor(t)
	st := ex.Stats()
	assert.Equal(t, laboro.DefaultConcurrency, st.Concurrency)
	assert.Equal(t, laboro.DefaultBufferSize, st.BufferSize)
	assert.Positive(t, st.PoolSize)
	assert.Equal(t, 1, ex.Parallelism())
}

func TestSubmitAssignsIncreasingIDs(t *testing.T) {
	ex := newExecutor(t, laboro.WithConcurrency(0), laboro.WithBufferSize(10))
	var ids []string
	for range 3 {
		ids = append(ids, submit(t, ex, laboro.Job{Command: "true"}).ID())
	}
	mine := submit(t, ex, laboro.Job{ID: "job_5", Command: "true"})
	assert.Equal(t, "job_5", mine.ID())
	ids = append(ids, submit(t, ex, laboro.Job{Command: "true"}).ID())
	// job_5 is taken by the caller's job while it is queued: skipped.
	ids = append(ids, submit(t, ex, laboro.Job{Command: "true"}).ID())
	assert.Equal(t, []string{"job_1", "job_2", "job_3", "job_4", "job_6"}, ids)
}

func TestSubmitRefusesDuplicateAndInvalidJobs(t *testing.T) {
	g := newGate()
	ex := newExecutor(t, laboro.WithBufferSize(4))
	running := submit(t, ex, withID(g.job("a"), "running"))
	g.expectStarts(t, 1)
	queued := submit(t, ex, laboro.Job{ID: "queued", Command: "true"})

	for _, id := range []string{"running", "queued"} {
		_, err := ex.Submit(testCtx(t), laboro.Job{ID: id, Command: "true"})
		require.ErrorIs(t, err, laboro.ErrDuplicateID, id)
	}
	for _, job := range []laboro.Job{
		{},                              // nothing to run
		{Command: "   "},                // no words
		{Command: `echo "unterminated`}, // bad quoting
		{Args: []string{""}},            // empty program
	} {
		_, err := ex.Submit(testCtx(t), job)
		require.ErrorIs(t, err, laboro.ErrInvalidJob, "%+v", job)
	}
	close(g.release)
	wait(t, running)
	wait(t, queued)
	// Once finished, an id may be used again.
	h := submit(t, ex, laboro.Job{ID: "running", Func: func(context.Context) error { return nil }})
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
}

func withID(job laboro.Job, id string) laboro.Job {
	job.ID = id
	return job
}

func TestSubmitBlocksOnFullBufferUntilContextEnds(t *testing.T) {
	ex := newExecutor(t, laboro.WithConcurrency(0), laboro.WithBufferSize(2))
	submit(t, ex, laboro.Job{Command: "true"})
	submit(t, ex, laboro.Job{Command: "true"})

	ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	h, err := ex.Submit(ctx, laboro.Job{ID: "late", Command: "true"})
	require.ErrorIs(t, err, laboro.ErrNotQueued)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Nil(t, h)
	assert.Equal(t, []string{"job_1", "job_2"}, queuedIDs(ex), "the timed-out job is not queued")
	assert.Zero(t, ex.Stats().Blocked)
	// Its id was not kept either.
	require.NoError(t, ex.Stop("job_1"))
	submit(t, ex, laboro.Job{ID: "late", Command: "true"})
}

func queuedIDs(ex *laboro.Executor) []string {
	var ids []string
	for _, j := range ex.Queued() {
		ids = append(ids, j.ID)
	}
	return ids
}

// Blocked submitters enter the buffer in the order they arrived, one per
// place that frees, and run in that order.
func TestBlockedSubmittersWakeInArrivalOrder(t *testing.T) {
	g := newGate()
	ex := newExecutor(t, laboro.WithConcurrency(0), laboro.WithBufferSize(1), laboro.WithPoolSize(1))
	submit(t, ex, withID(g.job("first"), "first"))

	type submitted struct {
		h   *laboro.Handle
		err error
	}
	results := make(map[string]chan submitted)
	names := []string{"b", "c", "d", "e"}
	for i, name := range names {
		ch := make(chan submitted, 1)
		results[name] = ch
		go func() {
			h, err := ex.Submit(testCtx(t), withID(g.job(name), name))
			ch <- submitted{h, err}
		}()
		eventually(t, func() bool { return ex.Stats().Blocked == i+1 }, "submitter %s blocks", name)
	}

	require.NoError(t, ex.Stop("first"))
	r := <-results["b"]
	require.NoError(t, r.err)
	assert.Equal(t, []string{"b"}, queuedIDs(ex))
	assert.Equal(t, 3, ex.Stats().Blocked)

	require.NoError(t, ex.SetConcurrency(1))
	var order []string
	for range names {
		order = append(order, g.expectStarts(t, 1)...)
		g.release <- struct{}{}
	}
	assert.Equal(t, names, order)
	for _, name := range names[1:] {
		r := <-results[name]
		require.NoError(t, r.err)
		assert.Equal(t, laboro.StatusSucceeded, wait(t, r.h).Status)
	}
}

func TestConcurrencyRaisedAndLoweredWhileRunning(t *testing.T) {
	g := newGate()
	ex := newExecutor(t, laboro.WithPoolSize(4), laboro.WithBufferSize(20))
	var hs []*laboro.Handle
	for i := range 10 {
		hs = append(hs, submit(t, ex, g.job(fmt.Sprint(i))))
	}
	// Concurrency 1: one runs, the rest wait.
	g.expectStarts(t, 1)
	g.expectNoStart(t)
	assert.Equal(t, 1, ex.Stats().Running)

	// Raising starts queued jobs at once, up to the new level.
	require.NoError(t, ex.SetConcurrency(3))
	g.expectStarts(t, 2)
	g.expectNoStart(t)
	assert.Equal(t, 3, g.max())

	// Above the pool size, the pool is the limit.
	require.NoError(t, ex.SetConcurrency(8))
	assert.Equal(t, 4, ex.Parallelism())
	g.expectStarts(t, 1)
	g.expectNoStart(t)
	assert.Equal(t, 4, g.max())

	// Lowering stops nothing: the four go on; nothing starts until fewer
	// than 2 run.
	require.NoError(t, ex.SetConcurrency(2))
	assert.Equal(t, 4, ex.Stats().Running)
	g.resetMax()
	g.release <- struct{}{}
	g.release <- struct{}{}
	eventually(t, func() bool { return ex.Stats().Running == 2 }, "two finish")
	g.expectNoStart(t)
	g.release <- struct{}{}
	g.expectStarts(t, 1) // 1 ran, so one more may start
	g.expectNoStart(t)
	assert.LessOrEqual(t, g.max(), 4)
	g.resetMax()

	// From here on, never more than 2 at once.
	for range 7 {
		g.release <- struct{}{}
	}
	for _, h := range hs {
		assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
	}
	assert.LessOrEqual(t, g.max(), 2)
}

func TestConcurrencyZeroPausesStarts(t *testing.T) {
	g := newGate()
	ex := newExecutor(t, laboro.WithConcurrency(0), laboro.WithPoolSize(2))
	h := submit(t, ex, g.job("a"))
	g.expectNoStart(t)
	assert.Equal(t, 0, ex.Parallelism())
	assert.Equal(t, []string{h.ID()}, queuedIDs(ex))

	require.ErrorIs(t, ex.SetConcurrency(-1), laboro.ErrInvalidConfig)
	assert.Equal(t, 0, ex.Concurrency())

	require.NoError(t, ex.SetConcurrency(1))
	g.expectStarts(t, 1)
	close(g.release)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
}

func TestStopAndQueued(t *testing.T) {
	g := newGate()
	ex := newExecutor(t, laboro.WithBufferSize(10))
	running := submit(t, ex, g.job("running"))
	g.expectStarts(t, 1)
	var queued []*laboro.Handle
	for _, cmd := range []string{"echo a", `grep "two words" f`, "sleep 1"} {
		queued = append(queued, submit(t, ex, laboro.Job{Command: cmd}))
	}
	jobs := ex.Queued()
	require.Len(t, jobs, 3)
	assert.Equal(t, "job_2", jobs[0].ID)
	assert.Equal(t, `grep "two words" f`, jobs[1].String())
	assert.Equal(t, "job_4", jobs[2].ID)

	assert.Equal(t, jobs[:2], ex.Peek(2), "the first two, in order")
	assert.Equal(t, jobs, ex.Peek(10))
	assert.Empty(t, ex.Peek(0))
	assert.Empty(t, ex.Peek(-1))

	buf := make([]laboro.Job, 1, 8)
	buf = ex.AppendQueued(buf)
	require.Len(t, buf, 4, "appended after what was there")
	assert.Equal(t, jobs, buf[1:])
	reused := buf[:0]
	assert.Zero(t, testing.AllocsPerRun(50, func() { reused = ex.AppendQueued(reused[:0]) }), "a slice with room is reused")

	require.NoError(t, ex.Stop("job_3"))
	assert.Equal(t, []string{"job_2", "job_4"}, queuedIDs(ex))
	res := wait(t, queued[1])
	assert.Equal(t, laboro.StatusStopped, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrStopped)
	assert.Nil(t, res.Output)
	assert.True(t, res.Started.IsZero())

	for _, id := range []string{"job_3", running.ID(), "job_99", ""} {
		require.ErrorIs(t, ex.Stop(id), laboro.ErrNotFound, id)
	}
	require.NoError(t, ex.Stop("job_4"))
	close(g.release)
	wait(t, running)
	wait(t, queued[0])
	require.ErrorIs(t, ex.Stop("job_2"), laboro.ErrNotFound, "finished")
	assert.Empty(t, ex.Queued())
}

func TestShutdownDrains(t *testing.T) {
	g := newGate()
	var mu sync.Mutex
	finished := map[string]laboro.Status{}
	ex, err := laboro.New(laboro.WithPoolSize(2), laboro.WithConcurrency(2), laboro.WithBufferSize(2),
		laboro.WithObserver(func(ev laboro.Event) {
			if ev.Kind == laboro.EventFinished {
				mu.Lock()
				finished[ev.Job.ID] = ev.Result.Status
				mu.Unlock()
			}
		}))
	require.NoError(t, err)
	run1, run2 := submit(t, ex, g.job("r1")), submit(t, ex, g.job("r2"))
	g.expectStarts(t, 2)
	q1, q2 := submit(t, ex, g.job("q1")), submit(t, ex, g.job("q2"))
	blocked := make(chan error, 1)
	go func() {
		_, err := ex.Submit(testCtx(t), g.job("blocked"))
		blocked <- err
	}()
	eventually(t, func() bool { return ex.Stats().Blocked == 1 }, "submitter blocks")

	shutdown := make(chan error, 1)
	go func() { shutdown <- ex.Shutdown(testCtx(t)) }()

	err = <-blocked
	require.ErrorIs(t, err, laboro.ErrTerminated)
	require.ErrorIs(t, err, laboro.ErrClosed)
	for _, h := range []*laboro.Handle{q1, q2} {
		res := wait(t, h)
		assert.Equal(t, laboro.StatusTerminated, res.Status)
		assert.ErrorIs(t, res.Err, laboro.ErrTerminated)
		assert.Equal(t, "terminated before execution", res.Status.String())
	}
	// The drain refuses new work but lets running jobs finish.
	_, err = ex.Submit(testCtx(t), laboro.Job{Command: "true"})
	require.ErrorIs(t, err, laboro.ErrClosed)
	require.ErrorIs(t, ex.SetConcurrency(3), laboro.ErrClosed)
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned %v while jobs run", err)
	case <-time.After(50 * time.Millisecond):
	}
	for _, h := range []*laboro.Handle{run1, run2} {
		_, done := h.Result()
		assert.False(t, done)
	}
	close(g.release)
	require.NoError(t, <-shutdown)
	for _, h := range []*laboro.Handle{run1, run2} {
		res, done := h.Result()
		require.True(t, done)
		assert.Equal(t, laboro.StatusSucceeded, res.Status)
	}
	mu.Lock()
	assert.Equal(t, map[string]laboro.Status{
		run1.ID(): laboro.StatusSucceeded, run2.ID(): laboro.StatusSucceeded,
		q1.ID(): laboro.StatusTerminated, q2.ID(): laboro.StatusTerminated,
	}, finished, "the observer saw every result before Shutdown returned")
	mu.Unlock()
	require.NoError(t, ex.Shutdown(testCtx(t)), "again")
	require.NoError(t, ex.Close(), "after shutdown")
}

func TestShutdownDeadlineThenClose(t *testing.T) {
	ex, err := laboro.New()
	require.NoError(t, err)
	h := submit(t, ex, laboro.Job{Command: "sleep 30"})
	eventually(t, func() bool { return ex.Stats().Running == 1 }, "job starts")
	ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, ex.Shutdown(ctx), context.DeadlineExceeded)
	_, done := h.Result()
	assert.False(t, done, "the job goes on after Shutdown gave up")

	start := time.Now()
	require.NoError(t, ex.Close())
	assert.Less(t, time.Since(start), 5*time.Second)
	res := wait(t, h)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrKilled)
	assert.Equal(t, -1, res.ExitCode)
}

func TestCloseAndShutdownFromManyGoroutines(t *testing.T) {
	ex, err := laboro.New(laboro.WithConcurrency(4), laboro.WithPoolSize(4))
	require.NoError(t, err)
	var hs []*laboro.Handle
	for range 20 {
		hs = append(hs, submit(t, ex, laboro.Job{Func: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}}))
	}
	eventually(t, func() bool { return ex.Stats().Running == 4 }, "four jobs start")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if i%2 == 0 {
				assert.NoError(t, ex.Close())
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			assert.NoError(t, ex.Shutdown(ctx))
		})
	}
	wg.Wait()
	counts := map[laboro.Status]int{}
	for _, h := range hs {
		counts[wait(t, h).Status]++
	}
	assert.Equal(t, map[laboro.Status]int{laboro.StatusKilled: 4, laboro.StatusTerminated: 16}, counts)
}

func TestFuncJobs(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	ex := newExecutor(t, laboro.WithConcurrency(2), laboro.WithLogger(zap.New(core)))
	boom := errors.New("boom")
	failing := submit(t, ex, laboro.Job{Func: func(context.Context) error { return boom }})
	panicking := submit(t, ex, laboro.Job{Func: func(context.Context) error { panic(boom) }})
	slow := submit(t, ex, laboro.Job{Timeout: 20 * time.Millisecond, Func: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}})

	res := wait(t, failing)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorIs(t, res.Err, boom)

	res = wait(t, panicking)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	var pe *laboro.PanicError
	require.ErrorAs(t, res.Err, &pe)
	assert.ErrorIs(t, res.Err, boom)
	assert.Contains(t, string(pe.Stack), "executor_test.go")
	logged := logs.FilterMessage("job panicked").All()
	require.Len(t, logged, 1)
	assert.Equal(t, panicking.ID(), logged[0].ContextMap()["job"])
	assert.Contains(t, logged[0].ContextMap()["stack"], "executor_test.go", "the stack is logged")

	res = wait(t, slow)
	assert.Equal(t, laboro.StatusTimedOut, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrTimeout)
}

type panickyRunner struct{}

func (panickyRunner) Run(context.Context, laboro.Job) laboro.Result { panic("runner bug") }

func TestRunnerPanicFailsTheJobOnly(t *testing.T) {
	ex := newExecutor(t, laboro.WithRunner(panickyRunner{}))
	res := wait(t, submit(t, ex, laboro.Job{Command: "anything"}))
	assert.Equal(t, laboro.StatusFailed, res.Status)
	var pe *laboro.PanicError
	require.ErrorAs(t, res.Err, &pe)
	assert.Equal(t, "runner bug", pe.Value)
	res = wait(t, submit(t, ex, laboro.Job{Command: "again"}))
	assert.Equal(t, laboro.StatusFailed, res.Status, "the worker survived")
}

func TestEventsInOrder(t *testing.T) {
	var mu sync.Mutex
	var events []string
	ex, err := laboro.New(laboro.WithObserver(func(ev laboro.Event) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Kind == laboro.EventConcurrency {
			events = append(events, fmt.Sprintf("concurrency %d/%d", ev.Concurrency, ev.Parallelism))
			return
		}
		events = append(events, ev.Kind.String()+" "+ev.Job.ID)
	}), laboro.WithConcurrency(0), laboro.WithPoolSize(1))
	require.NoError(t, err)
	noop := laboro.Job{Func: func(context.Context) error { return nil }}
	first := submit(t, ex, noop)
	h := submit(t, ex, noop)
	require.NoError(t, ex.Stop(h.ID()))
	require.NoError(t, ex.SetConcurrency(3))
	wait(t, first)
	require.NoError(t, ex.Shutdown(testCtx(t)))
	assert.Equal(t, []string{
		"queued job_1", "queued job_2", "finished job_2", "concurrency 3/1",
		"started job_1", "finished job_1",
	}, events)
}

// A job's EventStarted tells how long it waited in the buffer: from its
// EventQueued, which for a submitter that waited for room is when it got in.
func TestEventsTellTheWait(t *testing.T) {
	var mu sync.Mutex
	queued, started := map[string]time.Time{}, map[string]laboro.Event{}
	ex, err := laboro.New(laboro.WithObserver(func(ev laboro.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Kind {
		case laboro.EventQueued:
			queued[ev.Job.ID] = ev.Time
		case laboro.EventStarted:
			started[ev.Job.ID] = ev
		}
	}), laboro.WithPoolSize(1), laboro.WithBufferSize(1))
	require.NoError(t, err)
	release := make(chan struct{})
	first := submit(t, ex, laboro.Job{ID: "first", Func: func(context.Context) error { <-release; return nil }})
	second := submit(t, ex, laboro.Job{ID: "second", Func: func(context.Context) error { return nil }})
	blocked := make(chan *laboro.Handle)
	go func() {
		blocked <- submit(t, ex, laboro.Job{ID: "third", Func: func(context.Context) error { return nil }})
	}()
	require.Eventually(t, func() bool { return ex.Stats().Blocked == 1 }, 10*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // a wait the events must show
	close(release)
	wait(t, first)
	wait(t, second)
	wait(t, <-blocked)
	require.NoError(t, ex.Shutdown(testCtx(t)))
	for _, id := range []string{"first", "second", "third"} {
		ev := started[id]
		assert.Equal(t, ev.Time.Sub(queued[id]), ev.Waited, id)
	}
	assert.GreaterOrEqual(t, started["second"].Waited, 20*time.Millisecond, "it waited behind first")
	assert.True(t, !queued["third"].Before(queued["second"].Add(20*time.Millisecond)),
		"third is queued when first ends and second leaves the buffer, not when its Submit began")
}

// Under any mix of submits, stops, concurrency changes and a drain, every
// accepted job ends with exactly one result.
func TestEveryJobEndsOnce(t *testing.T) {
	var mu sync.Mutex
	finished := map[string]int{}
	ex, err := laboro.New(laboro.WithPoolSize(4), laboro.WithBufferSize(8), laboro.WithObserver(func(ev laboro.Event) {
		if ev.Kind == laboro.EventFinished {
			mu.Lock()
			finished[ev.Job.ID]++
			mu.Unlock()
		}
	}))
	require.NoError(t, err)
	job := laboro.Job{Func: func(context.Context) error {
		time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		return nil
	}}
	var (
		wg       sync.WaitGroup
		hmu      sync.Mutex
		accepted []*laboro.Handle
	)
	for range 4 {
		wg.Go(func() {
			for range 300 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(2000))*time.Microsecond)
				h, err := ex.Submit(ctx, job)
				cancel()
				if err != nil {
					assert.True(t, errors.Is(err, laboro.ErrNotQueued) || errors.Is(err, laboro.ErrClosed), "%v", err)
					continue
				}
				hmu.Lock()
				accepted = append(accepted, h)
				hmu.Unlock()
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			_ = ex.SetConcurrency(rand.IntN(5))
			_ = ex.Stop(fmt.Sprintf("job_%d", rand.IntN(1200)+1))
			if i == 150 {
				_ = ex.SetConcurrency(4)
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	time.Sleep(30 * time.Millisecond)
	require.NoError(t, ex.Shutdown(testCtx(t)))
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	hmu.Lock()
	defer hmu.Unlock()
	require.NotEmpty(t, accepted)
	assert.Len(t, finished, len(accepted))
	for _, h := range accepted {
		res, done := h.Result()
		require.True(t, done, h.ID())
		assert.Equal(t, 1, finished[h.ID()], h.ID())
		assert.Contains(t, []laboro.Status{laboro.StatusSucceeded, laboro.StatusStopped, laboro.StatusTerminated}, res.Status)
	}
}

// Every waiter of a job, however its Done or Wait call falls against the
// job's end, is woken with the final result: waiters arrive before, while
// and after the job ends.
func TestWaitersRaceTheEnd(t *testing.T) {
	ex := newExecutor(t, laboro.WithPoolSize(2), laboro.WithConcurrency(2))
	var seen sync.WaitGroup
	for range 2000 {
		h := submit(t, ex, laboro.Job{Func: func(context.Context) error { return nil }})
		for w := range 3 {
			seen.Go(func() {
				if w == 0 {
					<-h.Done()
				} else {
					_, err := h.Wait(context.Background())
					assert.NoError(t, err)
				}
				res, ok := h.Result()
				assert.True(t, ok, "woken before the result was final")
				assert.Equal(t, laboro.StatusSucceeded, res.Status)
				assert.Equal(t, h.ID(), res.ID)
			})
		}
	}
	seen.Wait()
}
