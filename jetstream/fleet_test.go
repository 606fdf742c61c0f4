package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/freeport"
)

// A fleet's service sees its workers (name, slots, the jobs each runs) and
// follows a running job's output from the worker that runs it, a worker
// with only a worker's token included; a worker that stops is gone from
// the list at once.
func TestFleetWorkersAndLiveOutput(t *testing.T) {
	srv, err := StartEmbedded(t.TempDir(), "127.0.0.1", -1, WithToken("s3cret"))
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	owner, _ := roleConn(t, srv.URL(), "s3cret")
	workerConn, refusals := roleConn(t, srv.URL(), RoleToken("s3cret", RoleWorker, ""))
	stopWorker := runWorker(t, &Worker{Conn: workerConn, Concurrency: 2, Name: "w1.example", OutputDir: t.TempDir(),
		Logger: zaptest.NewLogger(t)})

	svc := &Service{Conn: owner, Config: Config{Logger: zaptest.NewLogger(t), Dir: t.TempDir()}, Concurrency: 4}
	started := make(chan *laboro.Executor, 1)
	svc.Started = func(ex *laboro.Executor) { started <- ex }
	serveUntilEnd(t, svc)
	ex := <-started
	ctx := t.Context()

	require.Eventually(t, func() bool { return len(svc.Workers()) == 1 }, 30*time.Second, 5*time.Millisecond)
	w := svc.Workers()[0]
	assert.Equal(t, "w1.example", w.Name)
	assert.Equal(t, 2, w.Slots)

	dir := t.TempDir()
	script := "echo first; until [ -e " + dir + "/a ]; do sleep 0.01; done; echo second; until [ -e " + dir + "/b ]; do sleep 0.01; done"
	h, err := ex.Submit(ctx, laboro.Job{ID: "live", Script: script})
	require.NoError(t, err)
	tailIs := func(offset int64, want string) {
		t.Helper()
		var got []byte
		require.Eventually(t, func() bool {
			got, err = svc.Tail(ctx, "live", offset)
			return err == nil && string(got) == want
		}, 30*time.Second, 5*time.Millisecond, "%q, %v", got, err)
	}
	tailIs(0, "first\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a"), nil, 0o600))
	tailIs(6, "second\n")
	tailIs(13, "") // nothing more yet
	require.Eventually(t, func() bool {
		ws := svc.Workers()
		return len(ws) == 1 && assert.ObjectsAreEqual([]string{"live"}, ws[0].Running)
	}, 30*time.Second, 5*time.Millisecond, "the worker says what it runs")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "b"), nil, 0o600))
	res, err := h.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "first\nsecond\n", string(output(t, res)))
	_, err = svc.Tail(ctx, "live", 0)
	assert.ErrorIs(t, err, ErrNotRunning, "it ended")
	_, err = svc.Tail(ctx, "nosuchjob", 0)
	assert.ErrorIs(t, err, ErrNotRunning)

	stopWorker()
	require.Eventually(t, func() bool { return len(svc.Workers()) == 0 }, 30*time.Second, 5*time.Millisecond,
		"a worker that stops says it is gone")
	select {
	case err := <-refusals:
		t.Errorf("the worker's token was refused: %v", err)
	default:
	}
}

// A Service keeps the newest outputs up to KeepOutputs bytes, and none
// without it.
func TestServiceKeepsOutputs(t *testing.T) {
	dir := t.TempDir()
	out := func(name string, size int) *laboro.Output {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, make([]byte, size), 0o600))
		return laboro.NewOutput(path, int64(size))
	}
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}
	s := &Service{KeepOutputs: 100}
	s.keep(out("a", 40))
	s.keep(out("b", 40))
	assert.True(t, exists("a") && exists("b"))
	s.keep(out("c", 40)) // 120 > 100: a goes
	assert.False(t, exists("a"))
	assert.True(t, exists("b") && exists("c"))
	s.keep(out("big", 500)) // beyond the bound by itself: it goes too
	assert.False(t, exists("b") || exists("c") || exists("big"))
	s.keep(out("d", 10))
	s.dropKept()
	assert.False(t, exists("d"))

	none := &Service{}
	none.keep(out("e", 10))
	assert.False(t, exists("e"))
}

// serveUntilEnd runs svc until the test ends.
func serveUntilEnd(t *testing.T, svc *Service) {
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-served })
}

