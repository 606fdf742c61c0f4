package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// longScript is a job that appends a line to runs, writes its shell's pid
// and its child's to pids, and waits for the child, a sleep of 300 s.
func longScript(runs, pids string) string {
	return fmt.Sprintf("echo run >> %s\nsleep 300 &\necho $$ $! > %[2]s.tmp\nmv %[2]s.tmp %[2]s\nwait\n", runs, pids)
}

// awaitPIDs waits for the pid file of a longScript and returns its pids.
func awaitPIDs(t *testing.T, path string) []int {
	t.Helper()
	var b []byte
	require.Eventually(t, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil
	}, 20*time.Second, 5*time.Millisecond, "the job did not start")
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

// requireGone waits until no process of pids runs (a zombie is gone).
func requireGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		require.Eventually(t, func() bool {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				return syscall.Kill(pid, 0) != nil
			}
			fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			return len(fields) > 0 && fields[0] == "Z"
		}, 10*time.Second, 5*time.Millisecond, "process %d still runs", pid)
	}
}

func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

// subjectMsgs is how many messages stream name holds on subject.
func subjectMsgs(t *testing.T, nc *nats.Conn, name, subject string) uint64 {
	t.Helper()
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(testCtx(t, 5*time.Second), name)
	require.NoError(t, err)
	info, err := s.Info(testCtx(t, 5*time.Second), natsjs.WithSubjectFilter(subject))
	require.NoError(t, err)
	return info.State.Subjects[subject]
}

// publishJob stores wj in the JOBS stream as a Manager would.
func publishJob(t *testing.T, nc *nats.Conn, wj wireJob) {
	t.Helper()
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	data, err := json.Marshal(wj)
	require.NoError(t, err)
	msg := nats.NewMsg("LABORO.jobs." + wj.ID)
	msg.Header.Set(hdrJob, wj.ID)
	msg.Data = data
	_, err = publish(testCtx(t, 5*time.Second), js, msg, wj.ID)
	require.NoError(t, err)
}

// runOne runs a job through m and requires it to succeed: once it has, a
// worker of concurrency 1 has taken everything stored before it.
func runOne(t *testing.T, m *Manager, id string) {
	t.Helper()
	res := m.Run(testCtx(t, 30*time.Second), laboro.Job{ID: id, Script: "echo " + id})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	res.Output.Close()
}

// A Run cancelled while its job runs returns at once; the worker kills the
// job's processes and publishes no result; the cancel is the job's
// outcome, for a later Run and for Client.Result, even when a result comes
// late.
func TestCancelRunningJob(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{})
	startWorker(t, nc, Config{}, 1)
	dir := t.TempDir()
	runs, pids := filepath.Join(dir, "runs"), filepath.Join(dir, "pids")
	job := laboro.Job{ID: "long", Script: longScript(runs, pids)}

	ctx, cancel := context.WithCancelCause(testCtx(t, time.Minute))
	done := make(chan laboro.Result, 1)
	go func() { done <- m.Run(ctx, job) }()
	procs := awaitPIDs(t, pids)
	cancel(laboro.ErrCancelled)
	var res laboro.Result
	select {
	case res = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return at once")
	}
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrCancelled)
	assert.Nil(t, res.Output)
	// It ran, from its Run's start to its cancel: a console shows when.
	assert.False(t, res.Started.IsZero(), "no start")
	assert.False(t, res.Ended.Before(res.Started), "ended %v, started %v", res.Ended, res.Started)
	requireGone(t, procs)

	// The worker acknowledged the job, and goes on with the next one.
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 0 }, 10*time.Second, 10*time.Millisecond)
	runOne(t, m, "next")
	assert.Zero(t, subjectMsgs(t, nc, "LABORO_RESULTS", "LABORO.results.long"), "no result from the worker")
	assert.Equal(t, uint64(1), subjectMsgs(t, nc, "LABORO_RESULTS", "LABORO.cancel.long"))

	// A result that comes late (from a worker that did not hear of the
	// cancel) does not change the outcome.
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	late := nats.NewMsg("LABORO.results.long")
	setResultHeaders(late.Header, "long", 1, laboro.Result{Status: laboro.StatusSucceeded})
	late.Header.Set(hdrChunk, "0")
	late.Header.Set(hdrChunks, "0")
	_, err = js.PublishMsg(testCtx(t, 5*time.Second), late)
	require.NoError(t, err)

	res = m.Run(testCtx(t, 5*time.Second), job)
	assert.Equal(t, laboro.StatusCancelled, res.Status, "a Run of the same id gives the stored outcome")
	assert.ErrorIs(t, res.Err, laboro.ErrCancelled)
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	res, err = cl.Result(testCtx(t, 5*time.Second), "long")
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	assert.Equal(t, 1, lines(t, runs), "the job ran once")
}

