package runexp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/freeport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The job of the captured session: 43 bytes, like the wire notes' okjob.
const runnerOKScript = "#!/bin/bash\necho RES:ok\necho hello, world!\n"

// fakeWait bounds every wait of the fake manager and of the tests: far
// beyond what any step takes, so it only turns a hang into a failure.
const fakeWait = 10 * time.Second

// fakeManager is a scripted manager that speaks as the reference one
// does: it reads each message with a single Read into a 1025-byte buffer
// and writes each with a single Write, without a terminator.
type fakeManager struct {
	ln *net.TCPListener
}

func newFakeManager(t *testing.T) *fakeManager {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return &fakeManager{ln: ln.(*net.TCPListener)}
}

func (m *fakeManager) addr() string { return m.ln.Addr().String() }

// accept takes the runner's connection.
func (m *fakeManager) accept(t *testing.T) *fakePeer {
	t.Helper()
	m.ln.SetDeadline(time.Now().Add(fakeWait))
	c, err := m.ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &fakePeer{t: t, c: c}
}

// fakePeer is the manager's end of one runner's connection. Its methods
// call t.Fatal, so they run in the test's goroutine only.
type fakePeer struct {
	t    *testing.T
	c    net.Conn
	buf  [MaxMessage + 1]byte
	rest string // a PETO read together with JES
}

// hear reads one message with one Read.
func (p *fakePeer) hear() string {
	p.t.Helper()
	if p.rest != "" {
		m := p.rest
		p.rest = ""
		return m
	}
	p.c.SetReadDeadline(time.Now().Add(fakeWait))
	n, err := p.c.Read(p.buf[:])
	require.NoError(p.t, err, "reading a message")
	return string(p.buf[:n])
}

func (p *fakePeer) expect(want string) {
	p.t.Helper()
	require.Equal(p.t, want, p.hear())
}

func (p *fakePeer) say(msg string) {
	p.t.Helper()
	p.c.SetWriteDeadline(time.Now().Add(fakeWait))
	_, err := p.c.Write([]byte(msg))
	require.NoError(p.t, err)
}

func (p *fakePeer) payload(n int) string {
	p.t.Helper()
	b := make([]byte, n)
	p.c.SetReadDeadline(time.Now().Add(fakeWait))
	_, err := io.ReadFull(p.c, b)
	require.NoError(p.t, err, "reading a payload of %d bytes", n)
	return string(b)
}

// closed checks that the runner closed the connection without saying more.
func (p *fakePeer) closed() {
	p.t.Helper()
	p.c.SetReadDeadline(time.Now().Add(fakeWait))
	n, err := p.c.Read(p.buf[:])
	require.Error(p.t, err, "the runner sent %q instead of closing", p.buf[:n])
	require.Zero(p.t, n)
	require.NotErrorIs(p.t, err, os.ErrDeadlineExceeded, "the runner did not close the connection")
}

// silent checks that the runner says nothing for d: a lower bound only.
func (p *fakePeer) silent(d time.Duration) {
	p.t.Helper()
	p.c.SetReadDeadline(time.Now().Add(d))
	n, err := p.c.Read(p.buf[:])
	require.ErrorIs(p.t, err, os.ErrDeadlineExceeded, "the runner sent %q", p.buf[:n])
}

// handshake plays the manager's part of state 1 with the reference's
// words.
func (p *fakePeer) handshake() {
	p.t.Helper()
	p.expect("SALUTON; MI testhost")
	p.say("VERSIO 1.3")
	p.expect("KOMPRENAS")
	p.say("ALIGI __defaulte__")
	p.joined()
}

// joined reads the JES. The runner's first PETO follows it unanswered,
// kept apart by the pause (see TestRunnerKeepsUnansweredMessagesApart);
// a test goroutine descheduled for longer may still read both, so the
// PETO is then kept for the next hear.
func (p *fakePeer) joined() {
	p.t.Helper()
	m := p.hear()
	if m == "JESPETO" {
		m, p.rest = "JES", "PETO"
	}
	require.Equal(p.t, "JES", m)
}

// give answers a PETO with a job and sends its contents.
func (p *fakePeer) give(name, typ, contents string) {
	p.t.Helper()
	p.expect("PETO")
	p.say(fmt.Sprintf("LABORO %s %s %d", name, typ, len(contents)))
	p.expect("PRETA")
	p.say(contents)
}

var rezultoRE = regexp.MustCompile(`^REZULTO (.+) (success|failure) (\d+)$`)