// A Service lists its batches, newest first, with their counts and, once
// every job ended, when the last one did.
func TestServiceListsBatches(t *testing.T) {
	nc := setup(t)
	startWorker(t, nc, Config{}, 2)
	svc := &Service{Conn: nc, Config: Config{Logger: zaptest.NewLogger(t)}, Concurrency: 4}
	serveUntilEnd(t, svc)
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	wctx := testCtx(t, time.Minute)
	for _, batch := range []string{"first", "second"} {
		ids, err := cl.Submit(wctx, batch, []laboro.Job{{Command: "true"}, {Command: "false"}})
		require.NoError(t, err)
		_, err = cl.Wait(wctx, batch, len(ids), 10*time.Millisecond, nil)
		require.NoError(t, err)
	}
	var list []BatchStatus
	require.Eventually(t, func() bool {
		list = svc.Batches(10)
		return len(list) == 2 && !list[0].Ended.IsZero()
	}, 30*time.Second, 5*time.Millisecond, "%+v", list)
	assert.Equal(t, "second", list[0].Batch)
	assert.Equal(t, "first", list[1].Batch)
	for _, b := range list {
		assert.Equal(t, 2, b.Jobs)
		assert.Equal(t, 1, b.Succeeded)
		assert.Equal(t, 1, b.Failed)
		assert.False(t, b.Ended.Before(b.Submitted), "%+v", b)
	}
	assert.Len(t, svc.Batches(1), 1)
}

// A batch the Service has not read all of (it reads as it has room) lists
// the submissions it has not read, and no end.
func TestServiceListsUnreadSubmissions(t *testing.T) {
	nc := setup(t)
	svc := &Service{Conn: nc, Config: Config{Logger: zaptest.NewLogger(t)}, Concurrency: 1}
	serveUntilEnd(t, svc)
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	jobs := make([]laboro.Job, 5)
	for i := range jobs {
		jobs[i] = laboro.Job{Command: "true"}
	}
	_, err := cl.Submit(testCtx(t, time.Minute), "behind", jobs)
	require.NoError(t, err)
	// No worker: one job out, one queued, one waiting for room.
	var list []BatchStatus
	require.Eventually(t, func() bool {
		list = svc.Batches(10)
		return len(list) == 1 && list[0].Jobs == 3
	}, 30*time.Second, 5*time.Millisecond, "%+v", list)
	assert.Equal(t, 2, list[0].Unread, "%+v", list[0])
}

// The service hands back only deliveries of the workers' consumer, and
// only while they cannot have expired and gone to another worker: a
// heartbeat naming another subject does not have it publish there.
func TestFleetHandsBackOnlyLiveLeasesOfItsConsumer(t *testing.T) {
	var f fleet
	f.reset(Config{}.withDefaults(), zap.NewNop())
	ours := "$JS.ACK.LABORO_JOBS.workers.1.7.7.1764370000000000000.0"
	ours2 := "$JS.ACK.hub.ACCHASH.LABORO_JOBS.workers.2.8.9.1764370000000000000.0.token" // with a domain
	beat := func(name string, leases ...lease) {
		b, err := json.Marshal(heartbeat{WorkerInfo: WorkerInfo{Name: name, Slots: 1}, Leases: leases})
		require.NoError(t, err)
		f.heard(&nats.Msg{Data: b})
	}
	beat("a", lease{"j1", ours}, lease{"j2", ours2}, lease{"j3", "$JS.ACK.OTHER_JOBS.workers.1.7.7.1.0"},
		lease{"j4", "LABORO.submit.x"}, lease{"j5", "$JS.ACK.LABORO_JOBS.workers.>"},
		lease{"j6", "$JS.ACK.LABORO_JOBS.workers.1 2"})
	beat("b", lease{"k1", ours})
	seen := f.workers["a"].info.Seen
	f.mu.Lock()
	late := f.workers["b"]
	late.info.Seen = seen.Add(-14 * time.Second) // heard a while before a
	f.workers["b"] = late
	f.back = seen.Add(-time.Minute) // the service has run for a minute
	f.mu.Unlock()
	assert.Equal(t, []string{"a"}, names(f.list()), "b is silent")

	gone := f.vanished(seen.Add(beatInterval), 30*time.Second, true, 0)
	require.Len(t, gone, 1, "a heard lately")
	assert.Equal(t, "b", gone[0].info.Name)
	assert.Empty(t, gone[0].leases, "heard 16 s ago, past AckWait/2: its deliveries may be another worker's now")
	gone = f.vanished(seen.Add(beatsMissed*beatInterval+time.Second), 30*time.Second, true, 0)
	require.Len(t, gone, 1)
	assert.Equal(t, "a", gone[0].info.Name)
	assert.Equal(t, []lease{{"j1", ours}, {"j2", ours2}}, gone[0].leases, "only the consumer's deliveries")
	assert.Empty(t, f.workers, "both forgotten")

	beat("c", lease{"j1", ours})
	beat("c", lease{"j1", ours}, lease{"j2", ours2})
	b, err := json.Marshal(heartbeat{WorkerInfo: WorkerInfo{Name: "c", Gone: true}})
	require.NoError(t, err)
	f.heard(&nats.Msg{Data: b})
	assert.Empty(t, f.vanished(time.Now().Add(time.Minute), 30*time.Second, true, 0), "a worker that said it stops hands back its own jobs")
}

