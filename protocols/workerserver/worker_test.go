package workerserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// A Worker against a real Master over loopback HTTP: a job's result, a
// failing executable, an unknown code, and a job cancelled by the master
// (its process killed, its status Cancelled).
func TestWorkerAgainstMaster(t *testing.T) {
	codes := t.TempDir()
	for name, body := range map[string]string{
		"double": "#!/bin/sh\nread p\necho \"{\\\"twice\\\": [$p, $p]}\"\n",
		"broken": "#!/bin/sh\necho 'no such input' >&2\nexit 3\n",
		"slow":   "#!/bin/sh\nexec sleep 30\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(codes, name), []byte(body), 0o755))
	}
	ctx, m, ex, w := workerAndMaster(t, codes, 0, 4)

	run := func(id, code string, params string) laboro.Result {
		var p map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(params), &p))
		h, err := ex.Submit(ctx, NewJob(id, code, p))
		require.NoError(t, err)
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		defer wcancel()
		res, err := h.Wait(wctx)
		require.NoError(t, err)
		return res
	}

	res := run("a", "double", `{"n": 21}`)
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	out, err := res.Output.ReadAll()
	require.NoError(t, err)
	res.Output.Close()
	assert.JSONEq(t, `{"twice": [{"n": 21}, {"n": 21}]}`, string(out))
	recA, _ := m.Job("a")
	assert.Equal(t, JobDone, recA.Status)
	assert.Equal(t, "w1", recA.Server)
	srvRec, _ := m.Server("w1")
	require.NotNil(t, srvRec.Startup)
	assert.ElementsMatch(t, []WorkerCode{{"broken", ""}, {"double", ""}, {"slow", ""}}, srvRec.Startup.Workers)

	res = run("b", "broken", `{}`)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorContains(t, res.Err, "no such input")
	assert.Equal(t, 3, res.ExitCode, "the job's exit status, as the worker reported it")
	assert.Equal(t, "no such input\n", string(res.Stderr), "the end of the job's standard error")

	// A code the worker did not announce is never handed to it.
	hc, err := ex.Submit(ctx, NewJob("c", "nonexistent", nil))
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // ten pings
	rec, _ := m.Job("c")
	assert.Equal(t, JobQueued, rec.Status)
	require.NoError(t, m.Cancel("c"))
	res, err = hc.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusKilled, res.Status)

	h, err := ex.Submit(ctx, NewJob("d", "slow", nil))
	require.NoError(t, err)
	require.Eventually(t, func() bool { r, _ := m.Job("d"); return r.Status == JobProcessing }, 10*time.Second, time.Millisecond)
	require.NoError(t, m.Cancel("d"))
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	res, err = h.Wait(wctx)
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	rec, _ = m.Job("d")
	assert.Equal(t, JobCancelled, rec.Status, "the worker said Cancelled")
	var je *JobError
	assert.True(t, errors.As(res.Err, &je))
	assert.Eventually(t, func() bool {
		entries, _ := os.ReadDir(w.CacheDir)
		return len(entries) == 0
	}, 10*time.Second, 10*time.Millisecond, "nothing left in the cache")
}

