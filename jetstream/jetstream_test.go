package jetstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// setup starts an embedded server with file storage in a temporary
// directory and connects to it; both are stopped at the end of the test.
func setup(t *testing.T) *nats.Conn {
	nc, _ := setupURL(t)
	return nc
}

// setupURL is setup that also returns the server's URL.
func setupURL(t *testing.T) (*nats.Conn, string) {
	t.Helper()
	srv, err := StartEmbedded(t.TempDir(), "127.0.0.1", -1)
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc, srv.URL()
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newManager(t *testing.T, nc *nats.Conn, cfg Config) *Manager {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	m, err := NewManager(testCtx(t, 10*time.Second), nc, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// startWorker runs a Worker until the returned stop is called (or the test
// ends); stop waits for it.
func startWorker(t *testing.T, nc *nats.Conn, cfg Config, concurrency int) (stop func()) {
	t.Helper()
	return runWorker(t, &Worker{Conn: nc, Config: cfg, Concurrency: concurrency, OutputDir: t.TempDir(),
		Logger: zaptest.NewLogger(t)})
}

// runWorker runs w until the returned stop is called (or the test ends);
// stop waits for it.
func runWorker(t *testing.T, w *Worker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		require.NoError(t, <-done)
	})
	t.Cleanup(stop)
	return stop
}

func output(t *testing.T, res laboro.Result) []byte {
	t.Helper()
	require.NotNil(t, res.Output)
	b, err := res.Output.ReadAll()
	require.NoError(t, err)
	require.NoError(t, res.Output.Close())
	return b
}

func streamMsgs(t *testing.T, nc *nats.Conn, name string) uint64 {
	t.Helper()
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(testCtx(t, 5*time.Second), name)
	require.NoError(t, err)
	info, err := s.Info(testCtx(t, 5*time.Second))
	require.NoError(t, err)
	return info.State.Msgs
}

func TestResult(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{})
	startWorker(t, nc, Config{}, 2)
	ctx := testCtx(t, 30*time.Second)

	res := m.Run(ctx, laboro.Job{ID: "ok", Script: "printf 'hello\\nworld'"})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	require.Equal(t, "ok", res.ID)
	require.Equal(t, 0, res.ExitCode)
	require.NoError(t, res.Err)
	require.NotZero(t, res.PID)
	require.False(t, res.Started.IsZero())
	require.Equal(t, "hello\nworld", string(output(t, res)))

	res = m.Run(ctx, laboro.Job{ID: "bad", Script: "echo partial; echo oops >&2; exit 1"})
	require.Equal(t, laboro.StatusFailed, res.Status)
	require.Equal(t, 1, res.ExitCode)
	var re *RemoteError
	require.ErrorAs(t, res.Err, &re)
	require.Contains(t, string(res.Stderr), "oops")
	require.Equal(t, "partial\n", string(output(t, res)))

	res = m.Run(ctx, laboro.Job{ID: "cmd", Command: "echo 'two words' x"})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	require.Equal(t, "two words x\n", string(output(t, res)))

	// Job.Timeout is the Executor's to apply (see TestTimeout): Run applies
	// the deadline of its context.
	slowCtx, cancel := context.WithTimeoutCause(ctx, 200*time.Millisecond, laboro.ErrTimeout)
	defer cancel()
	res = m.Run(slowCtx, laboro.Job{ID: "slow", Command: "sleep 5"})
	require.Equal(t, laboro.StatusTimedOut, res.Status)
	require.ErrorIs(t, res.Err, laboro.ErrTimeout)
	if res.Output != nil {
		// The worker, given the deadline, killed the job at it and sent
		// what it wrote before the Manager's own wait ended: that may
		// come first.
		require.Empty(t, string(output(t, res)))
	}

	res = m.Run(ctx, laboro.Job{ID: "bad.id", Command: "true"})
	require.ErrorIs(t, res.Err, laboro.ErrInvalidJob)
}

