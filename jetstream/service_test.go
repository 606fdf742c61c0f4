package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/freeport"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// startService runs a Service until the returned stop is called (or the
// test ends); stop waits for it and returns its error.
func startService(t *testing.T, nc *nats.Conn, cfg Config, concurrency int) (stop func() error) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Service{Conn: nc, Config: cfg, Concurrency: concurrency}).Run(ctx) }()
	var err error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			err = <-done
		}
		return err
	}
	t.Cleanup(func() { stop() })
	// Serving once it answers.
	cl := &Client{Conn: nc, Config: cfg}
	require.Eventually(t, func() bool {
		_, err := cl.Status(testCtx(t, time.Second), StatusRequest{})
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	return stop
}

func TestServiceBatch(t *testing.T) {
	nc := setup(t)
	startService(t, nc, Config{}, 8)
	startWorker(t, nc, Config{}, 2)
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	ctx := testCtx(t, time.Minute)

	jobs := make([]laboro.Job, 20)
	for i := range jobs {
		jobs[i] = laboro.Job{Script: fmt.Sprintf("echo job %d", i)}
	}
	jobs[13] = laboro.Job{Script: "echo no >&2; exit 5"}
	jobs[17] = laboro.Job{ID: "mine", Args: []string{"echo", "a   b"}}
	ids, err := cl.Submit(ctx, "b1", jobs)
	require.NoError(t, err)
	require.Len(t, ids, 20)
	assert.Equal(t, "b1-1", ids[0])
	assert.Equal(t, "mine", ids[17])
	assert.Equal(t, "b1-19", ids[18], "numbers skip the jobs with ids of their own")

	b, err := cl.Wait(ctx, "b1", len(ids), 20*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, BatchStatus{Batch: "b1", Submitted: b.Submitted, Jobs: 20, Succeeded: 19, Failed: 1, Ended: b.Ended}, b)
	assert.WithinDuration(t, time.Now(), b.Submitted, time.Minute)
	assert.False(t, b.Ended.Before(b.Submitted), "it ended after it began: %v", b.Ended)

	reply, err := cl.Status(ctx, StatusRequest{Batches: []string{"b1"}, IDs: []string{"mine", "nosuch"}, Unsuccessful: true})
	require.NoError(t, err)
	require.Len(t, reply.Jobs, 3)
	assert.Equal(t, JobStatus{ID: "mine", Batch: "b1", State: "succeeded", ExitCode: 0, Command: "echo a   b"}, reply.Jobs[0])
	assert.Equal(t, JobStatus{ID: "nosuch", State: StateUnknown, ExitCode: -1}, reply.Jobs[1])
	assert.Equal(t, "b1-14", reply.Jobs[2].ID)
	assert.Equal(t, "failed", reply.Jobs[2].State)
	assert.Equal(t, 5, reply.Jobs[2].ExitCode)
	assert.Contains(t, reply.Jobs[2].Error, "exit status 5")
	// A worker stores a job's result before it acknowledges the job: the
	// last acknowledgement may still be on its way when the batch ends.
	require.Eventually(t, func() bool {
		reply, err := cl.Status(ctx, StatusRequest{})
		return err == nil && reply.InStream == 0 && reply.OnWorkers == 0
	}, 30*time.Second, 5*time.Millisecond, "the workers acknowledge every job")

	res, err := cl.Result(ctx, "mine")
	require.NoError(t, err)
	assert.Equal(t, "a   b\n", string(output(t, res)))
	res, err = cl.Result(ctx, "b1-14")
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.Equal(t, "no\n", string(res.Stderr))
	var remote *RemoteError
	assert.ErrorAs(t, res.Err, &remote)
	res.Output.Close()

	// More jobs in the same batch are numbered after the first ones; a job
	// submitted again with a known id keeps its first result.
	ids, err = cl.Submit(ctx, "b1", []laboro.Job{{Script: "echo more"}, {ID: "mine", Script: "echo other"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"b1-21", "mine"}, ids)
	b, err = cl.Wait(ctx, "b1", 21, 20*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, 21, b.Jobs)
	res, err = cl.Result(ctx, "mine")
	require.NoError(t, err)
	assert.Equal(t, "a   b\n", string(output(t, res)))

	// Jobs that cannot travel are refused before anything is stored.
	_, err = cl.Submit(ctx, "b.2", []laboro.Job{{Script: "true"}})
	assert.Error(t, err)
	_, err = cl.Submit(ctx, "b2", []laboro.Job{{Script: "true"}, {ID: "a b", Script: "true"}})
	assert.Error(t, err)
	_, err = cl.Submit(ctx, "b2", []laboro.Job{{}})
	assert.Error(t, err)
	_, err = cl.Submit(ctx, "b2", []laboro.Job{{Script: strings.Repeat("x", 2<<20)}})
	assert.ErrorContains(t, err, "more than the server's limit")
	reply, err = cl.Status(ctx, StatusRequest{Batches: []string{"b2"}})
	require.NoError(t, err)
	assert.Empty(t, reply.Batches)
}

// A Service stopped mid-batch and started again, the server and the workers
// staying up: every job runs exactly once.
func TestServiceRestart(t *testing.T) {
	nc := setup(t)
	stop := startService(t, nc, Config{}, 4)
	startWorker(t, nc, Config{}, 4)
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	ctx := testCtx(t, 2*time.Minute)

	// A batch that ends before the restart, and one the restart cuts.
	_, err := cl.Submit(ctx, "old", []laboro.Job{{Script: "true"}, {Script: "true"}})
	require.NoError(t, err)
	_, err = cl.Wait(ctx, "old", 2, 5*time.Millisecond, nil)
	require.NoError(t, err)
	marks := filepath.Join(t.TempDir(), "marks")
	const n = 100
	jobs := make([]laboro.Job, n)
	for i := range jobs {
		jobs[i] = laboro.Job{Script: fmt.Sprintf("echo %d >> %s; sleep 0.02", i, marks)}
	}
	_, err = cl.Submit(ctx, "r", jobs)
	require.NoError(t, err)
	_, err = cl.Wait(ctx, "r", n/5, 5*time.Millisecond, nil)
	require.NoError(t, err)
	require.NoError(t, stop())
	_, err = cl.Status(ctx, StatusRequest{})
	require.ErrorIs(t, err, ErrNoService)

	core, logs := observer.New(zap.InfoLevel)
	startService(t, nc, Config{Logger: zap.New(core)}, 4)
	b, err := cl.Wait(ctx, "r", n, 20*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, n, b.Succeeded)
	// The outcomes the restarted service read back end no batch: "old"
	// ended before it, and r, if it says it is done, is whole.
	for _, e := range logs.FilterMessage("batch done").AllUntimed() {
		assert.Equal(t, map[string]any{"batch": "r", "jobs": int64(n), "succeeded": int64(n), "failed": int64(0)}, e.ContextMap())
	}
	data, err := os.ReadFile(marks)
	require.NoError(t, err)
	assert.Equal(t, n, strings.Count(string(data), "\n"), "every job ran once")
}

func TestServiceBadInput(t *testing.T) {
	nc := setup(t)
	startService(t, nc, Config{}, 2)
	startWorker(t, nc, Config{}, 1)
	ctx := testCtx(t, time.Minute)

	// Submissions that are no job are dropped; the next one runs.
	for _, data := range []string{"not json", `{"id":"a.b","script":"true"}`, `{"id":"","script":"true"}`, `{"id":"x"`} {
		require.NoError(t, nc.Publish("LABORO.submit.bad", []byte(data)))
	}
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	_, err := cl.Submit(ctx, "good", []laboro.Job{{Script: "echo fine"}})
	require.NoError(t, err)
	b, err := cl.Wait(ctx, "good", 1, 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, b.Succeeded)
	reply, err := cl.Status(ctx, StatusRequest{Batches: []string{"bad"}})
	require.NoError(t, err)
	assert.Empty(t, reply.Batches)

	// A status request that is not JSON gets an error reply.
	msg, err := nc.Request("LABORO.api.status", []byte("{"), 5*time.Second)
	require.NoError(t, err)
	assert.Contains(t, string(msg.Data), `"error":"bad status request`)

	// A second Service on the same streams is refused.
	err = (&Service{Conn: nc}).Run(ctx)
	assert.ErrorIs(t, err, ErrServiceRunning)
}

// Settings left at 0 keep those in force: a worker started without
// -ack-wait does not undo the service's.
func TestZeroConfigKeepsSettings(t *testing.T) {
	nc := setup(t)
	newManager(t, nc, Config{AckWait: 1500 * time.Millisecond, MaxDeliver: 3})
	startWorker(t, nc, Config{}, 1)
	newManager(t, nc, Config{})
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	cons, err := js.Consumer(testCtx(t, 5*time.Second), "LABORO_JOBS", "workers")
	require.NoError(t, err)
	info := cons.CachedInfo()
	assert.Equal(t, 1500*time.Millisecond, info.Config.AckWait)
	assert.Equal(t, 3, info.Config.MaxDeliver)

	// A new consumer gets the defaults.
	newManager(t, nc, Config{Stream: "OTHER"})
	cons, err = js.Consumer(testCtx(t, 5*time.Second), "OTHER_JOBS", "workers")
	require.NoError(t, err)
	assert.Equal(t, DefaultAckWait, cons.CachedInfo().Config.AckWait)
	assert.Equal(t, DefaultMaxDeliver, cons.CachedInfo().Config.MaxDeliver)
}

// A job that runs longer than AckWait is kept by its worker with
// in-progress acknowledgements: the other worker never gets it.
func TestLongJobKeptAlive(t *testing.T) {
	nc := setup(t)
	cfg := Config{AckWait: time.Second}
	m := newManager(t, nc, cfg)
	startWorker(t, nc, cfg, 1)
	startWorker(t, nc, cfg, 1)
	marks := filepath.Join(t.TempDir(), "runs")
	res := m.Run(testCtx(t, time.Minute), laboro.Job{ID: "long", Script: fmt.Sprintf("echo run >> %s; sleep 3.5; echo done", marks)})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "done\n", string(output(t, res)))
	runs, err := os.ReadFile(marks)
	require.NoError(t, err)
	assert.Equal(t, "run\n", string(runs), "one run, over three times AckWait")
}

// The core's buffer, poll, Stop, concurrency and drain keep their meaning
// over a Manager: a job reaches the stream only once the Executor runs it.
func TestCoreOverManager(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{})
	startWorker(t, nc, Config{}, 4)
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithConcurrency(1), laboro.WithPoolSize(4), laboro.WithBufferSize(8))
	require.NoError(t, err)
	defer ex.Close()
	ctx := testCtx(t, time.Minute)
	gate := filepath.Join(t.TempDir(), "gate")
	submit := func(id, script string) *laboro.Handle {
		h, err := ex.Submit(ctx, laboro.Job{ID: id, Script: script})
		require.NoError(t, err)
		return h
	}
	// a runs until the gate file appears; the others wait in the buffer.
	a := submit("a", fmt.Sprintf("while [ ! -e %s ]; do sleep 0.01; done; echo a", gate))
	b, c, d := submit("b", "echo b"), submit("c", "echo c"), submit("d", "echo d")
	ids := func(jobs []laboro.Job) (out []string) {
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	require.Eventually(t, func() bool { return slices.Equal([]string{"b", "c", "d"}, ids(ex.Queued())) },
		10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 1 }, 10*time.Second, 5*time.Millisecond)

	require.NoError(t, ex.Stop("c"))
	res, err := c.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusStopped, res.Status)
	assert.Equal(t, []string{"b", "d"}, ids(ex.Queued()))

	require.NoError(t, ex.SetConcurrency(3))
	for _, h := range []*laboro.Handle{b, d} {
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		assert.Equal(t, laboro.StatusSucceeded, res.Status)
		assert.Equal(t, h.ID()+"\n", string(output(t, res)))
	}

	// Drain: the running job finishes and is delivered; queued ones end
	// without reaching the stream.
	require.NoError(t, ex.SetConcurrency(1))
	e := submit("e", "echo e")
	shut := make(chan error, 1)
	go func() { shut <- ex.Shutdown(ctx) }()
	res, err = e.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusTerminated, res.Status)
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	res, err = a.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	assert.Equal(t, "a\n", string(output(t, res)))
	require.NoError(t, <-shut)

	// Three results stored: a, b, d. The stopped and terminated jobs never
	// reached a worker.
	assert.Equal(t, uint64(3), streamMsgs(t, nc, "LABORO_RESULTS"))
}