// A job that ends before the Worker's FirstProgress sends its end alone;
// one that runs longer says Processing, with its progress, once it has run
// that long, and its end after; with a negative FirstProgress, Processing
// goes as any job starts, as the reference's worker sends it. (The
// master's own Processing, when it hands the job out, carries no data.)
func TestWorkerFirstProgress(t *testing.T) {
	for _, tc := range []struct {
		name         string
		first        time.Duration
		quick, gated bool // run a job that ends at once, one that runs until let go
		quickSaysIt  bool // the quick one says Processing
	}{
		{name: "an-hour", first: time.Hour, quick: true},
		{name: "soon", first: 20 * time.Millisecond, gated: true},
		{name: "at-start", first: -1, quick: true, gated: true, quickSaysIt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			codes := t.TempDir()
			gate := filepath.Join(t.TempDir(), "gate")
			for name, body := range map[string]string{
				"quick": "#!/bin/sh\nread p\necho '{}'\n",
				"gated": "#!/bin/sh\nread p\nwhile [ ! -e '" + gate + "' ]; do sleep 0.01; done\necho '{}'\n",
			} {
				require.NoError(t, os.WriteFile(filepath.Join(codes, name), []byte(body), 0o755))
			}
			ctx, m, ex, _ := workerAndMaster(t, codes, 0, 2, func(w *Worker) {
				w.FirstProgress, w.Progress = tc.first, 2*time.Hour
			})
			// The Processing statuses the worker sent for job id.
			said := func(id string) (n int) {
				rec, _ := m.Job(id)
				for _, ev := range rec.History {
					if ev.Status == JobProcessing && ev.Server == "w1" && len(ev.Data) > 0 {
						n++
					}
				}
				return n
			}
			run := func(id, code string) *laboro.Handle {
				h, err := ex.Submit(ctx, NewJob(id, code, nil))
				require.NoError(t, err)
				return h
			}
			wait := func(h *laboro.Handle) {
				wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
				defer wcancel()
				res, err := h.Wait(wctx)
				require.NoError(t, err)
				require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
				res.Output.Close()
			}

			if tc.quick {
				wait(run("q", "quick"))
				want := 0
				if tc.quickSaysIt {
					want = 1
				}
				assert.Equal(t, want, said("q"), "Processing statuses of a job that ended at once")
				rec, _ := m.Job("q")
				assert.Equal(t, JobDone, rec.Status)
			}
			if tc.gated {
				h := run("g", "gated")
				require.Eventually(t, func() bool { return said("g") == 1 }, 10*time.Second, time.Millisecond,
					"no Processing from a job that runs")
				require.NoError(t, os.WriteFile(gate, nil, 0o644))
				wait(h)
				assert.Equal(t, 1, said("g"), "one Processing: the next one is two hours away")
			}
		})
	}
	t.Run("defaults", func(t *testing.T) {
		for _, tc := range []struct{ first, progress, want time.Duration }{
			{0, 0, DefaultFirstProgress},
			{0, 300 * time.Millisecond, 300 * time.Millisecond},
			{5 * time.Second, 0, 5 * time.Second},
			{time.Minute, 0, 10 * time.Second},
			{-1, 0, -1},
		} {
			w := &Worker{FirstProgress: tc.first, Progress: tc.progress}
			assert.Equal(t, tc.want, w.firstProgress(), "FirstProgress %v, Progress %v", tc.first, tc.progress)
		}
	})
}

// A Worker of 8 slots keeps a connection open to the master for each slot
// and for its pings: its jobs' statuses do not open new ones (Go's default
// client keeps two idle connections to a host, and closes the others).
func TestWorkerKeepsItsConnections(t *testing.T) {
	const slots, jobs = 8, 200
	codes, m, ex := quickMaster(t, jobs)
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(m.Handler())
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	w := &Worker{URL: srv.URL, ServerID: "w1", Password: "pw", CodeDir: codes, CacheDir: t.TempDir(),
		Concurrency: slots, Ping: 20 * time.Millisecond}
	var wg sync.WaitGroup
	wg.Go(func() { assert.ErrorIs(t, w.Run(ctx), context.Canceled) })
	defer func() {
		cancel()
		wg.Wait()
		srv.Close()
	}()

	waitSucceeded(t, ctx, submitQuick(t, ctx, ex, jobs))
	assert.LessOrEqual(t, opened.Load(), int64(2*(slots+2)), "connections opened for %d jobs", jobs)
}