// collect receives a result and returns its status and output.
func (p *fakePeer) collect(name string) (status, output string) {
	p.t.Helper()
	got, status, output := p.receive(p.hear())
	require.Equal(p.t, name, got)
	return status, output
}

// receive takes the result that msg, a REZULTO, announces.
func (p *fakePeer) receive(msg string) (name, status, output string) {
	p.t.Helper()
	m := rezultoRE.FindStringSubmatch(msg)
	require.NotNil(p.t, m, "expected REZULTO, got %q", msg)
	size, err := strconv.Atoi(m[3])
	require.NoError(p.t, err)
	p.say("PRETA")
	output = p.payload(size)
	p.say("RICEVIS")
	return m[1], m[2], output
}

// finish answers a PETO with FINO and expects the goodbye.
func (p *fakePeer) finish() {
	p.t.Helper()
	p.expect("PETO")
	p.say("FINO")
	p.expect("FINO ANKAU")
	p.closed()
}

// runnerRun is a Run in progress.
type runnerRun struct {
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// launchRunner starts r.Run; the test ends only once it has returned.
func launchRunner(t *testing.T, r *Runner) *runnerRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	x := &runnerRun{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(x.done)
		x.err = r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-x.done:
		case <-time.After(fakeWait):
			t.Error("Run did not return")
		}
	})
	return x
}

func (x *runnerRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-x.done:
		return x.err
	case <-time.After(fakeWait):
		t.Fatal("Run did not return")
		return nil
	}
}

// testRunner is a one-worker Runner for m, with short waits, writing to
// its own directory.
func testRunner(t *testing.T, m *fakeManager) *Runner {
	return &Runner{
		Addr:     m.addr(),
		Name:     "testhost",
		Workers:  1,
		HoldWait: 50 * time.Millisecond,
		Timeout:  2 * time.Second,
		Dir:      t.TempDir(),
	}
}

// startHeldRunner runs a Runner of n workers that would wait an hour after
// an ATENDI, past its handshake with a fake manager.
func startHeldRunner(t *testing.T, n int) (*fakePeer, *runnerRun) {
	m := newFakeManager(t)
	r := testRunner(t, m)
	r.Workers, r.HoldWait = n, time.Hour
	x := launchRunner(t, r)
	p := m.accept(t)
	p.handshake()
	return p, x
}

func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Empty(t, names, "files left in %s", dir)
}

// blockingScript waits until the returned release is called, then prints
// its name.
func blockingScript(t *testing.T, name string) (script string, release func()) {
	gate := filepath.Join(t.TempDir(), "go")
	script = fmt.Sprintf("while [ ! -e %s ]; do sleep 0.01; done\necho %s released\n", gate, name)
	return script, func() { require.NoError(t, os.WriteFile(gate, nil, 0o600)) }
}

var headerRE = regexp.MustCompile(`^runexp summary: (success|failure)\n\n` +
	`start: (\S+)\nend: (\S+)\ncommand: (.*)\nexit status: (-?\d+)\n(?:signal: (.*)\n)?\n`)

type runnerHeader struct {
	status, command string
	signal          string // "" when no signal ended the process
	start, end      time.Time
	exit            int
	output          string // what follows the header
}

func parseHeader(t *testing.T, body string) runnerHeader {
	t.Helper()
	m := headerRE.FindStringSubmatch(body)
	require.NotNil(t, m, "no header in %q", body)
	h := runnerHeader{status: m[1], command: m[4], signal: m[6], output: body[len(m[0]):]}
	var err error
	for i, tm := range []*time.Time{&h.start, &h.end} {
		require.True(t, strings.HasSuffix(m[2+i], "Z"), "%q is not UTC", m[2+i])
		*tm, err = time.Parse(time.RFC3339Nano, m[2+i])
		require.NoError(t, err)
	}
	require.False(t, h.end.Before(h.start))
	h.exit, err = strconv.Atoi(m[5])
	require.NoError(t, err)
	return h
}

