package jetstream

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/freeport"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// startWorkerProcess runs this test binary as a worker process, its
// environment added to with env.
func startWorkerProcess(t *testing.T, url string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorkerURL+"="+url, envWorkerDir+"="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

func TestWorkerProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	nc, url := setupURL(t)
	cfg := Config{AckWait: time.Second}
	m := newManager(t, nc, cfg)

	workers := []*exec.Cmd{}
	for range 3 {
		workers = append(workers, startWorkerProcess(t, url))
	}
	marks := filepath.Join(t.TempDir(), "started")

	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(48), laboro.WithConcurrency(48),
		laboro.WithBufferSize(64))
	require.NoError(t, err)
	defer ex.Close()

	const n = 1000
	ctx := testCtx(t, 3*time.Minute)
	var finished atomic.Int64
	handles := make([]*laboro.Handle, 0, n)
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for finished.Load() < n/5 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		// Kill it mid-job: while a job it started runs, which has then
		// no result and must run again.
		for !midJob(marks, workers[0].Process.Pid) && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		workers[0].Process.Signal(syscall.SIGKILL)
	}()
	for i := range n {
		h, err := ex.Submit(ctx, laboro.Job{
			ID:     fmt.Sprintf("p%d", i),
			Script: fmt.Sprintf("echo %d $PPID $$ >> %s; sleep 0.02; echo %d", i, marks, i),
		})
		require.NoError(t, err)
		handles = append(handles, h)
		go func() { <-h.Done(); finished.Add(1) }()
	}
	for i, h := range handles {
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		require.Equal(t, laboro.StatusSucceeded, res.Status, "job %d: %v", i, res.Err)
		require.Equal(t, fmt.Sprintf("%d\n", i), string(output(t, res)))
	}
	<-killed
	require.NoError(t, ex.Shutdown(ctx))

	started, err := os.ReadFile(marks)
	require.NoError(t, err)
	lines := strings.Count(string(started), "\n")
	t.Logf("%d jobs, %d runs started, %d result messages", n, lines, streamMsgs(t, nc, "LABORO_RESULTS"))
	require.Greater(t, lines, n, "the killed worker's jobs ran again")
	require.GreaterOrEqual(t, streamMsgs(t, nc, "LABORO_RESULTS"), uint64(n))
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 0 },
		10*time.Second, 50*time.Millisecond)

	for _, w := range workers[1:] {
		require.NoError(t, w.Process.Signal(syscall.SIGTERM))
		require.NoError(t, w.Wait())
	}
}

// A worker killed mid-job has its job handed to another worker by the
// service as soon as it is taken for gone (three heartbeats missed), not
// after the consumer's AckWait, here ten minutes.
func TestServiceHandsBackAKilledWorkersJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker process")
	}
	handsBackKilledWorkersJob(t, false)
}

// So is the job of a worker killed the moment after it took it: here the
// worker says it is there once an hour, and what it runs changed at most
// as often, and the service knows of the job only from the heartbeat the
// worker says as it takes a job.
func TestServiceHandsBackAJobTakenSinceTheLastHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker process")
	}
	handsBackKilledWorkersJob(t, true)
}