// A result too large for the master (HTTP 413) does not leave its job
// Processing for ever: the worker reports the job Failed, saying why, and
// goes on.
func TestWorkerResultTooLarge(t *testing.T) {
	codes := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(codes, "big"),
		[]byte("#!/bin/sh\nread p\nprintf '{\"x\": \"%s\"}' \"$(head -c 20000 /dev/zero | tr '\\0' a)\"\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(codes, "small"), []byte("#!/bin/sh\nread p\necho '{\"ok\": 1}'\n"), 0o755))
	ctx, _, ex, _ := workerAndMaster(t, codes, 4096, 1)
	res := resultOf(t, ctx, ex, "big")
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorContains(t, res.Err, "over the master's limit")
	res = resultOf(t, ctx, ex, "small")
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
}

// With the defaults, a result of the worker's MaxResult fits the master's
// limit on a request once form-encoded, even one whose every byte takes
// three there: it is not lost.
func TestWorkerDefaultMaxResultFitsTheMaster(t *testing.T) {
	// ["","",…]: every byte of it is %XX in a form.
	result := "[" + strings.Repeat(`"",`, (DefaultMaxResult-2)/3-1) + `""]`
	require.LessOrEqual(t, len(result), DefaultMaxResult)
	require.True(t, json.Valid([]byte(result)))
	codes := t.TempDir()
	file := filepath.Join(codes, "result.json")
	require.NoError(t, os.WriteFile(file, []byte(result), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(codes, "big"), []byte("#!/bin/sh\nread p\ncat "+file+"\n"), 0o755))
	ctx, _, ex, _ := workerAndMaster(t, codes, 0, 1)
	res := resultOf(t, ctx, ex, "big")
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.EqualValues(t, len(result), res.Output.Size())
}

// A job that prints more than the worker's MaxResult fails, saying so,
// and its output is never read into the worker's memory or cache: the
// master hears of a Failed job with the limit named, and the worker goes
// on with the next job.
func TestWorkerMaxResult(t *testing.T) {
	codes := t.TempDir()
	for code, n := range map[string]int{"big": 5000, "small": 4000} {
		require.NoError(t, os.WriteFile(filepath.Join(codes, code),
			fmt.Appendf(nil, "#!/bin/sh\nread p\nprintf '\"%%s\"' \"$(head -c %d /dev/zero | tr '\\0' a)\"\n", n), 0o755))
	}
	ctx, _, ex, _ := workerAndMaster(t, codes, 0, 1, func(w *Worker) { w.MaxResult = 4096 })
	res := resultOf(t, ctx, ex, "big")
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorContains(t, res.Err, "the job printed 5002 bytes, over the worker's limit of 4096 on a result")
	res = resultOf(t, ctx, ex, "small")
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	out, err := res.Output.ReadAll()
	require.NoError(t, err)
	assert.Len(t, out, 4002, "the result of the job under the limit")
}

// resultOf submits a job of code to ex and returns its result, its output
// closed when the test ends.
func resultOf(t *testing.T, ctx context.Context, ex *laboro.Executor, code string) laboro.Result {
	t.Helper()
	h, err := ex.Submit(ctx, NewJob(code, code, nil))
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	res, err := h.Wait(wctx)
	require.NoError(t, err, code)
	t.Cleanup(func() { res.Output.Close() })
	return res
}

// workerAndMaster runs a Master (with maxBody, 0 for the default) over
// loopback HTTP, an Executor of its jobs, and a Worker of the executables
// in codes running n jobs at once, until the test ends; ctx ends then.
func workerAndMaster(t *testing.T, codes string, maxBody int64, n int, opts ...func(*Worker)) (context.Context, *Master, *laboro.Executor, *Worker) {
	m := &Master{Servers: map[string]string{"w1": "pw"}, OutputDir: t.TempDir(), MaxBody: maxBody}
	require.NoError(t, m.Open(filepath.Join(t.TempDir(), "table.db")))
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(8), laboro.WithConcurrency(8))
	require.NoError(t, err)
	srv := httptest.NewServer(m.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	w := &Worker{URL: srv.URL, ServerID: "w1", Password: "pw", CodeDir: codes, CacheDir: t.TempDir(),
		Concurrency: n, Ping: 20 * time.Millisecond, Progress: 50 * time.Millisecond}
	for _, o := range opts {
		o(w)
	}
	var wg sync.WaitGroup
	wg.Go(func() { assert.ErrorIs(t, w.Run(ctx), context.Canceled) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		srv.Close()
		m.Close()
		ex.Close()
	})
	return ctx, m, ex, w
}

// A Worker asks for its next jobs with the end of each job: with jobs in
// line, it pings only as it starts, and sends one request a job.
func TestWorkerAsksWithJobEnds(t *testing.T) {
	const slots, jobs = 2, 60
	codes, m, ex := quickMaster(t, jobs)
	var pings, statuses atomic.Int64
	h := m.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, DefaultPaths.Ping):
			pings.Add(1)
		case strings.HasPrefix(r.URL.Path, DefaultPaths.Job):
			statuses.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		srv.Close()
	}()
	hs := submitQuick(t, ctx, ex, jobs)
	// Every job in line before the worker comes: each end finds one.
	require.Eventually(t, func() bool { return m.current().d.Stats().Waiting == jobs }, 10*time.Second, time.Millisecond)

	// No periodic ping, no Processing within the test.
	w := &Worker{URL: srv.URL, ServerID: "w1", Password: "pw", CodeDir: codes, CacheDir: t.TempDir(),
		Concurrency: slots, Ping: time.Hour, Progress: time.Hour, FirstProgress: time.Hour}
	wg.Go(func() { assert.ErrorIs(t, w.Run(ctx), context.Canceled) })
	waitSucceeded(t, ctx, hs)
	assert.Equal(t, int64(jobs), statuses.Load(), "job statuses")
	// The first ping, and at the end a ping for each slot whose job's end
	// found the line empty.
	assert.LessOrEqual(t, pings.Load(), int64(1+slots), "pings for %d jobs", jobs)
}