func TestRunnerCapturedSession(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the runner's own directory goes
	m := newFakeManager(t)
	r := testRunner(t, m)
	r.Dir = ""
	x := launchRunner(t, r)
	p := m.accept(t)

	p.handshake()
	require.Len(t, runnerOKScript, 43)
	p.expect("PETO")
	p.say("LABORO sub/okjob .sh 43")
	p.expect("PRETA")
	p.say(runnerOKScript)
	msg := p.hear()
	require.Regexp(t, `^REZULTO sub/okjob success \d+$`, msg)
	size, err := strconv.Atoi(msg[strings.LastIndexByte(msg, ' ')+1:])
	require.NoError(t, err)
	p.say("PRETA")
	body := p.payload(size)
	p.say("RICEVIS")
	p.finish()
	require.NoError(t, x.wait(t))

	assert.True(t, strings.HasPrefix(body, "runexp summary: success\n\nstart: "), "%q", body)
	h := parseHeader(t, body)
	assert.Equal(t, "success", h.status)
	assert.Equal(t, 0, h.exit)
	assert.Equal(t, "RES:ok\nhello, world!\n", h.output)
	// The script ran from a file of the runner's directory, named after
	// the job without its folder, with the type's extension.
	assert.Regexp(t, `^bash `+regexp.QuoteMeta(tmp)+`/runexp-runner-[^/]+/job-okjob-[^/]*\.sh$`, h.command)
	requireEmptyDir(t, tmp)
}

func TestRunnerStatusRules(t *testing.T) {
	tests := []struct {
		name, script  string
		useExitStatus bool
		want          string
		exit          int
		output        string
		signal        string
	}{
		{"RES:failed", "echo start\necho RES:failed\n", false, "failure", 0, "start\nRES:failed\n", ""},
		{"RES:failed exit 0 by exit status", "echo RES:failed\nexit 0\n", true, "success", 0, "RES:failed\n", ""},
		{"exit 3 by exit status", "echo RES:ok\nexit 3\n", true, "failure", 3, "RES:ok\n", ""},
		{"exit 3 by output", "echo RES:ok\nexit 3\n", false, "success", 3, "RES:ok\n", ""},
		{"RES:failed not at a line's start", "echo 'x RES:failed'\n", false, "success", 0, "x RES:failed\n", ""},
		{"stderr merged", "echo out\necho RES:failed >&2\n", false, "failure", 0, "out\nRES:failed\n", ""},
		{"killed by a signal", "echo RES:ok\nkill -9 $$\n", true, "failure", -1, "RES:ok\n", "9 (killed)"},
		{"killed by a signal, by output", "echo RES:ok\nkill -SEGV $$\n", false, "success", -1, "RES:ok\n", "11 (segmentation fault)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeManager(t)
			r := testRunner(t, m)
			r.UseExitStatus = tc.useExitStatus
			x := launchRunner(t, r)
			p := m.accept(t)
			p.handshake()
			p.give("a/job", ".sh", tc.script)
			status, body := p.collect("a/job")
			p.finish()
			require.NoError(t, x.wait(t))
			assert.Equal(t, tc.want, status)
			h := parseHeader(t, body)
			assert.Equal(t, tc.want, h.status)
			assert.Equal(t, tc.exit, h.exit)
			assert.Equal(t, tc.signal, h.signal, "the signal that ended it")
			assert.Equal(t, tc.output, h.output)
			requireEmptyDir(t, r.Dir)
		})
	}
}

// Every log line about a job names it as the manager does, its own lines
// and the local Executor's alike.
func TestRunnerLogsNameTheJob(t *testing.T) {
	m := newFakeManager(t)
	r := testRunner(t, m)
	core, logs := observer.New(zap.DebugLevel)
	r.Logger, r.UseExitStatus = zap.New(core), true
	x := launchRunner(t, r)
	p := m.accept(t)
	p.handshake()
	p.give("sweep/a-7", ".sh", "echo why >&2\nexit 4\n")
	status, _ := p.collect("sweep/a-7")
	p.finish()
	require.NoError(t, x.wait(t))
	assert.Equal(t, "failure", status)
	failed := logs.FilterMessage("job failed").All()
	require.Len(t, failed, 1)
	assert.Equal(t, "sweep/a-7", failed[0].ContextMap()["job"])
	for _, e := range logs.FilterFieldKey("job").All() {
		assert.Equal(t, "sweep/a-7", e.ContextMap()["job"], "%q", e.Message)
	}
}