// handsBackKilledWorkersJob has a worker process take a job and killed,
// and checks that the service hands the job to another worker; quiet, the
// killed worker says no heartbeat after its first.
func handsBackKilledWorkersJob(t *testing.T, quiet bool) {
	nc, url := setupURL(t)
	core, logs := observer.New(zap.InfoLevel)
	svc := &Service{Conn: nc, Config: Config{AckWait: 10 * time.Minute, Dir: t.TempDir(), Logger: zap.New(core)}}
	started := make(chan *laboro.Executor, 1)
	svc.Started = func(ex *laboro.Executor) { started <- ex }
	serveUntilEnd(t, svc)
	ex := <-started
	ctx := testCtx(t, 2*time.Minute)

	dir := t.TempDir()
	runs, release := filepath.Join(dir, "runs"), filepath.Join(dir, "release")
	// The killed worker's run goes on, orphaned, until the test ends.
	t.Cleanup(func() { os.WriteFile(release, nil, 0o600) })
	script := fmt.Sprintf("echo run >> %s; until [ -e %s ]; do sleep 0.01; done; echo done", runs, release)
	h, err := ex.Submit(ctx, laboro.Job{ID: "held", Script: script})
	require.NoError(t, err)

	env := []string{envWorkerAckWait + "=0"}
	if quiet {
		env = append(env, envWorkerQuiet+"=1")
	}
	worker := startWorkerProcess(t, url, env...)
	name := fmt.Sprintf("process-%d", worker.Process.Pid)
	if quiet {
		require.Eventually(t, func() bool {
			svc.fleet.mu.Lock()
			defer svc.fleet.mu.Unlock()
			w := svc.fleet.workers[name+"\x00"+svc.fleet.names[name].run]
			return lines(t, runs) == 1 && len(w.leases) == 1 && w.leases[0].Job == "held"
		}, time.Minute, 5*time.Millisecond, "the worker process says it took the job")
	} else {
		require.Eventually(t, func() bool {
			ws := svc.Workers()
			return lines(t, runs) == 1 && len(ws) == 1 && ws[0].Name == name && slices.Equal(ws[0].Running, []string{"held"})
		}, time.Minute, 5*time.Millisecond, "the worker process says it runs the job")
	}
	require.NoError(t, worker.Process.Kill())
	worker.Wait()

	startWorker(t, nc, Config{}, 1) // the consumer's AckWait kept
	require.Eventually(t, func() bool { return lines(t, runs) == 2 }, time.Minute, 5*time.Millisecond,
		"the killed worker's job handed to the other worker")
	require.NoError(t, os.WriteFile(release, nil, 0o600))
	res, err := h.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	require.Equal(t, "done\n", string(output(t, res)))

	said := logs.FilterMessage("worker not heard from: the jobs it held are handed to other workers").All()
	require.Len(t, said, 1, "the service says why the job moved")
	fields := said[0].ContextMap()
	assert.Equal(t, name, fields["worker"])
	assert.Equal(t, []any{"held"}, fields["ids"])
}

// A worker killed while no service ran, here while `laboro serve` (the
// service and the server it embeds) was down, has its job handed back by
// the service that starts next, from the worker's last heartbeat the
// server kept: long before the consumer's AckWait.
func TestServiceStartedAgainHandsBackAKilledWorkersJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker process and restarts a NATS server")
	}
	dir, port := t.TempDir(), freeport.Port(t)
	srv, err := StartEmbedded(dir, "127.0.0.1", port)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown() }) // the server of the moment
	ctx := testCtx(t, 2*time.Minute)
	serve := func() (*nats.Conn, *observer.ObservedLogs, func()) {
		core, logs := observer.New(zap.InfoLevel)
		svc, stop := startOwnService(t, srv.URL(), zap.New(core))
		return svc.Conn, logs, stop
	}
	nc, _, stopService := serve()

	work := t.TempDir()
	runs, release := filepath.Join(work, "runs"), filepath.Join(work, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o600) }) // the killed worker's orphan
	script := fmt.Sprintf("echo run >> %s; until [ -e %s ]; do sleep 0.01; done; echo done", runs, release)
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	ids, err := cl.Submit(ctx, "b", []laboro.Job{{Script: script}})
	require.NoError(t, err)
	require.Len(t, ids, 1)

	worker := startWorkerProcess(t, srv.URL(), envWorkerAckWait+"=0")
	name := fmt.Sprintf("process-%d", worker.Process.Pid)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := js.Stream(ctx, "LABORO_WORKERS")
		if err != nil || lines(t, runs) != 1 {
			return false
		}
		msg, err := st.GetLastMsgForSubject(ctx, "LABORO.workers."+name+".*")
		return err == nil && strings.Contains(string(msg.Data), `"job":"`+ids[0]+`"`)
	}, time.Minute, 5*time.Millisecond, "the server keeps the worker's heartbeat, which holds the job")

	stopService()
	srv.Shutdown()
	require.NoError(t, worker.Process.Kill())
	worker.Wait()
	srv, err = StartEmbedded(dir, "127.0.0.1", port)
	require.NoError(t, err)
	nc, logs, _ := serve()
	startWorker(t, nc, Config{}, 1)

	require.Eventually(t, func() bool { return lines(t, runs) == 2 }, time.Minute, 5*time.Millisecond,
		"the killed worker's job handed to the other worker")
	require.NoError(t, os.WriteFile(release, nil, 0o600))
	cl = &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	got, err := cl.Wait(ctx, "b", 1, 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, got.Succeeded, "%+v", got)

	recalled := logs.FilterMessage("workers heard before this service started held jobs: those not heard again have them handed back").All()
	require.Len(t, recalled, 1)
	assert.Equal(t, []any{name}, recalled[0].ContextMap()["workers"])
	said := logs.FilterMessage("worker not heard from: the jobs it held are handed to other workers").All()
	require.Len(t, said, 1, "the service says why the job moved")
	assert.Equal(t, name, said[0].ContextMap()["worker"])
	assert.Equal(t, []any{ids[0]}, said[0].ContextMap()["ids"])
}

func TestManagerProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a manager process")
	}
	nc, url := setupURL(t)
	// No worker dies here: a long AckWait keeps a slow machine from
	// redelivering a job whose worker is only late.
	cfg := Config{AckWait: managerAckWait}
	marks := filepath.Join(t.TempDir(), "started")

	mgr := exec.Command(os.Args[0], "-test.run=^$")
	mgr.Env = append(os.Environ(), envManagerURL+"="+url, envManagerMarks+"="+marks)
	mgr.Stderr = os.Stderr
	require.NoError(t, mgr.Start())
	t.Cleanup(func() {
		mgr.Process.Kill()
		mgr.Wait()
	})
	// Kill the manager while most of its jobs are still queued.
	for range 3 {
		startWorker(t, nc, cfg, 4)
	}
	require.Eventually(t, func() bool {
		js, err := natsjs.New(nc)
		if err != nil {
			return false
		}
		s, err := js.Stream(testCtx(t, time.Second), "LABORO_RESULTS")
		if err != nil {
			return false // not created yet
		}
		info, err := s.Info(testCtx(t, time.Second))
		return err == nil && info.State.Msgs >= managerJobs/5
	}, 60*time.Second, 5*time.Millisecond)
	require.NoError(t, mgr.Process.Signal(syscall.SIGKILL))
	mgr.Wait()
	before := streamMsgs(t, nc, "LABORO_RESULTS")

	// A new manager runs the same jobs: nothing lost, nothing run twice.
	m := newManager(t, nc, cfg)
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(64), laboro.WithConcurrency(64))
	require.NoError(t, err)
	defer ex.Close()
	ctx := testCtx(t, 2*time.Minute)
	var handles []*laboro.Handle
	for i := range managerJobs {
		h, err := ex.Submit(ctx, managerJob(i, marks))
		require.NoError(t, err)
		handles = append(handles, h)
	}
	for i, h := range handles {
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		require.Equal(t, laboro.StatusSucceeded, res.Status, "job %d: %v", i, res.Err)
		require.Equal(t, fmt.Sprintf("%d\n", i), string(output(t, res)))
	}
	require.NoError(t, ex.Shutdown(ctx))
	started, err := os.ReadFile(marks)
	require.NoError(t, err)
	t.Logf("%d results before the restart", before)
	require.Equal(t, managerJobs, strings.Count(string(started), "\n"), "every job ran once")
	require.Equal(t, uint64(managerJobs), streamMsgs(t, nc, "LABORO_RESULTS"))
}

// midJob tells whether a job started by the worker process of pid worker,
// as marks records them ("<job> <worker pid> <job pid>" lines), still runs.
func midJob(marks string, worker int) bool {
	b, _ := os.ReadFile(marks)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[1] != strconv.Itoa(worker) {
			continue
		}
		if pid, err := strconv.Atoi(f[2]); err == nil && syscall.Kill(pid, 0) == nil {
			return true
		}
	}
	return false
}

// startOwnService runs a Service on a connection of its own to url, with an
// AckWait of 10 minutes (no job goes back on its own during a test), until
// stop is called or the test ends; it returns once the Service started.
func startOwnService(t *testing.T, url string, log *zap.Logger) (svc *Service, stop func()) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	svc = &Service{Conn: nc, Config: Config{AckWait: 10 * time.Minute, Dir: t.TempDir(), Logger: log}}
	ctx, cancel := context.WithCancel(context.Background())
	started, served := make(chan struct{}), make(chan error, 1)
	svc.Started = func(*laboro.Executor) { close(started) }
	go func() { served <- svc.Run(ctx) }()
	stop = sync.OnceFunc(func() { cancel(); require.NoError(t, <-served); nc.Close() })
	t.Cleanup(stop)
	<-started
	return svc, stop
}
