package jetstream

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/laboro-go/laboro/internal/freeport"
	"github.com/laboro-go/laboro/transport"
)

// TestServerRestart shuts the NATS server down in the middle of a batch and
// starts it again on the same port and data directory: the Manager and the
// Workers reconnect, and every job ends with its own output, none lost.
func TestServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a NATS server")
	}
	begin := time.Now()
	dir := t.TempDir()
	// A port below the ephemeral range, kept for the restart: the clients
	// retrying meanwhile can never be given it as their own, and so
	// connect to themselves.
	port := freeport.Port(t)
	srv, err := StartEmbedded(dir, "127.0.0.1", port)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown() }) // the server of the moment
	url := srv.URL()

	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	cfg := Config{AckWait: 2 * time.Second, Logger: log}

	ncM := reconnecting(t, "manager", url)
	mcfg := cfg
	mcfg.Dir = t.TempDir()
	m, err := NewManager(testCtx(t, 10*time.Second), ncM, mcfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })

	var workerConns []*nats.Conn
	var stopWorkers []func()
	for i := range 2 {
		nc := reconnecting(t, fmt.Sprintf("worker %d", i), url)
		workerConns = append(workerConns, nc)
		stopWorkers = append(stopWorkers, runWorker(t, &Worker{Conn: nc, Config: cfg, Concurrency: 4, OutputDir: t.TempDir()}))
	}

	const n = 300
	ctx := testCtx(t, 2*time.Minute)
	b := submitBatch(t, ctx, m, n)

	// Shut the server down once a quarter of the jobs have results, and
	// start it again a second later.
	b.awaitFinished(ctx, n/4)
	down := time.Now()
	srv.Shutdown()
	atShutdown := b.finished()
	time.Sleep(time.Second)
	srv, err = StartEmbedded(dir, "127.0.0.1", port)
	require.NoError(t, err)
	up := time.Now()
	t.Logf("server shut down with %d of %d results, down for %v", atShutdown, n, up.Sub(down).Round(time.Millisecond))

	b.requireOutputs(ctx)
	t.Logf("all %d results %v after the restart", n, time.Since(up).Round(time.Millisecond))
	// Every job ran at least once; some ran again (their acknowledgement
	// was lost with the server, or came after AckWait).
	runs, again := b.requireRuns()
	msgs := b.requireResults(ncM)

	for _, stop := range stopWorkers {
		stop()
	}
	require.NoError(t, m.Close())
	t.Logf("%d runs of %d jobs (run again: %v), %d result messages; reconnections: manager %d, workers %d and %d; %v in all",
		runs, n, again, msgs, ncM.Stats().Reconnects,
		workerConns[0].Stats().Reconnects, workerConns[1].Stats().Reconnects, time.Since(begin).Round(time.Millisecond))
}

// A job that ends while its worker cannot reach the server keeps its
// result until the server is back, however long that takes (here longer
// than a publication's limit when the worker stops), and runs once: the
// server delivers it again meanwhile (its AckWait passed), and its worker,
// which still holds it, does not run it again.
func TestResultOutlastsAnOutage(t *testing.T) {
	old := publishTimeout
	publishTimeout = 100 * time.Millisecond
	t.Cleanup(func() { publishTimeout = old })

	const token = "the-server-token-0123456789"
	url, owner := tokenServer(t, token)
	key := JobKey(token, "")
	cfg := Config{JobKey: key, AckWait: time.Second}.withDefaults()
	m := newManager(t, owner, Config{JobKey: key, AckWait: time.Second})
	relay, conn := relayed(t, url, RoleToken(token, RoleWorker, ""))
	log, _, logs := noting("the job's result")
	stop := runWorker(t, &Worker{Conn: conn, Config: Config{JobKey: key, ProveServer: true}, OutputDir: t.TempDir(),
		Logger: log})

	ctx := testCtx(t, 2*time.Minute)
	runs, release, done := holdJob(t, ctx, m, "long")

	// The job ends while the network stalls: its result is sent, lost, and
	// sent again once the first attempt got no answer in its time, which
	// is longer than publishTimeout.
	relay.Stall()
	release()
	require.NoError(t, relay.DroppedTimes(testCtx(t, 30*time.Second), "PUB "+cfg.resultsSubject("long"), 2))
	relay.Cut()
	relay.Resume()
	heldOut(t, ctx, done, "no result once the server was back")
	stop()
	b, err := os.ReadFile(runs)
	require.NoError(t, err)
	assert.Equal(t, 1, bytes.Count(b, []byte("run\n")), "the job ran again")
	// The worker said that the result waited, once, and when it went.
	assert.Equal(t, 1, logs.FilterMessageSnippet("the job's result waits for the server").Len())
	assert.Equal(t, 1, logs.FilterMessageSnippet("the job's result went").Len())
}

// What waits after a failure for want of the server (a result to store, a
// job to fetch, a proof) is tried again as soon as the connection is back,
// not at the end of its pause (here an hour).
func TestPauseEndsWhenTheConnectionIsBack(t *testing.T) {
	_, url := setupURL(t)
	relay := e2e.NewRelay(t, strings.TrimPrefix(url, "nats://"))
	g := &gate{}
	nc, err := nats.Connect("nats://"+relay.Addr(), nats.SetCustomDialer(g),
		nats.ReconnectWait(10*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	ctx := testCtx(t, time.Minute)

	down := nc.StatusChanged(nats.RECONNECTING)
	g.set(true)
	relay.Cut()
	select {
	case <-down:
	case <-ctx.Done():
		t.Fatal("the connection never went down")
	}
	p := connPause{Backoff: transport.Backoff{Min: time.Hour, Max: time.Hour}, nc: nc}
	waited := make(chan error, 1)
	go func() { waited <- p.Wait(ctx) }()
	g.set(false)
	select {
	case err := <-waited:
		require.NoError(t, err)
		assert.True(t, nc.IsConnected())
	case <-ctx.Done():
		t.Fatal("the pause outlasted the connection's return")
	}
}

// A job its worker hands back as it stops goes to another worker at once,
// even when the server stops right after and starts again (serve's own
// server, stopped with serve): it does not wait for its AckWait, an hour
// here.
func TestHandedBackJobOutlastsTheServersRestart(t *testing.T) {
	dir, port := t.TempDir(), freeport.Port(t)
	srv, err := StartEmbedded(dir, "127.0.0.1", port)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown() }) // the server of the moment
	url := srv.URL()
	cfg := Config{AckWait: time.Hour}
	m := newManager(t, reconnecting(t, "manager", url), cfg)
	stop := runWorker(t, &Worker{Conn: reconnecting(t, "first", url), Config: cfg, OutputDir: t.TempDir()})
	ctx := testCtx(t, 30*time.Second)
	runs, release, done := holdJob(t, ctx, m, "long")
	stop() // the job is killed, and handed back
	srv.Shutdown()
	srv, err = StartEmbedded(dir, "127.0.0.1", port)
	require.NoError(t, err)
	release()
	runWorker(t, &Worker{Conn: reconnecting(t, "second", url), Config: cfg, OutputDir: t.TempDir()})
	heldOut(t, ctx, done, "the job waited for its AckWait after the restart")
	b, err := os.ReadFile(runs)
	require.NoError(t, err)
	assert.Equal(t, 2, bytes.Count(b, []byte("run\n")), "run by the first worker, then by the second")
}
