package fuq

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// system is a Foreman serving an Executor on a loopback port, and the
// workers started against it.
type system struct {
	t       *testing.T
	f       *Foreman
	ex      *laboro.Executor
	addr    string
	dir     string
	logs    *observer.ObservedLogs
	ctx     context.Context
	workers sync.WaitGroup
}

func startSystem(t *testing.T, f *Foreman) *system {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	f.Logger = zap.New(core)
	if f.Timeout == 0 {
		f.Timeout = 5 * time.Second
	}
	ex, err := laboro.New(laboro.WithRunner(f), laboro.WithPoolSize(8), laboro.WithConcurrency(8))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	s := &system{t: t, f: f, ex: ex, addr: ln.Addr().String(), dir: t.TempDir(), logs: logs, ctx: ctx}
	served := make(chan error, 1)
	go func() { served <- f.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		ex.Close()
		<-served
		s.workers.Wait()
	})
	return s
}

// worker starts a Worker of procs processors connecting to addr; its Run's
// error arrives on the channel.
func (s *system) worker(addr string, procs int) (*Worker, <-chan error) {
	return s.workerWith(addr, procs, nil)
}

// workerWith is worker with a shared secret.
func (s *system) workerWith(addr string, procs int, secret []byte) (*Worker, <-chan error) {
	w := &Worker{Addr: addr, Procs: procs, Secret: secret, SpoolDir: s.t.TempDir(), Reconnect: 50 * time.Millisecond, Timeout: 5 * time.Second}
	ran := make(chan error, 1)
	s.workers.Go(func() { ran <- w.Run(s.ctx) })
	return w, ran
}

// script writes an executable shell script and returns its path.
func (s *system) script(body string) string {
	path := filepath.Join(s.dir, fmt.Sprintf("task-%d.sh", time.Now().UnixNano()))
	require.NoError(s.t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755))
	return path
}

func (s *system) submit(name, command string, tasks int) (*laboro.Handle, string) {
	logDir := filepath.Join(s.dir, "logs-"+name)
	require.NoError(s.t, os.MkdirAll(logDir, 0o755))
	h, err := s.ex.Submit(context.Background(), NewJob(name, command, tasks, s.dir, logDir))
	require.NoError(s.t, err)
	return h, logDir
}

func wait(t *testing.T, h *laboro.Handle) laboro.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := h.Wait(ctx)
	require.NoError(t, err)
	return res
}

func logFiles(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") {
			names = append(names, e.Name())
		}
	}
	return names
}

// Two workers of 2 processors run a job of 20 tasks: each runs as
// "Command <task>" in the working directory, its output in
// <Name>_<Task>.log; the job succeeds, and its state says so.
func TestForemanAndWorkers(t *testing.T) {
	s := startSystem(t, &Foreman{})
	s.worker(s.addr, 2)
	s.worker(s.addr, 2)
	h, logDir := s.submit("sweep", s.script("echo task $1 in $(pwd)\n"), 20)
	res := wait(t, h)
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)

	info, ok := s.f.JobByRef(h.ID())
	require.True(t, ok)
	assert.Equal(t, 20, info.Done)
	assert.Equal(t, JobFinished, info.Status)
	for _, ti := range info.Tasks {
		assert.Equal(t, TaskDone, ti.State)
		assert.Equal(t, "done", ti.Status)
		assert.Equal(t, 1, ti.Attempts)
		b, err := os.ReadFile(filepath.Join(logDir, fmt.Sprintf("sweep_%d.log", ti.Task)))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("task %d in %s\n", ti.Task, s.dir), string(b))
	}
	assert.Len(t, s.f.Workers(), 2)
}