// A job cancelled on the master reaches a worker whose every slot is
// busy, which pings no more, with the answer to a Processing of its jobs.
func TestWorkerHearsCancelsWhenBusy(t *testing.T) {
	codes := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(codes, "long"), []byte("#!/bin/sh\nread p\nexec sleep 600\n"), 0o755))
	ctx, m, ex, _ := workerAndMaster(t, codes, 0, 1)
	h, err := ex.Submit(ctx, NewJob("1", "long", nil))
	require.NoError(t, err)
	require.Eventually(t, func() bool { rec, ok := m.Job("1"); return ok && len(rec.History) >= 3 }, 20*time.Second, 5*time.Millisecond,
		"the job's Processing from its worker") // Queued, Processing (handed out), Processing (the worker's)
	require.NoError(t, m.Cancel("1"))
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := h.Wait(wctx)
	require.NoError(t, err, "the cancel never reached the busy worker")
	require.Equal(t, laboro.StatusKilled, res.Status)
	rec, _ := m.Job("1")
	require.Equal(t, JobCancelled, rec.Status)
}

// quickMaster returns a directory of one worker code, quick (it echoes
// {}), and a Master with an Executor of its jobs running up to n at once,
// both closed at the end of the test.
func quickMaster(t *testing.T, n int) (codes string, m *Master, ex *laboro.Executor) {
	codes = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(codes, "quick"), []byte("#!/bin/sh\nread p\necho '{}'\n"), 0o755))
	m = &Master{Servers: map[string]string{"w1": "pw"}, OutputDir: t.TempDir()}
	require.NoError(t, m.Open(filepath.Join(t.TempDir(), "table.db")))
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(n), laboro.WithConcurrency(n))
	require.NoError(t, err)
	t.Cleanup(func() { ex.Close() })
	t.Cleanup(func() { m.Close() })
	return codes, m, ex
}

// submitQuick submits n quick jobs to ex.
func submitQuick(t *testing.T, ctx context.Context, ex *laboro.Executor, n int) []*laboro.Handle {
	hs := make([]*laboro.Handle, n)
	for i := range hs {
		var err error
		hs[i], err = ex.Submit(ctx, NewJob(fmt.Sprint(i), "quick", nil))
		require.NoError(t, err)
	}
	return hs
}

// waitSucceeded waits, a minute at most each, for the jobs of hs to
// succeed.
func waitSucceeded(t *testing.T, ctx context.Context, hs []*laboro.Handle) {
	for _, h := range hs {
		wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
		res, err := h.Wait(wctx)
		wcancel()
		require.NoError(t, err)
		require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
		res.Output.Close()
	}
}

// gatedMaster is a Master on loopback HTTP, an Executor on it, and a code
// "gated" that, once started, ends, printing {"ok": 1}, once the file the
// returned open makes exists; started reports whether one has started;
// newWorker gives a Worker w1 of it, not yet running.
func gatedMaster(t *testing.T) (m *Master, ex *laboro.Executor, newWorker func() *Worker, started func() bool, open func()) {
	codes, dir := t.TempDir(), t.TempDir()
	gate, mark := filepath.Join(dir, "gate"), filepath.Join(dir, "started")
	require.NoError(t, os.WriteFile(filepath.Join(codes, "gated"),
		fmt.Appendf(nil, "#!/bin/sh\ntouch %s\nwhile [ ! -e %s ]; do sleep 0.01; done\necho '{\"ok\": 1}'\n", mark, gate), 0o755))
	started = func() bool { _, err := os.Stat(mark); return err == nil }
	m = &Master{Servers: map[string]string{"w1": "pw"}, OutputDir: t.TempDir()}
	require.NoError(t, m.Open(filepath.Join(t.TempDir(), "table.db")))
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(8), laboro.WithConcurrency(8))
	require.NoError(t, err)
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(func() { srv.Close(); m.Close(); ex.Close() })
	cache := t.TempDir()
	newWorker = func() *Worker {
		return &Worker{URL: srv.URL, ServerID: "w1", Password: "pw", CodeDir: codes, CacheDir: cache,
			Concurrency: 2, Ping: 20 * time.Millisecond, Progress: 50 * time.Millisecond, Logger: zaptest.NewLogger(t)}
	}
	return m, ex, newWorker, started, func() { require.NoError(t, os.WriteFile(gate, nil, 0o600)) }
}

