package runexp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// testManager is a Manager serving an Executor on a loopback port.
type testManager struct {
	m      *Manager
	ex     *laboro.Executor
	addr   string
	logs   *observer.ObservedLogs
	served chan error
}

func startManager(t *testing.T, m *Manager, opts ...laboro.Option) *testManager {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	m.Logger = zap.New(core)
	if m.Timeout == 0 {
		m.Timeout = 2 * time.Second
	}
	if m.IdleWait == 0 {
		m.IdleWait = 50 * time.Millisecond
	}
	m.Dir = t.TempDir()
	ex, err := laboro.New(append([]laboro.Option{laboro.WithRunner(m), laboro.WithPoolSize(16),
		laboro.WithConcurrency(16), laboro.WithBufferSize(64)}, opts...)...)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	tm := &testManager{m: m, ex: ex, addr: ln.Addr().String(), logs: logs, served: make(chan error, 1)}
	go func() { tm.served <- m.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		ex.Close()
		select {
		case <-tm.served:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return")
		}
		entries, _ := os.ReadDir(m.Dir)
		assert.Empty(t, entries, "output files left behind")
	})
	return tm
}

func (tm *testManager) submit(t *testing.T, name, contents string) *laboro.Handle {
	t.Helper()
	h, err := tm.ex.Submit(context.Background(), NewJob(name, ".sh", contents))
	require.NoError(t, err)
	return h
}

// submitInLine submits a job and waits until it is in the manager's line:
// the Executor's workers hand jobs to the manager concurrently, so a test
// that gives a runner several jobs in order submits each this way.
func (tm *testManager) submitInLine(t *testing.T, name, contents string) *laboro.Handle {
	t.Helper()
	before := tm.m.Stats().Pending
	h := tm.submit(t, name, contents)
	require.Eventually(t, func() bool { return tm.m.Stats().Pending == before+1 }, 10*time.Second, time.Millisecond,
		"job %s in the manager's line", name)
	return h
}

func (tm *testManager) logged(text string) int {
	return tm.logs.FilterMessageSnippet(text).Len()
}

// result waits for h's result and returns it with its output's text.
func result(t *testing.T, h *laboro.Handle) (laboro.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := h.Wait(ctx)
	require.NoError(t, err)
	var text []byte
	if res.Output != nil {
		text, err = res.Output.ReadAll()
		require.NoError(t, err)
		require.NoError(t, res.Output.Close())
	}
	return res, string(text)
}

// scripted is a runner played by the test as the reference runner speaks:
// each message one write, no terminator; each answer one read.
type scripted struct {
	t *testing.T
	c net.Conn
}

func dialRunner(t *testing.T, addr string) *scripted {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &scripted{t, c}
}

// join dials and completes the handshake as host.
func join(t *testing.T, addr, host string) *scripted {
	t.Helper()
	r := dialRunner(t, addr)
	r.exchange("SALUTON; MI "+host, "VERSIO 1.3")
	r.exchange("KOMPRENAS", "ALIGI __defaulte__")
	r.say("JES")
	return r
}

func (r *scripted) say(msg string) {
	r.t.Helper()
	_, err := r.c.Write([]byte(msg))
	require.NoError(r.t, err)
}

func (r *scripted) hear() string {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2048)
	n, err := r.c.Read(buf)
	require.NoError(r.t, err)
	return string(buf[:n])
}

func (r *scripted) exchange(msg, want string) {
	r.t.Helper()
	r.say(msg)
	require.Equal(r.t, want, r.hear(), "answer to %q", msg)
}

// payload reads exactly n bytes.
func (r *scripted) payload(n int) string {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, n)
	_, err := io.ReadFull(r.c, buf)
	require.NoError(r.t, err)
	return string(buf)
}

// closed asserts that the manager closes the connection.
func (r *scripted) closed() {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := r.c.Read(make([]byte, 64))
	assert.Zero(r.t, n)
	var ne net.Error
	require.False(r.t, errors.As(err, &ne) && ne.Timeout(), "the manager kept the connection open")
}

// take asks for a job and accepts it: the LABORO line and the contents.
func (r *scripted) take() (laboro string, contents string) {
	r.t.Helper()
	r.say("PETO")
	laboro = r.hear()
	require.True(r.t, strings.HasPrefix(laboro, "LABORO "), "got %q", laboro)
	var size int
	_, err := fmt.Sscanf(laboro[strings.LastIndexByte(laboro, ' ')+1:], "%d", &size)
	require.NoError(r.t, err)
	r.say("PRETA")
	if size == 0 {
		return laboro, ""
	}
	return laboro, r.payload(size)
}