// A failing task fails the job; its status is the worker's word on it. A
// second run of the same job name keeps the first logs: <Name>_<Task>-1.log.
func TestForemanFailedTask(t *testing.T) {
	s := startSystem(t, &Foreman{})
	s.worker(s.addr, 2)
	cmd := s.script("echo out $1; [ $1 != 2 ] || { echo \"no input for task $1\" >&2; exit 1; }\n")
	h, logDir := s.submit("f", cmd, 3)
	res := wait(t, h)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	// The job's error says why, in the worker's words, with the task's
	// command and where its standard error is; the end of that log is the
	// job's Stderr: what its log line shows.
	assert.EqualError(t, res.Err, "fuq: 1 of 3 tasks of job 1 failed; the first, task 2 ("+cmd+" 2): error encountered: exit status 1 "+
		"(its standard output and error: "+filepath.Join(logDir, "f_2.log")+")")
	assert.Equal(t, "out 2\nno input for task 2", string(res.Stderr))
	assert.Equal(t, -1, res.ExitCode, "the job has no exit status of its own: its tasks' are their own")
	info, _ := s.f.JobByRef(h.ID())
	assert.Equal(t, TaskFailed, info.Tasks[1].State)
	assert.Contains(t, info.Tasks[1].Status, "error encountered: exit status 1")

	h, _ = s.submit("f", cmd, 3)
	res = wait(t, h)
	assert.ErrorContains(t, res.Err, "(its standard output and error: "+filepath.Join(logDir, "f_2-1.log")+")", "the newest log")
	assert.ElementsMatch(t, []string{"f_1.log", "f_2.log", "f_3.log", "f_1-1.log", "f_2-1.log", "f_3-1.log"}, logFiles(t, logDir))
}

// Cancel drops a job's pending tasks and kills its running ones.
func TestForemanCancel(t *testing.T) {
	s := startSystem(t, &Foreman{})
	s.worker(s.addr, 2)
	h, logDir := s.submit("long", s.script("exec sleep 30\n"), 5)
	var id uint64
	require.Eventually(t, func() bool {
		info, ok := s.f.JobByRef(h.ID())
		id = info.JobId
		return ok && info.Running == 2
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, s.f.Cancel(id))
	res := wait(t, h)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	assert.ErrorIs(t, res.Err, ErrJobCancelled)
	info, _ := s.f.Job(id)
	assert.Equal(t, 5, info.Cancelled)
	assert.Equal(t, JobCancelled, info.Status)
	require.Eventually(t, func() bool {
		ws := s.f.Workers()
		return len(ws) == 1 && ws[0].Free == 2
	}, 10*time.Second, time.Millisecond, "the worker's processors are free again")
	assert.Empty(t, logFiles(t, logDir))
	assert.Error(t, s.f.Cancel(999))
}

// STOP(0) ends a worker once its tasks are done; STOP(immediate) at once.
func TestForemanStopsWorkers(t *testing.T) {
	s := startSystem(t, &Foreman{})
	_, ran := s.worker(s.addr, 2)
	h, _ := s.submit("s", s.script("sleep 0.2\n"), 2)
	require.Eventually(t, func() bool { info, _ := s.f.JobByRef(h.ID()); return info.Running == 2 }, 10*time.Second, time.Millisecond)
	s.f.StopWorkers(0)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status, "running tasks finish")
	select {
	case err := <-ran:
		assert.ErrorIs(t, err, ErrStopped)
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not stop")
	}

	_, ran = s.worker(s.addr, 1)
	h, _ = s.submit("s2", s.script("exec sleep 30\n"), 1)
	require.Eventually(t, func() bool { info, _ := s.f.JobByRef(h.ID()); return info.Running == 1 }, 10*time.Second, time.Millisecond)
	s.f.StopWorkers(StopImmediate)
	select {
	case err := <-ran:
		assert.ErrorIs(t, err, ErrStopped)
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not stop at once")
	}
}