// A worker still waiting for its server (none there yet, or one that
// refuses its token) has no job to finish: Drain ends its Run.
func TestWorkerDrainWhileWaitingForServer(t *testing.T) {
	addr := freeport.Addr(t) // nothing listens there
	nc, err := nats.Connect("nats://"+addr, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	require.NoError(t, err)
	defer nc.Close()
	core, logs := observer.New(zap.InfoLevel)
	w := &Worker{Conn: nc, Logger: zap.New(core)}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	require.Eventually(t, func() bool { return logs.FilterMessage("waiting for the NATS server").Len() > 0 }, time.Minute, time.Millisecond)
	w.Drain()
	require.NoError(t, <-ran)
}

// A draining worker takes no new job, finishes and delivers the ones it
// runs, and returns; the jobs it did not take wait for another worker.
func TestWorkerDrain(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{})
	w := &Worker{Conn: nc, Concurrency: 2, OutputDir: t.TempDir(), Logger: zaptest.NewLogger(t)}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()

	dir := t.TempDir()
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithConcurrency(8), laboro.WithPoolSize(8))
	require.NoError(t, err)
	defer ex.Close()
	ctx := testCtx(t, time.Minute)
	var hs []*laboro.Handle
	for i := range 5 {
		h, err := ex.Submit(ctx, laboro.Job{ID: fmt.Sprintf("d%d", i),
			Script: fmt.Sprintf("touch %s/started-%d; sleep 0.5; echo %d >> %s/runs; echo %d", dir, i, i, dir, i)})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	started := func() int {
		entries, _ := filepath.Glob(filepath.Join(dir, "started-*"))
		return len(entries)
	}
	require.Eventually(t, func() bool { return started() == 2 }, 10*time.Second, time.Millisecond)
	w.Drain()
	require.NoError(t, <-ran)
	assert.Equal(t, 2, started(), "no job taken while draining")
	runs, err := os.ReadFile(filepath.Join(dir, "runs"))
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(runs), "\n"), "both running jobs finished")

	startWorker(t, nc, Config{}, 2)
	for i, h := range hs {
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
		assert.Equal(t, fmt.Sprintf("%d\n", i), string(output(t, res)))
	}
	runs, err = os.ReadFile(filepath.Join(dir, "runs"))
	require.NoError(t, err)
	assert.Equal(t, 5, strings.Count(string(runs), "\n"), "each job ran once")
}