// A worker says nothing of its jobs to a server that has not proved itself
// to it, such as one started again: the service keeps what the worker said
// before, and hands it back should the worker die before it proves. A
// worker started again under the same name holds none of what the one
// before held: that is handed back as a silent worker's.
func TestFleetKeepsWhatAnUnprovenWorkerHeld(t *testing.T) {
	f, cfg, logs := loggedFleet()
	say := func(run string, said uint64, unproven bool, leases ...lease) {
		info := WorkerInfo{Name: "a", Run: run, Slots: 1}
		for _, l := range leases {
			info.Running = append(info.Running, l.Job)
		}
		b, err := json.Marshal(heartbeat{WorkerInfo: info, Leases: leases, Said: said, Unproven: unproven})
		require.NoError(t, err)
		f.heard(&nats.Msg{Subject: cfg.workersSubject("a", run), Data: b})
	}
	held := func() (running []string, leases []lease) {
		f.mu.Lock()
		defer f.mu.Unlock()
		w := f.workers["a\x00"+f.names["a"].run]
		return w.info.Running, w.leases
	}

	say("r1", 1, false, lease{"j1", ackOf(1)})
	say("r1", 2, true)
	running, leases := held()
	assert.Equal(t, []string{"j1"}, running, "what it said last")
	assert.Equal(t, []lease{{"j1", ackOf(1)}}, leases)
	say("r1", 3, false)
	_, leases = held()
	assert.Empty(t, leases, "proven again, it holds nothing")

	say("r1", 4, false, lease{"j2", ackOf(2)})
	say("r2", 1, true)
	running, leases = held()
	assert.Empty(t, running, "a worker started again under the same name")
	assert.Empty(t, leases)
	say("r2", 2, false, lease{"j3", ackOf(3)})
	say("r2", 3, true)
	assert.Equal(t, []WorkerInfo{{Name: "a", Run: "r2", Slots: 1, Running: []string{"j3"}, Seen: f.list()[0].Seen}}, f.list(),
		"the one before is not listed")
	assert.Zero(t, logs.Len(), "a worker started again is not taken for two: %v", logs.All())

	f.mu.Lock()
	seen := f.workers["a\x00"+f.names["a"].run].info.Seen
	f.mu.Unlock()
	gone := f.vanished(seen.Add(beatsMissed*beatInterval+time.Second), 30*time.Second, true, 0)
	require.Len(t, gone, 2, "the worker, and the one before it")
	var handed []lease
	for _, w := range gone {
		assert.Equal(t, "a", w.info.Name)
		handed = append(handed, w.leases...)
	}
	assert.ElementsMatch(t, []lease{{"j2", ackOf(2)}, {"j3", ackOf(3)}}, handed, "handed back")
	assert.Empty(t, f.workers)
	assert.Empty(t, f.names)
}