func TestManyJobsThreeWorkers(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{})
	for range 3 {
		startWorker(t, nc, Config{}, 4)
	}
	ctx := testCtx(t, 90*time.Second)
	const n = 200
	results := make([]laboro.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i] = m.Run(ctx, laboro.Job{ID: fmt.Sprintf("job_%d", i), Args: []string{"echo", fmt.Sprint(i)}})
		})
	}
	wg.Wait()
	for i, res := range results {
		require.Equal(t, laboro.StatusSucceeded, res.Status, "job %d: %v", i, res.Err)
		require.Equal(t, fmt.Sprintf("%d\n", i), string(output(t, res)))
	}
	// One result message per job, and no job left in the work queue.
	require.Equal(t, uint64(n), streamMsgs(t, nc, "LABORO_RESULTS"))
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 0 },
		10*time.Second, 50*time.Millisecond)
}

func TestExecutorOverManager(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{})
	startWorker(t, nc, Config{}, 2)
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithConcurrency(4), laboro.WithPoolSize(4))
	require.NoError(t, err)
	var hs []*laboro.Handle
	for i := range 10 {
		h, err := ex.Submit(testCtx(t, 5*time.Second), laboro.Job{Args: []string{"echo", fmt.Sprint(i)}})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	for i, h := range hs {
		res, err := h.Wait(testCtx(t, 30*time.Second))
		require.NoError(t, err)
		require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
		require.Equal(t, fmt.Sprintf("%d\n", i), string(output(t, res)))
	}
	require.NoError(t, ex.Shutdown(testCtx(t, 10*time.Second)))
}

// A worker stopped mid-job hands the job back: another worker runs it at
// once, not after the AckWait, here ten minutes.
func TestWorkerStoppedMidJobRedelivered(t *testing.T) {
	nc := setup(t)
	cfg := Config{AckWait: 10 * time.Minute}
	m := newManager(t, nc, cfg)
	marks := t.TempDir()
	stopA := startWorker(t, nc, cfg, 1)

	ctx := testCtx(t, 60*time.Second)
	done := make(chan laboro.Result, 1)
	script := fmt.Sprintf("echo run >> %s/runs; sleep 1.5; echo finished", marks)
	go func() { done <- m.Run(ctx, laboro.Job{ID: "long", Script: script}) }()

	// The line written, not the file created: the shell creates the file
	// before it writes, and a kill in between would leave it empty.
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(marks, "runs"))
		return string(b) == "run\n"
	}, 20*time.Second, time.Millisecond)
	stopA() // kills the job; it is not acknowledged
	startWorker(t, nc, cfg, 1)

	res := <-done
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	require.Equal(t, "finished\n", string(output(t, res)))
	runs, err := os.ReadFile(filepath.Join(marks, "runs"))
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(runs), "run"), "one run killed, one finished")
	// The stopped worker published nothing: one result message.
	require.Equal(t, uint64(1), streamMsgs(t, nc, "LABORO_RESULTS"))
}

