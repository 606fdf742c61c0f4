package jetstream

import (
	"context"
	"fmt"
	"net"
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
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// TestServerRestart shuts the NATS server down in the middle of a batch and
// starts it again on the same port and data directory: the Manager and the
// Workers reconnect, and every job ends with its own output, none lost.
func TestServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a NATS server")
	}
	begin := time.Now()
	dir, port := t.TempDir(), freePort(t)
	srv, err := StartEmbedded(dir, "127.0.0.1", port)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown() }) // the server of the moment
	url := srv.URL()

	connect := func(name string) *nats.Conn {
		nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1),
			nats.ReconnectWait(100*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	cfg := Config{AckWait: 2 * time.Second, Logger: log}

	ncM := connect("manager")
	mcfg := cfg
	mcfg.Dir = t.TempDir()
	m, err := NewManager(testCtx(t, 10*time.Second), ncM, mcfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })

	var workerConns []*nats.Conn
	var stopWorkers []func()
	for i := range 2 {
		nc := connect(fmt.Sprintf("worker %d", i))
		workerConns = append(workerConns, nc)
		ctx, cancel := context.WithCancel(context.Background())
		w := &Worker{Conn: nc, Config: cfg, Concurrency: 4, OutputDir: t.TempDir()}
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		stop := sync.OnceFunc(func() {
			cancel()
			require.NoError(t, <-done)
		})
		stopWorkers = append(stopWorkers, stop)
		t.Cleanup(stop)
	}

	const n = 300
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(32), laboro.WithConcurrency(32),
		laboro.WithBufferSize(n))
	require.NoError(t, err)
	t.Cleanup(func() { ex.Close() })
	marks := filepath.Join(t.TempDir(), "marks")
	ctx := testCtx(t, 2*time.Minute)
	handles := make([]*laboro.Handle, n)
	for i := range n {
		handles[i], err = ex.Submit(ctx, managerJob(i, marks))
		require.NoError(t, err)
	}
	finished := func() int {
		k := 0
		for _, h := range handles {
			select {
			case <-h.Done():
				k++
			default:
			}
		}
		return k
	}

	// Shut the server down once a quarter of the jobs have results, and
	// start it again a second later.
	for finished() < n/4 {
		require.NoError(t, ctx.Err(), "%d results before the restart", finished())
		time.Sleep(2 * time.Millisecond)
	}
	down := time.Now()
	srv.Shutdown()
	atShutdown := finished()
	time.Sleep(time.Second)
	srv, err = StartEmbedded(dir, "127.0.0.1", port)
	require.NoError(t, err)
	up := time.Now()
	t.Logf("server shut down with %d of %d results, down for %v", atShutdown, n, up.Sub(down).Round(time.Millisecond))

	var failed []string
	for i, h := range handles {
		res, err := h.Wait(ctx)
		require.NoError(t, err, "job %d: %d results", i, finished())
		switch {
		case res.Status != laboro.StatusSucceeded:
			failed = append(failed, fmt.Sprintf("job %d %v: %v", i, res.Status, res.Err))
			res.Output.Close()
		default:
			if out := string(output(t, res)); out != fmt.Sprintf("%d\n", i) {
				failed = append(failed, fmt.Sprintf("job %d output %q", i, out))
			}
		}
	}
	require.Empty(t, failed, "%d jobs of %d without their output", len(failed), n)
	all := time.Now()
	t.Logf("all %d results %v after the restart", n, all.Sub(up).Round(time.Millisecond))
	require.NoError(t, ex.Shutdown(testCtx(t, 10*time.Second)))

	// Every job ran at least once; some ran again (their acknowledgement
	// was lost with the server, or came after AckWait).
	data, err := os.ReadFile(marks)
	require.NoError(t, err)
	runs := make([]int, n)
	lines := strings.Fields(string(data))
	for _, s := range lines {
		i, err := strconv.Atoi(s)
		require.NoError(t, err, "marks %q", s)
		require.True(t, i >= 0 && i < n, "marks %d", i)
		runs[i]++
	}
	var again []int
	for i, k := range runs {
		require.NotZero(t, k, "job %d never ran", i)
		if k > 1 {
			again = append(again, i)
		}
	}

	// The RESULTS stream holds results for every job, and the work queue
	// empties once the jobs run again have been acknowledged.
	js, err := natsjs.New(ncM)
	require.NoError(t, err)
	results, err := js.Stream(testCtx(t, 10*time.Second), "LABORO_RESULTS")
	require.NoError(t, err)
	info, err := results.Info(testCtx(t, 10*time.Second), natsjs.WithSubjectFilter("LABORO.results.>"))
	require.NoError(t, err)
	for i := range n {
		require.NotZero(t, info.State.Subjects[fmt.Sprintf("LABORO.results.m%d", i)], "no result for job %d", i)
	}
	require.Len(t, info.State.Subjects, n)
	require.Eventually(t, func() bool { return streamMsgs(t, ncM, "LABORO_JOBS") == 0 },
		15*time.Second, 50*time.Millisecond)

	for _, stop := range stopWorkers {
		stop()
	}
	require.NoError(t, m.Close())
	t.Logf("%d runs of %d jobs (run again: %v), %d result messages; reconnections: manager %d, workers %d and %d; %v in all",
		len(lines), n, again, info.State.Msgs, ncM.Stats().Reconnects,
		workerConns[0].Stats().Reconnects, workerConns[1].Stats().Reconnects, time.Since(begin).Round(time.Millisecond))
}