// A job whose Run ended before any worker took it never runs: it leaves
// the work queue, and its outcome is stored.
func TestCancelBeforeTaken(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{})
	runs := filepath.Join(t.TempDir(), "runs")
	ctx, cancel := context.WithCancelCause(testCtx(t, time.Minute))
	done := make(chan laboro.Result, 1)
	go func() { done <- m.Run(ctx, laboro.Job{ID: "early", Script: "echo run >> " + runs}) }()
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 1 }, 10*time.Second, 5*time.Millisecond)
	cancel(laboro.ErrCancelled)
	res := <-done
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 0 }, 10*time.Second, 5*time.Millisecond,
		"the job is taken out of the work queue")

	startWorker(t, nc, Config{}, 1)
	runOne(t, m, "after")
	assert.Zero(t, lines(t, runs), "the cancelled job did not run")
}

// A worker does not run a job whose end is recorded, though it is still in
// the work queue (a Manager stopped between recording the end and taking
// the job out), nor a job received past its deadline (its Manager died
// before recording anything): it acknowledges the first without a result,
// and reports the second timed out.
func TestWorkerSkipsEndedJobs(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{})
	runs := filepath.Join(t.TempDir(), "runs")
	js, err := natsjs.New(nc)
	require.NoError(t, err)

	publishJob(t, nc, wireJob{ID: "ended", Script: "echo ended >> " + runs})
	rec := nats.NewMsg("LABORO.cancel.ended")
	rec.Header.Set(hdrJob, "ended")
	rec.Header.Set(hdrStatus, strconv.Itoa(int(laboro.StatusKilled)))
	_, err = js.PublishMsg(testCtx(t, 5*time.Second), rec)
	require.NoError(t, err)
	publishJob(t, nc, wireJob{ID: "late", Script: "echo late >> " + runs,
		DeadlineNS: time.Now().Add(-time.Second).UnixNano()})

	startWorker(t, nc, Config{}, 1)
	runOne(t, m, "after")
	assert.Zero(t, lines(t, runs), "neither job ran")
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 0 }, 10*time.Second, 5*time.Millisecond)
	assert.Zero(t, subjectMsgs(t, nc, "LABORO_RESULTS", "LABORO.results.ended"))

	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	res, err := cl.Result(testCtx(t, 5*time.Second), "ended")
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	res, err = cl.Result(testCtx(t, 5*time.Second), "late")
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusTimedOut, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrTimeout)
	assert.Zero(t, res.PID)
}

// A worker kills a job at its deadline by itself, should the end of its
// Run never reach it (its Manager died), and reports it timed out.
func TestWorkerKillsAtDeadline(t *testing.T) {
	nc := setup(t)
	dir := t.TempDir()
	runs, pids := filepath.Join(dir, "runs"), filepath.Join(dir, "pids")
	startWorker(t, nc, Config{}, 1)
	deadline := time.Now().Add(2 * time.Second)
	publishJob(t, nc, wireJob{ID: "bounded", Script: longScript(runs, pids), DeadlineNS: deadline.UnixNano()})
	procs := awaitPIDs(t, pids)

	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	res, err := cl.Result(testCtx(t, 30*time.Second), "bounded")
	require.NoError(t, err)
	res.Output.Close()
	assert.Equal(t, laboro.StatusTimedOut, res.Status)
	assert.WithinDuration(t, deadline, res.Ended, time.Second)
	requireGone(t, procs)
}