// Wait, asked for all of a batch's jobs, waits for those the Service has
// not read yet too: a batch whose jobs read have all ended is not done
// while it has submissions to read.
func TestWaitCountsUnreadSubmissions(t *testing.T) {
	nc := setup(t)
	cfg := Config{}.withDefaults()
	replies := []BatchStatus{
		{Batch: "u", Jobs: 3, Succeeded: 3, Unread: 2},
		{Batch: "u", Jobs: 5, Succeeded: 4, Waiting: 1},
		{Batch: "u", Jobs: 5, Succeeded: 5},
	}
	asked := 0
	sub, err := nc.Subscribe(cfg.statusSubject(), func(msg *nats.Msg) {
		data, _ := json.Marshal(StatusReply{Batches: []BatchStatus{replies[min(asked, len(replies)-1)]}})
		asked++
		msg.Respond(data)
	})
	require.NoError(t, err)
	t.Cleanup(func() { sub.Unsubscribe() })
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	var seen []BatchStatus
	b, err := cl.Wait(testCtx(t, 30*time.Second), "u", 0, time.Millisecond, func(b BatchStatus) { seen = append(seen, b) })
	require.NoError(t, err)
	assert.Equal(t, replies[2], b)
	assert.Equal(t, replies, seen)
}

// A job submitted that the Service has not read yet (it reads as it has
// room) can be cancelled too: it ends cancelled and never runs, read by the
// same Service or by one started again.
func TestServiceCancelNotReadYet(t *testing.T) {
	t.Run("read later", func(t *testing.T) { cancelNotReadYet(t, false) })
	t.Run("after a restart", func(t *testing.T) { cancelNotReadYet(t, true) })
}