// STOP(n) takes n processors away for good: the foreman offers the worker
// no more tasks than it has left, even once its running tasks end.
func TestForemanStopLowersProcessors(t *testing.T) {
	s := startSystem(t, &Foreman{})
	s.worker(s.addr, 3)
	require.Eventually(t, func() bool {
		ws := s.f.Workers()
		return len(ws) == 1 && ws[0].Free == 3
	}, 10*time.Second, time.Millisecond)
	// Lowered while its 3 processors are busy.
	busy, _ := s.submit("busy", s.script("sleep 0.3\n"), 3)
	require.Eventually(t, func() bool { info, _ := s.f.JobByRef(busy.ID()); return info.Running == 3 }, 10*time.Second, time.Millisecond)
	s.f.StopWorkers(2)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, busy).Status)
	require.Eventually(t, func() bool { return s.f.Workers()[0].Free == 1 }, 10*time.Second, time.Millisecond)

	h, _ := s.submit("one-at-a-time", s.script("sleep 0.05\n"), 4)
	most := 0
	for {
		info, _ := s.f.JobByRef(h.ID())
		most = max(most, info.Running)
		select {
		case <-h.Done():
			assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
			assert.Equal(t, 1, most, "tasks at once on a worker left with 1 processor")
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// spoolFiles returns the UPDATEs in w's spool directory.
func spoolFiles(w *Worker) []string {
	entries, _ := os.ReadDir(w.SpoolDir)
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".update") {
			names = append(names, e.Name())
		}
	}
	return names
}

// gated is a script, for tasks that mark their start and then wait to be
// let go.
type gated struct {
	t   *testing.T
	dir string
}

// script returns a script body that creates the file started-<task> in
// dir, waits for the file gate-<task>, then echoes its task number.
func (g gated) script() string {
	return fmt.Sprintf("touch %[1]s/started-$1\nwhile [ ! -e %[1]s/gate-$1 ]; do sleep 0.01; done\necho $1\n", g.dir)
}

// running waits until tasks 1 … n have started (on a worker, not merely
// sent to it), and removes their marks.
func (g gated) running(n int) {
	g.t.Helper()
	for i := 1; i <= n; i++ {
		mark := filepath.Join(g.dir, fmt.Sprintf("started-%d", i))
		require.Eventually(g.t, func() bool { return os.Remove(mark) == nil }, 20*time.Second, time.Millisecond, "task %d did not start", i)
	}
}

// open lets task n go.
func (g gated) open(n int) {
	require.NoError(g.t, os.WriteFile(filepath.Join(g.dir, fmt.Sprintf("gate-%d", n)), nil, 0o600))
}