// The Executor applies Job.Timeout: the job travels with its Run's
// deadline, not with its timeout, which the worker would apply again from
// its own start.
func TestTimeoutTravelsAsDeadline(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{})
	ex, err := laboro.New(laboro.WithRunner(m))
	require.NoError(t, err)
	defer ex.Close()
	start := time.Now()
	h, err := ex.Submit(testCtx(t, 5*time.Second), laboro.Job{ID: "t", Command: "true", Timeout: time.Hour})
	require.NoError(t, err)

	js, err := natsjs.New(nc)
	require.NoError(t, err)
	jobs, err := js.Stream(testCtx(t, 5*time.Second), "LABORO_JOBS")
	require.NoError(t, err)
	var raw *natsjs.RawStreamMsg
	require.Eventually(t, func() bool {
		raw, err = jobs.GetLastMsgForSubject(testCtx(t, 5*time.Second), "LABORO.jobs.t")
		return err == nil
	}, 10*time.Second, 5*time.Millisecond)
	var wj wireJob
	require.NoError(t, json.Unmarshal(raw.Data, &wj))
	assert.Zero(t, wj.TimeoutNS)
	d, ok := wj.deadline()
	require.True(t, ok)
	assert.WithinDuration(t, start.Add(time.Hour), d, 5*time.Second)

	require.NoError(t, ex.Cancel("t"))
	res, err := h.Wait(testCtx(t, 5*time.Second))
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusCancelled, res.Status)

	// A RunTimeout is the worker's, and travels as the job's timeout.
	h, err = ex.Submit(testCtx(t, 5*time.Second), laboro.Job{ID: "r", Command: "true",
		Payload: JobOptions{RunTimeout: 7 * time.Second}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		raw, err = jobs.GetLastMsgForSubject(testCtx(t, 5*time.Second), "LABORO.jobs.r")
		return err == nil
	}, 10*time.Second, 5*time.Millisecond)
	wj = wireJob{}
	require.NoError(t, json.Unmarshal(raw.Data, &wj))
	assert.Equal(t, int64(7*time.Second), wj.TimeoutNS)
	_, ok = wj.deadline()
	assert.False(t, ok)
	require.NoError(t, ex.Cancel("r"))
	_, err = h.Wait(testCtx(t, 5*time.Second))
	require.NoError(t, err)

	_, err = ex.Submit(testCtx(t, 5*time.Second), laboro.Job{Command: "true", Payload: 7})
	assert.ErrorIs(t, err, laboro.ErrInvalidJob, "a Payload of another type")
}

// A RunTimeout bounds the run on the worker, from its start there.
func TestRunTimeout(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{})
	startWorker(t, nc, Config{}, 1)
	res := m.Run(testCtx(t, 30*time.Second), laboro.Job{ID: "r", Command: "sleep 30",
		Payload: JobOptions{RunTimeout: 300 * time.Millisecond}})
	res.Output.Close()
	assert.Equal(t, laboro.StatusTimedOut, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrTimeout)
	assert.NotZero(t, res.PID, "it ran")
	assert.Less(t, res.Duration(), 10*time.Second)
}

// The end of a Run heard of before its job reaches the worker is kept for
// that job.
func TestWorkerRemembersEnds(t *testing.T) {
	r := &workerRun{taken: map[string]*taken{}, recent: map[string]time.Time{}}
	now := time.Now()
	r.endAt("old", now.Add(-recentCancels*3/2))
	r.endAt("again", now.Add(-recentCancels*3/2))
	r.endAt("again", now.Add(-recentCancels*3/4)) // heard again since
	r.end("a")
	r.end("b")
	assert.NotContains(t, r.recent, "old", "forgotten after recentCancels")
	assert.Contains(t, r.recent, "again", "heard again within recentCancels")
	assert.Len(t, r.heardEnds, 3, "the ends heard of before recentCancels forgotten")
	ta := r.take("a", "")
	require.NotNil(t, ta)
	assert.True(t, r.ended(ta))
	tc := r.take("c", "")
	assert.False(t, r.ended(tc))
	assert.Nil(t, r.take("c", ""), "a job handled here already")
	r.end("c")
	assert.False(t, r.queued(tc), "its Run ended")
	r.release("a")
	r.release("c")
	assert.Empty(t, r.taken)
}