// A job a worker cannot run (its command line does not split into words),
// from a Manager that did not check it, fails once with the reason, rather
// than go round the workers until its delivery limit. A Manager checks it
// before it goes.
func TestWorkerFailsAJobItCannotRun(t *testing.T) {
	nc := setup(t)
	cfg := Config{AckWait: 10 * time.Minute}.withDefaults()
	m := newManager(t, nc, cfg)
	ctx := testCtx(t, time.Minute)
	res := m.Run(ctx, laboro.Job{ID: "checked", Command: "echo 'unterminated"})
	require.Equal(t, laboro.StatusFailed, res.Status)
	require.ErrorContains(t, res.Err, "unterminated")
	assert.Zero(t, streamMsgs(t, nc, "LABORO_JOBS"), "not published")

	results, err := nc.SubscribeSync(cfg.resultsSubject("bad"))
	require.NoError(t, err)
	data, err := json.Marshal(wireJob{ID: "bad", Command: "echo 'unterminated"})
	require.NoError(t, err)
	job := nats.NewMsg(cfg.jobsSubject("bad"))
	job.Header.Set(hdrJob, "bad")
	job.Data = data
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	_, err = js.PublishMsg(ctx, job)
	require.NoError(t, err)
	startWorker(t, nc, Config{}, 1)

	msg, err := results.NextMsg(30 * time.Second)
	require.NoError(t, err, "a result")
	assert.Equal(t, strconv.Itoa(int(laboro.StatusFailed)), msg.Header.Get(hdrStatus))
	assert.Equal(t, "1", msg.Header.Get(hdrAttempt), "on its first delivery")
	assert.Contains(t, msg.Header.Get(hdrError), "invalid job")
	assert.Contains(t, msg.Header.Get(hdrError), "unterminated")
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 0 }, 30*time.Second,
		5*time.Millisecond, "acknowledged")
}

func TestMaxDeliverFails(t *testing.T) {
	nc := setup(t)
	cfg := Config{AckWait: time.Second, MaxDeliver: 2}
	m := newManager(t, nc, cfg)

	// A worker that dies with every job it takes: it fetches and never
	// acknowledges nor publishes.
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	cons, err := js.Consumer(testCtx(t, 5*time.Second), "LABORO_JOBS", consumerName)
	require.NoError(t, err)
	var mu sync.Mutex
	deliveries := 0
	cc, err := cons.Consume(func(msg natsjs.Msg) {
		mu.Lock()
		deliveries++
		mu.Unlock()
	})
	require.NoError(t, err)
	defer cc.Stop()

	start := time.Now()
	res := m.Run(testCtx(t, 30*time.Second), laboro.Job{ID: "crasher", Command: "true"})
	require.Equal(t, laboro.StatusFailed, res.Status)
	require.ErrorIs(t, res.Err, ErrMaxDeliver)
	require.Nil(t, res.Output)
	require.Less(t, time.Since(start), 15*time.Second)
	mu.Lock()
	require.Equal(t, 2, deliveries)
	mu.Unlock()
	// The job is gone from the work queue.
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 0 },
		5*time.Second, 50*time.Millisecond)
	// Its failure is its outcome: the same job gets it again; another job
	// under its id is refused.
	res = m.Run(testCtx(t, 10*time.Second), laboro.Job{ID: "crasher", Command: "true"})
	require.ErrorIs(t, res.Err, ErrMaxDeliver)
	res = m.Run(testCtx(t, 10*time.Second), laboro.Job{ID: "crasher", Command: "false"})
	require.ErrorIs(t, res.Err, laboro.ErrDuplicateID)
}

// TestMaxDeliverWhileNoManager: a job that reaches its delivery limit
// while no Manager listens for the advisory (it is sent once) is failed by
// the next Manager, rather than stay in the work queue forever with its
// Run waiting.
func TestMaxDeliverWhileNoManager(t *testing.T) {
	nc := setup(t)
	cfg := Config{AckWait: time.Second, MaxDeliver: 2}
	m1 := newManager(t, nc, cfg)
	advisories, err := nc.SubscribeSync(cfg.withDefaults().advisorySubject())
	require.NoError(t, err)

	// A worker that dies with every job it takes.
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	ctx := testCtx(t, time.Minute)
	cons, err := js.Consumer(ctx, "LABORO_JOBS", consumerName)
	require.NoError(t, err)
	delivered := make(chan struct{}, 2)
	cc, err := cons.Consume(func(natsjs.Msg) { delivered <- struct{}{} })
	require.NoError(t, err)
	defer cc.Stop()

	job := laboro.Job{ID: "orphan", Command: "true"}
	first := make(chan laboro.Result, 1)
	go func() { first <- m1.Run(ctx, job) }()
	<-delivered
	require.NoError(t, m1.Close())
	assert.Equal(t, laboro.StatusKilled, (<-first).Status, "a closed Manager's Run")
	_, err = advisories.NextMsgWithContext(ctx)
	require.NoError(t, err, "the job reached its limit")
	cc.Stop()
	assert.Equal(t, uint64(1), streamMsgs(t, nc, "LABORO_JOBS"), "nobody heard the advisory: the job stays")

	res := newManager(t, nc, cfg).Run(ctx, job)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorIs(t, res.Err, ErrMaxDeliver)
	assert.ErrorContains(t, res.Err, "delivered 2 times (its limit was reached while no Manager listened)")
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 0 },
		10*time.Second, 50*time.Millisecond, "the job is off the work queue")
}