// report sends a job's result.
func (r *scripted) report(name, status, output string) {
	r.t.Helper()
	r.say(fmt.Sprintf("REZULTO %s %s %d", name, status, len(output)))
	if output == "" {
		// Kept apart by the manager's pause (see
		// TestManagerKeepsPretaApartFromRicevis), unless this goroutine
		// reads later than that.
		if got := r.hear(); got != "PRETARICEVIS" {
			require.Equal(r.t, "PRETA", got)
			require.Equal(r.t, "RICEVIS", r.hear())
		}
		return
	}
	require.Equal(r.t, "PRETA", r.hear())
	r.say(output)
	require.Equal(r.t, "RICEVIS", r.hear())
}

const okScript = "#!/bin/bash\necho RES:ok\necho hello, world!\n" // 43 bytes

// The captured session of the wire notes, message by message.
func TestManagerSession(t *testing.T) {
	require.Len(t, okScript, 43)
	tm := startManager(t, &Manager{})
	h := tm.submit(t, "sub/okjob", okScript)
	r := join(t, tm.addr, "testhost")
	line, contents := r.take()
	assert.Equal(t, "LABORO sub/okjob .sh 43", line)
	assert.Equal(t, okScript, contents)
	output := "runexp summary: success\n\n" + strings.Repeat("x", 237)
	r.report("sub/okjob", "success", output)

	res, text := result(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	assert.Equal(t, output, text)
	assert.Equal(t, "sub/okjob", res.ID)

	tm.m.Finish(tm.ex)
	r.exchange("PETO", "FINO")
	r.say("FINO ANKAU")
	r.closed()
	select {
	case <-tm.m.Idle():
	case <-time.After(10 * time.Second):
		t.Fatal("the manager still counts the runner")
	}
	assert.Equal(t, 1, tm.logged("runner done"))
	assert.Equal(t, Stats{Done: 1}, tm.m.Stats())
}

func TestManagerFailureAndEmptyPayloads(t *testing.T) {
	tm := startManager(t, &Manager{})
	h := tm.submit(t, "empty", "")
	r := join(t, tm.addr, "h1")
	line, contents := r.take()
	assert.Equal(t, "LABORO empty .sh 0", line)
	assert.Empty(t, contents)
	r.report("empty", "failure", "")
	res, text := result(t, h)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.Equal(t, -1, res.ExitCode, "no header: no exit status")
	assert.Empty(t, text)
	assert.Equal(t, Stats{Runners: 1, Done: 1, Failed: 1}, tm.m.Stats())
}

// A failed job's Result says what its output's header and end say: the
// exit status (this package's runner's header, or the reference's, whose
// status is a wait status) and the output's last 4 KiB after the header,
// where the job's standard error is.
func TestManagerFailureExplained(t *testing.T) {
	ours := "runexp summary: failure\n\nstart: 2026-11-27T10:00:00Z\nend: 2026-11-27T10:00:01Z\ncommand: bash job.sh\nexit status: 4\n\n"
	reference := func(status int) string {
		return "runexp summary: failure\n\nFri Nov 27 10:00:00 UTC 2026 -- [h1] Running a\n> bash /tmp/runexp/a.sh\n" +
			"Fri Nov 27 10:00:01 UTC 2026 -- Finished running\nProgram exited with status " + strconv.Itoa(status) + "\nProgram output follows\n\n"
	}
	long := strings.Repeat("x", 5000) + "\nfatal: the end\n"
	for _, tc := range []struct {
		name, output string
		exit         int
		stderr       string
		err          string
	}{
		{"ours", ours + "partial\nfatal: out of memory\n", 4, "partial\nfatal: out of memory\n", "reported failure"},
		{"ours, RES:failed", strings.Replace(ours, "exit status: 4", "exit status: 0", 1) + "RES:failed\n", 0, "RES:failed\n", "its output says so"},
		{"reference", reference(4<<8) + "RES:failed\n", 4, "RES:failed\n", "reported failure"},
		{"ours, a signal", strings.Replace(ours, "exit status: 4\n", "exit status: -1\nsignal: 9 (killed)\n", 1) + "started\n", -1, "started\n", "reported failure: killed by signal 9 (killed)"},
		{"reference, a signal", reference(9) + "started\n", -1, "started\n", "reported failure: killed by signal 9 (killed)"},
		{"the output's end", ours + long, 4, long[len(long)-outputTail:], "reported failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm := startManager(t, &Manager{})
			h := tm.submit(t, "a", "exit 4")
			r := join(t, tm.addr, "h1")
			r.take()
			r.report("a", "failure", tc.output)
			res, text := result(t, h)
			assert.Equal(t, laboro.StatusFailed, res.Status)
			assert.Equal(t, tc.exit, res.ExitCode)
			assert.Equal(t, tc.stderr, string(res.Stderr))
			assert.ErrorContains(t, res.Err, tc.err)
			assert.Equal(t, tc.output, text, "the output is kept whole")
		})
	}
}