// The runner's log gives one verdict a job, runexp's: under the
// reference's rule a job that exits 1 without a RES:failed line
// succeeded, and no line says it failed (the local Executor's own line
// did); one whose output says RES:failed, exiting 0, failed, and its line
// says why and shows the end of its output.
func TestRunnerLogsOneVerdict(t *testing.T) {
	m := newFakeManager(t)
	r := testRunner(t, m)
	core, logs := observer.New(zap.DebugLevel)
	r.Logger = zap.New(core)
	x := launchRunner(t, r)
	p := m.accept(t)
	p.handshake()
	p.give("b/exits-1", ".sh", "echo doing things\nexit 1\n")
	status, _ := p.collect("b/exits-1")
	assert.Equal(t, "success", status)
	p.give("b/says-failed", ".sh", "echo RES:failed\necho the disk is full >&2\n")
	status, _ = p.collect("b/says-failed")
	assert.Equal(t, "failure", status)
	p.finish()
	require.NoError(t, x.wait(t))

	failed := logs.FilterMessage("job failed").All()
	require.Len(t, failed, 1, "one failure line, the failed job's")
	fields := failed[0].ContextMap()
	assert.Equal(t, "b/says-failed", fields["job"])
	assert.Equal(t, "its output reports a failure (RES:failed)", fields["error"])
	assert.Equal(t, []any{"bash", "b/says-failed.sh"}, fields["command"], "the script by the job's name, not its temporary file")
	assert.Contains(t, fields["stderr"], "the disk is full")
	finished := logs.FilterMessage("job finished").All()
	require.Len(t, finished, 1)
	assert.Equal(t, "b/exits-1", finished[0].ContextMap()["job"])
	assert.EqualValues(t, 1, finished[0].ContextMap()["exit"])
}

func TestRunnerUnknownType(t *testing.T) {
	m := newFakeManager(t)
	r := testRunner(t, m)
	x := launchRunner(t, r)
	p := m.accept(t)
	p.handshake()
	p.give("py/job", ".py", "print('hello')\n")
	status, body := p.collect("py/job")
	p.finish()
	require.NoError(t, x.wait(t))
	assert.Equal(t, "failure", status)
	h := parseHeader(t, body)
	assert.Equal(t, -1, h.exit)
	assert.Contains(t, h.output, "no interpreter for type .py")
	requireEmptyDir(t, r.Dir)
}

func TestRunnerInterpreters(t *testing.T) {
	m := newFakeManager(t)
	r := testRunner(t, m)
	r.Interpreters = map[string][]string{".x": {"sh", "-e"}}
	x := launchRunner(t, r)
	p := m.accept(t)
	p.handshake()
	p.give("j", ".x", "echo from sh\nfalse\necho not reached\n")
	_, body := p.collect("j")
	p.finish()
	require.NoError(t, x.wait(t))
	h := parseHeader(t, body)
	assert.Regexp(t, `^sh -e .*/job-j-[^/]*\.x$`, h.command)
	assert.Equal(t, "from sh\n", h.output)
	assert.Equal(t, 1, h.exit)
}

// Workers share the connection: after FINO to one of them, the other
// still reports its job, and only then is FINO ANKAU said, once.
func TestRunnerFinoWhileJobOut(t *testing.T) {
	m := newFakeManager(t)
	r := testRunner(t, m)
	r.Workers = 2
	x := launchRunner(t, r)
	p := m.accept(t)
	p.handshake()
	script, release := blockingScript(t, "long")
	p.give("long", ".sh", script)
	p.expect("PETO")
	p.say("FINO")
	p.silent(100 * time.Millisecond)
	release()
	status, body := p.collect("long")
	assert.Equal(t, "success", status)
	assert.Equal(t, "long released\n", parseHeader(t, body).output)
	p.expect("FINO ANKAU")
	p.closed()
	require.NoError(t, x.wait(t))
	requireEmptyDir(t, r.Dir)
}

// ELIRI raises MASTERSTOP: no worker asks again, running jobs report.
func TestRunnerBanned(t *testing.T) {
	m := newFakeManager(t)
	r := testRunner(t, m)
	r.Workers = 3
	x := launchRunner(t, r)
	p := m.accept(t)
	p.handshake()
	script, release := blockingScript(t, "out")
	p.give("out", ".sh", script)
	p.expect("PETO")
	p.say("ELIRI")
	p.silent(100 * time.Millisecond)
	release()
	status, _ := p.collect("out")
	assert.Equal(t, "success", status)
	p.expect("FINO ANKAU")
	p.closed()
	require.ErrorIs(t, x.wait(t), ErrBanned)
	requireEmptyDir(t, r.Dir)
}

