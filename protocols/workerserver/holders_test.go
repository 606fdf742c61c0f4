package workerserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// processForm is the form of a request of the worker process p (its instance,
// and, for a server status, what it says of itself).
func processForm(server, status string, data any, p WorkerProcess) url.Values {
	v := form(server, status, data)
	v.Set(FieldInstance, p.Instance)
	desc := p
	desc.Instance = ""
	b, _ := json.Marshal(desc)
	v.Set(FieldProcess, string(b))
	return v
}

// bubbleMaster opens a Master on file, for a test in a synctest bubble,
// and returns it and a func that posts a request of process p to it (no
// network: the handler itself) and returns the answer, with its refusal
// header and Retry-After (-1 when none).
func bubbleMaster(t *testing.T, file string, lease, hold time.Duration) (*Master, func(path, server, status string, p WorkerProcess) (int, Answer, string, int)) {
	m := &Master{Servers: testServers, OutputDir: t.TempDir(), Lease: lease, Hold: hold}
	require.NoError(t, m.Open(file))
	h := m.Handler()
	return m, func(path, server, status string, p WorkerProcess) (int, Answer, string, int) {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(processForm(server, status, nil, p).Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		var a Answer
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a))
		retry := -1
		if v := rec.Header().Get("Retry-After"); v != "" {
			var err error
			retry, err = strconv.Atoi(v)
			require.NoError(t, err)
		}
		return rec.Code, a, rec.Header().Get(HeaderRefusal), retry
	}
}