func cancelNotReadYet(t *testing.T, restart bool) {
	nc := setup(t)
	stop := startService(t, nc, Config{}, 1)
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	ctx := testCtx(t, time.Minute)
	runs := filepath.Join(t.TempDir(), "runs")
	var jobs []laboro.Job
	for i := 1; i <= 5; i++ {
		jobs = append(jobs, laboro.Job{ID: fmt.Sprintf("j%d", i), Script: fmt.Sprintf("echo j%d >> %s", i, runs)})
	}
	_, err := cl.Submit(ctx, "r", jobs)
	require.NoError(t, err)
	// No worker: one job out, one queued, one waiting for room; two not read.
	require.Eventually(t, func() bool {
		reply, err := cl.Status(ctx, StatusRequest{})
		return err == nil && len(reply.Batches) == 1 && reply.Batches[0].Jobs == 3 && reply.Unread == 2
	}, 10*time.Second, 5*time.Millisecond)

	reply, err := cl.Cancel(ctx, "j4", "nosuch")
	require.NoError(t, err)
	require.Len(t, reply.Jobs, 2)
	assert.Equal(t, JobStatus{ID: "j4", State: "cancelled", ExitCode: -1, Error: laboro.ErrCancelled.Error()}, reply.Jobs[0])
	assert.Equal(t, StateUnknown, reply.Jobs[1].State)

	if restart {
		// Started again before reading it, the Service ends it cancelled.
		require.NoError(t, stop())
		startService(t, nc, Config{}, 1)
	}
	startWorker(t, nc, Config{}, 1)
	b, err := cl.Wait(ctx, "r", 5, 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, 4, b.Succeeded)
	assert.Equal(t, 1, b.Failed)
	status, err := cl.Status(ctx, StatusRequest{IDs: []string{"j4"}})
	require.NoError(t, err)
	assert.Equal(t, "cancelled", status.Jobs[0].State)
	ran, err := os.ReadFile(runs)
	require.NoError(t, err)
	got := strings.Fields(string(ran))
	slices.Sort(got)
	assert.Equal(t, []string{"j1", "j2", "j3", "j5"}, got, "the jobs that ran")
}