func TestRunnerOnHold(t *testing.T) {
	m := newFakeManager(t)
	r := testRunner(t, m)
	x := launchRunner(t, r)
	p := m.accept(t)
	p.handshake()
	for range 2 {
		p.expect("PETO")
		p.say("ATENDI")
		held := time.Now()
		p.give("j", ".sh", "echo hi\n")
		assert.GreaterOrEqual(t, time.Since(held), r.HoldWait, "PETO came before HoldWait")
		status, _ := p.collect("j")
		assert.Equal(t, "success", status)
	}
	p.finish()
	require.NoError(t, x.wait(t))
}

// A worker told ATENDI while the manager had nothing for it asks again as
// soon as another worker of its runner reports a result or receives a job,
// not after HoldWait: otherwise a runner idle for a moment would run one
// job at a time, for up to HoldWait, once jobs came again.
func TestRunnerHeldWorkersResume(t *testing.T) {
	p, x := startHeldRunner(t, 2)

	first, release := blockingScript(t, "a")
	p.give("a", ".sh", first)
	p.expect("PETO") // the second worker
	p.say("ATENDI")
	release()
	status, out := p.collect("a")
	require.Equal(t, "success", status)
	require.Contains(t, out, "a released")

	// Both workers ask now: the one that ran a, and the held one, woken
	// by a's result (an hour before its HoldWait).
	both, releaseBoth := blockingScript(t, "bc")
	p.give("b", ".sh", both)
	p.give("c", ".sh", both)
	releaseBoth()
	got := map[string]string{}
	for len(got) < 2 {
		msg := p.hear()
		if msg == "PETO" { // the first to report asks again
			p.say("ATENDI")
			continue
		}
		name, status, _ := p.receive(msg)
		got[name] = status
	}
	require.Equal(t, map[string]string{"b": "success", "c": "success"}, got)
	p.finish()
	require.NoError(t, x.wait(t))
}

// An ATENDI that came after the manager held the PETO while it waited for
// work is followed by another PETO at once, not after HoldWait: an idle
// runner takes a new job as soon as the manager has one.
func TestRunnerAsksAgainAfterWaitedAtendi(t *testing.T) {
	p, x := startHeldRunner(t, 1)
	p.expect("PETO")
	time.Sleep(waitedAnswer + 50*time.Millisecond) // a manager waiting for work
	p.say("ATENDI")
	p.give("j", ".sh", "echo RES:ok\n") // an hour before HoldWait
	status, _ := p.collect("j")
	assert.Equal(t, "success", status)
	p.finish()
	require.NoError(t, x.wait(t))
}

// A worker told ATENDI at once while another worker of its runner has a
// job out asks again within a second, not after HoldWait: a job that
// comes next does not wait an hour for a free worker.
func TestRunnerBusyHoldIsShort(t *testing.T) {
	p, x := startHeldRunner(t, 2)
	long, release := blockingScript(t, "long")
	p.give("long", ".sh", long)
	p.expect("PETO") // the other worker, while long runs
	p.say("ATENDI")
	p.give("next", ".sh", "echo RES:ok\n") // an hour before HoldWait; long still runs
	status, _ := p.collect("next")
	assert.Equal(t, "success", status)
	p.expect("PETO")
	p.say("ATENDI")
	release()
	status, _ = p.collect("long")
	assert.Equal(t, "success", status)
	p.finish()
	require.NoError(t, x.wait(t))
}

// A runner on hold stops waiting when its context ends.
func TestRunnerOnHoldCancelled(t *testing.T) {
	p, x := startHeldRunner(t, 1)
	p.expect("PETO")
	p.say("ATENDI")
	p.silent(50 * time.Millisecond)
	x.cancel()
	p.expect("FINO ANKAU")
	p.closed()
	require.ErrorIs(t, x.wait(t), context.Canceled)
}