// The master tells the processes under one serverId apart by their
// instance: it refuses every request of a second one (409, named, with
// Retry-After) while the first shows life, on every route; it takes the
// restart of the first (a Connecting on its host with its cache folder)
// at once, another process once the first left or showed no life for a
// lease, and, restarted on its table, keeps the holder it had.
func TestOneProcessPerServerID(t *testing.T) {
	file := filepath.Join(t.TempDir(), "master.db")
	synctest.Test(t, func(t *testing.T) {
		const lease = 10 * time.Second
		m, post := bubbleMaster(t, file, lease, -1)
		a := WorkerProcess{Instance: "aaaa", Host: "h1", PID: 101, CacheDir: "/var/cache/a"}
		b := WorkerProcess{Instance: "bbbb", Host: "h2", PID: 202, CacheDir: "/var/cache/b"}
		ok := func(p WorkerProcess, path, status string) {
			t.Helper()
			code, ans, _, _ := post(path, "s1", status, p)
			require.Equal(t, http.StatusOK, code, "%s %s: %+v", p.Instance, path, ans)
		}
		refused := func(p WorkerProcess, path, status string, holder WorkerProcess, retry int) {
			t.Helper()
			code, ans, refusal, after := post(path, "s1", status, p)
			require.Equal(t, http.StatusConflict, code, "%s %s: %+v", p.Instance, path, ans)
			assert.Equal(t, RefusalInUse, refusal)
			assert.Equal(t, retry, after, "Retry-After: when the holder's silence would reach the lease")
			assert.Contains(t, ans.Error, `serverId "s1" is in use by another worker process (`+holder.String()+")")
			assert.Contains(t, ans.Error, "stop one of them, or give each its own serverId")
		}
		ok(a, DefaultPaths.Status+"s1", ServerConnecting)
		ok(a, DefaultPaths.Status+"s1", ServerOnline)
		time.Sleep(3 * time.Second)
		refused(b, DefaultPaths.Status+"s1", ServerConnecting, a, 7)
		refused(b, DefaultPaths.Status+"s1", ServerOnline, a, 7)
		refused(b, DefaultPaths.Ping+"s1", "", a, 7)
		refused(b, DefaultPaths.Job+"j1", JobProcessing, a, 7)
		// A reference worker names no instance: another process, refused too.
		refused(WorkerProcess{}, DefaultPaths.Ping+"s1", "", a, 7)
		rec, _ := m.Server("s1")
		assert.Equal(t, []string{ServerConnecting, ServerOnline}, statuses(rec.History), "nothing of b recorded")
		require.NotNil(t, rec.Process)
		assert.Equal(t, a, *rec.Process, "the holder, in the server's record")

		// a restarts: same host, same cache folder (which a Worker locks).
		a2 := a
		a2.Instance, a2.PID = "a2a2", 103
		ok(a2, DefaultPaths.Status+"s1", ServerConnecting)
		refused(a, DefaultPaths.Ping+"s1", "", a2, 10) // the old one, should it live after all
		// Only a process that starts is a restart: not the Online of one
		// that says it runs there.
		a3 := a2
		a3.Instance = "a3a3"
		refused(a3, DefaultPaths.Status+"s1", ServerOnline, a2, 10)
		ok(a2, DefaultPaths.Status+"s1", ServerOnline)

		// The holder leaves: another process is taken at once.
		ok(a2, DefaultPaths.Status+"s1", ServerStopping)
		ok(a2, DefaultPaths.Status+"s1", ServerOffline)
		ok(b, DefaultPaths.Status+"s1", ServerConnecting)
		ok(b, DefaultPaths.Status+"s1", ServerOnline)
		refused(a2, DefaultPaths.Status+"s1", ServerOffline, b, 10) // a late word of a2 changes nothing
		rec, _ = m.Server("s1")
		assert.Equal(t, ServerOnline, rec.Status)

		// Restarted on its table, the master keeps the holder it had for
		// a lease from the Open; then another process is taken.
		require.NoError(t, m.Close())
		m, post = bubbleMaster(t, file, lease, -1)
		defer m.Close()
		time.Sleep(time.Second)
		c := WorkerProcess{Instance: "cccc", Host: "h3", PID: 303, CacheDir: "/c"}
		refused(c, DefaultPaths.Status+"s1", ServerConnecting, b, 9)
		ok(b, DefaultPaths.Ping+"s1", "")
		time.Sleep(lease - time.Second)
		refused(c, DefaultPaths.Status+"s1", ServerConnecting, b, 1)
		time.Sleep(time.Second)
		ok(c, DefaultPaths.Status+"s1", ServerConnecting)
		refused(b, DefaultPaths.Ping+"s1", "", c, 10)

		// Processes that name no instance (reference workers) are one
		// process to the master, as before.
		for _, path := range []string{DefaultPaths.Status + "s2", DefaultPaths.Status + "s2", DefaultPaths.Ping + "s2"} {
			code, ans, _, _ := post(path, "s2", ServerConnecting, WorkerProcess{})
			require.Equal(t, http.StatusOK, code, "%s: %+v", path, ans)
		}
	})
}

// A held ping is life: a process whose ping the master holds for longer
// than the lease keeps its serverId (Retry-After: the lease after the
// hold's end, and a second), and its silence counts from the ping's
// answer.
func TestHeldPingHoldsServerID(t *testing.T) {
	file := filepath.Join(t.TempDir(), "master.db")
	synctest.Test(t, func(t *testing.T) {
		const lease, hold = 10 * time.Second, 40 * time.Second
		m, post := bubbleMaster(t, file, lease, hold)
		defer m.Close()
		a := WorkerProcess{Instance: "aaaa", Host: "h1", PID: 1, CacheDir: "/a"}
		b := WorkerProcess{Instance: "bbbb", Host: "h2", PID: 2, CacheDir: "/b"}
		code, _, _, _ := post(DefaultPaths.Status+"s1", "s1", ServerConnecting, a)
		require.Equal(t, http.StatusOK, code)
		held := make(chan int, 1)
		go func() {
			code, _, _, _ := post(DefaultPaths.Ping+"s1", "s1", "", a)
			held <- code
		}()
		synctest.Wait()
		time.Sleep(3 * lease)
		code, _, _, retry := post(DefaultPaths.Status+"s1", "s1", ServerConnecting, b)
		assert.Equal(t, http.StatusConflict, code, "b taken while a's ping is held")
		assert.Equal(t, 10+10+1, retry)
		m.Release()
		assert.Equal(t, http.StatusOK, <-held)
		time.Sleep(lease - time.Second)
		code, _, _, retry = post(DefaultPaths.Status+"s1", "s1", ServerConnecting, b)
		assert.Equal(t, http.StatusConflict, code)
		assert.Equal(t, 1, retry)
		time.Sleep(time.Second)
		code, _, _, _ = post(DefaultPaths.Status+"s1", "s1", ServerConnecting, b)
		assert.Equal(t, http.StatusOK, code, "a silent for a lease since its ping's answer")
	})
}