// A person on a terminal ends lines with a newline; the manager accepts it.
func TestManagerAcceptsNewlines(t *testing.T) {
	tm := startManager(t, &Manager{Group: "lab"})
	h := tm.submit(t, "a b/c", "echo hi\n")
	r := dialRunner(t, tm.addr)
	r.exchange("SALUTON; MI term-1\n", "VERSIO 1.3")
	r.exchange("KOMPRENAS\r\n", "ALIGI lab")
	r.say("JES\n")
	r.exchange("PETO\n", "LABORO a b/c .sh 8")
	r.say("PRETA\n")
	assert.Equal(t, "echo hi\n", r.payload(8))
	r.exchange("REZULTO a b/c success 3\n", "PRETA")
	r.exchange("ok\n", "RICEVIS")
	_, text := result(t, h)
	assert.Equal(t, "ok\n", text)
}

// A runner's message that gets no answer (JES; PRETA for an empty job)
// and the runner's next one may reach the manager in one read, as when
// the runner does not pause between them (the reference runner, too, only
// leaves the time it takes to start its threads after JES). The manager
// reads them apart, for each pair that can occur, here sent in one write;
// with a REZULTO whose name is long, the two are more than MaxMessage
// bytes together.
func TestManagerAcceptsCoalescedMessages(t *testing.T) {
	long := strings.Repeat("n", 1005)
	require.Greater(t, len("PRETAREZULTO "+long+" success 3"), MaxMessage+1)
	// hail shakes hands up to ALIGI: the JES is the test's.
	hail := func(t *testing.T, tm *testManager) *scripted {
		r := dialRunner(t, tm.addr)
		r.exchange("SALUTON; MI h1", "VERSIO 1.3")
		r.exchange("KOMPRENAS", "ALIGI __defaulte__")
		return r
	}
	// emptyJob gives r the empty job name, without its PRETA.
	emptyJob := func(t *testing.T, tm *testManager, r *scripted, name string) *laboro.Handle {
		h := tm.submit(t, name, "")
		r.exchange("PETO", "LABORO "+name+" .sh 0")
		return h
	}
	tests := []struct {
		name string
		play func(t *testing.T, tm *testManager)
	}{
		{"JES PETO", func(t *testing.T, tm *testManager) {
			h := tm.submit(t, "a", okScript)
			r := hail(t, tm)
			r.say("JES" + "PETO")
			require.Equal(t, "LABORO a .sh 43", r.hear())
			r.say("PRETA")
			assert.Equal(t, okScript, r.payload(len(okScript)))
			r.report("a", "success", "ok\n")
			_, text := result(t, h)
			assert.Equal(t, "ok\n", text)
		}},
		{"JES FINO ANKAU", func(t *testing.T, tm *testManager) {
			r := hail(t, tm)
			r.say("JES" + "FINO ANKAU")
			r.closed()
			assert.Equal(t, 1, tm.logged("runner done"))
		}},
		{"PRETA PETO", func(t *testing.T, tm *testManager) {
			r := join(t, tm.addr, "h1")
			h := emptyJob(t, tm, r, "empty")
			r.say("PRETA" + "PETO")
			require.Equal(t, "ATENDI", r.hear()) // no other job
			r.report("empty", "success", "ok\n")
			_, text := result(t, h)
			assert.Equal(t, "ok\n", text)
		}},
		{"PRETA REZULTO", func(t *testing.T, tm *testManager) {
			r := join(t, tm.addr, "h1")
			h := emptyJob(t, tm, r, "empty")
			r.say("PRETA" + "REZULTO empty failure 3")
			require.Equal(t, "PRETA", r.hear())
			r.exchange("ok\n", "RICEVIS")
			res, text := result(t, h)
			assert.Equal(t, laboro.StatusFailed, res.Status)
			assert.Equal(t, "ok\n", text)
		}},
		{"PRETA REZULTO of a long name", func(t *testing.T, tm *testManager) {
			r := join(t, tm.addr, "h1")
			h := emptyJob(t, tm, r, long)
			r.say("PRETA" + "REZULTO " + long + " success 3")
			require.Equal(t, "PRETA", r.hear())
			r.exchange("ok\n", "RICEVIS")
			_, text := result(t, h)
			assert.Equal(t, "ok\n", text)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tm := startManager(t, &Manager{})
			tt.play(t, tm)
			assert.Zero(t, tm.logged("dropped"), "a runner was dropped")
		})
	}
}