// A cancel of many jobs goes in requests of at most maxCancelIDs, each
// answered in its own time: every job ends cancelled, the reply names them
// all in the order asked, and no worker runs one.
func TestServiceCancelMany(t *testing.T) {
	const n = 2*maxCancelIDs + 100
	nc := setup(t)
	core, logs := observer.New(zap.InfoLevel)
	startService(t, nc, Config{Logger: zap.New(core)}, n) // all of them out, none waiting for room
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	ctx := testCtx(t, 2*time.Minute)
	runs := filepath.Join(t.TempDir(), "runs")
	jobs := make([]laboro.Job, n)
	ids := make([]string, n)
	for i := range jobs {
		ids[i] = fmt.Sprintf("many-%d", i+1)
		jobs[i] = laboro.Job{ID: ids[i], Script: "echo ran >> " + runs}
	}
	_, err := cl.Submit(ctx, "many", jobs)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		reply, err := cl.Status(ctx, StatusRequest{Batches: []string{"many"}})
		return err == nil && len(reply.Batches) == 1 && reply.Batches[0].Jobs == n
	}, time.Minute, 5*time.Millisecond, "the Service has read the batch")

	requests := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(cl.Config.withDefaults().cancelAPISubject(), requests)
	require.NoError(t, err)
	t.Cleanup(func() { sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	// A context without a deadline: each request has its own.
	reply, err := cl.Cancel(context.Background(), ids...)
	require.NoError(t, err)
	require.Len(t, reply.Jobs, n)
	for i, j := range reply.Jobs {
		require.Equal(t, ids[i], j.ID, "in the order asked")
		require.Equal(t, "cancelled", j.State, j.ID)
	}
	sizes := []int{}
	for len(requests) > 0 {
		var req CancelRequest
		require.NoError(t, json.Unmarshal((<-requests).Data, &req))
		sizes = append(sizes, len(req.IDs))
	}
	assert.Equal(t, []int{maxCancelIDs, maxCancelIDs, 100}, sizes)
	// One line a request in the service's log, not one a job.
	said := logs.FilterMessage("jobs cancelled").All()
	require.Len(t, said, 3)
	for i, size := range sizes {
		assert.Equal(t, int64(size), said[i].ContextMap()["jobs"])
	}
	assert.Equal(t, []any{"many-1", "many-2", "many-3", "many-4", "many-5", "many-6", "many-7", "many-8", "many-9", "many-10"},
		said[0].ContextMap()["ids"])
	assert.Less(t, logs.Len(), 100, "%d lines", logs.Len())

	// A worker that comes now runs none of them, and then the next job.
	startWorker(t, nc, Config{}, 2)
	b, err := cl.Wait(ctx, "many", n, 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, n, b.Failed)
	assert.Zero(t, b.Succeeded)
	_, err = cl.Submit(ctx, "after", []laboro.Job{{ID: "after", Command: "true"}})
	require.NoError(t, err)
	after, err := cl.Wait(ctx, "after", 1, 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, after.Succeeded, "the worker runs the next job")
	assert.NoFileExists(t, runs, "a cancelled job ran")
}

// Jobs cancelled through the Service, whether running on a worker, queued
// in the Service or waiting for room there, end cancelled and never run
// (again), also after the Service restarts; an unknown id is said so, and
// a job that ended keeps its end.
func TestServiceCancel(t *testing.T) {
	nc := setup(t)
	stop := startService(t, nc, Config{}, 1)
	startWorker(t, nc, Config{}, 1)
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	pids := filepath.Join(dir, "pids")
	_, err := cl.Submit(ctx, "c", []laboro.Job{
		{ID: "running", Script: longScript(runs, pids)},
		{ID: "queued", Script: "echo queued >> " + runs},
		{ID: "blocked", Script: "echo blocked >> " + runs},
		{ID: "last", Script: "echo last"},
	})
	require.NoError(t, err)
	procs := awaitPIDs(t, pids)
	// One job out, one queued, one waiting for room: the Service has read
	// three, and says that one is not read yet.
	require.Eventually(t, func() bool {
		reply, err := cl.Status(ctx, StatusRequest{Batches: []string{"c"}})
		return err == nil && len(reply.Batches) == 1 && reply.Batches[0].Jobs == 3
	}, 10*time.Second, 5*time.Millisecond)
	status, err := cl.Status(ctx, StatusRequest{})
	require.NoError(t, err)
	assert.Equal(t, uint64(1), status.Unread, "submissions not read yet")
	require.Len(t, status.Batches, 1)
	assert.Equal(t, 1, status.Batches[0].Unread, "the batch's submissions not read yet")

	reply, err := cl.Cancel(ctx, "running", "queued", "blocked", "nosuch")
	require.NoError(t, err)
	states := map[string]string{}
	for _, j := range reply.Jobs {
		states[j.ID] = j.State
	}
	assert.Equal(t, map[string]string{"running": "cancelled", "queued": "cancelled", "blocked": "cancelled",
		"nosuch": StateUnknown}, states)
	requireGone(t, procs)

	b, err := cl.Wait(ctx, "c", 4, 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, BatchStatus{Batch: "c", Submitted: b.Submitted, Jobs: 4, Succeeded: 1, Failed: 3, Cancelled: 3, Ended: b.Ended}, b)
	assert.Zero(t, b.Failures(), "a cancelled job is no failure")
	status, err = cl.Status(ctx, StatusRequest{})
	require.NoError(t, err)
	assert.Zero(t, status.Unread, "every submission read")
	assert.Zero(t, status.Batches[0].Unread, "every submission of the batch read")
	assert.False(t, b.Ended.IsZero(), "it ended")
	assert.Equal(t, 1, lines(t, runs), "only the running job ran")
	res, err := cl.Result(ctx, "running")
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusCancelled, res.Status)

	// Cancelling a job that ended changes nothing.
	reply, err = cl.Cancel(ctx, "last", "running")
	require.NoError(t, err)
	require.Len(t, reply.Jobs, 2)
	assert.Equal(t, "succeeded", reply.Jobs[0].State)
	assert.Equal(t, "cancelled", reply.Jobs[1].State)

	// Started again, the Service knows them cancelled, and runs none.
	require.NoError(t, stop())
	_, err = cl.Cancel(ctx, "running")
	require.ErrorIs(t, err, ErrNoService)
	startService(t, nc, Config{}, 1)
	b, err = cl.Wait(ctx, "c", 4, 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, b.Succeeded)
	assert.Equal(t, 3, b.Cancelled, "read back as cancelled")
	status, err = cl.Status(ctx, StatusRequest{IDs: []string{"running", "queued", "blocked"}})
	require.NoError(t, err)
	for _, j := range status.Jobs {
		assert.Equal(t, "cancelled", j.State, j.ID)
		assert.Equal(t, laboro.ErrCancelled.Error(), j.Error, j.ID)
	}
	assert.Equal(t, 1, lines(t, runs))
}