// A worker whose connection drops runs its tasks on, keeps their UPDATEs
// on disk, and delivers them once connected again; it announces the tasks
// it still runs, so that none runs twice.
func TestWorkerReconnects(t *testing.T) {
	s := startSystem(t, &Foreman{Grace: time.Minute})
	r := e2e.NewRelay(t, s.addr)
	w, _ := s.worker(r.Addr(), 4)
	g := gated{t, t.TempDir()}
	h, logDir := s.submit("r", s.script(g.script()), 4)
	g.running(4)

	r.Down.Store(true)
	r.Cut()
	g.open(1)
	g.open(2)
	require.Eventually(t, func() bool { return len(spoolFiles(w)) == 2 }, 10*time.Second, time.Millisecond,
		"UPDATEs of the tasks that ended wait on disk")
	r.Down.Store(false)
	require.Eventually(t, func() bool { return s.logs.FilterMessage("task taken back from the worker").Len() == 2 }, 20*time.Second, time.Millisecond,
		"the tasks still running are taken back")
	g.open(3)
	g.open(4)

	res := wait(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	info, _ := s.f.JobByRef(h.ID())
	for _, ti := range info.Tasks {
		assert.Equal(t, 1, ti.Attempts, "task %d ran once", ti.Task)
		assert.Equal(t, TaskDone, ti.State)
	}
	assert.Len(t, logFiles(t, logDir), 4)
	require.Eventually(t, func() bool { return len(spoolFiles(w)) == 0 }, 10*time.Second, time.Millisecond,
		"delivered UPDATEs leave the spool")
}

// The tasks of a worker that vanishes for good go to another worker once
// the grace period is over.
func TestVanishedWorkersTasksGoElsewhere(t *testing.T) {
	s := startSystem(t, &Foreman{Grace: 200 * time.Millisecond})
	r := e2e.NewRelay(t, s.addr)
	s.worker(r.Addr(), 2)
	g := gated{t, t.TempDir()}
	h, _ := s.submit("v", s.script(g.script()), 2)
	g.running(2)
	r.Down.Store(true) // gone for good
	r.Cut()
	s.worker(s.addr, 2)
	g.running(2) // on the other worker
	g.open(1)
	g.open(2)
	res := wait(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	info, _ := s.f.JobByRef(h.ID())
	for _, ti := range info.Tasks {
		assert.Equal(t, 2, ti.Attempts)
		assert.Equal(t, "worker-2", ti.Worker)
	}
	assert.Equal(t, 2, s.logs.FilterMessage("task given to another worker").Len())
}

// When Run's context ends (here Executor.Cancel), the job's tasks in line
// leave it and its running ones are cancelled on their workers, whose
// processors are free again for the next job.
func TestForemanRunContextEnds(t *testing.T) {
	s := startSystem(t, &Foreman{})
	s.worker(s.addr, 2)
	h, logDir := s.submit("long", s.script("exec sleep 30\n"), 5)
	require.Eventually(t, func() bool { info, _ := s.f.JobByRef(h.ID()); return info.Running == 2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, s.ex.Cancel(h.ID()))
	res := wait(t, h)
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrCancelled)
	info, _ := s.f.JobByRef(h.ID())
	assert.Equal(t, 5, info.Cancelled)
	assert.Equal(t, JobCancelled, info.Status)
	require.Eventually(t, func() bool {
		ws := s.f.Workers()
		return len(ws) == 1 && ws[0].Free == 2
	}, 10*time.Second, time.Millisecond, "the worker's processors are free again")

	next, _ := s.submit("next", s.script("echo $1\n"), 4)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, next).Status)
	assert.Empty(t, logFiles(t, logDir), "cancelled tasks leave no log")
}

// With a small sequence space both sides RESET often; the worker then
// says HELLO again, and the job goes on as if nothing happened.
func TestResetOverTheWire(t *testing.T) {
	s := startSystem(t, &Foreman{Seq: SeqConfig{MaxSeq: 24}})
	w := &Worker{Addr: s.addr, Procs: 2, SpoolDir: t.TempDir(), Seq: SeqConfig{MaxSeq: 24}}
	core, logs := observer.New(zap.DebugLevel)
	w.Logger = zap.New(core)
	s.workers.Go(func() { w.Run(s.ctx) })
	h, logDir := s.submit("reset", s.script("echo $1\n"), 40)
	res := wait(t, h)
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Len(t, logFiles(t, logDir), 40)
	info, _ := s.f.JobByRef(h.ID())
	for _, ti := range info.Tasks {
		assert.Equal(t, 1, ti.Attempts)
	}
	resets := 0
	for _, e := range logs.FilterMessage("sent").All() {
		if e.ContextMap()["type"] == "RESET" {
			resets++
		}
	}
	assert.Greater(t, resets, 2, "the worker sent or answered RESETs")
	assert.Greater(t, logs.FilterMessage("connected").Len(), 0)
}

// A fuq job's description travels in Job.Payload; Job.Meta is the
// caller's, and the Foreman neither needs nor reads it.
func TestForemanJobPayload(t *testing.T) {
	s := startSystem(t, &Foreman{})
	s.worker(s.addr, 1)
	dir := t.TempDir()
	job := NewJob("p", "/bin/true", 2, dir, dir)
	job.Meta = map[string]int{"priority": 3}
	h, err := s.ex.Submit(context.Background(), job)
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)

	_, err = s.ex.Submit(context.Background(), laboro.Job{Meta: JobDescription{Name: "old", Command: "/bin/true", NumTasks: 1}})
	assert.ErrorIs(t, err, laboro.ErrInvalidJob, "a description in Meta is not a fuq job")
	for _, bad := range []JobDescription{{Command: "/bin/true"}, {NumTasks: 1},
		{Name: "../../escape", Command: "/bin/true", NumTasks: 1}} { // its logs would go out of LoggingDir
		_, err = s.ex.Submit(context.Background(), laboro.Job{Payload: bad})
		assert.ErrorIs(t, err, laboro.ErrInvalidJob, "%+v", bad)
	}
}