// A bad hail, a wrong answer in the handshake, a runner that leaves at
// ALIGI (another group) and one that says nothing each lose only their
// connection, with a log line; others are served.
func TestManagerHandshakeErrors(t *testing.T) {
	tm := startManager(t, &Manager{Timeout: 300 * time.Millisecond})
	for _, hail := range []string{"HELLO", "SALUTON; MI bad host", "SALUTON; MI " + strings.Repeat("a", 2000)} {
		r := dialRunner(t, tm.addr)
		r.say(hail)
		r.closed()
	}
	r := dialRunner(t, tm.addr)
	r.exchange("SALUTON; MI h", "VERSIO 1.3")
	r.say("JES")
	r.closed()
	r = dialRunner(t, tm.addr)
	r.exchange("SALUTON; MI h", "VERSIO 1.3")
	r.exchange("KOMPRENAS", "ALIGI __defaulte__")
	r.c.Close() // a runner of another group leaves
	silent := dialRunner(t, tm.addr)
	silent.closed() // after the 300 ms handshake deadline

	h := tm.submit(t, "j", "true\n")
	good := join(t, tm.addr, "good")
	good.take()
	good.report("j", "success", "done")
	res, _ := result(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	require.Eventually(t, func() bool { return tm.logged("refused at the handshake") == 6 }, 5*time.Second, 10*time.Millisecond)
}

// A REZULTO for a job the manager never sent drops that runner, as the
// spec says, and its other jobs go to another runner.
func TestManagerUnknownResult(t *testing.T) {
	tm := startManager(t, &Manager{})
	h := tm.submit(t, "real", "echo real\n")
	bad := join(t, tm.addr, "bad")
	bad.take()
	bad.say("REZULTO invented success 3")
	bad.closed()
	require.Eventually(t, func() bool { return tm.logged("runner dropped") == 1 }, 5*time.Second, 10*time.Millisecond)
	entry := tm.logs.FilterMessageSnippet("runner dropped").All()[0]
	assert.Contains(t, entry.ContextMap()["error"], "result for a job this runner was not sent")

	good := join(t, tm.addr, "good")
	line, _ := good.take()
	assert.Equal(t, "LABORO real .sh 10", line, "the dropped runner's job goes to the next")
	good.report("real", "success", "real\n")
	_, text := result(t, h)
	assert.Equal(t, "real\n", text)
}

// A runner that vanishes mid-LABORO or mid-REZULTO loses nothing: the job
// goes to another runner, and its result is recorded once.
func TestManagerRunnerVanishes(t *testing.T) {
	tm := startManager(t, &Manager{})
	h1 := tm.submitInLine(t, "one", "echo one\n")
	h2 := tm.submitInLine(t, "two", "echo two\n")

	r := join(t, tm.addr, "flaky")
	r.say("PETO")
	assert.Equal(t, "LABORO one .sh 9", r.hear())
	r.c.Close() // gone before PRETA

	r = join(t, tm.addr, "flaky")
	r.take()
	r.take()
	r.exchange("REZULTO one success 100", "PRETA")
	r.say("only half")
	r.c.Close() // gone mid-output

	good := join(t, tm.addr, "good")
	got := map[string]bool{}
	for range 2 {
		line, _ := good.take()
		got[line] = true
	}
	assert.Equal(t, map[string]bool{"LABORO one .sh 9": true, "LABORO two .sh 9": true}, got)
	good.report("two", "success", "two\n")
	good.report("one", "success", "one\n")
	_, text := result(t, h1)
	assert.Equal(t, "one\n", text)
	_, text = result(t, h2)
	assert.Equal(t, "two\n", text)
	assert.Equal(t, 2, tm.m.Stats().Done, "each result once")
	assert.Equal(t, 2, tm.logged("runner dropped"))
}

// FINO while the runner still has jobs out: it reports them (state 5 → 4
// → 5), then says FINO ANKAU. Meanwhile another runner that asks is held
// with ATENDI, since a job may yet come back.
func TestManagerFinoWhileJobsOut(t *testing.T) {
	tm := startManager(t, &Manager{})
	h1 := tm.submitInLine(t, "a", "echo a\n")
	h2 := tm.submitInLine(t, "b", "echo b\n")
	r := join(t, tm.addr, "busy")
	r.take()
	r.take()
	tm.m.Finish(tm.ex)
	other := join(t, tm.addr, "idle")
	other.exchange("PETO", "ATENDI")
	r.exchange("PETO", "FINO")
	r.report("a", "success", "a\n")
	r.exchange("PETO", "FINO") // a PETO in state 5 is answered as in state 2
	r.report("b", "failure", "b\n")
	r.say("FINO ANKAU")
	r.closed()
	other.exchange("PETO", "FINO")
	other.say("FINO ANKAU")
	other.closed()
	res, _ := result(t, h1)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	res, _ = result(t, h2)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	<-tm.m.Idle()
}

// holdRunner runs jobs with the Manager and then holds each result until
// release is closed: the Executor still counts the job as running, as it
// does for a moment after any Run returns.
type holdRunner struct {
	m        *Manager
	returned chan string
	release  chan struct{}
}

func (h holdRunner) Run(ctx context.Context, job laboro.Job) laboro.Result {
	res := h.m.Run(ctx, job)
	h.returned <- job.ID
	<-h.release
	return res
}

// A job whose result has come back is not one to wait for, even before the
// Executor has recorded its end: the runner that sent it is told FINO.
func TestManagerFinoBeforeTheCoreRecordsTheEnd(t *testing.T) {
	m := &Manager{}
	hold := holdRunner{m: m, returned: make(chan string, 1), release: make(chan struct{})}
	tm := startManager(t, m, laboro.WithRunner(hold))
	release := sync.OnceFunc(func() { close(hold.release) })
	t.Cleanup(release) // before the Executor closes, should the test fail
	h := tm.submitInLine(t, "a", "echo a\n")
	r := join(t, tm.addr, "r")
	r.take()
	tm.m.Finish(tm.ex)
	r.report("a", "success", "a\n")
	require.Equal(t, "a", <-hold.returned)
	require.Equal(t, 1, tm.ex.Stats().Running, "the Executor has not recorded the end")
	r.exchange("PETO", "FINO")
	r.say("FINO ANKAU")
	r.closed()
	release()
	res, out := result(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	assert.Equal(t, "a\n", out)
}

// No job now but more may come: ATENDI after IdleWait; a job that arrives
// while a PETO waits is sent at once.
func TestManagerWaitsForJobs(t *testing.T) {
	tm := startManager(t, &Manager{IdleWait: 2 * time.Second})
	r := join(t, tm.addr, "early")
	r.say("PETO")
	time.Sleep(100 * time.Millisecond)
	h := tm.submit(t, "late", "echo\n")
	assert.Equal(t, "LABORO late .sh 5", r.hear())
	r.say("PRETA")
	r.payload(5)
	r.report("late", "success", "\n")
	result(t, h)

	tm.m.IdleWait = 50 * time.Millisecond
	r.exchange("PETO", "ATENDI")
}

// The core's queue applies: with concurrency 1 the second job waits in the
// Executor's buffer, where poll sees it and stop removes it; it never
// reaches a runner.
func TestManagerUnderTheCore(t *testing.T) {
	tm := startManager(t, &Manager{}, laboro.WithConcurrency(1))
	h1 := tm.submit(t, "first", "echo 1\n")
	h2 := tm.submit(t, "second", "echo 2\n")
	require.Eventually(t, func() bool { return tm.m.Stats().Pending == 1 }, 5*time.Second, time.Millisecond)
	queued := tm.ex.Queued()
	require.Len(t, queued, 1)
	assert.Equal(t, "second", queued[0].ID)
	require.NoError(t, tm.ex.Stop("second"))
	res, _ := result(t, h2)
	assert.Equal(t, laboro.StatusStopped, res.Status)

	r := join(t, tm.addr, "h")
	line, _ := r.take()
	assert.Equal(t, "LABORO first .sh 7", line)
	r.report("first", "success", "1\n")
	result(t, h1)
	tm.m.Finish(tm.ex)
	r.exchange("PETO", "FINO")
}

// An output over MaxSize does not cost the runner its session (a job that
// writes too much would otherwise break every runner that takes it, and
// run again forever): the manager reads it all, keeps MaxSize bytes, and
// the job fails with the reason; the runner goes on with the next job.
func TestManagerOutputTooLarge(t *testing.T) {
	tm := startManager(t, &Manager{MaxSize: 1000})
	h := tm.submit(t, "big", "yes\n")
	r := join(t, tm.addr, "h")
	r.take()
	out := strings.Repeat("y\n", 5000) // 10000 bytes
	r.report("big", "success", out)
	res, text := result(t, h)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	require.ErrorIs(t, res.Err, ErrSizeTooLarge)
	assert.ErrorContains(t, res.Err, "the output of 10000 bytes is over the limit of 1000")
	assert.Equal(t, out[:1000], text)
	assert.Equal(t, 1, tm.logged("output over the limit"))

	// The session goes on: the runner's next PETO is answered (no job
	// is left: ATENDI), and its goodbye taken.
	r.exchange("PETO", "ATENDI")
	r.say("FINO ANKAU")
	r.closed()
	assert.Zero(t, tm.logged("runner dropped"))
}

// When the Executor is closed while a job is out, Run returns at once; the
// result that comes later is taken and discarded.
func TestManagerAbandonedJob(t *testing.T) {
	tm := startManager(t, &Manager{})
	h := tm.submit(t, "slow", "sleep 100\n")
	r := join(t, tm.addr, "h")
	r.take()
	require.NoError(t, tm.ex.Close())
	res, _ := result(t, h)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	r.report("slow", "success", "late")
	require.Eventually(t, func() bool { return tm.logged("abandoned job discarded") == 1 }, 5*time.Second, 10*time.Millisecond)
}

// A job cancelled while out at a runner ends at once: runexp cannot tell
// the runner, so its REZULTO comes later and is read and dropped, its
// output removed, and the runner stays connected. A job submitted again
// under the same name does not go to the runner that still runs the old
// one, since a REZULTO could not tell the two apart.
func TestManagerCancelledJob(t *testing.T) {
	tm := startManager(t, &Manager{})
	h := tm.submit(t, "j", "sleep 100\n")
	r := join(t, tm.addr, "h")
	r.take()
	require.NoError(t, tm.ex.Cancel("j"))
	res, _ := result(t, h)
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrCancelled)
	assert.Equal(t, 0, tm.m.Stats().Out, "a cancelled job is no longer awaited")

	again := tm.submit(t, "j", "echo again\n")
	require.Eventually(t, func() bool { return tm.m.Stats().Pending == 1 }, 5*time.Second, time.Millisecond)
	r.exchange("PETO", "ATENDI") // this runner still runs the first j
	r.report("j", "success", "late")
	require.Eventually(t, func() bool { return tm.logged("abandoned job discarded") == 1 }, 5*time.Second, 10*time.Millisecond)
	line, contents := r.take()
	assert.Equal(t, "LABORO j .sh 11", line, "the same connection goes on")
	assert.Equal(t, "echo again\n", contents)
	r.report("j", "success", "again\n")
	res, text := result(t, again)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	assert.Equal(t, "again\n", text, "the late result of the first j is not taken for the second")
	assert.Zero(t, tm.logged("runner dropped"))
	assert.Equal(t, 2, tm.m.Stats().Done)
}

// The Manager leaves Job.Timeout to the Executor: Run by itself does not
// apply it. Through an Executor, the job times out at once, though its
// runner cannot be told, and the late result is dropped.
func TestManagerTimeout(t *testing.T) {
	tm := startManager(t, &Manager{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	direct := NewJob("direct", ".sh", "true\n")
	direct.Timeout = time.Nanosecond
	ran := make(chan laboro.Result, 1)
	go func() { ran <- tm.m.Run(ctx, direct) }()
	r := join(t, tm.addr, "h")
	r.take()
	r.report("direct", "success", "ok")
	res := <-ran
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	res.Output.Close()

	job := NewJob("slow", ".sh", "sleep 100\n")
	job.Timeout = 100 * time.Millisecond
	h, err := tm.ex.Submit(ctx, job)
	require.NoError(t, err)
	r.take()
	res, _ = result(t, h)
	assert.Equal(t, laboro.StatusTimedOut, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrTimeout)
	r.report("slow", "success", "late")
	require.Eventually(t, func() bool { return tm.logged("abandoned job discarded") == 1 }, 5*time.Second, 10*time.Millisecond)
}

// With the ban policy, a runner under 60% success after 10 jobs is told
// ELIRI, and stays banned; its results are still taken.
func TestManagerBans(t *testing.T) {
	tm := startManager(t, &Manager{Policy: BanPolicy{}})
	var hs []*laboro.Handle
	for i := range 11 {
		hs = append(hs, tm.submit(t, fmt.Sprintf("j%d", i), "x\n"))
	}
	r := join(t, tm.addr, "sloppy")
	taken := map[string]bool{} // the Executor starts the 11 in no set order
	for i := range 10 {
		line, _ := r.take()
		name := strings.Fields(line)[1]
		taken[name] = true
		status := "failure"
		if i < 5 {
			status = "success"
		}
		r.report(name, status, "out")
	}
	r.exchange("PETO", "ELIRI")
	r.exchange("PETO", "ELIRI")
	assert.Equal(t, 1, tm.logged("runner banned"))
	var last *laboro.Handle
	for _, h := range hs {
		if taken[h.ID()] {
			result(t, h)
		} else {
			last = h
		}
	}
	good := join(t, tm.addr, "careful")
	line, _ := good.take()
	good.report(strings.Fields(line)[1], "success", "ok")
	result(t, last)
	r.say("FINO ANKAU")
	r.closed()
}

// With the ban policy, a runner with more than 2 failures among its last
// 10 jobs is held (ATENDI) while it has jobs out, and let run again once
// they are back.
func TestManagerHolds(t *testing.T) {
	tm := startManager(t, &Manager{Policy: BanPolicy{}})
	var hs []*laboro.Handle
	for i := range 6 {
		hs = append(hs, tm.submit(t, fmt.Sprintf("j%d", i), "x\n"))
	}
	r := join(t, tm.addr, "shaky")
	for range 3 {
		line, _ := r.take()
		r.report(strings.Fields(line)[1], "failure", "bad")
	}
	line, _ := r.take() // nothing out: the record cannot change by waiting
	r.exchange("PETO", "ATENDI")
	assert.Equal(t, 1, tm.logged("runner on hold"))
	r.report(strings.Fields(line)[1], "success", "ok")
	line, _ = r.take()
	r.report(strings.Fields(line)[1], "success", "ok")
	line, _ = r.take()
	r.report(strings.Fields(line)[1], "success", "ok")
	for _, h := range hs {
		result(t, h)
	}
}

func TestBanPolicy(t *testing.T) {
	outcomes := func(spec string) []Status {
		var s []Status
		for _, c := range spec {
			s = append(s, c == '+')
		}
		return s
	}
	tests := []struct {
		name string
		r    Record
		want Verdict
	}{
		{"new runner", Record{}, Allow},
		{"9 failures of 9", Record{Done: 9, Failed: 9, Recent: outcomes("++-------")}, Allow},
		{"5 of 10 succeeded", Record{Done: 10, Failed: 5, Recent: outcomes("+++++-----")}, Ban},
		{"6 of 10 succeeded", Record{Done: 10, Failed: 4, Recent: outcomes("++++++----"), Out: 1}, Hold},
		{"3 recent failures, jobs out", Record{Done: 20, Failed: 3, Recent: outcomes("+++++++---"), Out: 2}, Hold},
		{"3 recent failures, nothing out", Record{Done: 20, Failed: 3, Recent: outcomes("+++++++---")}, Allow},
		{"2 recent failures", Record{Done: 20, Failed: 2, Recent: outcomes("++++++++--"), Out: 2}, Allow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, BanPolicy{}.Judge(tt.r))
		})
	}
	var r record
	for i := range 13 {
		r.add(i%4 != 0)
	}
	v := r.view("h", 1)
	assert.Equal(t, Record{Host: "h", Done: 13, Failed: 4, Out: 1, Recent: outcomes("-+++-+++-+++-")[3:]}, v, "the last 10, oldest first")
}

func TestManagerValidate(t *testing.T) {
	m := &Manager{}
	assert.NoError(t, m.Validate(NewJob("sub/job", ".py", "print(1)")))
	assert.NoError(t, m.Validate(laboro.Job{ID: "plain", Script: "x", Meta: "the caller's"}), "no Payload: a .sh job; Meta is the caller's")
	for _, job := range []laboro.Job{
		NewJob("", ".sh", "x"),
		NewJob("two\nlines", ".sh", "x"),
		NewJob("name", "sh", "x"),
		NewJob("name", ".s h", "x"),
		{ID: "cmd", Command: "ls"},
		{ID: "meta", Script: "x", Payload: ".sh"}, // a string, not a JobType
	} {
		assert.Error(t, m.Validate(job), "%+v", job)
	}
	ex, err := laboro.New(laboro.WithRunner(m))
	require.NoError(t, err)
	defer ex.Close()
	_, err = ex.Submit(context.Background(), NewJob("x", "sh", ""))
	assert.ErrorIs(t, err, laboro.ErrInvalidJob)
}

// A Manager with an allow-list closes, before a word is said, a connection
// from an address not on it, and serves one from an address on it.
func TestManagerAllowList(t *testing.T) {
	tm := startManager(t, &Manager{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, IdleWait: time.Minute})
	h := tm.submit(t, "a", okScript)

	stranger := dialRunner(t, tm.addr) // from 127.0.0.1
	stranger.say("SALUTON; MI thief")
	stranger.closed()
	assert.Equal(t, 1, tm.logged("the address is not allowed"))

	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c, err := d.Dial("tcp", tm.addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	r := &scripted{t, c}
	r.exchange("SALUTON; MI h1", "VERSIO 1.3")
	r.exchange("KOMPRENAS", "ALIGI __defaulte__")
	r.say("JES")
	laboro, _ := r.take()
	assert.Equal(t, "LABORO a .sh 43", laboro)
	r.report("a", "success", "ok\n")
	_, text := result(t, h)
	assert.Equal(t, "ok\n", text)
}

// A job whose runners all vanish while they have it fails once it has
// been handed out MaxAttempts times, instead of going round them forever.
func TestManagerMaxAttempts(t *testing.T) {
	tm := startManager(t, &Manager{MaxAttempts: 2, IdleWait: time.Minute})
	h := tm.submit(t, "deadly", "kill -9 $PPID\n")
	for range 2 {
		r := join(t, tm.addr, "h")
		r.take()
		r.c.Close() // the runner died with the job
	}
	res, _ := result(t, h)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	require.ErrorIs(t, res.Err, transport.ErrAttempts)
}

// Beyond MaxConns, a connection is closed before a word is said; once
// one ends, another is served.
func TestManagerMaxConns(t *testing.T) {
	tm := startManager(t, &Manager{MaxConns: 1, Timeout: time.Minute, IdleWait: time.Minute})
	first := dialRunner(t, tm.addr)
	require.Eventually(t, func() bool { return tm.m.conns.Load() == 1 }, 10*time.Second, time.Millisecond)
	second := dialRunner(t, tm.addr)
	second.say("SALUTON; MI h2")
	second.closed()
	assert.Equal(t, 1, tm.logged("too many connections"))
	first.c.Close()
	require.Eventually(t, func() bool { return tm.m.conns.Load() == 0 }, 10*time.Second, time.Millisecond)
	h := tm.submit(t, "a", okScript)
	r := join(t, tm.addr, "h3")
	r.take()
	r.report("a", "success", "ok\n")
	_, text := result(t, h)
	assert.Equal(t, "ok\n", text)
}

// A job that comes while a runner's PETO waits for one reaches it at
// once, whenever it comes: the PETO takes its wake-up before it looks at
// the line, so a job added in between is not missed (it then waited out
// IdleWait, and the runner was told ATENDI with a job in line). Run many
// times, this failed about once in twenty before.
func TestManagerJobWhilePetoWaits(t *testing.T) {
	for range 20 {
		tm := startManager(t, &Manager{IdleWait: time.Minute})
		r := join(t, tm.addr, "h")
		h := tm.submit(t, "first", okScript)
		r.take()
		r.report("first", "success", "ok\n")
		result(t, h)
		r.say("PETO")
		h = tm.submit(t, "next", okScript)
		require.Equal(t, "LABORO next .sh 43", r.hear(), "dispatcher: %+v", tm.m.d.Stats())
		r.say("PRETA")
		r.payload(len(okScript))
		r.report("next", "success", "ok\n")
		result(t, h)
	}
}

// A runner left idle takes a new job as soon as the manager has one: its
// workers' PETOs wait at the manager (IdleWait) and, told ATENDI after that
// wait, they ask again at once rather than holding for HoldWait (an hour
// here).
func TestIdleRunnerTakesNewJobAtOnce(t *testing.T) {
	tm := startManager(t, &Manager{IdleWait: waitedAnswer + 50*time.Millisecond})
	core, logs := observer.New(zap.DebugLevel)
	r := &Runner{Addr: tm.addr, Name: "idle", Workers: 2, HoldWait: time.Hour, Timeout: 2 * time.Second,
		Dir: t.TempDir(), Logger: zap.New(core)}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-ran
	})
	// Both workers were told ATENDI after a wait at least once.
	require.Eventually(t, func() bool {
		return logs.FilterMessageSnippet("ATENDI after a wait").Len() >= 2
	}, 10*time.Second, time.Millisecond)
	res, out := result(t, tm.submit(t, "late", "echo RES:ok\n"))
	require.Equal(t, laboro.StatusSucceeded, res.Status, res.Err)
	assert.Contains(t, out, "RES:ok")
}