// TestUnreadableJobFailsSayingWhy: a job a worker cannot read (a Manager
// of another version, say) is not run, and fails at its delivery limit
// with the reason, rather than wait forever; a message that names no job
// is dropped.
func TestUnreadableJobFailsSayingWhy(t *testing.T) {
	nc := setup(t)
	newManager(t, nc, Config{MaxDeliver: 2})
	core, logs := observer.New(zap.ErrorLevel)
	runWorker(t, &Worker{Conn: nc, OutputDir: t.TempDir(), Logger: zap.New(core), Name: "w1"})
	ended, err := nc.SubscribeSync("LABORO.results.unreadable")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	js, err := natsjs.New(nc)
	require.NoError(t, err)
	ctx := testCtx(t, time.Minute)
	junk := nats.NewMsg("LABORO.jobs.nojob")
	junk.Data = []byte("{")
	_, err = js.PublishMsg(ctx, junk)
	require.NoError(t, err)
	job := nats.NewMsg("LABORO.jobs.unreadable")
	job.Header.Set(hdrJob, "unreadable")
	job.Data = []byte(`{"id": 7}`)
	_, err = js.PublishMsg(ctx, job)
	require.NoError(t, err)

	msg, err := ended.NextMsgWithContext(ctx)
	require.NoError(t, err)
	res := decodeResult(msg.Header, nil)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorIs(t, res.Err, ErrMaxDeliver)
	assert.ErrorContains(t, res.Err, `worker "w1" did not run it: it could not read the job`)
	assert.Equal(t, 2, logs.FilterMessage("job not run: this worker cannot read it").Len())
	assert.Equal(t, 1, logs.FilterMessageSnippet("names no job").Len(), "%v", logs.All())
	// The Manager deletes the failed job once its failure is stored.
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 0 },
		10*time.Second, 50*time.Millisecond, "both messages are gone from the work queue")
}

func TestLargeOutputInChunks(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{})
	startWorker(t, nc, Config{}, 1)
	const size = 3 << 20
	res := m.Run(testCtx(t, 60*time.Second), laboro.Job{ID: "big", Script: fmt.Sprintf("yes abcdefgh | head -c %d", size)})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	want := bytes.Repeat([]byte("abcdefgh\n"), size/9+1)[:size]
	require.Equal(t, int64(size), res.Output.Size())
	require.True(t, bytes.Equal(want, output(t, res)))
	require.Equal(t, uint64(6), streamMsgs(t, nc, "LABORO_RESULTS"), "3 MiB in 512 KiB chunks")
}