// slowCode writes a code "slow" in a new folder: each start adds a line to
// the file it returns, and the job ends, printing {"ok": 1}, once the file
// gate exists.
func slowCode(t *testing.T) (codes, starts, gate string) {
	codes, dir := t.TempDir(), t.TempDir()
	starts, gate = filepath.Join(dir, "starts"), filepath.Join(dir, "gate")
	require.NoError(t, os.WriteFile(filepath.Join(codes, "slow"),
		fmt.Appendf(nil, "#!/bin/sh\necho started >> %s\nwhile [ ! -e %s ]; do sleep 0.01; done\necho '{\"ok\": 1}'\n", starts, gate), 0o755))
	return codes, starts, gate
}

// startCount returns how many jobs of slowCode started.
func startCount(starts string) int {
	b, _ := os.ReadFile(starts)
	return strings.Count(string(b), "started")
}

// observed returns a logger that records its entries, and writes them to
// the test's log too.
func observed(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core())), logs
}

// runWorker runs w until the test ends (or it returns); its Run's error
// comes on the channel.
func runWorker(t *testing.T, w *Worker) (<-chan error, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ran, done := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(done)
		ran <- w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ran, cancel
}

// w1Worker returns a Worker of serverId w1 at url, with a cache folder of
// its own and the quick intervals of these tests.
func w1Worker(t *testing.T, url, codes string, log *zap.Logger) *Worker {
	return &Worker{URL: url, ServerID: "w1", Password: "pw", CodeDir: codes, CacheDir: t.TempDir(), Concurrency: 2,
		Ping: 20 * time.Millisecond, Progress: 50 * time.Millisecond, Reconnect: 50 * time.Millisecond, Logger: log}
}

// stillRunning fails t if the Run whose end comes on ran has ended.
func stillRunning(t *testing.T, ran <-chan error, who string) {
	t.Helper()
	select {
	case err := <-ran:
		t.Fatalf("%s stopped: %v", who, err)
	default:
	}
}