func TestRunnerHandshakeRefusals(t *testing.T) {
	t.Run("group", func(t *testing.T) {
		m := newFakeManager(t)
		x := launchRunner(t, testRunner(t, m))
		p := m.accept(t)
		p.expect("SALUTON; MI testhost")
		p.say("VERSIO 1.3")
		p.expect("KOMPRENAS")
		p.say("ALIGI other")
		p.closed()
		require.ErrorIs(t, x.wait(t), ErrGroupMismatch)
	})
	t.Run("own group", func(t *testing.T) {
		m := newFakeManager(t)
		r := testRunner(t, m)
		r.Group = "other"
		x := launchRunner(t, r)
		p := m.accept(t)
		p.expect("SALUTON; MI testhost")
		p.say("VERSIO 1.3")
		p.expect("KOMPRENAS")
		p.say("ALIGI other")
		p.joined()
		p.finish()
		require.NoError(t, x.wait(t))
	})
	t.Run("version", func(t *testing.T) {
		m := newFakeManager(t)
		x := launchRunner(t, testRunner(t, m))
		p := m.accept(t)
		p.expect("SALUTON; MI testhost")
		p.say("VERSIO 2.0")
		p.closed()
		require.ErrorIs(t, x.wait(t), ErrVersionMismatch)
	})
	t.Run("garbage", func(t *testing.T) {
		m := newFakeManager(t)
		x := launchRunner(t, testRunner(t, m))
		p := m.accept(t)
		p.expect("SALUTON; MI testhost")
		p.say("ALIGI __defaulte__")
		p.closed()
		var pe *ProtocolError
		require.ErrorAs(t, x.wait(t), &pe)
	})
	t.Run("silent manager", func(t *testing.T) {
		m := newFakeManager(t)
		r := testRunner(t, m)
		r.Timeout = 100 * time.Millisecond
		x := launchRunner(t, r)
		p := m.accept(t)
		p.expect("SALUTON; MI testhost")
		require.ErrorIs(t, x.wait(t), os.ErrDeadlineExceeded)
		p.closed()
	})
	t.Run("cancelled", func(t *testing.T) {
		m := newFakeManager(t)
		r := testRunner(t, m)
		r.Timeout = time.Hour
		x := launchRunner(t, r)
		p := m.accept(t)
		p.expect("SALUTON; MI testhost")
		x.cancel()
		require.ErrorIs(t, x.wait(t), context.Canceled)
		p.closed()
	})
}

func TestRunnerAcceptsNewlines(t *testing.T) {
	m := newFakeManager(t)
	r := testRunner(t, m)
	x := launchRunner(t, r)
	p := m.accept(t)
	p.expect("SALUTON; MI testhost")
	p.say("VERSIO 1.3\n")
	p.expect("KOMPRENAS")
	p.say("ALIGI __defaulte__\r\n")
	p.joined()
	p.expect("PETO")
	p.say("LABORO nl .sh 8\n")
	p.expect("PRETA")
	p.say("echo nl\n")
	msg := p.hear()
	require.Regexp(t, `^REZULTO nl success \d+$`, msg)
	size, _ := strconv.Atoi(msg[strings.LastIndexByte(msg, ' ')+1:])
	p.say("PRETA\n")
	assert.Equal(t, "nl\n", parseHeader(t, p.payload(size)).output)
	p.say("RICEVIS\r\n")
	p.expect("PETO")
	p.say("FINO\n")
	p.expect("FINO ANKAU")
	p.closed()
	require.NoError(t, x.wait(t))
}

// A manager that vanishes breaks the session at once: the running jobs
// are killed, nothing is left behind.
func TestRunnerManagerVanishes(t *testing.T) {
	t.Run("mid-LABORO", func(t *testing.T) {
		m := newFakeManager(t)
		r := testRunner(t, m)
		r.Workers = 2
		r.Timeout = time.Minute // the end must not come from a deadline
		x := launchRunner(t, r)
		p := m.accept(t)
		p.handshake()
		p.give("sleeper", ".sh", "sleep 60\n")
		p.expect("PETO")
		p.say("LABORO half .sh 100")
		p.expect("PRETA")
		p.say(strings.Repeat("#", 50))
		p.c.Close()
		err := x.wait(t)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		requireEmptyDir(t, r.Dir)
	})
	t.Run("mid-REZULTO", func(t *testing.T) {
		m := newFakeManager(t)
		r := testRunner(t, m)
		r.Timeout = time.Minute
		x := launchRunner(t, r)
		p := m.accept(t)
		p.handshake()
		p.give("j", ".sh", "echo hi\n")
		require.Regexp(t, `^REZULTO j success \d+$`, p.hear())
		p.c.Close()
		require.ErrorIs(t, x.wait(t), io.EOF)
		requireEmptyDir(t, r.Dir)
	})
	t.Run("mid-output", func(t *testing.T) {
		m := newFakeManager(t)
		r := testRunner(t, m)
		r.Timeout = time.Minute
		x := launchRunner(t, r)
		p := m.accept(t)
		p.handshake()
		// More output than the socket buffers hold, so that the
		// runner is still writing when the manager leaves.
		p.give("big", ".sh", "head -c 50000000 /dev/zero\n")
		require.Regexp(t, `^REZULTO big success \d+$`, p.hear())
		p.say("PRETA")
		p.payload(1000)
		p.c.Close()
		require.Error(t, x.wait(t))
		requireEmptyDir(t, r.Dir)
	})
}

