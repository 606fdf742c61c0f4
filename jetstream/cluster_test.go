package jetstream

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// startCluster starts n NATS servers with JetStream in this process, named
// n1…nn, routed to each other as the cluster "laboro", each with its file
// storage in a temporary directory. It returns once JetStream has a meta
// leader that sees every server and a stream with n replicas can be
// created. The servers are shut down at the end of the test.
//
// Each server's cluster port is one the kernel gives it as it listens, and
// each server routes to the ones started before it (the cluster tells every
// server of the others). Ports picked beforehand, closed and listened on
// again later, could be taken in between by any other test's listener.
func startCluster(t *testing.T, n int) []*server.Server {
	t.Helper()
	servers := make([]*server.Server, n)
	var routes []string
	for i := range servers {
		srv, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
			Cluster:    server.ClusterOpts{Name: "laboro", Host: "127.0.0.1", Port: -1},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
		})
		require.NoError(t, err)
		t.Cleanup(func() { // after the connections are closed (cleanups run last first)
			srv.Shutdown()
			srv.WaitForShutdown()
		})
		srv.Start()
		require.True(t, srv.ReadyForConnections(10*time.Second), "server %s not ready", srv.Name())
		routes = append(routes, fmt.Sprintf("nats-route://%s", srv.ClusterAddr()))
		servers[i] = srv
	}

	// A meta leader that sees every server, and every server current.
	deadline := time.Now().Add(30 * time.Second)
	ready := func() bool {
		peers := 0
		for _, srv := range servers {
			if !srv.JetStreamIsClustered() || !srv.JetStreamIsCurrent() {
				return false
			}
			if srv.JetStreamIsLeader() {
				peers = len(srv.JetStreamClusterPeers())
			}
		}
		return peers == n
	}
	for !ready() {
		require.True(t, time.Now().Before(deadline), "no JetStream meta leader with %d peers after 30 s", n)
		time.Sleep(20 * time.Millisecond)
	}
	// And a stream with n replicas can be placed.
	nc, err := nats.Connect(servers[0].ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "CLUSTER_CHECK", Replicas: n, Storage: natsjs.MemoryStorage})
		if err == nil {
			err = js.DeleteStream(ctx, "CLUSTER_CHECK")
		}
		cancel()
		if err == nil {
			return servers
		}
		require.True(t, time.Now().Before(deadline), "no stream with %d replicas after 30 s: %v", n, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// effectiveReplicas is how many servers hold a stream or consumer: its
// leader and the other replicas the server reports.
func effectiveReplicas(ci *natsjs.ClusterInfo) int {
	if ci == nil {
		return 0
	}
	return 1 + len(ci.Replicas)
}

// TestCluster runs a batch on a cluster of three NATS servers, the streams
// and the workers' consumer at three replicas, and shuts one server down in
// the middle: the JOBS stream's leader, unless the Manager is connected to
// it. The Manager is given every server's URL, each Worker a different
// server; Workers leave Replicas at 0 and keep the streams at three. Every
// job ends with its own output, every job ran, and the RESULTS stream holds
// every result. Results wait for a publication lost with a stream leader
// to be made again (firstAttempt); when the server held the Manager's reader of new
// results, two missed heartbeats (feedHeartbeat) until it is made again.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of three NATS servers")
	}
	begin := time.Now()
	servers := startCluster(t, 3)
	var urls []string
	for _, srv := range servers {
		urls = append(urls, srv.ClientURL())
	}
	clusterUp := time.Now()

	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))

	ncM := reconnecting(t, "manager", strings.Join(urls, ","))
	m, err := NewManager(testCtx(t, 20*time.Second), ncM,
		Config{Replicas: 3, AckWait: 2 * time.Second, Dir: t.TempDir(), Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })

	// Two Workers on n1 and n2, with the zero Config. Each logs "job done"
	// (debug) for every job it acknowledged: that tells they started.
	var (
		workerConns []*nats.Conn
		workerLogs  []*observer.ObservedLogs
		stopWorkers []func()
	)
	for i := range 2 {
		nc := reconnecting(t, fmt.Sprintf("worker %d", i), urls[i])
		workerConns = append(workerConns, nc)
		core, logs := observer.New(zap.DebugLevel)
		workerLogs = append(workerLogs, logs)
		stopWorkers = append(stopWorkers, runWorker(t, &Worker{Conn: nc, Config: Config{}, Concurrency: 4,
			OutputDir: t.TempDir(), Logger: zap.New(zapcore.NewTee(log.Core(), core))}))
	}
	jobsDone := func(i int) int { return workerLogs[i].FilterMessage("job done").Len() }

	const n = 300
	ctx := testCtx(t, 50*time.Second)
	b := submitBatch(t, ctx, m, n)
	finished := b.finished
	// When each job got its result.
	ended := make([]time.Time, n)
	var watching sync.WaitGroup
	quit := make(chan struct{})
	t.Cleanup(func() { close(quit); watching.Wait() })
	for i, h := range b.handles {
		watching.Go(func() {
			select {
			case <-h.Done():
				ended[i] = time.Now()
			case <-quit:
			}
		})
	}
	js, err := natsjs.New(ncM)
	require.NoError(t, err)
	streamInfo := func(name string) *natsjs.StreamInfo {
		t.Helper()
		s, err := js.Stream(testCtx(t, 10*time.Second), name)
		require.NoError(t, err)
		info, err := s.Info(testCtx(t, 10*time.Second))
		require.NoError(t, err)
		return info
	}
	consumerInfo := func() *natsjs.ConsumerInfo {
		t.Helper()
		c, err := js.Consumer(testCtx(t, 10*time.Second), "LABORO_JOBS", consumerName)
		require.NoError(t, err)
		info, err := c.Info(testCtx(t, 10*time.Second))
		require.NoError(t, err)
		return info
	}
	// The streams keep the Manager's three replicas after Workers started
	// with Replicas 0. The consumer is created with Replicas 0 ("the
	// stream's") by whoever updated it last, a Worker here: the server
	// keeps 0 in its configuration, and places it on three servers.
	checkReplicas := func(when string) {
		t.Helper()
		for _, name := range []string{"LABORO_JOBS", "LABORO_RESULTS"} {
			info := streamInfo(name)
			require.Equal(t, 3, info.Config.Replicas, "%s: stream %s", when, name)
			require.Equal(t, 3, effectiveReplicas(info.Cluster), "%s: stream %s on %+v", when, name, info.Cluster)
		}
		info := consumerInfo()
		require.Equal(t, 0, info.Config.Replicas, "%s: consumer", when)
		require.Equal(t, 3, effectiveReplicas(info.Cluster), "%s: consumer on %+v", when, info.Cluster)
	}

	// Once a quarter of the jobs have results (and both Workers have done
	// some), shut down the JOBS stream's leader, or another server if the
	// Manager is connected to it.
	for finished() < n/4 || jobsDone(0) == 0 || jobsDone(1) == 0 {
		require.NoError(t, ctx.Err(), "%d results, workers done %d and %d", finished(), jobsDone(0), jobsDone(1))
		time.Sleep(2 * time.Millisecond)
	}
	checkReplicas("before the shutdown")
	jobsLeader := streamInfo("LABORO_JOBS").Cluster.Leader
	resultsLeader := streamInfo("LABORO_RESULTS").Cluster.Leader
	consLeader := consumerInfo().Cluster.Leader
	// The Manager reads new results with an ordered consumer of its own,
	// on one server.
	var feedAt []string
	resultsStream, err := js.Stream(testCtx(t, 10*time.Second), "LABORO_RESULTS")
	require.NoError(t, err)
	feeds := resultsStream.ListConsumers(testCtx(t, 10*time.Second))
	for c := range feeds.Info() {
		if c.Cluster != nil {
			feedAt = append(feedAt, c.Cluster.Leader)
		}
	}
	require.NoError(t, feeds.Err())
	managerAt := ncM.ConnectedServerName()
	victim := slices.IndexFunc(servers, func(s *server.Server) bool { return s.Name() == jobsLeader })
	if jobsLeader == managerAt || victim < 0 {
		victim = slices.IndexFunc(servers, func(s *server.Server) bool { return s.Name() != managerAt })
	}
	gone := servers[victim].Name()
	metaLeader := ""
	for _, srv := range servers {
		if srv.JetStreamIsLeader() {
			metaLeader = srv.Name()
		}
	}
	down := time.Now()
	atShutdown := finished()
	servers[victim].Shutdown()
	servers[victim].WaitForShutdown()
	t.Logf("cluster up in %v; server %s shut down with %d of %d results (manager on %s, its results "+
		"consumer on %v, workers on %s and %s; leaders: meta %s, JOBS %s, RESULTS %s, workers' consumer %s)",
		clusterUp.Sub(begin).Round(time.Millisecond), gone, atShutdown, n, managerAt, feedAt,
		servers[0].Name(), servers[1].Name(), metaLeader, jobsLeader, resultsLeader, consLeader)

	// The JOBS stream has a leader, a new one if it was on that server.
	var newLeader string
	for newLeader == "" || newLeader == gone {
		require.NoError(t, ctx.Err(), "no leader of the JOBS stream")
		time.Sleep(50 * time.Millisecond)
		s, err := js.Stream(testCtx(t, 2*time.Second), "LABORO_JOBS")
		if err != nil {
			continue
		}
		if info, err := s.Info(testCtx(t, 2*time.Second)); err == nil && info.Cluster != nil {
			newLeader = info.Cluster.Leader
		}
	}
	elected := time.Since(down)

	b.requireOutputs(ctx)
	watching.Wait() // every job has its result

	// The longest wait for a result after the shutdown, counted from it.
	var after []time.Time
	for _, e := range ended {
		if e.After(down) {
			after = append(after, e)
		}
	}
	slices.SortFunc(after, func(a, b time.Time) int { return a.Compare(b) })
	stall, prev := time.Duration(0), down
	for _, e := range after {
		stall = max(stall, e.Sub(prev))
		prev = e
	}

	// Every job ran at least once; some ran again (their acknowledgement
	// was lost with the server, or came after AckWait).
	runs, again := b.requireRuns()
	msgs := b.requireResults(ncM)
	checkReplicas("after the batch")

	for _, stop := range stopWorkers {
		stop()
	}
	require.NoError(t, m.Close())
	t.Logf("JOBS leader %s %v after the shutdown; results stalled for at most %v after the shutdown; "+
		"%d runs of %d jobs (run again: %v), %d result messages; jobs done by the workers: %d and %d; "+
		"reconnections: manager %d, workers %d and %d; %v in all",
		newLeader, elected.Round(time.Millisecond), stall.Round(time.Millisecond),
		runs, n, again, msgs, jobsDone(0), jobsDone(1), ncM.Stats().Reconnects,
		workerConns[0].Stats().Reconnects, workerConns[1].Stats().Reconnects, time.Since(begin).Round(time.Millisecond))
}