// A worker stopped (its context ended) while a job runs kills it, but
// sends no end for it: the master gives it back, and it runs again; it
// does not end Failed for the stop.
func TestWorkerStopLeavesItsJobsToTheMaster(t *testing.T) {
	m, ex, newWorker, started, open := gatedMaster(t)
	ctx := t.Context()
	h, err := ex.Submit(ctx, NewJob("s", "gated", nil))
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- newWorker().Run(wctx) }()
	require.Eventually(t, started, 20*time.Second, time.Millisecond)
	stop()
	require.ErrorIs(t, <-ran, context.Canceled)
	rec, _ := m.Job("s")
	assert.Equal(t, JobQueued, rec.Status, "back in line, not failed: %+v", rec.History)

	open()
	wctx, stop = context.WithCancel(ctx)
	defer stop()
	go func() { ran <- newWorker().Run(wctx) }()
	res, err := h.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	res.Output.Close()
	stop()
	require.ErrorIs(t, <-ran, context.Canceled)
}

// A draining worker takes no new job, lets the one it runs finish and
// sends its end, then returns nil.
func TestWorkerDrain(t *testing.T) {
	m, ex, newWorker, started, open := gatedMaster(t)
	ctx := t.Context()
	h, err := ex.Submit(ctx, NewJob("s", "gated", nil))
	require.NoError(t, err)
	w := newWorker()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	require.Eventually(t, started, 20*time.Second, time.Millisecond)
	w.Drain()
	later, err := ex.Submit(ctx, NewJob("t", "gated", nil))
	require.NoError(t, err)
	open()
	require.NoError(t, <-ran)
	res, err := h.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	res.Output.Close()
	rec, _ := m.Job("t")
	assert.Equal(t, JobQueued, rec.Status, "no job taken while draining")
	require.NoError(t, ex.Cancel(later.ID()))
}

// A Worker whose password the master refuses at its first request stops
// at once with ErrPasswordRefused, naming itself and the master (it used
// to try again for ever); one that the master accepted first tries again,
// warning, and is back once the master takes its password again.
func TestWorkerPasswordRefused(t *testing.T) {
	codes := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(codes, "quick"), []byte("#!/bin/sh\necho '{}'\n"), 0o755))
	file := filepath.Join(t.TempDir(), "table.db")
	var current atomic.Pointer[http.Handler]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*current.Load()).ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	// open opens the table under a master that knows w1 by password, and
	// serves it.
	open := func(password string) *Master {
		m := &Master{Servers: map[string]string{"w1": password}, OutputDir: t.TempDir(), Logger: zaptest.NewLogger(t), Hold: -1}
		require.NoError(t, m.Open(file))
		h := m.Handler()
		current.Store(&h)
		return m
	}
	m := open("pw")
	newWorker := func(password string, log *zap.Logger) *Worker {
		return &Worker{URL: srv.URL, ServerID: "w1", Password: password, CodeDir: codes, CacheDir: t.TempDir(), Concurrency: 1,
			Ping: 20 * time.Millisecond, Progress: 50 * time.Millisecond, Reconnect: 50 * time.Millisecond, Logger: log}
	}

	ran, _ := runWorker(t, newWorker("typo", zaptest.NewLogger(t)))
	select {
	case err := <-ran:
		require.ErrorIs(t, err, ErrPasswordRefused)
		assert.ErrorContains(t, err, fmt.Sprintf(`the master at %s refused the password of worker "w1"`, srv.URL))
	case <-time.After(20 * time.Second):
		t.Fatal("a worker whose password the master refuses did not stop")
	}

	log, logs := observed(t)
	ran, _ = runWorker(t, newWorker("pw", log))
	require.Eventually(t, func() bool { rec, _ := m.Server("w1"); return rec.Status == ServerOnline }, 20*time.Second, time.Millisecond)
	// The master restarted with another password for w1, then with its own.
	require.NoError(t, m.Close())
	m = open("another")
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("which it accepted before: trying again").Len() > 0 },
		20*time.Second, time.Millisecond)
	require.NoError(t, m.Close())
	m = open("pw")
	t.Cleanup(func() { m.Close() })
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("accepts this worker's password again").Len() > 0 },
		20*time.Second, time.Millisecond)
	ex, err := laboro.New(laboro.WithRunner(m))
	require.NoError(t, err)
	t.Cleanup(func() { ex.Close() })
	h, err := ex.Submit(t.Context(), NewJob("1", "quick", nil))
	require.NoError(t, err)
	res := wait(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	select {
	case err := <-ran:
		t.Fatalf("the worker stopped: %v", err)
	default:
	}
}