// longScript writes its shell's pid and its child's (a sleep of 300 s)
// to a file, then waits for the child.
func longScript(t *testing.T, name string) (script, pidFile string) {
	pidFile = filepath.Join(t.TempDir(), name+".pids")
	return fmt.Sprintf("sleep 300 &\necho $$ $! > %[1]s.tmp\nmv %[1]s.tmp %[1]s\nwait\n", pidFile), pidFile
}

// startedPids waits for a long script's pid file and returns its pids.
func startedPids(t *testing.T, pidFile string) []int {
	t.Helper()
	var b []byte
	require.Eventually(t, func() bool {
		var err error
		b, err = os.ReadFile(pidFile)
		return err == nil
	}, fakeWait, 5*time.Millisecond, "the job did not start")
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	require.Len(t, pids, 2)
	return pids
}

// requireGone checks that none of pids runs any more (gone, or a zombie).
func requireGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		require.Eventually(t, func() bool {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				return true
			}
			fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			return len(fields) > 0 && fields[0] == "Z"
		}, fakeWait, 5*time.Millisecond, "process %d of a job still runs", pid)
	}
}

// A manager that goes away while every worker runs a job, so that none
// talks to it, is seen at once: the jobs are killed with their process
// groups rather than left running for nobody; so are they when it speaks
// out of turn.
func TestRunnerManagerGoneWhileJobsRun(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(p *fakePeer)
		check func(t *testing.T, err error)
	}{
		{"closed", func(p *fakePeer) { p.c.Close() }, func(t *testing.T, err error) {
			require.ErrorIs(t, err, io.EOF)
		}},
		{"out of turn", func(p *fakePeer) { p.say("FINO") }, func(t *testing.T, err error) {
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeManager(t)
			r := testRunner(t, m)
			r.Workers = 2
			r.Timeout = time.Minute // the end must not come from a deadline
			x := launchRunner(t, r)
			p := m.accept(t)
			p.handshake()
			a, aPids := longScript(t, "a")
			b, bPids := longScript(t, "b")
			p.give("a", ".sh", a)
			p.give("b", ".sh", b)
			pids := append(startedPids(t, aPids), startedPids(t, bPids)...)
			p.silent(20 * time.Millisecond) // both workers run: nobody talks
			tc.leave(p)
			tc.check(t, x.wait(t))
			requireGone(t, pids)
			requireEmptyDir(t, r.Dir)
		})
	}
}

// RunDrain: when drain ends, no job is asked for and the running one goes
// on; when ctx ends, the runner leaves at once without a goodbye, and the
// running job is killed with its process group.
func TestRunnerRunDrainStopsAtOnce(t *testing.T) {
	m := newFakeManager(t)
	r := testRunner(t, m)
	r.Workers = 2
	drain, stopAsking := context.WithCancel(context.Background())
	defer stopAsking()
	ctx, quit := context.WithCancel(context.Background())
	defer quit()
	done := make(chan error, 1)
	go func() { done <- r.RunDrain(ctx, drain) }()
	p := m.accept(t)
	p.handshake()
	script, pidFile := longScript(t, "j")
	p.give("j", ".sh", script)
	pids := startedPids(t, pidFile)
	p.expect("PETO") // the other worker
	stopAsking()
	p.say("ATENDI")
	p.silent(100 * time.Millisecond) // it does not ask again (HoldWait is 50 ms)
	quit()
	p.closed()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(fakeWait):
		t.Fatal("RunDrain did not return")
	}
	requireGone(t, pids)
	requireEmptyDir(t, r.Dir)
}

func TestRunnerBadManager(t *testing.T) {
	tests := []struct {
		name, answer string
		check        func(t *testing.T, err error)
	}{
		{"size above MaxSize", "LABORO big .sh 101", func(t *testing.T, err error) {
			require.ErrorIs(t, err, ErrSizeTooLarge)
		}},
		{"garbage", "HELLO", func(t *testing.T, err error) {
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe)
		}},
		{"wrong kind", "RICEVIS", func(t *testing.T, err error) {
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe)
		}},
		{"too long", strings.Repeat("A", MaxMessage+1), func(t *testing.T, err error) {
			require.ErrorIs(t, err, ErrMessageTooLong)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeManager(t)
			r := testRunner(t, m)
			r.MaxSize = 100
			x := launchRunner(t, r)
			p := m.accept(t)
			p.handshake()
			p.expect("PETO")
			p.say(tc.answer)
			p.closed()
			tc.check(t, x.wait(t))
			requireEmptyDir(t, r.Dir)
		})
	}
}