// Two live workers that share a name (two machines of one host name, a
// name given twice) are two to the service: neither has the other's jobs
// handed back while both speak, each has its own handed back once silent,
// and the service warns, once, that the name is shared.
func TestFleetKeepsTwoWorkersOfOneNameApart(t *testing.T) {
	f, cfg, logs := loggedFleet()
	said := map[string]uint64{}
	say := func(run string, leases ...lease) {
		said[run]++
		b, err := json.Marshal(heartbeat{WorkerInfo: WorkerInfo{Name: "twin", Run: run, Slots: 1}, Leases: leases, Said: said[run]})
		require.NoError(t, err)
		f.heard(&nats.Msg{Subject: cfg.workersSubject("twin", run), Data: b})
	}
	for range 3 {
		say("left", lease{"j1", ackOf(1)})
		say("right", lease{"j2", ackOf(2)})
	}
	require.Equal(t, 1, logs.FilterMessageSnippet("two live workers share this name").Len(), "warned once: %v", logs.All())
	assert.Equal(t, "twin", logs.All()[0].ContextMap()["worker"])
	assert.ElementsMatch(t, []any{"left", "right"}, logs.All()[0].ContextMap()["runs"], "the runs named")
	assert.Equal(t, []string{"twin\x00left", "twin\x00right"}, keys(f.list()), "each listed")

	f.mu.Lock()
	seen := f.workers["twin\x00right"].info.Seen
	f.mu.Unlock()
	assert.Empty(t, f.vanished(seen.Add(time.Second), 10*time.Minute, true, 0), "both speak")

	f.mu.Lock()
	left := f.workers["twin\x00left"]
	left.info.Seen = seen.Add(-beatsMissed * beatInterval) // left fell silent
	f.workers["twin\x00left"] = left
	f.back = seen.Add(-time.Minute) // the service has run for a minute
	f.mu.Unlock()
	gone := f.vanished(seen.Add(time.Second), 10*time.Minute, true, 0)
	require.Len(t, gone, 1, "left is silent, right speaks")
	assert.Equal(t, "left", gone[0].info.Run)
	assert.Equal(t, []lease{{"j1", ackOf(1)}}, gone[0].leases, "left's own handed back")
	assert.Equal(t, []string{"twin\x00right"}, keys(f.list()), "right listed")

	gone = f.vanished(seen.Add(beatsMissed*beatInterval+time.Second), 10*time.Minute, true, 0)
	require.Len(t, gone, 1)
	assert.Equal(t, "right", gone[0].info.Run)
	assert.Equal(t, []lease{{"j2", ackOf(2)}}, gone[0].leases, "right's own handed back")
	assert.Empty(t, f.workers)
	assert.Empty(t, f.names)
}

// loggedFleet returns a fleet reset for the default configuration, and
// the warnings it logs.
func loggedFleet() (*fleet, Config, *observer.ObservedLogs) {
	var f fleet
	cfg := Config{}.withDefaults()
	core, logs := observer.New(zap.WarnLevel)
	f.reset(cfg, zap.New(core))
	return &f, cfg, logs
}

// ackOf is the acknowledgement subject of the workers' consumer's nth
// delivery.
func ackOf(n int) string {
	return fmt.Sprintf("$JS.ACK.LABORO_JOBS.workers.1.%d.%d.1764370000000000000.0", n, n)
}

// names returns the names of the workers in list.
func names(list []WorkerInfo) []string {
	var n []string
	for _, w := range list {
		n = append(n, w.Name)
	}
	return n
}

// keys returns the fleet's key (workerKey) of each worker of list.
func keys(list []WorkerInfo) []string {
	var k []string
	for _, w := range list {
		k = append(k, workerKey(w.Name, w.Run))
	}
	return k
}

// A service cut off from the server hears no heartbeat: no worker is
// taken for gone while it is, nor until as long after it is back, lest
// every job of the fleet run again.
func TestFleetWaitsOutItsOwnOutage(t *testing.T) {
	var f fleet
	f.reset(Config{}.withDefaults(), zap.NewNop())
	ours := "$JS.ACK.LABORO_JOBS.workers.1.7.7.1764370000000000000.0"
	b, err := json.Marshal(heartbeat{WorkerInfo: WorkerInfo{Name: "a", Slots: 1}, Leases: []lease{{"j1", ours}}})
	require.NoError(t, err)
	f.heard(&nats.Msg{Data: b})
	seen := f.workers["a"].info.Seen
	at := func(d time.Duration) time.Time { return seen.Add(d) }
	const ackWait = 30 * time.Second

	assert.Empty(t, f.vanished(at(2*time.Second), ackWait, false, 0), "cut off")
	assert.Empty(t, f.vanished(at(8*time.Second), ackWait, false, 0), "still cut off")
	assert.Empty(t, f.vanished(at(10*time.Second), ackWait, true, 1), "just back")
	assert.Empty(t, f.vanished(at(14*time.Second), ackWait, true, 1), "a worker's silence counts from then")
	gone := f.vanished(at(17*time.Second), ackWait, true, 1)
	require.Len(t, gone, 1, "silent since the service was back")
	assert.Empty(t, gone[0].leases, "heard 17 s ago: its deliveries may have expired since")

	f.heard(&nats.Msg{Data: b})
	seen = f.workers["a"].info.Seen
	assert.Empty(t, f.vanished(seen.Add(time.Second), ackWait, true, 2), "back again, unseen by any tick")
	gone = f.vanished(seen.Add(beatsMissed*beatInterval+2*time.Second), ackWait, true, 2)
	require.Len(t, gone, 1)
	assert.Equal(t, []lease{{"j1", ours}}, gone[0].leases, "a short outage keeps them live")
}