// A peer that greets with host name after name does not grow the
// Manager's records without end: beyond maxRecords, a host with no runner
// connected is forgotten; a connected one's record stays.
func TestManagerBoundsTheHostsItRecords(t *testing.T) {
	defer func(n int) { maxRecords = n }(maxRecords)
	maxRecords = 4
	tm := startManager(t, &Manager{})
	hosts := func() (n int, has func(string) bool) {
		tm.m.mu.Lock()
		defer tm.m.mu.Unlock()
		known := map[string]bool{}
		for h := range tm.m.records {
			known[h] = true
		}
		return len(known), func(h string) bool { return known[h] }
	}
	recorded := func(host string) {
		t.Helper()
		require.Eventually(t, func() bool { _, has := hosts(); return has(host) }, 10*time.Second, time.Millisecond,
			"a record of %s", host)
	}
	kept := join(t, tm.addr, "kept")
	recorded("kept")
	for i := range 20 {
		host := fmt.Sprintf("h%d", i)
		r := join(t, tm.addr, host)
		recorded(host)
		n, has := hosts()
		require.LessOrEqual(t, n, maxRecords)
		require.True(t, has("kept"), "the record of a connected host")
		r.c.Close()
		require.Eventually(t, func() bool {
			tm.m.mu.Lock()
			defer tm.m.mu.Unlock()
			return len(tm.m.runners) == 1
		}, 10*time.Second, time.Millisecond, "%s gone", host)
	}
	kept.c.Close()
}