func TestManagerRestart(t *testing.T) {
	nc := setup(t)
	marks := t.TempDir()
	m1, err := NewManager(testCtx(t, 10*time.Second), nc, Config{Dir: t.TempDir()})
	require.NoError(t, err)
	stopW := startWorker(t, nc, Config{}, 1)
	done := laboro.Job{ID: "done", Script: fmt.Sprintf("echo x >> %s/done; echo stored", marks)}
	res := m1.Run(testCtx(t, 30*time.Second), done)
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	require.Equal(t, "stored\n", string(output(t, res)))
	stopW()
	require.NoError(t, m1.Close())
	require.NoError(t, m1.Close())
	res = m1.Run(testCtx(t, time.Second), done)
	require.ErrorIs(t, res.Err, laboro.ErrClosed)

	m2 := newManager(t, nc, Config{})
	// No worker runs: the stored result comes back at once.
	res = m2.Run(testCtx(t, 5*time.Second), done)
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	require.Equal(t, "stored\n", string(output(t, res)))
	require.Equal(t, uint64(0), streamMsgs(t, nc, "LABORO_JOBS"), "not published again")

	// A Manager closed while a Run waits leaves the job in the stream; the
	// next Manager waits for it without publishing it again.
	pending := laboro.Job{ID: "pending", Script: fmt.Sprintf("echo x >> %s/pending; echo ran", marks)}
	waited := make(chan laboro.Result, 1)
	go func() { waited <- m2.Run(testCtx(t, 30*time.Second), pending) }()
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 1 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, m2.Close())
	res = <-waited
	require.Equal(t, laboro.StatusKilled, res.Status)
	require.ErrorIs(t, res.Err, laboro.ErrKilled)
	m3 := newManager(t, nc, Config{})
	startWorker(t, nc, Config{}, 2)
	res = m3.Run(testCtx(t, 30*time.Second), pending)
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	require.Equal(t, "ran\n", string(output(t, res)))
	for _, name := range []string{"done", "pending"} {
		b, err := os.ReadFile(filepath.Join(marks, name))
		require.NoError(t, err)
		require.Equal(t, "x\n", string(b), "%s ran once", name)
	}
}

// A job's sum tells what it runs: not its id nor its timeout, nor whether
// an empty list is nil; each of its command, arguments, script,
// interpreter, directory and environment.
func TestJobSum(t *testing.T) {
	base := laboro.Job{ID: "a", Command: "echo hi", Dir: "/tmp", Env: []string{"A=1"}}
	same := base
	same.ID, same.Timeout, same.Args, same.Interpreter = "b", time.Second, []string{}, []string{}
	assert.Equal(t, jobSum(base), jobSum(same))
	assert.Len(t, jobSum(base), 32)
	others := []laboro.Job{
		{Command: "echo ho", Dir: "/tmp", Env: []string{"A=1"}},
		{Command: "echo hi", Args: []string{"x"}, Dir: "/tmp", Env: []string{"A=1"}},
		{Script: "echo hi", Dir: "/tmp", Env: []string{"A=1"}},
		{Command: "echo hi", Interpreter: []string{"bash"}, Dir: "/tmp", Env: []string{"A=1"}},
		{Command: "echo hi", Dir: "/", Env: []string{"A=1"}},
		{Command: "echo hi", Dir: "/tmp", Env: []string{"A=2"}},
		{Command: "echo hi", Dir: "/tmp"},
	}
	for _, other := range others {
		assert.NotEqual(t, jobSum(base), jobSum(other), "%+v", other)
	}
}

// A program that gives its jobs the Executor's ids (job_1, job_2, …) and
// runs again on the same streams gives job_1 to another job: that job is
// refused, saying why, and is never given the first one's result; the same
// job submitted again under its id still gets its stored result.
func TestIDUsedByAnotherJob(t *testing.T) {
	nc := setup(t)
	startWorker(t, nc, Config{}, 1)
	run := func(script string) laboro.Result {
		t.Helper()
		m, err := NewManager(testCtx(t, 10*time.Second), nc, Config{Dir: t.TempDir()})
		require.NoError(t, err)
		defer m.Close()
		ex, err := laboro.New(laboro.WithRunner(m))
		require.NoError(t, err)
		defer ex.Close()
		h, err := ex.Submit(testCtx(t, 10*time.Second), laboro.Job{Script: script})
		require.NoError(t, err)
		res, err := h.Wait(testCtx(t, 30*time.Second))
		require.NoError(t, err)
		require.Equal(t, "job_1", res.ID)
		return res
	}
	res := run("echo first")
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	require.Equal(t, "first\n", string(output(t, res)))

	res = run("echo second") // the program again: job_1 again
	require.Equal(t, laboro.StatusFailed, res.Status)
	require.ErrorIs(t, res.Err, laboro.ErrDuplicateID)
	assert.ErrorContains(t, res.Err, `"job_1" was used by another job`)
	assert.Nil(t, res.Output, "no output of the other job")

	res = run("echo first")
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	require.Equal(t, "first\n", string(output(t, res)), "the stored result")
}