// Two Worker processes started under one serverId: the master refuses the
// second while the first lives (it used to take the second's Online for
// a restart of the first, whose job went back in line and ran twice); the
// second, refused longer than the master's lease, stops with ErrInUse,
// saying why; the first runs on, its job once, and hears its cancels.
func TestSecondWorkerUnderOneServerID(t *testing.T) {
	codes, starts, gate := slowCode(t)
	mlog, mlogs := observed(t)
	// A short Hold: a process refused while the other's ping is held waits
	// for the end of the hold, and the lease after it.
	m := &Master{Servers: map[string]string{"w1": "pw"}, OutputDir: t.TempDir(), Lease: 2 * time.Second, Hold: 100 * time.Millisecond, Logger: mlog}
	require.NoError(t, m.Open(filepath.Join(t.TempDir(), "table.db")))
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(8), laboro.WithConcurrency(8))
	require.NoError(t, err)
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(func() { ex.Close(); srv.Close(); m.Close() })
	first := w1Worker(t, srv.URL, codes, nil)
	firstRan, _ := runWorker(t, first)
	ctx := t.Context()
	h1, err := ex.Submit(ctx, NewJob("1", "slow", nil))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return startCount(starts) == 1 }, 20*time.Second, time.Millisecond)

	wlog, wlogs := observed(t)
	secondRan, _ := runWorker(t, w1Worker(t, srv.URL, codes, wlog))
	// The second process is heard of: refused (now), or taken, Online, for
	// a restart of the first (before).
	count := func(status string) int {
		rec, _ := m.Server("w1")
		return strings.Count(" "+strings.Join(statuses(rec.History), " ")+" ", " "+status+" ")
	}
	require.Eventually(t, func() bool {
		return mlogs.FilterMessageSnippet("worker process refused").Len() > 0 || count(ServerOnline) > 1
	}, 20*time.Second, time.Millisecond)
	rec, _ := m.Job("1")
	assert.Equal(t, []string{JobQueued, JobProcessing}, statuses(rec.History)[:2])
	assert.NotContains(t, statuses(rec.History)[1:], JobQueued, "job 1 went back in line: the second process was taken for a restart of the first")
	assert.Equal(t, 1, count(ServerConnecting), "the second process's statuses were recorded")

	select {
	case err := <-secondRan:
		require.ErrorIs(t, err, ErrInUse)
		assert.ErrorContains(t, err, fmt.Sprintf(`the master at %s has refused worker "w1"`, srv.URL))
		assert.ErrorContains(t, err, fmt.Sprintf("pid %d on host", os.Getpid()), "the error names the other process")
	case <-time.After(30 * time.Second):
		t.Fatal("the second process was not refused")
	}
	assert.Equal(t, 1, wlogs.FilterMessageSnippet("another worker already runs under this id").Len(), "the refused process said why, once")

	// The first runs on: a cancel reaches it, and a new job runs once.
	require.NoError(t, m.Cancel("1"))
	res := wait(t, h1)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	rec, _ = m.Job("1")
	assert.Equal(t, JobCancelled, rec.Status)
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	h2, err := ex.Submit(ctx, NewJob("2", "slow", nil))
	require.NoError(t, err)
	res = wait(t, h2)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, 2, startCount(starts), "each job started once")
	stillRunning(t, firstRan, "the first process")
}

// A second process under a serverId whose holder lives stops as soon as
// it has heard that the holder made a request since it was refused, not
// after the master's lease (up to a lease and a hold: minutes by default,
// for nothing); the holder, idle, runs on.
func TestRefusedWorkerStopsOnceTheHolderShowsLife(t *testing.T) {
	codes, _, _ := slowCode(t)
	m := &Master{Servers: map[string]string{"w1": "pw"}, OutputDir: t.TempDir(), Lease: time.Hour, Hold: 100 * time.Millisecond}
	require.NoError(t, m.Open(filepath.Join(t.TempDir(), "table.db")))
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(func() { srv.Close(); m.Close() })
	firstRan, _ := runWorker(t, w1Worker(t, srv.URL, codes, nil))
	require.Eventually(t, func() bool {
		rec, ok := m.Server("w1")
		return ok && rec.Status == ServerOnline
	}, 20*time.Second, time.Millisecond)

	wlog, wlogs := observed(t)
	secondRan, _ := runWorker(t, w1Worker(t, srv.URL, codes, wlog))
	select {
	case err := <-secondRan:
		require.ErrorIs(t, err, ErrInUse)
		assert.ErrorContains(t, err, "the other process has made requests since, so it runs")
	case <-time.After(30 * time.Second): // the lease is an hour
		t.Fatal("the refused process did not stop: it waits for the holder's lease")
	}
	assert.Equal(t, 1, wlogs.FilterMessageSnippet("another worker already runs under this id").Len(), "the refused process said why, once")
	stillRunning(t, firstRan, "the first process")
	rec, ok := m.Server("w1")
	require.True(t, ok)
	assert.Equal(t, ServerOnline, rec.Status, "the holder is still the master's server")
}