// A service that starts learns from the kept heartbeats the workers that
// held deliveries of its consumer when they last spoke, lately: not those
// that said they stop, held none, or spoke too long ago, nor one heard
// since it started; but one started again under its name since does not
// hide it. A recalled worker's silence counts from the start.
func TestFleetRecallsWhoHeldJobs(t *testing.T) {
	nc := setup(t)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	ctx := testCtx(t, time.Minute)
	cfg := Config{}.withDefaults()
	var f fleet
	f.reset(cfg, zap.NewNop())
	recalled, err := f.recall(ctx, js, cfg, 10*time.Minute)
	require.NoError(t, err)
	assert.Empty(t, recalled, "nothing kept yet")

	ours := "$JS.ACK.LABORO_JOBS.workers.1.7.7.1764370000000000000.0"
	say := func(name string, gone bool, leases ...lease) {
		b, err := json.Marshal(heartbeat{WorkerInfo: WorkerInfo{Name: name, Run: "old", Slots: 1, Gone: gone}, Leases: leases})
		require.NoError(t, err)
		require.NoError(t, nc.Publish(cfg.workersSubject(name, "old"), b))
	}
	say("held", false, lease{"j1", ours})
	say("idle", false)
	say("stopped", false, lease{"j2", ours})
	say("stopped", true)
	say("foreign", false, lease{"j3", "$JS.ACK.OTHER_JOBS.workers.1.7.7.1.0"})
	say("live", false, lease{"j4", ours})
	require.Eventually(t, func() bool { return streamMsgs(t, nc, cfg.fleetStream()) == 5 }, 30*time.Second,
		5*time.Millisecond, "the last word of each worker kept")
	f.heard(&nats.Msg{Data: []byte(`{"name":"live","run":"old","slots":2}`)}) // heard by this service
	f.heard(&nats.Msg{Data: []byte(`{"name":"held","run":"new","slots":1}`)}) // started again

	var g fleet
	g.reset(cfg, zap.NewNop())
	recalled, err = g.recall(ctx, js, cfg, time.Nanosecond)
	require.NoError(t, err)
	assert.Empty(t, recalled, "every heartbeat older than AckWait/2")

	recalled, err = f.recall(ctx, js, cfg, 10*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"held"}, recalled)
	f.mu.Lock()
	start := f.back
	assert.Equal(t, []lease{{"j1", ours}}, f.workers["held\x00old"].leases)
	assert.Equal(t, 2, f.workers["live\x00old"].info.Slots, "as heard, not as kept")
	assert.Len(t, f.workers, 3)
	delete(f.workers, "live\x00old")
	delete(f.workers, "held\x00new")
	f.mu.Unlock()

	assert.Empty(t, f.vanished(start.Add(beatsMissed*beatInterval-time.Second), 10*time.Minute, true, 0),
		"a recalled worker is silent from the service's start")
	gone := f.vanished(start.Add(beatsMissed*beatInterval+time.Second), 10*time.Minute, true, 0)
	require.Len(t, gone, 1)
	assert.Equal(t, "held", gone[0].info.Name)
	assert.Equal(t, []lease{{"j1", ours}}, gone[0].leases)
}