// So for what else the streams may keep under an id: a job still in the
// work queue (its Manager stopped) and the record of a Run's end (a
// failure past the delivery limit: TestMaxDeliverFails).
func TestIDUsedByAnotherJobInTheStreams(t *testing.T) {
	nc := setup(t)
	refused := func(t *testing.T, m *Manager, job laboro.Job) {
		t.Helper()
		res := m.Run(testCtx(t, 10*time.Second), job)
		require.Equal(t, laboro.StatusFailed, res.Status)
		require.ErrorIs(t, res.Err, laboro.ErrDuplicateID)
		assert.ErrorContains(t, res.Err, fmt.Sprintf("%q was used by another job", job.ID))
	}
	t.Run("queued", func(t *testing.T) {
		m1 := newManager(t, nc, Config{})
		waited := make(chan laboro.Result, 1)
		go func() { waited <- m1.Run(testCtx(t, 30*time.Second), laboro.Job{ID: "q", Command: "echo one"}) }()
		require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 1 }, 10*time.Second, 5*time.Millisecond)
		require.NoError(t, m1.Close()) // the job stays in the work queue
		require.Equal(t, laboro.StatusKilled, (<-waited).Status)
		m2 := newManager(t, nc, Config{})
		refused(t, m2, laboro.Job{ID: "q", Command: "echo two"})
		assert.Equal(t, uint64(1), streamMsgs(t, nc, "LABORO_JOBS"), "the other job not published")
		// The same job is waited for, not refused: a worker runs it now.
		startWorker(t, nc, Config{}, 1)
		res := m2.Run(testCtx(t, 30*time.Second), laboro.Job{ID: "q", Command: "echo one"})
		require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
		assert.Equal(t, "one\n", string(output(t, res)))
	})
	t.Run("ended", func(t *testing.T) {
		m1 := newManager(t, nc, Config{})
		ctx, cancel := context.WithCancelCause(testCtx(t, 30*time.Second))
		cancel(laboro.ErrCancelled) // the Run ends at once; its end is recorded
		res := m1.Run(ctx, laboro.Job{ID: "e", Command: "echo one"})
		require.Equal(t, laboro.StatusCancelled, res.Status)
		require.NoError(t, m1.Close()) // once the record is stored
		m2 := newManager(t, nc, Config{})
		refused(t, m2, laboro.Job{ID: "e", Command: "echo two"})
		res = m2.Run(testCtx(t, 10*time.Second), laboro.Job{ID: "e", Command: "echo one"})
		assert.Equal(t, laboro.StatusCancelled, res.Status, "the same job: its recorded end")
	})
}

// An output over MaxOutput is cut there, and its job fails, saying so:
// one job's output cannot fill the RESULTS stream, which keeps results
// for ResultsMaxAge and ResultsMaxBytes at most.
func TestOutputOverTheLimit(t *testing.T) {
	nc := setup(t)
	cfg := Config{MaxOutput: 1 << 20, ResultsMaxBytes: 64 << 20}
	m := newManager(t, nc, cfg)
	startWorker(t, nc, cfg, 1)
	res := m.Run(testCtx(t, 60*time.Second), laboro.Job{ID: "flood", Script: "yes abcdefgh | head -c 3000000"})
	require.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorContains(t, res.Err, "the output of 3000000 bytes is over the limit of 1048576")
	assert.Equal(t, int64(1<<20), res.Output.Size())
	res.Output.Close()

	js, err := natsjs.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(testCtx(t, 10*time.Second), "LABORO_RESULTS")
	require.NoError(t, err)
	assert.Equal(t, int64(64<<20), s.CachedInfo().Config.MaxBytes)
	assert.Equal(t, DefaultResultsMaxAge, s.CachedInfo().Config.MaxAge)
	assert.Equal(t, natsjs.DiscardOld, s.CachedInfo().Config.Discard)
}