// When ctx ends, the running job finishes and is reported; no job is
// asked for; FINO ANKAU ends the session.
func TestRunnerCancelledWhileJobRuns(t *testing.T) {
	m := newFakeManager(t)
	r := testRunner(t, m)
	x := launchRunner(t, r)
	p := m.accept(t)
	p.handshake()
	script, release := blockingScript(t, "job")
	p.give("j", ".sh", script)
	p.silent(50 * time.Millisecond)
	x.cancel()
	p.silent(50 * time.Millisecond)
	release()
	status, body := p.collect("j")
	assert.Equal(t, "success", status)
	assert.Equal(t, "job released\n", parseHeader(t, body).output)
	p.expect("FINO ANKAU")
	p.closed()
	require.ErrorIs(t, x.wait(t), context.Canceled)
	requireEmptyDir(t, r.Dir)
}

func TestRunnerConfig(t *testing.T) {
	for _, r := range []*Runner{
		{Workers: 1},
		{Addr: "127.0.0.1:1"},
		{Addr: "127.0.0.1:1", Workers: 1, Name: "bad name"},
		{Addr: "127.0.0.1:1", Workers: 1, Timeout: -1},
		{Addr: "127.0.0.1:1", Workers: 1, Interpreters: map[string][]string{".sh": nil}},
		{Addr: "127.0.0.1:1", Workers: 1, Dir: filepath.Join(t.TempDir(), "missing")},
	} {
		assert.Error(t, r.Run(context.Background()), "%+v", r)
	}
	// Nothing listens there: the dial fails, the directory goes.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	addr := freeport.Addr(t) // nothing listens there
	assert.Error(t, (&Runner{Addr: addr, Workers: 2}).Run(context.Background()))
	requireEmptyDir(t, tmp)
}

func TestShortHostname(t *testing.T) {
	h := shortHostname()
	assert.True(t, validHost(h), "%q", h)
	assert.NotContains(t, h, ".")
}

func TestScriptPattern(t *testing.T) {
	for name, want := range map[string]string{
		"sub/okjob":              "job-okjob-*.sh",
		"../../etc/passwd":       "job-passwd-*.sh",
		"a b\x00c":               "job-a_b_c-*.sh",
		"dir/..":                 "job-..-*.sh",
		strings.Repeat("x", 300): "job-" + strings.Repeat("x", 64) + "-*.sh",
	} {
		assert.Equal(t, want, scriptPattern(name, ".sh"), "%q", name)
	}
	assert.Equal(t, "job-j-*._.._x", scriptPattern("j", "./../x"))
}

func TestReportsFailure(t *testing.T) {
	for in, want := range map[string]bool{
		"":                    false,
		"RES:failed":          true,
		"RES:ok\n":            false,
		"a\nRES:failed now\n": true,
		"a RES:failed\n":      false,
		"RES:fail\nRES:faile": false,
		"RES:RES:failed\n":    false,
		"\n\nRES:failed":      true,
		strings.Repeat("y", 70000) + "\nRES:failed": true,
		"RES:faileX\nRES:failed":                    true,
	} {
		for _, r := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in))} {
			got, err := reportsFailure(r)
			require.NoError(t, err)
			assert.Equal(t, want, got, "%.40q", in)
		}
	}
	_, err := reportsFailure(iotest.ErrReader(errors.ErrUnsupported))
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

// A job that did not run to its end (killed, timed out, cancelled) fails,
// whatever its output said so far; by the reference's rule alone it would
// pass (no RES:failed line).
func TestRunnerJudgesUnfinishedJobFailed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	for _, st := range []laboro.Status{laboro.StatusKilled, laboro.StatusTimedOut, laboro.StatusCancelled, laboro.StatusSucceeded} {
		require.NoError(t, os.WriteFile(path, []byte("RES:ok\n"), 0o600))
		s := &runnerSession{log: zap.NewNop()}
		o := s.judge("a/job", []string{"bash", "job.sh"}, laboro.Result{Status: st, ExitCode: -1, Output: laboro.NewOutput(path, 7)})
		want := Failure
		if st == laboro.StatusSucceeded {
			want = Success
		}
		assert.Equal(t, want, o.status, "%v", st)
		o.file.Close()
	}
}