// The stream of heartbeats as an earlier serve made it (a subject a
// worker's name, no runs) is brought to a subject a run, and what it kept
// is recalled: a serve upgraded on its data directory.
func TestFleetStreamOfAnEarlierServe(t *testing.T) {
	nc := setup(t)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	ctx := testCtx(t, time.Minute)
	cfg := Config{}.withDefaults()
	_, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: cfg.fleetStream(), Subjects: []string{cfg.Stream + ".workers.*"},
		MaxMsgsPerSubject: 1, Storage: natsjs.FileStorage})
	require.NoError(t, err)
	ours := "$JS.ACK.LABORO_JOBS.workers.1.7.7.1764370000000000000.0"
	b, err := json.Marshal(heartbeat{WorkerInfo: WorkerInfo{Name: "before", Slots: 1}, Leases: []lease{{"j1", ours}}, Said: 9})
	require.NoError(t, err)
	_, err = js.Publish(ctx, cfg.Stream+".workers.before", b)
	require.NoError(t, err)

	var f fleet
	f.reset(cfg, zap.NewNop())
	recalled, err := f.recall(ctx, js, cfg, 10*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"before"}, recalled, "kept by the earlier serve")
	st, err := js.Stream(ctx, cfg.fleetStream())
	require.NoError(t, err)
	assert.Equal(t, []string{cfg.workersSubjects()}, st.CachedInfo().Config.Subjects)
	for _, run := range []string{"R1", "R2"} {
		b, err := json.Marshal(heartbeat{WorkerInfo: WorkerInfo{Name: "after", Run: run, Slots: 1}, Said: 1})
		require.NoError(t, err)
		_, err = js.Publish(ctx, cfg.workersSubject("after", run), b)
		require.NoError(t, err, "a run's heartbeat is kept")
	}
	assert.EqualValues(t, 3, streamMsgs(t, nc, cfg.fleetStream()), "the last of each run, and the earlier worker's")
}

// gate dials while open; shut, it refuses: a connection that comes back
// only when the test lets it.
type gate struct {
	mu   sync.Mutex
	shut bool
}

func (g *gate) set(shut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = shut
}

func (g *gate) Dial(network, address string) (net.Conn, error) {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut {
		return nil, errors.New("dial held back by the test")
	}
	return net.Dial(network, address)
}

// A worker whose connection comes back after the service started again
// (laboro serve restarted, its roll call gone by) says at once that it is
// there and what it runs, not at its next heartbeat: the service hears of
// its job before it would take the worker for gone and hand the job to
// another, and the job runs once.
func TestWorkerSaysItIsBackAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a NATS server")
	}
	every := beatEvery
	beatEvery = time.Hour // past the first, heartbeats only for a change (or a return)
	t.Cleanup(func() { beatEvery = every })
	dir, port := t.TempDir(), freeport.Port(t)
	srv, err := StartEmbedded(dir, "127.0.0.1", port)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown() }) // the server of the moment
	ctx := testCtx(t, 2*time.Minute)
	svc, stopService := startOwnService(t, srv.URL(), zaptest.NewLogger(t))

	g := &gate{}
	wc, err := nats.Connect(srv.URL(), nats.SetCustomDialer(g), nats.MaxReconnects(-1),
		nats.ReconnectWait(10*time.Millisecond), nats.ReconnectBufSize(-1))
	require.NoError(t, err)
	t.Cleanup(wc.Close)
	runWorker(t, &Worker{Conn: wc, Name: "w-back", OutputDir: t.TempDir(), Logger: zaptest.NewLogger(t)})
	work := t.TempDir()
	runs, release := filepath.Join(work, "runs"), filepath.Join(work, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o600) })
	script := fmt.Sprintf("echo run >> %s; until [ -e %s ]; do sleep 0.01; done; echo done", runs, release)
	cl := &Client{Conn: svc.Conn, Config: Config{Dir: t.TempDir()}}
	ids, err := cl.Submit(ctx, "b", []laboro.Job{{Script: script}})
	require.NoError(t, err)
	require.Len(t, ids, 1)
	runsIt := func(svc *Service, since time.Time) bool {
		for _, w := range svc.Workers() {
			if w.Name == "w-back" && w.Seen.After(since) && slices.Contains(w.Running, ids[0]) {
				return true
			}
		}
		return false
	}
	require.Eventually(t, func() bool { return runsIt(svc, time.Time{}) }, time.Minute, 5*time.Millisecond,
		"the service hears that the worker runs the job")

	// The server and the service go, and come back before the worker's
	// connection does.
	g.set(true)
	stopService()
	srv.Shutdown()
	srv, err = StartEmbedded(dir, "127.0.0.1", port)
	require.NoError(t, err)
	svc, _ = startOwnService(t, srv.URL(), zaptest.NewLogger(t))
	back := time.Now()
	g.set(false)
	require.Eventually(t, func() bool { return runsIt(svc, back) }, time.Minute, 5*time.Millisecond,
		"the service started again hears from the worker as soon as it is back")

	require.NoError(t, os.WriteFile(release, nil, 0o600))
	cl = &Client{Conn: svc.Conn, Config: Config{Dir: t.TempDir()}}
	got, err := cl.Wait(ctx, "b", 1, 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, got.Succeeded, "%+v", got)
	assert.Equal(t, 1, lines(t, runs), "the job ran once")
}