// A Worker that crashed (the master heard nothing more of it: no Stopping,
// no Offline) and is started again with its cache folder is taken at once,
// refused never, and gets its job again; one started instead with another
// cache folder is refused until the first has shown no life for the
// master's lease, then taken, and runs jobs.
func TestRestartedWorkerTaken(t *testing.T) {
	codes, starts, gate := slowCode(t)
	mlog, mlogs := observed(t)
	m := &Master{Servers: map[string]string{"w1": "pw"}, OutputDir: t.TempDir(), Lease: 2 * time.Second, Hold: 100 * time.Millisecond, Logger: mlog}
	require.NoError(t, m.Open(filepath.Join(t.TempDir(), "table.db")))
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(8), laboro.WithConcurrency(8))
	require.NoError(t, err)
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(func() { ex.Close(); srv.Close(); m.Close() })
	cache := t.TempDir()
	// crashable runs a Worker whose connection crash cuts first, so that
	// the master hears nothing more of it, then ends it.
	crashable := func(cache string, log *zap.Logger) (crash func(), ran <-chan error) {
		cut := &cutTransport{base: http.DefaultTransport.(*http.Transport).Clone()}
		w := &Worker{URL: srv.URL, ServerID: "w1", Password: "pw", CodeDir: codes, CacheDir: cache, Concurrency: 2,
			Ping: 20 * time.Millisecond, Progress: 50 * time.Millisecond, Reconnect: 50 * time.Millisecond, Logger: log,
			Client: &http.Client{Transport: cut, Timeout: 10 * time.Second}}
		ran, cancel := runWorker(t, w)
		return func() {
			cut.cut.Store(true)
			cut.base.CloseIdleConnections()
			cancel()
			require.ErrorIs(t, <-ran, context.Canceled)
		}, ran
	}
	crash, _ := crashable(cache, nil)
	h1, err := ex.Submit(t.Context(), NewJob("1", "slow", nil))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return startCount(starts) == 1 }, 20*time.Second, time.Millisecond)
	crash()

	crash, _ = crashable(cache, nil)
	require.Eventually(t, func() bool { return startCount(starts) == 2 }, 20*time.Second, time.Millisecond,
		"the restarted worker runs the job it had")
	assert.Zero(t, mlogs.FilterMessageSnippet("worker process refused").Len(), "the restarted worker was refused")
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	res := wait(t, h1)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	crash()

	wlog, wlogs := observed(t)
	_, ran := crashable(t.TempDir(), wlog)
	require.Eventually(t, func() bool { return mlogs.FilterMessageSnippet("worker process refused").Len() > 0 }, 20*time.Second, time.Millisecond)
	h2, err := ex.Submit(t.Context(), NewJob("2", "slow", nil))
	require.NoError(t, err)
	res = wait(t, h2)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, 1, wlogs.FilterMessageSnippet("the master takes this worker process under its serverId now").Len())
	stillRunning(t, ran, "the worker")
}

// Two Workers with one cache folder: the second stops at once with
// ErrCacheDirInUse (each would replay and delete the other's statuses).
func TestWorkerCacheDirLocked(t *testing.T) {
	codes, _, _ := slowCode(t)
	m := &Master{Servers: map[string]string{"w1": "pw", "w2": "pw"}, OutputDir: t.TempDir()}
	require.NoError(t, m.Open(filepath.Join(t.TempDir(), "table.db")))
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(func() { srv.Close(); m.Close() })
	cache := t.TempDir()
	newWorker := func(id string) *Worker {
		return &Worker{URL: srv.URL, ServerID: id, Password: "pw", CodeDir: codes, CacheDir: cache, Concurrency: 1,
			Ping: 20 * time.Millisecond, Reconnect: 50 * time.Millisecond}
	}
	first, _ := runWorker(t, newWorker("w1"))
	require.Eventually(t, func() bool { rec, _ := m.Server("w1"); return rec.Status == ServerOnline }, 20*time.Second, time.Millisecond)
	second, _ := runWorker(t, newWorker("w2"))
	select {
	case err := <-second:
		require.ErrorIs(t, err, ErrCacheDirInUse)
		assert.ErrorContains(t, err, cache)
	case <-time.After(20 * time.Second):
		t.Fatal("a second worker ran with the first one's cache folder")
	}
	select {
	case err := <-first:
		t.Fatalf("the first worker stopped: %v", err)
	default:
	}
}