// The timeout of a submitted job bounds its run on a worker, not its wait
// for one.
func TestServiceTimeout(t *testing.T) {
	nc := setup(t)
	startService(t, nc, Config{}, 4)
	startWorker(t, nc, Config{}, 1)
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	ctx := testCtx(t, time.Minute)
	_, err := cl.Submit(ctx, "t", []laboro.Job{
		// quick waits 3 s for the worker, more than its timeout, which
		// leaves an echo 2 s to run however loaded the machine.
		{ID: "first", Script: "sleep 3"},
		{ID: "quick", Script: "echo quick", Timeout: 2 * time.Second},
		{ID: "slow", Script: "sleep 30", Timeout: 2 * time.Second},
	})
	require.NoError(t, err)
	b, err := cl.Wait(ctx, "t", 3, 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, 2, b.Succeeded)
	assert.Equal(t, 1, b.TimedOut)
	assert.Equal(t, 1, b.Failures())
	reply, err := cl.Status(ctx, StatusRequest{IDs: []string{"quick", "slow"}})
	require.NoError(t, err)
	assert.Equal(t, "succeeded", reply.Jobs[0].State)
	assert.Equal(t, "timed out", reply.Jobs[1].State)
}

// A batch counts its jobs by how they ended: cancelled, timed out and
// killed apart, within Failed (its meaning for peers of older versions);
// a cancel overrides an end. Failures lists the first jobs that failed
// otherwise than by a cancel, and says that more did.
func TestTrackerCountsEnds(t *testing.T) {
	tr := newTracker(100)
	now := time.Now()
	for i := range 7 {
		require.True(t, tr.add(fmt.Sprint("j", i), "b", "job "+fmt.Sprint(i), now))
	}
	tr.dispatched("j0")
	tr.finish("j0", laboro.Result{Status: laboro.StatusCancelled, ExitCode: -1, Err: laboro.ErrCancelled})
	tr.finish("j1", laboro.Result{Status: laboro.StatusFailed, ExitCode: 3, Stderr: []byte("oops\n")})
	tr.finish("j2", laboro.Result{Status: laboro.StatusTimedOut, ExitCode: -1, Err: laboro.ErrTimeout})
	tr.finish("j3", laboro.Result{Status: laboro.StatusKilled, ExitCode: -1, Err: laboro.ErrKilled})
	tr.finish("j4", laboro.Result{Status: laboro.StatusSucceeded})
	tr.finish("j5", laboro.Result{Status: laboro.StatusFailed, ExitCode: 1})
	b := tr.status(StatusRequest{}).Batches[0]
	assert.Equal(t, BatchStatus{Batch: "b", Submitted: now, Jobs: 7, Waiting: 1, Succeeded: 1, Failed: 5,
		Cancelled: 1, TimedOut: 1, Killed: 1}, b)
	assert.Equal(t, 4, b.Failures())

	reply := tr.status(StatusRequest{Failures: 2})
	require.Len(t, reply.Jobs, 2)
	assert.Equal(t, JobStatus{ID: "j1", Batch: "b", State: "failed", ExitCode: 3, Command: "job 1", Stderr: "oops\n"}, reply.Jobs[0])
	assert.Equal(t, "j2", reply.Jobs[1].ID)
	assert.True(t, reply.Truncated, "more failed")
	reply = tr.status(StatusRequest{Failures: 4, IDs: []string{"j4"}})
	assert.Equal(t, []string{"j4", "j1", "j2", "j3", "j5"}, jobIDs(reply.Jobs))
	assert.False(t, reply.Truncated)
	reply = tr.status(StatusRequest{Failures: 2, Unsuccessful: true})
	assert.Equal(t, []string{"j0", "j1", "j2", "j3", "j5"}, jobIDs(reply.Jobs), "-failed lists them all")

	// Cancelled after it failed, or while it waits: cancelled.
	_, last := tr.cancel("j5")
	assert.False(t, last)
	_, last = tr.cancel("j6")
	assert.True(t, last, "the batch's last job")
	b = tr.status(StatusRequest{}).Batches[0]
	assert.Equal(t, BatchStatus{Batch: "b", Submitted: now, Jobs: 7, Succeeded: 1, Failed: 6,
		Cancelled: 3, TimedOut: 1, Killed: 1, Ended: b.Ended}, b)
	assert.Equal(t, []string{"j1", "j2", "j3"}, jobIDs(tr.status(StatusRequest{Failures: 10}).Jobs))
}