// A JOBS stream deleted under a worker and a Manager (by a client with
// every right) is said loudly, made again (by whichever of them notices
// first), and the jobs submitted after run.
func TestWorkerStreamDeleted(t *testing.T) {
	nc := setup(t)
	core, logs := observer.New(zap.InfoLevel)
	w := &Worker{Conn: nc, Config: Config{Logger: zap.New(core)}, Concurrency: 1}
	runWorker(t, w)
	m := newManager(t, nc, Config{Logger: zap.New(core)})
	res := m.Run(testCtx(t, 30*time.Second), laboro.Job{ID: "before", Command: "echo one"})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	res.Output.Close()

	js, err := natsjs.New(nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(testCtx(t, 10*time.Second), "LABORO_JOBS"))
	require.Eventually(t, func() bool {
		return logs.FilterMessageSnippet("was deleted").Len()+logs.FilterMessageSnippet("deleted by hand").Len() > 0
	}, 30*time.Second, 10*time.Millisecond, "nobody said anything")
	require.Eventually(t, func() bool {
		_, err := js.Stream(testCtx(t, 5*time.Second), "LABORO_JOBS")
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "the stream was not made again")
	res = m.Run(testCtx(t, 30*time.Second), laboro.Job{ID: "after", Command: "echo two"})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "two\n", string(output(t, res)))
}

// A worker that started on an empty JOBS stream looks nothing up before
// running a job delivered the first time: the job's end, if any, comes
// after the job, on the subscription the worker holds (a lookup is a
// request to the server per job, all for nothing).
func TestFirstDeliveriesNeedNoLookup(t *testing.T) {
	nc, url := setupURL(t)
	m := newManager(t, nc, Config{}) // the streams, empty
	mon, err := nats.Connect(url)
	require.NoError(t, err)
	defer mon.Close()
	pulls, err := mon.SubscribeSync("$JS.API.CONSUMER.MSG.NEXT.LABORO_JOBS.>")
	require.NoError(t, err)
	lookups, err := mon.SubscribeSync("$JS.API.*.GET.LABORO_RESULTS.>")
	require.NoError(t, err)
	require.NoError(t, mon.Flush())

	wc, err := nats.Connect(url) // the worker's own connection, to tell its requests
	require.NoError(t, err)
	defer wc.Close()
	inbox := wc.NewRespInbox()
	inbox = inbox[:strings.LastIndexByte(inbox, '.')+1]
	runWorker(t, &Worker{Conn: wc, Concurrency: 2, OutputDir: t.TempDir(), Logger: zaptest.NewLogger(t)})
	_, err = pulls.NextMsg(10 * time.Second) // it asks for jobs: it took the stream's state before
	require.NoError(t, err)

	ctx := testCtx(t, 30*time.Second)
	for i := range 5 {
		res := m.Run(ctx, laboro.Job{ID: fmt.Sprintf("j%d", i), Command: "true"})
		require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
		res.Output.Close()
	}
	require.NoError(t, mon.Flush()) // the requests made before, delivered
	var byWorker []string
	for {
		msg, err := lookups.NextMsg(0)
		if err != nil {
			break
		}
		if strings.HasPrefix(msg.Reply, inbox) {
			byWorker = append(byWorker, msg.Subject)
		}
	}
	require.Empty(t, byWorker, "the worker looked up ends or results of jobs delivered the first time")
}