// A job of more tasks than MaxTasks is refused at submission, saying so.
func TestForemanMaxTasks(t *testing.T) {
	s := startSystem(t, &Foreman{MaxTasks: 10})
	_, err := s.ex.Submit(context.Background(), NewJob("big", "/bin/true", 11, s.dir, s.dir))
	require.ErrorIs(t, err, laboro.ErrInvalidJob)
	require.ErrorIs(t, err, ErrTooManyTasks)
	var limit *TaskLimitError
	require.ErrorAs(t, err, &limit)
	assert.Equal(t, TaskLimitError{Tasks: 11, Max: 10}, *limit)
	assert.ErrorContains(t, err, "a job of 11 tasks is over the foreman's limit of 10 tasks a job")
	assert.NotContains(t, err.Error(), "MaxTasks")
	h, _ := s.submit("fits", s.script("true\n"), 10)
	s.worker(s.addr, 4)
	require.NoError(t, wait(t, h).Err)
}

// A Foreman keeps the jobs that ended within MaxEndedTasks and
// MaxEndedJobs, forgetting the oldest first, never the last one to end
// nor a job that runs; a job it kept tells its tasks' attempts.
func TestForemanForgetsEndedJobs(t *testing.T) {
	s := startSystem(t, &Foreman{MaxEndedTasks: 5, MaxEndedJobs: 2})
	s.worker(s.addr, 2)
	long, _ := s.submit("long", s.script("exec sleep 30\n"), 1)
	require.Eventually(t, func() bool { _, ok := s.f.JobByRef(long.ID()); return ok }, 10*time.Second, time.Millisecond,
		"the long job is the foreman's first")
	cmd := s.script("true\n")
	run := func(name string, tasks int) uint64 {
		h, _ := s.submit(name, cmd, tasks)
		require.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
		info, ok := s.f.JobByRef(h.ID())
		require.True(t, ok, "the job that ended last is kept")
		for _, ti := range info.Tasks {
			assert.Equal(t, 1, ti.Attempts)
		}
		return info.JobId
	}
	kept := func() []string {
		var names []string
		for _, info := range s.f.Jobs() {
			names = append(names, info.Name)
		}
		return names
	}
	run("a", 2)
	run("b", 2)
	assert.Equal(t, []string{"long", "a", "b"}, kept(), "4 tasks in 2 jobs")
	c := run("c", 3)
	assert.Equal(t, []string{"long", "b", "c"}, kept(), "7 tasks: a is forgotten")
	run("d", 1)
	assert.Equal(t, []string{"long", "c", "d"}, kept(), "3 jobs: b is forgotten")
	e := run("e", 10)
	assert.Equal(t, []string{"long", "e"}, kept(), "e alone is over the bound, and kept")
	_, ok := s.f.Job(c)
	assert.False(t, ok)
	assert.ErrorContains(t, s.f.Cancel(c), fmt.Sprintf("no job %d", c))
	info, ok := s.f.Job(e)
	require.True(t, ok)
	assert.Equal(t, 10, info.Done)

	info, ok = s.f.JobByRef(long.ID())
	require.True(t, ok, "a job that runs is never forgotten")
	require.NoError(t, s.f.Cancel(info.JobId))
	assert.Equal(t, laboro.StatusKilled, wait(t, long).Status)
	assert.Equal(t, []string{"long"}, kept(), "11 tasks: e is forgotten once long ends")
}