func jobIDs(jobs []JobStatus) []string {
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// BatchStatus crosses the wire as JSON between peers of any versions: an
// older client reads the jobs that ended as Succeeded + Failed, which
// still counts the cancelled ones, and a newer one reads none cancelled
// from an older service.
func TestBatchStatusWire(t *testing.T) {
	b := BatchStatus{Batch: "b", Jobs: 4, Succeeded: 1, Failed: 3, Cancelled: 1, TimedOut: 1}
	data, err := json.Marshal(b)
	require.NoError(t, err)
	var older struct{ Jobs, Succeeded, Failed int }
	require.NoError(t, json.Unmarshal(data, &older))
	assert.Equal(t, b.Jobs, older.Succeeded+older.Failed, "an older client sees the batch done")
	assert.Contains(t, string(data), `"cancelled":1,"timed_out":1`)
	assert.NotContains(t, string(data), "killed", "none killed: said by leaving it out")

	var newer BatchStatus
	require.NoError(t, json.Unmarshal([]byte(`{"batch":"b","submitted":"2026-01-02T03:04:05Z","jobs":2,"waiting":0,"dispatched":0,"succeeded":1,"failed":1}`), &newer))
	assert.Equal(t, 1, newer.Failures(), "an older service's Failed")
	assert.Zero(t, newer.Cancelled)
}

// The status table keeps at most its bound of jobs while batches that
// ended can go: the oldest ended batches are forgotten first, never one
// that runs, and a forgotten job is unknown.
func TestTrackerForgetsEndedBatches(t *testing.T) {
	tr := newTracker(10)
	now := time.Now()
	ok := laboro.Result{Status: laboro.StatusSucceeded, Ended: now}
	addBatch := func(name string, n int) {
		for i := range n {
			require.True(t, tr.add(fmt.Sprintf("%s-%d", name, i), name, "true", now))
		}
	}
	end := func(name string, n int) {
		for i := range n {
			tr.finish(fmt.Sprintf("%s-%d", name, i), ok)
		}
	}
	addBatch("old", 4)
	end("old", 4)
	addBatch("running", 4) // 8 jobs: room left
	addBatch("ended", 2)
	end("ended", 2)
	assert.Len(t, tr.jobs, 10)
	names := func() (list []string) {
		batches, _ := tr.recentRead(10)
		for _, b := range batches {
			list = append(list, b.Batch)
		}
		return list
	}
	require.Equal(t, []string{"ended", "running", "old"}, names())

	// The 11th job: the oldest ended batch goes, down to 9 jobs at most.
	addBatch("new", 1)
	assert.Equal(t, []string{"new", "ended", "running"}, names())
	assert.Len(t, tr.jobs, 7)
	assert.Equal(t, "", tr.state("old-0"), "forgotten")
	reply := tr.status(StatusRequest{IDs: []string{"old-1", "running-1"}, Batches: []string{"old"}})
	assert.Equal(t, StateUnknown, reply.Jobs[0].State)
	assert.Equal(t, StateWaiting, reply.Jobs[1].State)
	assert.Empty(t, reply.Batches)
	assert.True(t, tr.add("old-0", "again", "true", now), "a forgotten id may come again")

	// Nothing that runs is forgotten, whatever the bound.
	addBatch("big", 8)
	assert.Equal(t, []string{"big", "again", "new", "running"}, names(), "the ended batch went; the running ones stay")
	assert.Len(t, tr.jobs, 14)
	assert.Equal(t, StateWaiting, tr.state("running-3"))
	assert.Zero(t, tr.endedBatches, "no ended batch left to forget")

	// A batch that ended and takes a job again runs: it stays.
	end("new", 1)
	assert.Equal(t, 1, tr.endedBatches)
	require.True(t, tr.add("new-1", "new", "true", now))
	assert.Zero(t, tr.endedBatches)
	assert.Equal(t, []string{"big", "again", "new", "running"}, names())
	// Once it ended, the next job past the bound forgets it.
	tr.finish("new-1", ok)
	addBatch("last", 1)
	assert.Equal(t, []string{"last", "big", "again", "running"}, names())
	assert.Len(t, tr.jobs, 14)
}

// A job submitted, and its result asked for, before any Service has run on
// the streams (`laboro serve &` and at once `laboro submit -wait`): the
// job waits in the SUBMIT stream, Result waits for the RESULTS stream, and
// both go on once a Service starts.
func TestResultBeforeAnyService(t *testing.T) {
	nc := setup(t)
	mon, err := nats.Connect(nc.ConnectedUrl())
	require.NoError(t, err)
	defer mon.Close()
	asks, err := mon.SubscribeSync("$JS.API.STREAM.INFO.LABORO_RESULTS")
	require.NoError(t, err)
	require.NoError(t, mon.Flush())

	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir(), Logger: zaptest.NewLogger(t)}}
	ctx := testCtx(t, time.Minute)
	ids, err := cl.Submit(ctx, "early", []laboro.Job{{Script: "echo early"}})
	require.NoError(t, err)
	type answer struct {
		res laboro.Result
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := cl.Result(ctx, ids[0])
		answered <- answer{res, err}
	}()
	// Asked for the stream, found none, and asked again: it waits.
	for range 2 {
		_, err := asks.NextMsg(30 * time.Second)
		select {
		case a := <-answered:
			t.Fatalf("Result returned before any Service ran: %v", a.err)
		default:
		}
		require.NoError(t, err, "Result did not ask for the RESULTS stream")
	}

	startService(t, nc, Config{}, 2)
	startWorker(t, nc, Config{}, 1)
	a := <-answered
	require.NoError(t, a.err)
	assert.Equal(t, laboro.StatusSucceeded, a.res.Status, "%v", a.res.Err)
	assert.Equal(t, "early\n", string(output(t, a.res)))
}
