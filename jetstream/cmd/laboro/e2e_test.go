package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/laboro-go/laboro/internal/freeport"
	"github.com/laboro-go/laboro/jetstream"
	"github.com/laboro-go/laboro/protocols/fuq/fuqtest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { e2e.Main(m) }

func build(t testing.TB) string {
	return e2e.Build(t, "github.com/laboro-go/laboro/jetstream/cmd/laboro")
}

var urlLine = regexp.MustCompile(`embedded NATS server.*"url": "(nats://[^"]+)"`)

// system is `laboro serve` with its embedded server, on an address and a
// data directory that stay the same across its restarts: its first start
// takes a free port (url is known from then on), the next ones that port.
type system struct {
	t      *testing.T
	bin    string
	data   string
	listen string
	url    string
	serve  *e2e.Process
}

func newSystem(t *testing.T) *system {
	// A port below the ephemeral range: a client may know it before the
	// server is up, and one that retries while the server restarts can
	// never be given it as its own, and so connect to itself.
	listen := freeport.Addr(t)
	return &system{t: t, bin: build(t), data: t.TempDir(), listen: listen, url: "nats://" + listen}
}

// start runs `laboro serve` with args and waits for it to serve.
func (s *system) start(args ...string) {
	s.t.Helper()
	args = append([]string{"serve", "-data", s.data, "-listen", s.listen}, args...)
	s.serve = e2e.Start(s.t, []string{"LABORO_NATS="}, s.bin, args...)
	s.served()
}

// served waits until s.serve serves, on its address.
func (s *system) served() {
	s.t.Helper()
	require.Equal(s.t, s.url, s.serve.Await(s.t, urlLine, 20*time.Second))
	s.serve.Await(s.t, regexp.MustCompile(`serving`), 20*time.Second)
}

// run runs a laboro command against the system and returns its standard
// output, standard error and exit status.
func (s *system) run(args ...string) (string, string, int) {
	s.t.Helper()
	p := e2e.Start(s.t, []string{"LABORO_NATS=" + s.url}, s.bin, args...)
	code := p.Wait(s.t, 2*time.Minute)
	return p.Stdout.String(), p.Log(), code
}

func TestOneMachine(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "2")

	// One job, waited for: its output and its exit status.
	out, _, code := s.run("submit", "-wait", `printf 'a  b\n'; exit 3`)
	assert.Equal(t, "a  b\n", out)
	assert.Equal(t, 3, code)

	// One job, not waited for: its id, then its output.
	out, _, code = s.run("submit", "-id", "greeting", "echo", "hello", "world")
	require.Equal(t, 0, code)
	require.Equal(t, "greeting\n", out)
	out, _, code = s.run("output", "greeting")
	assert.Equal(t, "hello world\n", out)
	assert.Equal(t, 0, code)

	// A batch from a file, with a failing job, a comment and blank lines.
	jobs := filepath.Join(t.TempDir(), "jobs.txt")
	var text strings.Builder
	text.WriteString("# fifty jobs\n\n")
	for i := range 49 {
		fmt.Fprintf(&text, "echo job %d\n", i)
	}
	text.WriteString("echo broken >&2; exit 4\n")
	require.NoError(t, os.WriteFile(jobs, []byte(text.String()), 0o600))
	out, _, code = s.run("submit", "-batch", "nightly", "-wait", "-f", jobs)
	assert.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 6, out)
	assert.Equal(t, "batch nightly: 50 jobs, 49 succeeded, 1 failed", lines[0])
	assert.Regexp(t, `^nightly-50\s+failed\s+4\s+echo broken >&2; exit 4\s+.*exit status 4$`, lines[2])
	assert.Equal(t, []string{"standard error of nightly-50 (its end):", "  broken"}, lines[4:])

	// A batch from a pipe, read as it is submitted.
	piped := exec.Command(s.bin, "submit", "-batch", "piped", "-wait", "-f", "-")
	piped.Env = append(os.Environ(), "LABORO_NATS="+s.url)
	piped.Stdin = strings.NewReader("echo p1\n# not a job\necho p2\n")
	b, err := piped.Output()
	require.NoError(t, err, "%s", b)
	assert.Contains(t, string(b), "batch piped: 2 jobs, 2 succeeded, 0 failed")

	out, errText, code := s.run("output", "nightly-7", "nosuch")
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Contains(t, errText, "no job nosuch")
	out, _, code = s.run("output", "nightly-7")
	assert.Equal(t, "job 6\n", out)
	assert.Equal(t, 0, code)

	// status: every batch; a batch with its failures; jobs by id. (A
	// worker acknowledges a job after it stored its result: the last
	// acknowledgement may still be on its way when the batch has ended.)
	require.Eventually(t, func() bool {
		out, _, code = s.run("status")
		return code == 0 && strings.Contains(out, "in the stream: 0, on workers: 0")
	}, time.Minute, 10*time.Millisecond, "status: every job acknowledged")
	assert.Regexp(t, `(?m)^nightly\s+50\s+0\s+0\s+49\s+1\s`, out)
	out, _, code = s.run("status", "-failed", "nightly")
	assert.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^nightly-50\s+failed\s+4\s`, out)
	out, log, code := s.run("status", "greeting", "nosuch")
	assert.Equal(t, 1, code)
	assert.Regexp(t, `(?m)^greeting\s+succeeded\s+0`, out)
	assert.Regexp(t, `(?m)^nosuch\s+unknown\s+-`, out)
	assert.Contains(t, log, "laboro: no job nosuch (never submitted, or forgotten: serve keeps -keep jobs)\n")

	// A job submitted again with the same id is not run again.
	out, _, code = s.run("submit", "-id", "greeting", "-wait", "echo", "again")
	assert.Equal(t, "hello world\n", out)
	assert.Equal(t, 0, code)

	// A second service on the same streams is refused; on the same data
	// directory too, though it would run a server of its own (serve reads
	// no $LABORO_NATS: that is for the clients).
	other := e2e.Start(t, nil, s.bin, "serve", "-nats", s.url, "-workers", "0")
	assert.Equal(t, 1, other.Wait(t, 30*time.Second))
	assert.Contains(t, other.Log(), "another service already serves these streams")
	other = e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "serve", "-data", s.data, "-listen", "127.0.0.1:0", "-workers", "0")
	assert.Equal(t, 1, other.Wait(t, 30*time.Second))
	assert.Contains(t, other.Log(), "another server uses the data directory")

	require.NoError(t, s.serve.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, s.serve.Wait(t, 30*time.Second))
}

// The service killed mid-batch (its embedded NATS server with it) and
// started again, with two worker processes, one of them killed mid-job:
// every job ends with exactly one result, and none is lost.
func TestRestartAndWorkerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	s := newSystem(t)
	s.start("-workers", "0", "-ack-wait", "2s")
	var workers []*e2e.Process
	var outDirs []string // not there yet: each worker makes its own
	for i := range 2 {
		outDirs = append(outDirs, filepath.Join(t.TempDir(), "outputs", fmt.Sprint(i)))
		workers = append(workers, e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin,
			"worker", "-c", "4", "-ack-wait", "2s", "-dir", outDirs[i]))
	}

	const n = 300
	jobs, marks := markJobs(t, n, "sleep 0.02; echo %d")
	out, _, code := s.run("submit", "-batch", "big", "-f", jobs)
	require.Equal(t, 0, code)
	require.Equal(t, "big\n", out)

	ran := func() int {
		b, _ := os.ReadFile(marks)
		return strings.Count(string(b), "\n")
	}
	require.Eventually(t, func() bool { return ran() >= n/5 }, time.Minute, 5*time.Millisecond)
	for _, d := range outDirs {
		fi, err := os.Stat(d)
		require.NoError(t, err, "the worker makes its -dir")
		assert.Equal(t, fs.ModeDir|0o700, fi.Mode(), "private to its user")
	}
	s.serve.Kill() // SIGKILL, with the NATS server inside
	t.Logf("service killed after %d runs", ran())
	s.start("-workers", "0", "-ack-wait", "2s")

	require.Eventually(t, func() bool { return ran() >= n/2 }, time.Minute, 5*time.Millisecond)
	require.NoError(t, workers[0].Cmd.Process.Signal(syscall.SIGKILL))
	t.Logf("worker killed after %d runs", ran())

	out, _, code = s.run("status", "-watch", "big")
	require.Equal(t, 0, code, out)
	assert.Equal(t, fmt.Sprintf("batch big: %d jobs, %d succeeded, 0 failed\n", n, n), out)

	// Every job ran, and its output is its own.
	require.Len(t, runs(t, marks), n)
	t.Logf("%d jobs, %d runs", n, ran())
	for _, i := range []int{0, 149, 299} {
		out, _, code := s.run("output", fmt.Sprintf("big-%d", i+1))
		assert.Equal(t, fmt.Sprintf("%d\n", i), out)
		assert.Equal(t, 0, code)
	}

	require.NoError(t, workers[1].Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, workers[1].Wait(t, 30*time.Second))
	assert.Contains(t, workers[1].Log(), "reconnected to NATS")
}

// laboro serve killed while its own worker runs a job, and started again:
// the new serve's worker, of the same name, holds none of the job, and the
// serve hands it back as a silent worker's, within seconds rather than
// after its AckWait (here ten minutes).
func TestServeStartedAgainRunsItsOwnWorkersJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	s := newSystem(t)
	s.start("-workers", "2", "-ack-wait", "10m")
	dir := t.TempDir()
	marks, release := filepath.Join(dir, "runs"), filepath.Join(dir, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o600) })
	out, _, code := s.run("submit", "-batch", "held", fmt.Sprintf("echo run >> %s; until [ -e %s ]; do sleep 0.01; done; echo done", marks, release))
	require.Equal(t, 0, code)
	require.Equal(t, "held-1\n", out)
	ran := func() int {
		b, _ := os.ReadFile(marks)
		return strings.Count(string(b), "\n")
	}
	// Killed once the heartbeat that lists the job is in serve's files,
	// which outlive it: a heartbeat is published without waiting for the
	// server to store it, so it reaches the stream a moment after the job
	// starts.
	require.Eventually(t, func() bool { return ran() == 1 && keptBeat(s.data, "held-1") }, time.Minute,
		5*time.Millisecond, "the job runs, and the worker's heartbeat that lists it is kept")
	s.serve.Kill() // SIGKILL: its worker, and the job with it
	s.start("-workers", "2", "-ack-wait", "10m")
	require.Eventually(t, func() bool { return ran() == 2 }, time.Minute, 5*time.Millisecond,
		"the job of the serve before runs again")
	require.NoError(t, os.WriteFile(release, nil, 0o600))
	out, _, code = s.run("status", "-watch", "held")
	require.Equal(t, 0, code, out)
	assert.Equal(t, "batch held: 1 job, 1 succeeded, 0 failed\n", out)
	assert.Contains(t, s.serve.Log(), "the jobs it held are handed to other workers")
}

// Two workers started under one name are two to serve, which says the
// name is shared; the jobs run, each once.
func TestTwoWorkersOfOneName(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	s := newSystem(t)
	s.start("-workers", "0", "-http", "127.0.0.1:0")
	var ids []string // each worker's run, as it logged it
	for range 2 {
		p := e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "worker", "-name", "twin", "-c", "2", "-dir", t.TempDir())
		ids = append(ids, p.Await(t, regexp.MustCompile(`worker taking jobs.*"name": "twin", "run": "(\w+)"`), time.Minute))
	}
	warned := s.serve.Await(t, regexp.MustCompile(`two live workers share this name.*"worker": "twin", "runs": (\[.*\])`), time.Minute)
	var said []string
	require.NoError(t, json.Unmarshal([]byte(warned), &said), warned)
	assert.ElementsMatch(t, ids, said, "the warning names both runs")

	// The console lists each, with its run; the metrics count both.
	base := s.serve.Await(t, regexp.MustCompile(`console.*"url": "(http://[^/]+)/\?token=…"`), 20*time.Second)
	cc := consoleClient{t, base, e2e.Token(t, "laboro")}
	var st struct {
		Workers []struct{ Name string } `json:"workers"`
	}
	require.Eventually(t, func() bool {
		code, body := cc.call("GET", "/api/state", nil)
		return code == http.StatusOK && json.Unmarshal([]byte(body), &st) == nil && len(st.Workers) == 2
	}, 30*time.Second, 10*time.Millisecond, "%+v", st)
	slices.Sort(ids)
	assert.Equal(t, []string{"twin (run " + ids[0] + ")", "twin (run " + ids[1] + ")"},
		[]string{st.Workers[0].Name, st.Workers[1].Name})
	code, body := cc.call("GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "\nlaboro_workers_connected 2\n")

	const n = 20
	jobs, marks := markJobs(t, n, "")
	out, _, code := s.run("submit", "-batch", "twins", "-wait", "-f", jobs)
	require.Equal(t, 0, code, out)
	assert.Equal(t, fmt.Sprintf("batch twins: %d jobs, %d succeeded, 0 failed\n", n, n), out)
	seen := runs(t, marks)
	assert.Len(t, seen, n)
	for i, times := range seen {
		assert.Equal(t, 1, times, "job %d ran more than once", i)
	}
	assert.Equal(t, 1, strings.Count(s.serve.Log(), "two live workers share this name"), "said once")
}

// keptBeat reports whether a file of the stream of heartbeats in serve's
// data directory holds one that names job id.
func keptBeat(data, id string) bool {
	found := false
	filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(path, "_WORKERS") {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(strconv.Quote(id))) {
			found = true
			return fs.SkipAll
		}
		return nil
	})
	return found
}

// A submission whose connection drops while its jobs are on the way goes
// on once the connection is back: the batch runs whole, each job once.
func TestSubmitThroughADroppedConnection(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "2")
	relay := e2e.NewRelay(t, s.listen)

	const n = 400
	jobs, marks := markJobs(t, n, "")
	// The first job's publication, and all that follows it, are lost.
	relay.StallOn("HPUB LABORO.submit.big")
	p := e2e.Start(t, []string{"LABORO_NATS=nats://" + relay.Addr()}, s.bin, "submit", "-batch", "big", "-wait", "-f", jobs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, relay.Dropped(ctx, "HPUB LABORO.submit.big"))
	relay.Cut()
	relay.Resume()
	require.Equal(t, 0, p.Wait(t, 2*time.Minute), p.Log())
	assert.Equal(t, fmt.Sprintf("batch big: %d jobs, %d succeeded, 0 failed\n", n, n), p.Stdout.String())
	assert.Contains(t, p.Log(), "reconnected to NATS")

	seen := runs(t, marks)
	assert.Len(t, seen, n)
	for i, times := range seen {
		assert.Equal(t, 1, times, "job %d ran more than once", i)
	}
}

// markJobs writes a file of n jobs, job i appending i to a file of marks
// and then running then (a format given i, if not empty), and returns
// both files' paths.
func markJobs(t *testing.T, n int, then string) (jobs, marks string) {
	t.Helper()
	dir := t.TempDir()
	marks, jobs = filepath.Join(dir, "marks"), filepath.Join(dir, "jobs.txt")
	var text strings.Builder
	for i := range n {
		fmt.Fprintf(&text, "echo %d >> %s", i, marks)
		if then != "" {
			fmt.Fprintf(&text, "; "+then, i)
		}
		text.WriteString("\n")
	}
	require.NoError(t, os.WriteFile(jobs, []byte(text.String()), 0o600))
	return jobs, marks
}

// runs counts the runs of each job of markJobs, by its number.
func runs(t *testing.T, marks string) map[int]int {
	t.Helper()
	b, err := os.ReadFile(marks)
	require.NoError(t, err)
	seen := map[int]int{}
	for _, l := range strings.Fields(string(b)) {
		i, err := strconv.Atoi(l)
		require.NoError(t, err)
		seen[i]++
	}
	return seen
}

// A job that kills the worker running it is failed after its delivery
// limit, and the batch ends.
func TestJobKillsItsWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	s := newSystem(t)
	s.start("-workers", "0", "-ack-wait", "1s", "-max-deliver", "2")
	worker := func() *e2e.Process {
		return e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "worker", "-c", "1", "-ack-wait", "1s", "-max-deliver", "2")
	}
	// The job kills its worker (its parent) each time it runs.
	w := worker()
	out, _, code := s.run("submit", "-id", "deadly", "kill -9 $PPID")
	require.Equal(t, 0, code)
	require.Equal(t, "deadly\n", out)
	w.Wait(t, 30*time.Second)
	w = worker()
	w.Wait(t, 30*time.Second)
	worker() // it runs the other jobs

	out, _, code = s.run("output", "deadly")
	assert.Equal(t, "", out)
	assert.Equal(t, 1, code)
	out, _, code = s.run("status", "deadly")
	assert.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^deadly\s+failed\s+-\s+.*delivered the maximum number of times`, out)
}

// laboro serve makes a token at its first start (laboro.token, its user's
// alone, in the state directory), where the other commands of the same
// user find it; a client without it, or with another, is told so; no job
// sees a token. With LABORO_TOKEN set, that is the token.
func TestToken(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "1")
	tok := e2e.Token(t, "laboro") // made at its first start, its user's alone
	out, _, code := s.run("submit", "-wait", "env")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "PATH=")
	assert.NotContains(t, out, tok, "a job sees the token")

	p := e2e.Start(t, []string{"LABORO_NATS=" + s.url, "LABORO_STATE_DIR=" + t.TempDir()}, s.bin, "submit", "echo", "x")
	assert.Equal(t, 1, p.Wait(t, 30*time.Second))
	assert.Contains(t, p.Log(), "wants a token")
	p = e2e.Start(t, []string{"LABORO_NATS=" + s.url, "LABORO_TOKEN=wrong"}, s.bin, "submit", "echo", "x")
	assert.Equal(t, 1, p.Wait(t, 30*time.Second))
	assert.Contains(t, p.Log(), "it is wrong")

	other := newSystem(t)
	other.serve = e2e.Start(t, []string{"LABORO_NATS=", "LABORO_TOKEN=s3cret"}, other.bin,
		"serve", "-data", other.data, "-listen", other.listen, "-workers", "1")
	other.served()
	p = e2e.Start(t, []string{"LABORO_NATS=" + other.url, "LABORO_TOKEN=s3cret"}, other.bin, "submit", "-wait", "env")
	assert.Equal(t, 0, p.Wait(t, 30*time.Second), p.Log())
	assert.NotContains(t, p.Stdout.String(), "s3cret")
	// That token guards the loopback only.
	p = e2e.Start(t, []string{"LABORO_NATS=", "LABORO_TOKEN=s3cret"}, other.bin,
		"serve", "-data", t.TempDir(), "-listen", "0.0.0.0:0")
	assert.Equal(t, 1, p.Wait(t, 30*time.Second), p.Log())
	assert.Contains(t, p.Log(), `$LABORO_TOKEN holds 6 characters; a server listening on 0.0.0.0 needs at least 16`)
	p = e2e.Start(t, []string{"LABORO_NATS=", "LABORO_TOKEN=s3cret"}, other.bin,
		"serve", "-data", t.TempDir(), "-listen", "127.0.0.1:0", "-http", "0.0.0.0:0", "-http-public")
	assert.Equal(t, 1, p.Wait(t, 30*time.Second), p.Log())
	assert.Contains(t, p.Log(), `the console`)
	assert.Contains(t, p.Log(), `holds 6 characters; a server listening on 0.0.0.0 needs at least 16`)
	p = e2e.Start(t, []string{"LABORO_TOKEN=s3cret"}, s.bin, "run", "-http", "0.0.0.0:0", "-http-public", "true")
	assert.Equal(t, 1, p.Wait(t, 30*time.Second), p.Log())
	assert.Contains(t, p.Log(), `laboro run: the console: secret too short for a server beyond this machine: $LABORO_TOKEN holds 6 characters`)

	// run needs no server: the user's token does not reach its jobs.
	p = e2e.Start(t, []string{"LABORO_TOKEN=s3cret"}, s.bin, "run", "env")
	assert.Equal(t, 0, p.Wait(t, time.Minute), p.Log())
	assert.Contains(t, p.Stdout.String(), "PATH=")
	assert.NotContains(t, p.Stdout.String(), "s3cret")

	// Credentials in a NATS URL reach no job and no log line: the jobs see
	// the address alone.
	withCreds := "nats://someone:hunter2@" + other.listen
	p = e2e.Start(t, []string{"LABORO_NATS=" + withCreds}, s.bin, "run", "env")
	assert.Equal(t, 0, p.Wait(t, time.Minute), p.Log())
	assert.Contains(t, p.Stdout.String(), "LABORO_NATS="+other.url+"\n")
	assert.NotContains(t, p.Stdout.String(), "hunter2")
	p = e2e.Start(t, []string{"LABORO_NATS=" + withCreds, "LABORO_TOKEN=s3cret"}, s.bin, "worker")
	p.Await(t, regexp.MustCompile(`refused`), 30*time.Second)
	assert.Contains(t, p.Log(), other.url)
	assert.NotContains(t, p.Log(), "hunter2")
}

// A machine that only runs workers, or only submits, holds a token made
// for that role by laboro token: each does its work with it, and cannot do
// the other's.
func TestRoleTokens(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "0")
	tokens := map[string]string{}
	for _, role := range []string{"worker", "client"} {
		p := e2e.Start(t, nil, s.bin, "token", role)
		require.Equal(t, 0, p.Wait(t, 30*time.Second), p.Log())
		tokens[role] = strings.TrimSpace(p.Stdout.String())
		assert.True(t, strings.HasPrefix(tokens[role], role+".LABORO."), tokens[role])
	}
	// Machines of their own: no laboro.token there.
	env := func(role string) []string {
		return []string{"LABORO_NATS=" + s.url, "LABORO_TOKEN=" + tokens[role], "LABORO_STATE_DIR=" + t.TempDir()}
	}
	e2e.Start(t, env("worker"), s.bin, "worker", "-c", "1")
	p := e2e.Start(t, env("client"), s.bin, "submit", "-wait", "echo from afar")
	require.Equal(t, 0, p.Wait(t, time.Minute), p.Log())
	assert.Equal(t, "from afar\n", p.Stdout.String())

	p = e2e.Start(t, env("worker"), s.bin, "submit", "echo", "forged")
	assert.Equal(t, 1, p.Wait(t, time.Minute))
	assert.Contains(t, p.Log(), "this token's rights do not cover it")

	p = e2e.Start(t, nil, s.bin, "token", "admin")
	assert.Equal(t, 2, p.Wait(t, 30*time.Second))
	assert.Contains(t, p.Log(), `role "admin": must be worker or client`)
}

// run needs nothing else: no server, no token.
func TestRun(t *testing.T) {
	bin := build(t)
	p := e2e.Start(t, []string{"LABORO_NATS=nats://127.0.0.1:1"}, bin, "run", "printf '%s\\n' one two; exit 6")
	assert.Equal(t, 6, p.Wait(t, time.Minute))
	assert.Equal(t, "one\ntwo\n", p.Stdout.String())

	jobs := filepath.Join(t.TempDir(), "jobs.txt")
	var text strings.Builder
	for i := range 30 {
		fmt.Fprintf(&text, "echo %d > %s/%d\n", i, filepath.Dir(jobs), i)
	}
	require.NoError(t, os.WriteFile(jobs, []byte(text.String()), 0o600))
	p = e2e.Start(t, nil, bin, "run", "-workers", "3", "-f", jobs)
	require.Equal(t, 0, p.Wait(t, time.Minute), p.Log())
	assert.Empty(t, p.Stdout.String(), "the jobs printed nothing")
	assert.Equal(t, "30 jobs: 30 succeeded, 0 failed\n", p.Log(), "nothing logged below warnings")
	for i := range 30 {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(jobs), strconv.Itoa(i)))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("%d\n", i), string(b))
	}
}

// A batch prints each job's output on standard output as the job ends,
// whole: jobs that run side by side, writing a line at a time, never mix
// their lines. The summary and the failures go to standard error.
func TestRunPrintsEachOutputWhole(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	var text strings.Builder
	for i := range 8 {
		// Each job writes 200 lines of its own, a line at a time, while
		// the others write theirs.
		fmt.Fprintf(&text, "for n in $(seq 200); do echo job%d line $n; done\n", i)
	}
	text.WriteString("echo partial; echo why >&2; exit 4\n")
	jobs := filepath.Join(dir, "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte(text.String()), 0o600))
	p := e2e.Start(t, nil, bin, "run", "-workers", "4", "-f", jobs)
	require.Equal(t, 1, p.Wait(t, time.Minute), p.Log())

	// The outputs come in the order the jobs ended, each in one piece.
	lines := strings.Split(strings.TrimSuffix(p.Stdout.String(), "\n"), "\n")
	require.Len(t, lines, 8*200+1, p.Stdout.String())
	seen := map[string]bool{}
	for i := 0; i < len(lines); {
		if lines[i] == "partial" {
			seen["partial"] = true
			i++
			continue
		}
		job, _, _ := strings.Cut(lines[i], " ")
		require.False(t, seen[job], "%s's output comes in two pieces", job)
		seen[job] = true
		for n := 1; n <= 200; n, i = n+1, i+1 {
			require.Equal(t, fmt.Sprintf("%s line %d", job, n), lines[i], "line %d of the output", i+1)
		}
	}
	assert.Len(t, seen, 9)
	assert.Equal(t, "9 jobs: 8 succeeded, 1 failed\n"+
		"9 failed, exit status 4: echo partial; echo why >&2; exit 4\n    | why\n", p.Log())
}

// laboro run -f - runs each job as it reads it: the first job of a pipe
// runs before the next line is written, as with xargs, and a million lines
// are never held at once. A line too long stops the reading, says which,
// after the jobs before it have run; in a file, before any runs.
func TestRunStreamsItsInput(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	cmd := exec.Command(bin, "run", "-workers", "1", "-f", "-")
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill() })
	_, err = fmt.Fprintf(in, "echo one > %s\n", fifo)
	require.NoError(t, err)
	ran := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(fifo) // until the job has written and closed it
		ran <- string(b)
	}()
	select {
	case got := <-ran:
		assert.Equal(t, "one\n", got)
	case <-time.After(time.Minute):
		t.Fatal("the first job did not run while its input was still open")
	}
	// laboro stops reading at the long line: the rest may find the pipe
	// closed.
	fmt.Fprintf(in, "echo two\n%s\necho never\n", strings.Repeat("x", 2<<20))
	in.Close()
	var ee *exec.ExitError
	require.ErrorAs(t, cmd.Wait(), &ee)
	assert.Equal(t, 1, ee.ExitCode())
	assert.Equal(t, "two\n", stdout.String(), "the output of the second job; the first wrote to the fifo")
	assert.Contains(t, stderr.String(), "2 jobs: 2 succeeded, 0 failed\n")
	assert.Contains(t, stderr.String(), "laboro run: -: line 3 is longer than 1048576 bytes")

	jobs := filepath.Join(dir, "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte("touch "+filepath.Join(dir, "ran")+"\n"+strings.Repeat("x", 2<<20)+"\n"), 0o600))
	p := e2e.Start(t, nil, bin, "run", "-f", jobs)
	assert.Equal(t, 1, p.Wait(t, time.Minute))
	assert.Contains(t, p.Log(), "line 2 is longer than 1048576 bytes")
	assert.NoFileExists(t, filepath.Join(dir, "ran"), "no job of a file that cannot be read whole runs")
}

func TestUsage(t *testing.T) {
	bin := build(t)
	for args, says := range map[string]string{
		"":                         "usage:",
		"nosuch":                   `unknown command "nosuch"`,
		"submit":                   "give a COMMAND, or -f FILE",
		"submit -f jobs.txt echo":  "not both",
		"submit -nosuchflag echo":  "flag provided but not defined: -nosuchflag",
		"status -watch":            "-watch follows one batch",
		"serve -c 0":               "-c 0: must be from 1 to 10000",
		"serve -keep 0":            "-keep 0: must be at least 1",
		"serve extra":              `unexpected argument "extra"`,
		"serve -listen :99999":     `port "99999": must be a number from 0 to 65535`,
		"worker -c 0":              "-c 0: must be from 1 to 10000",
		"worker -c 1000000":        "-c 1000000: must be from 1 to 10000",
		"worker -ack-wait -1s":     "-ack-wait -1s: must not be negative",
		"serve -max-deliver -1":    "-max-deliver -1: must not be negative",
		"output":                   "name the jobs",
		"cancel":                   "name the jobs to cancel",
		"run":                      "give a COMMAND",
		"run -workers 0 true":      "-workers 0: must be from 1 to 10000",
		"run -workers 99999 true":  "-workers 99999: must be from 1 to 10000",
		"run -log-format xml true": `"xml": must be console or json`,
		"token admin":              `role "admin": must be worker or client`,
	} {
		p := e2e.Start(t, nil, bin, strings.Fields(args)...)
		assert.Equal(t, 2, p.Wait(t, 10*time.Second), "laboro %s", args)
		assert.Contains(t, p.Log(), says, "laboro %s", args)
		assert.Empty(t, p.Stdout.String(), "laboro %s", args)
	}
	// Help and the version go to standard output, with status 0.
	for args, says := range map[string]string{
		"-h":            "laboro submit",
		"--help":        "laboro submit",
		"--version":     "laboro ",
		"run -h":        "-workers int",
		"run --help":    "-workers int",
		"status --help": "-failed",
		"run --version": "laboro ",
	} {
		p := e2e.Start(t, nil, bin, strings.Fields(args)...)
		assert.Equal(t, 0, p.Wait(t, 10*time.Second), "laboro %s", args)
		assert.Contains(t, p.Stdout.String(), says, "laboro %s", args)
	}
}

// A usage error of any subcommand, of a flag's syntax or of a value
// laboro checks, says what is wrong in three lines, the synopsis and where
// the flags are, not the ~30 lines of every flag, which would bury it; and
// it is said before anything is done: -C before any job fails to start in
// it, -batch and -id before connecting (nothing listens at $LABORO_NATS
// here).
func TestUsageErrorsAreShort(t *testing.T) {
	bin := build(t)
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	env := []string{"LABORO_NATS=nats://" + freeport.Addr(t)}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"run", "-workers", "0", "true"}, "-workers 0: must be from 1 to 10000"},
		{[]string{"run", "-workers", "x", "true"}, `-workers "x": not a whole number`},
		{[]string{"run", "-nosuchflag", "true"}, "flag provided but not defined: -nosuchflag"},
		{[]string{"run", "-stream", "S", "true"}, "flag provided but not defined: -stream"}, // run uses no stream
		{[]string{"run", "-C", "/nonexistent", "true"}, `-C "/nonexistent": no such file or directory`},
		{[]string{"run", "-C", file, "-f", file}, fmt.Sprintf("-C %q: not a directory", file)},
		{[]string{"serve", "-c", "0"}, "-c 0: must be from 1 to 10000"},
		{[]string{"serve", "-listen", ":99999"}, `-listen ":99999": port "99999": must be a number from 0 to 65535`},
		{[]string{"worker", "extra"}, `unexpected argument "extra"`},
		{[]string{"worker", "-ack-wait", "-1s"}, "-ack-wait -1s: must not be negative"},
		{[]string{"submit"}, "give a COMMAND, or -f FILE of commands"},
		{[]string{"submit", "-batch", "bad name!", "true"}, `-batch "bad name!": must be UTF-8 without '.', '*', '>' or white space`},
		{[]string{"submit", "-id", "a.b", "true"}, `-id "a.b": must be UTF-8 without '.', '*', '>' or white space`},
		{[]string{"status", "-watch"}, "-watch follows one batch: name it"},
		{[]string{"output"}, "name the jobs whose output to print"},
		{[]string{"cancel", "-nats"}, "flag needs an argument: -nats"},
		{[]string{"token", "-log", "debug", "worker"}, "flag provided but not defined: -log"}, // token logs nothing
		{[]string{"token", "admin"}, `role "admin": must be worker or client`},
	} {
		sub := tc.args[0]
		p := e2e.Start(t, env, bin, tc.args...)
		assert.Equal(t, 2, p.Wait(t, time.Minute), "laboro %q", tc.args)
		assert.Empty(t, p.Stdout.String(), "laboro %q", tc.args)
		lines := strings.Split(strings.TrimSuffix(p.Log(), "\n"), "\n")
		if !assert.Len(t, lines, 3, "laboro %q: the message, the synopsis, where the flags are; got\n%s", tc.args, p.Log()) {
			continue
		}
		assert.Equal(t, "laboro "+sub+": "+tc.says, lines[0], "laboro %q", tc.args)
		assert.True(t, strings.HasPrefix(lines[1], "usage: laboro "+sub+" "), "laboro %q: %s", tc.args, lines[1])
		assert.Equal(t, "Run 'laboro "+sub+" --help' for every flag.", lines[2], "laboro %q", tc.args)
	}
}

// run's help says what run does and what its exit statuses are, and lists
// only the flags run reads; -C is a directory here, not on workers.
func TestRunHelp(t *testing.T) {
	bin := build(t)
	for _, args := range [][]string{{"run", "-h"}, {"run", "--help"}} {
		p := e2e.Start(t, nil, bin, args...)
		require.Equal(t, 0, p.Wait(t, time.Minute), "laboro %q", args)
		help := p.Stdout.String()
		assert.Empty(t, p.Log(), "laboro %q", args)
		assert.True(t, strings.HasPrefix(help, "usage: laboro run [flags] (-f FILE | COMMAND…)\n\nRuns the jobs on this machine"), help)
		oneLine := strings.Join(strings.Fields(help), " ")
		for _, says := range []string{
			"Each job's output goes to standard output",
			"a summary line and the jobs that did not succeed",
			"Exit status: for a single COMMAND, its own",
			"1 when one did not", "2 for a usage error", "130 when interrupted",
			"-C string directory the jobs run in (default: the current one)",
			"-workers int",
		} {
			assert.Contains(t, oneLine, says, "laboro %q", args)
		}
		for _, never := range []string{"-stream", "-nats", "-creds", "on the workers", "-ack-wait"} {
			assert.NotContains(t, help, never, "laboro %q", args)
		}
	}
	// submit's jobs do run on the workers, through the streams.
	p := e2e.Start(t, nil, bin, "submit", "-h")
	require.Equal(t, 0, p.Wait(t, time.Minute))
	assert.Contains(t, p.Stdout.String(), "directory the jobs run in, on the workers")
	assert.Contains(t, p.Stdout.String(), "-stream")
}

// run's report is in words a user reads: "1 job", a timeout with its
// limit, and the jobs that did not succeed in the order of the file, not
// the order they ended in.
func TestRunReport(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	runIn := func(args ...string) (string, string, int) {
		t.Helper()
		p := e2e.Start(t, nil, bin, append([]string{"run"}, args...)...)
		code := p.Wait(t, 2*time.Minute)
		return p.Stdout.String(), p.Log(), code
	}
	one := filepath.Join(dir, "one.txt")
	require.NoError(t, os.WriteFile(one, []byte("echo only\n"), 0o600))
	out, report, code := runIn("-f", one)
	assert.Equal(t, 0, code)
	assert.Equal(t, "only\n", out)
	assert.Equal(t, "1 job: 1 succeeded, 0 failed\n", report)

	_, report, code = runIn("-timeout", "1s", "sleep 60")
	assert.Equal(t, 1, code)
	assert.Equal(t, "laboro: job 1 timed out after 1s\n  command: sleep 60\n", report)
	slow := filepath.Join(dir, "slow.txt")
	require.NoError(t, os.WriteFile(slow, []byte("sleep 60\ntrue\n"), 0o600))
	_, report, code = runIn("-timeout", "1s", "-f", slow)
	assert.Equal(t, 1, code)
	assert.Equal(t, "2 jobs: 1 succeeded, 1 timed out\n1 timed out after 1s: sleep 60\n", report)

	// The jobs end in the order 3, 2, 1, each once the one before it is
	// in the job log (a line each, under the header the first adds):
	// whatever the machine's load, the failures are reported in that
	// order.
	jobs := filepath.Join(dir, "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte(
		`until [ "$(wc -l < log.tsv)" -ge 3 ]; do sleep 0.01; done; exit 1`+"\n"+
			`until [ "$(wc -l < log.tsv)" -ge 2 ]; do sleep 0.01; done; exit 2`+"\n"+
			"exit 3\n"), 0o600))
	_, report, code = runIn("-workers", "3", "-C", dir, "-joblog", filepath.Join(dir, "log.tsv"), "-f", jobs)
	assert.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSuffix(report, "\n"), "\n")
	require.Len(t, lines, 4, report)
	assert.Equal(t, "3 jobs: 0 succeeded, 3 failed", lines[0])
	assert.Regexp(t, `^1 failed, exit status 1: `, lines[1])
	assert.Regexp(t, `^2 failed, exit status 2: `, lines[2])
	assert.Equal(t, "3 failed, exit status 3: exit 3", lines[3])
	log, err := os.ReadFile(filepath.Join(dir, "log.tsv"))
	require.NoError(t, err)
	assert.Regexp(t, `^Seq\t.*\n3\t.*\n2\t.*\n1\t.*\n$`, string(log), "the jobs ended 3, 2, 1")
}

// submit -wait of a single job says, as a batch's wait does, that no
// worker has taken it; the job runs once a worker comes.
func TestSubmitWaitSaysNoWorker(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "0") // no worker
	p := e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "submit", "-wait", "echo", "hi")
	p.Await(t, regexp.MustCompile(`laboro: no worker has taken a job for 5s \(is .laboro worker. running`), 2*time.Minute)
	e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "worker", "-c", "1")
	require.Equal(t, 0, p.Wait(t, 2*time.Minute), p.Log())
	assert.Equal(t, "hi\n", p.Stdout.String())
	assert.Equal(t, 1, p.Logged("no worker has taken a job"), "said once: %s", p.Log())
}

// A worker started before the server, even before serve has made its
// token, waits for it, and then runs its jobs.
func TestWorkerWaitsForServer(t *testing.T) {
	s := newSystem(t)
	// The worker is told the address before the server is up.
	state := []string{"LABORO_STATE_DIR=" + t.TempDir()} // no token there yet
	w := e2e.Start(t, append(state, "LABORO_NATS="+s.url), s.bin, "worker", "-c", "1")
	w.Await(t, regexp.MustCompile(`waiting for the NATS server`), 30*time.Second)
	// Why, not a request's timeout.
	w.Await(t, regexp.MustCompile(`cannot reach NATS yet; trying again.*connection refused`), 30*time.Second)
	s.serve = e2e.Start(t, append(state, "LABORO_NATS="), s.bin, "serve", "-data", s.data, "-listen", s.listen, "-workers", "0")
	s.serve.Await(t, regexp.MustCompile(`serving`), 20*time.Second)
	p := e2e.Start(t, append(state, "LABORO_NATS="+s.url), s.bin, "submit", "-wait", "echo waited")
	require.Equal(t, 0, p.Wait(t, time.Minute), p.Log())
	assert.Equal(t, "waited\n", p.Stdout.String())
}

// Wherever jobs are reported, a failed one shows its command, exit status
// and the end of its standard error; status speaks JSON for programs; an
// unknown batch, or a batch no worker takes, is said so.
func TestUserSeesWhy(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "0") // no worker yet
	jobs := filepath.Join(t.TempDir(), "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte("echo fine\necho why it failed >&2; exit 4\n"), 0o600))
	_, log, code := s.run("submit", "-batch", "b", "-f", jobs)
	require.Equal(t, 0, code, log)
	w := e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "status", "-watch", "b")
	w.Await(t, regexp.MustCompile(`no worker has taken a job`), time.Minute)
	e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "worker", "-c", "1")
	require.Equal(t, 1, w.Wait(t, time.Minute), w.Log())
	assert.Regexp(t, `(?m)^b-2\s+failed\s+4\s+echo why it failed >&2; exit 4\s+.*exit status 4$`, w.Stdout.String())
	assert.Contains(t, w.Stdout.String(), "standard error of b-2 (its end):\n  why it failed\n")

	out, _, code := s.run("status", "-json", "b-2")
	require.Equal(t, 0, code)
	var reply jetstream.StatusReply
	require.NoError(t, json.Unmarshal([]byte(out), &reply), out)
	require.Len(t, reply.Jobs, 1)
	assert.Equal(t, jetstream.JobStatus{ID: "b-2", Batch: "b", State: "failed", ExitCode: 4,
		Error: "jetstream: on the worker: exit status 4", Command: "echo why it failed >&2; exit 4",
		Stderr: "why it failed\n"}, reply.Jobs[0])

	out, log, code = s.run("output", "b-2")
	assert.Equal(t, 4, code, "one job's output: its own exit status")
	assert.Equal(t, "", out)
	assert.Contains(t, log, "command: echo why it failed >&2; exit 4\n")
	out, log, code = s.run("output", "b-1", "b-2")
	assert.Equal(t, 1, code)
	assert.Equal(t, "==> b-1 <==\nfine\n\n==> b-2 <==\n", out)
	assert.Contains(t, log, "command: echo why it failed >&2; exit 4\n  standard error (its end):\n  why it failed\n")

	// An id submitted before: its first submission stands, and the user is
	// told, not handed the old job's output as this one's.
	out, log, code = s.run("submit", "-wait", "-id", "b-1", "echo", "new")
	assert.Equal(t, 0, code)
	assert.Equal(t, "fine\n", out)
	assert.Contains(t, log, "warning: job b-1 was submitted before (echo fine, succeeded): that submission stands, this one is not run")

	_, log, code = s.run("status", "-watch", "nosuch")
	assert.Equal(t, 1, code)
	assert.Contains(t, log, "no batch nosuch")
}

func TestNoServer(t *testing.T) {
	bin := build(t)
	url := "nats://" + freeport.Addr(t) // nothing listens there
	for _, args := range [][]string{{"submit", "echo", "x"}, {"status"}, {"output", "x"}, {"cancel", "x"}} {
		p := e2e.Start(t, []string{"LABORO_NATS=" + url}, bin, args...)
		assert.Equal(t, 1, p.Wait(t, 30*time.Second), "laboro %q", args)
		assert.Contains(t, p.Log(), "is `laboro serve` running?", "laboro %q", args)
	}
}

// fakeNATS is a program holding a NATS address: it greets each connection
// (with a nonce or without), refuses its CONNECT, and keeps what it was
// sent.
func fakeNATS(t *testing.T, nonce bool) (url string, sent func() string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var got strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			info := `{"server_id":"fake","version":"2.10.0","proto":1,"max_payload":1048576,"auth_required":true`
			if nonce {
				info += `,"nonce":"aNonceOf11b"`
			}
			_, _ = io.WriteString(conn, "INFO "+info+"}\r\n")
			r := bufio.NewReader(conn)
			for {
				line, err := r.ReadString('\n')
				mu.Lock()
				got.WriteString(line)
				mu.Unlock()
				if err != nil {
					break
				}
				if strings.HasPrefix(line, "CONNECT ") {
					_, _ = io.WriteString(conn, "-ERR 'Authorization Violation'\r\n")
					break
				}
			}
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "nats://" + ln.Addr().String(), func() string {
		mu.Lock()
		defer mu.Unlock()
		return got.String()
	}
}

// laboro's token is proven, never sent: a program holding the NATS
// address gets neither the token nor a role's, whether it offers a nonce
// (it gets a proof of that nonce alone, refused by the real server) or
// not (it gets no token at all, and is told to be no serve of laboro's).
func TestTokenNeverSent(t *testing.T) {
	bin := build(t)
	const token = "a-token-of-laboro-0123456789"
	secrets := []string{token}
	for _, role := range []jetstream.Role{jetstream.RoleWorker, jetstream.RoleClient} {
		secrets = append(secrets, strings.Split(jetstream.RoleToken(token, role, ""), ".")[2])
	}
	env := func(url string) []string {
		return []string{"LABORO_NATS=" + url, "LABORO_TOKEN=" + token}
	}

	url, sent := fakeNATS(t, true)
	p := e2e.Start(t, env(url), bin, "submit", "echo", "x")
	assert.Equal(t, 1, p.Wait(t, 30*time.Second))
	assert.Contains(t, p.Log(), "refused the token (from $LABORO_TOKEN or laboro.token): it is wrong")
	assert.Contains(t, sent(), `"nkey":"client.LABORO"`)
	for _, s := range secrets {
		assert.NotContains(t, sent(), s)
	}

	url, sent = fakeNATS(t, false)
	p = e2e.Start(t, env(url), bin, "submit", "echo", "x")
	assert.Equal(t, 1, p.Wait(t, 30*time.Second))
	assert.Contains(t, p.Log(), "offers no nonce against which to prove laboro's token: it is not laboro serve's")
	assert.Contains(t, p.Log(), "wants credentials, and it is not laboro serve's: laboro's token is not for it (write them in the URL, or give -creds)")
	assert.Contains(t, sent(), "CONNECT ", "connected without the token")
	assert.NotContains(t, sent(), `"nkey"`)
	for _, s := range secrets {
		assert.NotContains(t, sent(), s)
	}
}

// anyone admits every client: a program posing as serve's server, which
// takes whatever proof it is given.
type anyone struct{}

func (anyone) Check(server.ClientAuthentication) bool { return true }

// A program posing as serve's server (a NATS server of its own with
// JetStream, that takes any proof of the token) gets no job from laboro
// submit: serve's service does not prove itself there, and submit says it
// waits for it.
func TestSubmitGivesAPoserNothing(t *testing.T) {
	bin := build(t)
	poser, err := jetstream.StartEmbedded(t.TempDir(), "127.0.0.1", -1, func(o *server.Options) {
		o.CustomClientAuthentication, o.AlwaysEnableNonce = anyone{}, true
	})
	require.NoError(t, err)
	t.Cleanup(poser.Shutdown)
	p := e2e.Start(t, []string{"LABORO_NATS=" + poser.URL(), "LABORO_TOKEN=a-token-of-laboro-0123456789"},
		bin, "submit", "echo", "secret-argument")
	p.Await(t, regexp.MustCompile(`waiting for laboro's service to prove itself on the NATS server`), 30*time.Second)

	nc, err := nats.Connect(poser.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "LABORO_SUBMITTED")
	require.NoError(t, err, "submit made its stream, as it does on serve's server")
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.State.Msgs, "a job given to a program posing as serve")
}

// A worker runs only the jobs serve signed with its token's key: a job
// put in the stream by anyone else (a program posing as the server would
// hand it such jobs) is not run, and the worker says why.
func TestWorkerRunsOnlySignedJobs(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "0")
	token := e2e.Token(t, "laboro")
	w := e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "worker", "-c", "1")
	out, log, code := s.run("submit", "-wait", "echo signed")
	require.Equal(t, 0, code, log)
	assert.Equal(t, "signed\n", out)

	nc, err := nats.Connect(s.url, jetstream.Token(token))
	require.NoError(t, err)
	defer nc.Close()
	mark := filepath.Join(t.TempDir(), "forged")
	job, err := json.Marshal(map[string]any{"id": "forged", "args": []string{"touch", mark}})
	require.NoError(t, err)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = js.Publish(ctx, "LABORO.jobs.forged", job)
	require.NoError(t, err)
	w.Await(t, regexp.MustCompile(`job not run: it is not signed with this worker's key.*LABORO.jobs.forged`), 30*time.Second)
	assert.NoFileExists(t, mark)
}

// serve's embedded server speaks TLS with -tls-cert and -tls-key: a
// worker and a client given its CA (-ca) run jobs through it, and so know
// it is the server; a client without is told what to give. Beyond the
// loopback without TLS, serve warns.
func TestTLS(t *testing.T) {
	pki := fuqtest.NewPKI(t)
	ca := filepath.Join(pki.Dir, "ca.crt")
	s := newSystem(t)
	s.serve = e2e.Start(t, []string{"LABORO_NATS="}, s.bin, "serve", "-data", s.data, "-listen", s.listen,
		"-workers", "0", "-tls-cert", filepath.Join(pki.Dir, "fuq.crt"), "-tls-key", filepath.Join(pki.Dir, "fuq.key"))
	s.serve.Await(t, regexp.MustCompile(`serving`), 20*time.Second)
	e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "worker", "-c", "1", "-ca", ca)
	out, log, code := s.run("submit", "-wait", "-ca", ca, "echo over TLS")
	require.Equal(t, 0, code, log)
	assert.Equal(t, "over TLS\n", out)

	_, log, code = s.run("status")
	assert.Equal(t, 1, code)
	assert.Contains(t, log, "speaks TLS with a certificate this command cannot verify (give -ca with the CA that signed it)")
	_, log, code = s.run("status", "-ca", filepath.Join(pki.Dir, "fuq.key"))
	assert.Equal(t, 1, code)
	assert.Contains(t, log, "fuq.key: no PEM certificate in it")

	p := e2e.Start(t, nil, s.bin, "serve", "-tls-cert", ca)
	assert.Equal(t, 2, p.Wait(t, 30*time.Second))
	assert.Contains(t, p.Log(), "-tls-cert and -tls-key go together")

	p = e2e.Start(t, []string{"LABORO_NATS=", "LABORO_TOKEN=a-token-of-twenty-chars"}, s.bin,
		"serve", "-data", t.TempDir(), "-listen", "0.0.0.0:0", "-workers", "0")
	p.Await(t, regexp.MustCompile(`listens beyond this machine without TLS.*give -tls-cert and -tls-key`), 20*time.Second)
}

// The credentials of $LABORO_NATS's URLs reach neither the help (as -nats's
// default) nor an error that quotes a URL; given on the command line,
// where ps shows them, they are warned of.
func TestNatsCredentialsNotShown(t *testing.T) {
	bin := build(t)
	addr := freeport.Addr(t) // nothing listens there
	help := exec.Command(bin, "status", "-h")
	help.Env = append(os.Environ(), "LABORO_NATS=nats://bob:s3cret@"+addr)
	out, err := help.CombinedOutput()
	require.NoError(t, err)
	assert.Contains(t, string(out), "(default nats://"+addr+")")
	assert.NotContains(t, string(out), "s3cret")

	// A password the URL parser refuses: its words quote the URL.
	p := e2e.Start(t, []string{"LABORO_NATS=nats://bob:s3 cret@" + addr}, bin, "status")
	assert.Equal(t, 1, p.Wait(t, 30*time.Second))
	assert.Contains(t, p.Log(), "cannot reach NATS at nats://"+addr)
	assert.NotContains(t, p.Log(), "cret")

	p = e2e.Start(t, nil, bin, "status", "-nats", "nats://bob:s3cret@"+addr)
	assert.Equal(t, 1, p.Wait(t, 30*time.Second))
	assert.Contains(t, p.Log(), "-nats carries credentials, which any user sees in ps")
	assert.Contains(t, p.Log(), "connection refused", "why NATS cannot be reached")
	assert.NotContains(t, p.Log(), "s3cret")
}

// The first interrupt lets a worker's running job finish and deliver its
// result; a second one stops it at once, leaving its job to another worker.
func TestWorkerInterrupts(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "0")
	worker := func() *e2e.Process {
		return e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "worker", "-c", "1")
	}
	w := worker()
	w.Await(t, regexp.MustCompile(`worker`), 20*time.Second)
	dir := t.TempDir()

	out, _, code := s.run("submit", "-id", "slow", fmt.Sprintf("touch %s/started; sleep 1; echo finished", dir))
	require.Equal(t, 0, code, out)
	require.Eventually(t, func() bool { _, err := os.Stat(dir + "/started"); return err == nil }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, w.Wait(t, 30*time.Second))
	assert.Contains(t, w.Log(), "worker stopped after finishing its jobs")
	out, _, code = s.run("output", "slow")
	assert.Equal(t, "finished\n", out)
	assert.Equal(t, 0, code)

	w = worker()
	out, _, code = s.run("submit", "-id", "stuck", fmt.Sprintf("touch %s/stuck; exec sleep 60", dir))
	require.Equal(t, 0, code, out)
	require.Eventually(t, func() bool { _, err := os.Stat(dir + "/stuck"); return err == nil }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	w.Await(t, regexp.MustCompile(`finishing the running jobs`), 10*time.Second)
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, w.Wait(t, 10*time.Second))
	assert.Contains(t, w.Log(), "its unfinished jobs go to other workers")
	out, _, _ = s.run("status", "stuck")
	assert.Regexp(t, `(?m)^stuck\s+dispatched`, out, "waiting for another worker")
}

// laboro cancel kills a running job on its worker, and the job ends
// cancelled for status and output; an unknown id fails.
func TestCancel(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "1")
	pidFile := filepath.Join(t.TempDir(), "pid")
	out, _, code := s.run("submit", "-id", "stuck", fmt.Sprintf("echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 300", pidFile))
	require.Equal(t, 0, code, out)
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 20*time.Second, 5*time.Millisecond)

	out, log, code := s.run("cancel", "stuck", "nosuch")
	assert.Equal(t, 1, code, "an unknown id")
	assert.Contains(t, log, "laboro: no job nosuch")
	assert.Regexp(t, `(?m)^stuck\s+cancelled\s+-\s+echo .*\s+laboro: job cancelled$`, out)
	assert.Regexp(t, `(?m)^nosuch\s+unknown\s+-`, out)
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 10*time.Second, 5*time.Millisecond,
		"the job's process is killed")

	out, _, code = s.run("status", "stuck")
	assert.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^stuck\s+cancelled\s+-`, out)
	out, errText, code := s.run("output", "stuck")
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Contains(t, errText, "job stuck cancelled")
	out, _, code = s.run("cancel", "stuck")
	assert.Equal(t, 0, code, "cancelled already")
	assert.Regexp(t, `(?m)^stuck\s+cancelled`, out)
}

// The README's first laboro command runs as shipped, from the root of the
// checkout, on the file of jobs that examples/ holds.
func TestReadmeRun(t *testing.T) {
	bin := build(t)
	cmd := exec.Command(bin, "run", "-f", "examples/jobs.txt")
	cmd.Dir = filepath.Join("..", "..", "..")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "one of its jobs fails: %s", stderr.String())
	assert.Equal(t, 1, ee.ExitCode())
	for _, out := range []string{"hello from job 1\n", "slept a second\n", "1+2+3+4+5 = 15\n"} {
		assert.Contains(t, stdout.String(), out)
	}
	assert.Regexp(t, `(?m)^6 jobs: 5 succeeded, 1 failed$`, stderr.String())
	assert.Contains(t, stderr.String(), "ls: cannot access '/nonexistent'")
}

// run keeps what GNU parallel's users expect: a results directory, a job
// log to resume from, retries of failed jobs, and a halt after failures.
func TestRunResultsJobLogResume(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	jobs := filepath.Join(dir, "jobs.txt")
	// Job 2 fails until the file "fixed" exists; job 3 fails twice, then
	// succeeds (its attempts are counted in a file).
	require.NoError(t, os.WriteFile(jobs, []byte("echo one\n"+
		"[ -e fixed ] || { echo not yet >&2; exit 3; }; echo two\n"+
		"echo x >> tries; [ $(wc -l < tries) -ge 3 ] && echo three\n"), 0o600))
	runIn := func(args ...string) (string, string, int) {
		return runLaboro(t, bin, dir, append([]string{"run", "-workers", "1", "-f", jobs, "-joblog", "log.tsv"}, args...)...)
	}

	out, report, code := runIn("-results", "res", "-retries", "3")
	assert.Equal(t, 1, code)
	assert.Equal(t, "one\nthree\n", out)
	assert.Equal(t, "3 jobs: 2 succeeded, 1 failed\n"+
		"2 failed, exit status 3: [ -e fixed ] || { echo not yet >&2; exit 3; }; echo two\n    | not yet\n", report)
	for file, want := range map[string]string{
		"res/1/stdout": "one\n", "res/1/exitval": "0\n", "res/1/cmd": "echo one\n",
		"res/2/stdout": "", "res/2/stderr": "not yet\n", "res/2/exitval": "3\n",
		"res/3/stdout": "three\n", "tries": "x\nx\nx\n",
	} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		require.NoError(t, err)
		assert.Equal(t, want, string(b), file)
	}
	log, err := os.ReadFile(filepath.Join(dir, "log.tsv"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	require.Len(t, lines, 4, string(log))
	assert.Equal(t, "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\tSignal\tCommand", lines[0])
	assert.Regexp(t, `^2\t\S+\t\d+\.\d{3}\t\d+\.\d{3}\t0\t0\t3\t0\t\[ -e fixed \]`, lines[2])

	// -resume runs nothing more; -resume-failed runs job 2 again, alone.
	out, report, code = runIn("-resume")
	assert.Equal(t, 0, code)
	assert.Empty(t, out)
	assert.Contains(t, report, "every job is in the job log already")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fixed"), nil, 0o600))
	out, report, code = runIn("-resume-failed")
	assert.Equal(t, 0, code, report)
	assert.Equal(t, "two\n", out)
	assert.Equal(t, "1 job: 1 succeeded, 0 failed\n", report)
}

// -halt now,fail=1 stops at the first failure: the job running beside it
// is killed, and the jobs after it never start.
func TestRunHalt(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	jobs := filepath.Join(dir, "jobs.txt")
	// The jobs after the failure take long: one may start before the halt,
	// and is killed; the other cannot start.
	require.NoError(t, os.WriteFile(jobs, []byte("sleep 60\nexit 5\nsleep 60; touch never1\nsleep 60; touch never2\n"), 0o600))
	cmd := exec.Command(bin, "run", "-workers", "2", "-f", jobs, "-halt", "now,fail=1")
	cmd.Dir = dir
	var out strings.Builder // the report
	cmd.Stderr = &out
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, out.String(), "2 failed, exit status 5: exit 5")
	assert.Contains(t, out.String(), "1 killed")
	assert.NoFileExists(t, filepath.Join(dir, "never1"))
	assert.NoFileExists(t, filepath.Join(dir, "never2"))
}

// -halt soon,fail=1 lets the job running beside the failure finish; the
// jobs still waiting to start are not run, not failed, and are left out of
// the job log, so that -resume runs them.
func TestRunHaltSoonLeavesTheRestToResume(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	jobs := filepath.Join(dir, "jobs.txt")
	lines := "exit 5\n"
	for i := 2; i <= 50; i++ {
		lines += fmt.Sprintf("touch ran.%d\n", i)
	}
	require.NoError(t, os.WriteFile(jobs, []byte(lines), 0o600))
	runIn := func(args ...string) (string, int) {
		_, report, code := runLaboro(t, bin, dir, append([]string{"run", "-workers", "1", "-f", jobs, "-joblog", "log.tsv"}, args...)...)
		return report, code
	}
	ran := func() int {
		m, err := filepath.Glob(filepath.Join(dir, "ran.*"))
		require.NoError(t, err)
		return len(m)
	}

	report, code := runIn("-halt", "soon,fail=1")
	assert.Equal(t, 1, code)
	// The worker may have taken job 2 as job 1 ended, before the halt.
	before := ran()
	assert.LessOrEqual(t, before, 1, report)
	assert.Contains(t, report, fmt.Sprintf("50 jobs: %d succeeded, 1 failed, %d not run (halted after 1 failure)\n", before, 49-before))
	assert.Contains(t, report, "1 failed, exit status 5: exit 5\n")
	assert.NotContains(t, report, "terminated")

	report, code = runIn("-resume")
	assert.Equal(t, 0, code, report)
	assert.Equal(t, fmt.Sprintf("%d jobs: %d succeeded, 0 failed\n", 49-before, 49-before), report)
	assert.Equal(t, 49, ran())
}

// -halt now kills the job running beside the failure: it did not end by
// itself, so the job log leaves it out and -resume runs it again; a job
// that timed out ended, and is logged as GNU parallel logs one (Exitval
// -1, its signal), so -resume-failed runs it again.
func TestRunJobLogKilledAndTimedOut(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	jobs := filepath.Join(dir, "jobs.txt")
	// On the first run job 1 waits, job 2 fails; then both succeed.
	require.NoError(t, os.WriteFile(jobs, []byte("[ -e again ] || sleep 60; touch ran.1\n[ -e again ] || exit 5\n"), 0o600))
	runIn := func(args ...string) (string, int) {
		_, report, code := runLaboro(t, bin, dir, append([]string{"run", "-workers", "2", "-joblog", "log.tsv"}, args...)...)
		return report, code
	}
	logLines := func() []string {
		b, err := os.ReadFile(filepath.Join(dir, "log.tsv"))
		require.NoError(t, err)
		return strings.Split(strings.TrimSpace(string(b)), "\n")[1:]
	}

	report, code := runIn("-f", jobs, "-halt", "now,fail=1")
	assert.Equal(t, 1, code)
	assert.Contains(t, report, "1 killed")
	lines := logLines()
	require.Len(t, lines, 1, "only job 2 ended by itself")
	assert.Regexp(t, `^2\t.*\t5\t0\t\[ -e again \] \|\| exit 5$`, lines[0])
	require.NoError(t, os.WriteFile(filepath.Join(dir, "again"), nil, 0o600))
	report, code = runIn("-f", jobs, "-resume")
	assert.Equal(t, 0, code, report)
	assert.Equal(t, "1 job: 1 succeeded, 0 failed\n", report)
	assert.FileExists(t, filepath.Join(dir, "ran.1"))

	// A job that timed out: Exitval -1, killed by SIGKILL.
	require.NoError(t, os.Remove(filepath.Join(dir, "log.tsv")))
	require.NoError(t, os.Remove(filepath.Join(dir, "again")))
	report, code = runIn("-f", jobs, "-timeout", "200ms")
	assert.Equal(t, 1, code)
	assert.Contains(t, report, "1 timed out")
	lines = logLines()
	require.Len(t, lines, 2)
	slices.Sort(lines)
	assert.Regexp(t, `^1\t.*\t-1\t9\t\[ -e again \] \|\| sleep 60; touch ran.1$`, lines[0])
	require.NoError(t, os.WriteFile(filepath.Join(dir, "again"), nil, 0o600))
	report, code = runIn("-f", jobs, "-resume-failed")
	assert.Equal(t, 0, code, report)
	assert.Equal(t, "2 jobs: 2 succeeded, 0 failed\n", report)
}

// runLaboro runs bin with args in dir until it exits, and returns its
// standard output and error and its exit status.
func runLaboro(t *testing.T, bin, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errOut.String(), code
}

// startFed starts laboro with args, its standard input a pipe that stays
// open until the test closes it.
func startFed(t *testing.T, args ...string) (cmd *exec.Cmd, in io.WriteCloser, stdout, stderr *strings.Builder) {
	t.Helper()
	cmd = exec.Command(build(t), args...)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, stderr = new(strings.Builder), new(strings.Builder)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, in, stdout, stderr
}

// exitCode waits for cmd to exit by itself, and returns its exit status;
// still running after a minute, it fails the test with why.
func exitCode(t *testing.T, cmd *exec.Cmd, why string) int {
	t.Helper()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		t.Fatal(why)
	}
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	require.ErrorAs(t, err, &ee)
	return ee.ExitCode()
}

// A halt stops the reading of a pipe at once, though its writer has more
// to come: laboro does not wait for the next line to notice.
func TestRunHaltStopsReadingPipe(t *testing.T) {
	cmd, in, _, report := startFed(t, "run", "-workers", "2", "-f", "-", "-halt", "now,fail=1")
	_, err := fmt.Fprint(in, "sleep 60\nexit 5\n") // and the pipe stays open
	require.NoError(t, err)
	assert.Equal(t, 1, exitCode(t, cmd, "laboro went on waiting for its input after the halt"))
	assert.Regexp(t, `2 jobs: 0 succeeded, 1 failed, 1 (killed|not run) \(halted after 1 failure; the rest of the input was not read\)\n`, report.String())
	assert.Contains(t, report.String(), "2 failed, exit status 5: exit 5")
	assert.Regexp(t, `1 (killed|terminated before execution): sleep 60`, report.String())
}

// Ctrl-C stops laboro run at once, though the writer of its pipe has more
// to come: it says what ran, and exits 130.
func TestRunInterruptedWhileReadingPipe(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	cmd, in, stdout, stderr := startFed(t, "run", "-workers", "1", "-f", "-")
	_, err := fmt.Fprintf(in, "echo one > %s\n", fifo) // and the pipe stays open
	require.NoError(t, err)
	b, err := os.ReadFile(fifo) // until the job has run
	require.NoError(t, err)
	require.Equal(t, "one\n", string(b))
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	assert.Equal(t, 130, exitCode(t, cmd, "laboro went on waiting for its input after Ctrl-C"), "stdout %q", stdout.String())
	assert.Contains(t, stderr.String(), "interrupted")
}

// serve logs each failed job once, with why, though its service and its
// local worker both see it fail.
func TestServeLogsFailureOnce(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "1")
	_, _, code := s.run("submit", "-wait", "-id", "bad", "echo broken >&2; exit 9")
	assert.Equal(t, 9, code)
	assert.Eventually(t, func() bool { return s.serve.Logged(`"job": "bad"`) > 0 }, 30*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, s.serve.Logged("job failed"), s.serve.Log())
	assert.Contains(t, s.serve.Log(), `"stderr": "broken\n"`)
}

// run -http shows the batch live and takes a new concurrency level while
// it runs: two jobs that wait, one worker; raised to two, both run.
func TestRunConsole(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	var jobs strings.Builder
	for _, name := range []string{"a", "b"} {
		fifo := filepath.Join(dir, name)
		require.NoError(t, syscall.Mkfifo(fifo, 0o600))
		fmt.Fprintf(&jobs, "cat %s\n", fifo)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "jobs.txt"), []byte(jobs.String()), 0o600))
	p := e2e.Start(t, nil, bin, "run", "-workers", "1", "-http", "127.0.0.1:0", "-f", filepath.Join(dir, "jobs.txt"))
	base := p.Await(t, regexp.MustCompile(`console at (http://[^/]+)/\?token=…`), 20*time.Second)
	token := e2e.Token(t, "laboro")
	assert.NotContains(t, p.Log(), token)

	cc := consoleClient{t, base, token}
	cc.await(1, 1, "one job runs, the other waits")
	cc.setConcurrency(2)
	cc.await(2, 0, "both run once the level is 2")
	for _, name := range []string{"a", "b"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(name+"\n"), 0o600))
	}
	assert.Equal(t, 0, p.Wait(t, 30*time.Second), p.Log())
}

// consoleClient drives a console as its page does, with the token.
type consoleClient struct {
	t           *testing.T
	base, token string
}

func (cc consoleClient) call(method, path string, form url.Values) (int, string) {
	req, _ := http.NewRequest(method, cc.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer "+cc.token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Requested-With", "console")
	res, err := http.DefaultClient.Do(req)
	require.NoError(cc.t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// await waits until the console shows running jobs running and queued
// queued.
func (cc consoleClient) await(running, queued int, what string) {
	cc.t.Helper()
	var body string
	require.Eventually(cc.t, func() bool {
		var code int
		code, body = cc.call("GET", "/api/state", nil)
		body = strconv.Itoa(code) + " " + body
		var st struct {
			Running []struct{ ID string } `json:"running"`
			Queued  []struct{ ID string } `json:"queued"`
		}
		return code == http.StatusOK && json.Unmarshal([]byte(strings.TrimPrefix(body, "200 ")), &st) == nil &&
			len(st.Running) == running && len(st.Queued) == queued
	}, 30*time.Second, 10*time.Millisecond, "%s: %s", what, body)
}

func (cc consoleClient) setConcurrency(n int) {
	cc.t.Helper()
	code, body := cc.call("POST", "/concurrency", url.Values{"n": {strconv.Itoa(n)}})
	require.Equal(cc.t, http.StatusNoContent, code, body)
}

// serve -http shows the fleet's jobs, and its concurrency level caps the
// jobs out across every worker, changed while they run; a running job's
// output comes live from its worker, serve's own or a laboro worker
// (which gives it only once serve proved itself).
func TestServeConsole(t *testing.T) {
	t.Run("serve's workers", func(t *testing.T) { testServeConsole(t, "local") })
	t.Run("laboro worker", func(t *testing.T) { testServeConsole(t, "outside") })
}

func testServeConsole(t *testing.T, worker string) {
	s := newSystem(t)
	if worker == "local" {
		s.start("-workers", "2", "-http", "127.0.0.1:0")
	} else {
		s.start("-workers", "0", "-http", "127.0.0.1:0")
		e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "worker", "-c", "2", "-name", worker)
	}
	base := s.serve.Await(t, regexp.MustCompile(`console.*"url": "(http://[^/]+)/\?token=…"`), 20*time.Second)
	token := e2e.Token(t, "laboro")
	assert.NotContains(t, s.serve.Log(), token)
	cc := consoleClient{t, base, token}
	cc.setConcurrency(1) // one job out at a time, over the whole fleet

	dir := t.TempDir()
	var args []string
	for _, name := range []string{"a", "b"} {
		fifo := filepath.Join(dir, name)
		require.NoError(t, syscall.Mkfifo(fifo, 0o600))
		args = append(args, "echo live-"+name+"; cat "+fifo)
	}
	jobs := filepath.Join(dir, "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte(strings.Join(args, "\n")+"\n"), 0o600))
	out, stderr, code := s.run("submit", "-f", jobs)
	require.Equal(t, 0, code, stderr)
	cc.await(1, 1, "one job out, the other waits at the service")
	cc.setConcurrency(2)
	cc.await(2, 0, "both out once the level is 2")

	// The workers, their slots and what each runs; where each job runs.
	var st struct {
		Running []struct{ ID, Command, Worker string } `json:"running"`
		Workers []struct {
			Name    string
			Slots   int
			Running []string
		} `json:"workers"`
	}
	require.Eventually(t, func() bool {
		code, body := cc.call("GET", "/api/state", nil)
		return code == http.StatusOK && json.Unmarshal([]byte(body), &st) == nil &&
			len(st.Workers) == 1 && len(st.Workers[0].Running) == 2 &&
			st.Running[0].Worker == worker && st.Running[1].Worker == worker
	}, 30*time.Second, 10*time.Millisecond, "%+v", st)
	assert.Equal(t, worker, st.Workers[0].Name)
	assert.Equal(t, 2, st.Workers[0].Slots)
	code, body := cc.call("GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "\nlaboro_workers_connected 1\n")

	// A running job's output, live from the worker that runs it, then
	// whole once it ended.
	job := st.Running[0]
	req, _ := http.NewRequestWithContext(t.Context(), "GET", cc.base+"/jobs/"+job.ID+"/output", nil)
	req.Header.Set("Authorization", "Bearer "+cc.token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	events := bufio.NewReader(res.Body)
	next := func() (event, data string) {
		for {
			line, err := events.ReadString('\n')
			require.NoError(t, err)
			line = strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data))
			case line == "" && event != "":
				return event, data
			}
		}
	}
	event, text := next()
	require.Equal(t, "output", event)
	which := strings.TrimSuffix(strings.TrimPrefix(text, "live-"), "\n")
	require.Contains(t, []string{"a", "b"}, which, "%q, before the job ends", text)
	for _, name := range []string{"a", "b"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(name+"\n"), 0o600))
	}
	for {
		event, data := next()
		if event != "output" {
			require.Equal(t, "end", event, data)
			break
		}
		text += data
	}
	assert.Equal(t, "live-"+which+"\n"+which+"\n", text)
	cc.await(0, 0, "both done")
	batch := strings.Fields(out)[0]
	var batches struct {
		Batches []struct {
			Name      string
			Jobs      int
			Succeeded int
			Ended     time.Time
		} `json:"batches"`
	}
	require.Eventually(t, func() bool {
		code, body := cc.call("GET", "/api/state", nil)
		return code == http.StatusOK && json.Unmarshal([]byte(body), &batches) == nil &&
			len(batches.Batches) == 1 && !batches.Batches[0].Ended.IsZero()
	}, 30*time.Second, 10*time.Millisecond, "the finished batch: %+v", batches)
	assert.Equal(t, batch, batches.Batches[0].Name)
	assert.Equal(t, 2, batches.Batches[0].Jobs)
	assert.Equal(t, 2, batches.Batches[0].Succeeded)
	_, _, code = s.run("status", "-watch", batch)
	assert.Equal(t, 0, code)
}

// A worker whose token the server refuses says so at once, and one
// interrupt stops it while it waits (it has no job to finish).
func TestWorkerRefusedTokenSaysSo(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "0")
	w := e2e.Start(t, []string{"LABORO_NATS=" + s.url, "LABORO_TOKEN=not-the-servers"}, s.bin, "worker")
	w.Await(t, regexp.MustCompile(`NATS refused the token`), 30*time.Second)
	require.NoError(t, w.Cmd.Process.Signal(os.Interrupt))
	assert.Equal(t, 0, w.Wait(t, 30*time.Second), w.Log())
	assert.Equal(t, 1, w.Logged("NATS refused the token"), "said once: %s", w.Log())
}

// Interrupted while it waits, submit -wait says that the job it stored runs
// on, naming it: its id was never printed.
func TestSubmitWaitInterruptedNamesTheJob(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "0")
	p := e2e.Start(t, []string{"LABORO_NATS=" + s.url}, s.bin, "submit", "-wait", "-id", "kept", "true")
	require.Eventually(t, func() bool {
		out, _, _ := s.run("status", "kept")
		return regexp.MustCompile(`(?m)^kept\s+(waiting|dispatched)`).MatchString(out)
	}, 30*time.Second, 50*time.Millisecond, "the job is stored")
	require.NoError(t, p.Cmd.Process.Signal(os.Interrupt))
	assert.Equal(t, 130, p.Wait(t, 30*time.Second))
	assert.Contains(t, p.Log(), "laboro: interrupted; job kept runs on (laboro output kept waits for it, laboro cancel kept stops it)")
}

// A batch with a job cancelled while it ran and jobs that failed: the
// cancelled job is counted apart from the failures by status -watch, by
// status (whose table and -json say so too), by serve's "batch done" and
// by its console, which shows when it ran; status shows the first
// failures with their command, exit status and standard error, and how
// to list the rest, while -json answers as it did.
func TestServeSaysHowJobsEnded(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "2", "-http", "127.0.0.1:0")
	base := s.serve.Await(t, regexp.MustCompile(`console.*"url": "(http://[^/]+)/\?token=…"`), 20*time.Second)
	cc := consoleClient{t, base, e2e.Token(t, "laboro")}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	lines := []string{fmt.Sprintf("echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 300", pidFile), "echo ok"}
	for i := 1; i <= 7; i++ {
		lines = append(lines, fmt.Sprintf("echo oops-%d >&2; exit %d", i, i))
	}
	jobs := filepath.Join(dir, "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	_, errText, code := s.run("submit", "-batch", "mixed", "-f", jobs)
	require.Equal(t, 0, code, errText)
	require.Eventually(t, func() bool { _, err := os.Stat(pidFile); return err == nil }, 20*time.Second, 5*time.Millisecond,
		"the long job runs")
	_, errText, code = s.run("cancel", "mixed-1")
	require.Equal(t, 0, code, errText)

	out, _, code := s.run("status", "-watch", "mixed")
	assert.Equal(t, 1, code, "jobs did not succeed")
	assert.True(t, strings.HasPrefix(out, "batch mixed: 9 jobs, 1 succeeded, 7 failed, 1 cancelled\n"), out)
	s.serve.Await(t, regexp.MustCompile(`batch done.*"batch": "mixed", "jobs": 9, "succeeded": 1, "failed": 7, "cancelled": 1\}`),
		10*time.Second)

	out, _, code = s.run("status", "mixed")
	assert.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^BATCH\s+JOBS\s+WAITING\s+DISPATCHED\s+SUCCEEDED\s+FAILED\s+CANCELLED\s+SUBMITTED\nmixed\s+9\s+0\s+0\s+1\s+7\s+1\s`, out)
	assert.Contains(t, out, "\njobs that failed (the first 5 of 7):\n")
	assert.Regexp(t, `(?m)^mixed-3\s+failed\s+1\s+echo oops-1 >&2; exit 1\s+.*exit status 1$`, out)
	assert.Contains(t, out, "\nstandard error of mixed-3 (its end):\n  oops-1\n")
	assert.Contains(t, out, "\nstandard error of mixed-7 (its end):\n  oops-5\n")
	assert.NotContains(t, out, "mixed-8", "the first five only")
	assert.NotContains(t, out, "mixed-1 ", "cancelled: no failure")
	assert.True(t, strings.HasSuffix(out, "\n(2 more failed: laboro status -failed mixed lists every job that did not succeed)\n"), out)

	out, _, code = s.run("status", "-json", "mixed")
	assert.Equal(t, 0, code)
	var reply struct {
		Batches []map[string]any `json:"batches"`
		Jobs    []any            `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &reply), out)
	require.Len(t, reply.Batches, 1)
	assert.EqualValues(t, 8, reply.Batches[0]["failed"], "every end but success, as before")
	assert.EqualValues(t, 1, reply.Batches[0]["cancelled"])
	assert.Nil(t, reply.Jobs, "the answer for programs lists no job it was not asked for")

	type finished struct {
		ID, Status     string
		Started, Ended time.Time
	}
	var st struct {
		Batches []struct {
			Name              string
			Failed, Cancelled int
		} `json:"batches"`
		Finished []finished `json:"finished"`
	}
	cancelled := -1
	require.Eventually(t, func() bool {
		code, body := cc.call("GET", "/api/state", nil)
		if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
			return false
		}
		cancelled = slices.IndexFunc(st.Finished, func(f finished) bool { return f.ID == "mixed-1" })
		return cancelled >= 0
	}, 30*time.Second, 10*time.Millisecond, "the console lists the cancelled job: %+v", st)
	job := st.Finished[cancelled]
	assert.Equal(t, "cancelled", job.Status)
	assert.False(t, job.Started.IsZero(), "it ran: it started")
	assert.False(t, job.Ended.Before(job.Started), "it ended when cancelled: %v, started %v", job.Ended, job.Started)
	require.Len(t, st.Batches, 1)
	assert.Equal(t, 7, st.Batches[0].Failed)
	assert.Equal(t, 1, st.Batches[0].Cancelled)
}

// A job the console stops while it waits at the service is cancelled for
// good, as laboro cancel cancels it: recorded in the streams, it does not
// run when serve starts again.
func TestConsoleStopOutlivesARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	s := newSystem(t)
	s.start("-workers", "1", "-c", "1", "-http", "127.0.0.1:0")
	base := s.serve.Await(t, regexp.MustCompile(`console.*"url": "(http://[^/]+)/\?token=…"`), 20*time.Second)
	cc := consoleClient{t, base, e2e.Token(t, "laboro")}
	dir := t.TempDir()
	ran, release := filepath.Join(dir, "ran"), filepath.Join(dir, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o600) })
	lines := fmt.Sprintf("until [ -e %s ]; do sleep 0.01; done\necho stopped-job-ran > %s\n", release, ran)
	jobs := filepath.Join(dir, "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte(lines), 0o600))
	_, errText, code := s.run("submit", "-batch", "held", "-f", jobs)
	require.Equal(t, 0, code, errText)
	cc.await(1, 1, "one job out (-c 1), the other waits at the service")

	code, body := cc.call("POST", "/jobs/held-2/stop", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	out, _, _ := s.run("status", "held-2")
	assert.Regexp(t, `(?m)^held-2\s+cancelled\s`, out)

	// Stopped at once (two interrupts): the running job goes back to the
	// streams, for the next serve.
	require.NoError(t, s.serve.Cmd.Process.Signal(os.Interrupt))
	s.serve.Await(t, regexp.MustCompile(`stopping: the jobs running here finish`), 20*time.Second)
	require.NoError(t, s.serve.Cmd.Process.Signal(os.Interrupt))
	s.serve.Wait(t, time.Minute)
	s.start("-workers", "1", "-c", "1")
	require.NoError(t, os.WriteFile(release, nil, 0o600))
	out, _, code = s.run("status", "-watch", "held")
	assert.Equal(t, 1, code, out)
	assert.True(t, strings.HasPrefix(out, "batch held: 2 jobs, 1 succeeded, 1 cancelled\n"), out)
	assert.Regexp(t, `(?m)^held-2\s+cancelled\s`, out)
	_, err := os.Stat(ran)
	assert.ErrorIs(t, err, os.ErrNotExist, "the job stopped from the console ran after the restart")
}

// assertCounts asserts the counts of a record.
func assertCounts(t *testing.T, r map[string]any, want map[string]float64) {
	t.Helper()
	for field, n := range want {
		assert.Equal(t, n, r[field], "%s in %v", field, r)
	}
}

// With -log-format json, laboro run writes only JSON objects on standard
// error, on a terminal as on a pipe: its progress is records of the logger
// "progress" (no bar, no line of counts), its summary records of the
// logger "summary"; the jobs' outputs are on standard output as ever.
func TestRunJSONLogHasOnlyJSON(t *testing.T) {
	bin := build(t)
	jobs := filepath.Join(t.TempDir(), "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte("echo one\necho broken >&2; exit 4\necho three\n"), 0o600))
	for _, s := range e2e.Starters {
		t.Run(s.Where, func(t *testing.T) {
			p := s.Start(t, nil, nil, bin, "run", "-workers", "1", "-log-format", "json", "-f", jobs)
			require.Equal(t, 1, p.Wait(t, 2*time.Minute), p.Log())
			assert.Equal(t, "one\nthree\n", p.Stdout.String())
			progress := e2e.LastRecord(t, p.Log(), "progress")
			assertCounts(t, progress, map[string]float64{"done": 3, "total": 3, "failed": 1, "cancelled": 0})
			summary := e2e.LastRecord(t, p.Log(), "summary")
			assert.Equal(t, "warn", summary["level"], "the last: the job that failed")
			assert.Equal(t, "2", summary["id"])
			assert.Equal(t, "echo broken >&2; exit 4", summary["command"])
			assert.EqualValues(t, 4, summary["exit"])
			assert.Equal(t, "broken\n", summary["stderr"])
			assert.Contains(t, p.Log(), `"msg":"3 jobs: 2 succeeded, 1 failed","total":3,"succeeded":2,"failed":1,"cancelled":0`)
		})
	}
}

// With -log-format json, submit -wait and status -watch write only JSON
// objects on standard error, on a terminal as on a pipe: their progress is
// records of the logger "progress", which count the cancelled jobs apart
// from those that failed, as the summary does.
func TestSubmitAndWatchJSONLogHasOnlyJSON(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "2")
	env := []string{"LABORO_NATS=" + s.url}
	mixedBatch(t, s)
	dir := t.TempDir()
	short := filepath.Join(dir, "short.txt")
	require.NoError(t, os.WriteFile(short, []byte("echo a\nexit 2\n"), 0o600))
	for _, st := range e2e.Starters {
		t.Run("status -watch on a "+st.Where, func(t *testing.T) {
			p := st.Start(t, nil, env, s.bin, "status", "-watch", "-log-format", "json", "mixed")
			require.Equal(t, 1, p.Wait(t, 2*time.Minute), p.Log())
			assert.True(t, strings.HasPrefix(p.Stdout.String(), "batch mixed: 3 jobs, 1 succeeded, 1 failed, 1 cancelled\n"),
				p.Stdout.String())
			assertCounts(t, e2e.LastRecord(t, p.Log(), "progress"),
				map[string]float64{"done": 3, "total": 3, "failed": 1, "cancelled": 1})
		})
		t.Run("submit -wait on a "+st.Where, func(t *testing.T) {
			p := st.Start(t, nil, env, s.bin, "submit", "-wait", "-log-format", "json", "-f", short)
			require.Equal(t, 1, p.Wait(t, 2*time.Minute), p.Log())
			assert.Contains(t, p.Stdout.String(), ": 2 jobs, 1 succeeded, 1 failed\n")
			assertCounts(t, e2e.LastRecord(t, p.Log(), "progress"),
				map[string]float64{"done": 2, "total": 2, "failed": 1, "cancelled": 0})
		})
	}
}

// jsonRecord returns the record of a JSON log whose message contains msg,
// failing t if a line of the log is not JSON, or if there is none.
func jsonRecord(t *testing.T, log, msg string) map[string]any {
	t.Helper()
	for _, r := range e2e.JSONRecords(t, log) {
		if m, _ := r["msg"].(string); strings.Contains(m, msg) {
			return r
		}
	}
	require.Fail(t, "no record", "no record saying %q:\n%s", msg, log)
	return nil
}

// With -log-format json, what laboro run says beside its summary is JSON
// too: that a file holds no jobs, that the job log has them all, how a
// single job failed, where the console is, a usage error.
func TestRunJSONLogSaysAllInJSON(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	require.NoError(t, os.WriteFile(empty, []byte("# no job\n"), 0o600))
	jobs := filepath.Join(dir, "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte("true\n"), 0o600))
	run := func(args ...string) (string, string, int) {
		return runLaboro(t, bin, dir, append([]string{"run", "-log-format", "json"}, args...)...)
	}

	_, log, code := run("-f", empty)
	assert.Equal(t, 1, code, log)
	r := jsonRecord(t, log, "no jobs in "+empty)
	assert.Equal(t, "error", r["level"])
	assert.Equal(t, "laboro run", r["logger"])

	_, log, code = run("-joblog", "log.tsv", "-f", jobs)
	require.Equal(t, 0, code, log)
	_, log, code = run("-joblog", "log.tsv", "-resume", "-f", jobs)
	assert.Equal(t, 0, code, log)
	jsonRecord(t, log, "every job is in the job log already")

	out, log, code := run("echo out; echo why >&2; exit 3")
	assert.Equal(t, 3, code, log)
	assert.Equal(t, "out\n", out, "the job's output stays on standard output")
	r = jsonRecord(t, log, "job 1 failed")
	assert.Equal(t, "warn", r["level"])
	assert.Equal(t, "summary", r["logger"])
	assert.Equal(t, "echo out; echo why >&2; exit 3", r["command"])
	assert.EqualValues(t, 3, r["exit"])
	assert.Equal(t, "why\n", r["stderr"])

	_, log, code = run("-http", "127.0.0.1:0", "-f", jobs)
	assert.Equal(t, 0, code, log)
	r = jsonRecord(t, log, "console at http://")
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+/\?token=…$`, r["url"])
	assert.NotContains(t, log, e2e.Token(t, "laboro"))

	_, log, code = run("-workers", "0", "true")
	assert.Equal(t, 2, code, log)
	r = jsonRecord(t, log, "-workers 0: must be from 1 to")
	assert.Equal(t, "error", r["level"])
	assert.Contains(t, r["usage"], "usage: laboro run")
}

// With -log-format json, submit -wait, status, output and the errors of
// every command are JSON records: a single job's notes (no worker, no
// service), its failure, an interrupt and what runs on after it, a batch
// or a job unknown, NATS out of reach.
func TestSubmitJSONLogSaysAllInJSON(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "0") // no worker yet
	env := []string{"LABORO_NATS=" + s.url}
	dir := t.TempDir()
	jobs := filepath.Join(dir, "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte("true\ntrue\n"), 0o600))
	empty := filepath.Join(dir, "empty.txt")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))

	t.Run("a single job no worker takes, interrupted", func(t *testing.T) {
		p := e2e.Start(t, env, s.bin, "submit", "-wait", "-log-format", "json", "-id", "lone", "true")
		p.Await(t, regexp.MustCompile(`no worker has taken a job`), 2*time.Minute)
		require.NoError(t, p.Cmd.Process.Signal(os.Interrupt))
		assert.Equal(t, 130, p.Wait(t, 30*time.Second), p.Log())
		assert.Equal(t, "warn", jsonRecord(t, p.Log(), "laboro: no worker has taken a job")["level"])
		r := jsonRecord(t, p.Log(), "interrupted; job lone runs on")
		assert.Equal(t, "error", r["level"])
		assert.Empty(t, p.Stdout.String())
	})
	t.Run("a batch interrupted", func(t *testing.T) {
		p := e2e.Start(t, env, s.bin, "submit", "-wait", "-log-format", "json", "-batch", "cut", "-f", jobs)
		p.Await(t, regexp.MustCompile(`no worker has taken a job`), 2*time.Minute)
		require.NoError(t, p.Cmd.Process.Signal(os.Interrupt))
		assert.Equal(t, 130, p.Wait(t, 30*time.Second), p.Log())
		jsonRecord(t, p.Log(), "interrupted")
		assert.Equal(t, "info", jsonRecord(t, p.Log(), "batch cut runs on (laboro status -watch cut follows it)")["level"])
	})
	t.Run("unknown and empty", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			says string
		}{
			{[]string{"status", "-watch", "nosuch"}, "no batch nosuch"},
			{[]string{"status", "nosuch"}, "no job nosuch"},
			{[]string{"output", "nosuch"}, "no job nosuch"},
			{[]string{"submit", "-f", empty}, "no jobs in " + empty},
		} {
			p := e2e.Start(t, env, s.bin, append(tc.args[:1:1], append([]string{"-log-format", "json"}, tc.args[1:]...)...)...)
			assert.Equal(t, 1, p.Wait(t, time.Minute), "%q: %s", tc.args, p.Log())
			assert.Equal(t, "error", jsonRecord(t, p.Log(), tc.says)["level"], "%q", tc.args)
		}
	})
	t.Run("a single job that fails", func(t *testing.T) {
		e2e.Start(t, env, s.bin, "worker", "-c", "1")
		p := e2e.Start(t, env, s.bin, "submit", "-wait", "-log-format", "json", "-id", "bad", "echo out; echo why >&2; exit 3")
		assert.Equal(t, 3, p.Wait(t, 2*time.Minute), p.Log())
		assert.Equal(t, "out\n", p.Stdout.String(), "the job's output stays on standard output")
		r := jsonRecord(t, p.Log(), "job bad failed")
		assert.Equal(t, "warn", r["level"])
		assert.Equal(t, "summary", r["logger"])
		assert.Equal(t, "echo out; echo why >&2; exit 3", r["command"])
		assert.EqualValues(t, 3, r["exit"])
		assert.Equal(t, "why\n", r["stderr"])

		p = e2e.Start(t, env, s.bin, "output", "-log-format", "json", "bad")
		assert.Equal(t, 3, p.Wait(t, time.Minute), p.Log())
		jsonRecord(t, p.Log(), "job bad failed")
	})
	t.Run("NATS out of reach", func(t *testing.T) {
		addr := freeport.Addr(t) // nothing listens there
		p := e2e.Start(t, nil, s.bin, "status", "-log-format", "json", "-nats", "nats://bob:s3cret@"+addr)
		assert.Equal(t, 1, p.Wait(t, 30*time.Second), p.Log())
		assert.Equal(t, "warn", jsonRecord(t, p.Log(), "-nats carries credentials")["level"])
		r := jsonRecord(t, p.Log(), "cannot reach NATS")
		assert.Equal(t, "error", r["level"])
		assert.Equal(t, "laboro status", r["logger"])
		assert.NotContains(t, p.Log(), "s3cret")
	})
}

// With -log-format json, submit -wait's note that no service runs is a
// JSON record.
func TestSubmitJSONLogSaysNoService(t *testing.T) {
	bin := build(t)
	srv, err := jetstream.StartEmbedded(t.TempDir(), "127.0.0.1", -1) // NATS, and no service
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	p := e2e.Start(t, []string{"LABORO_NATS=" + srv.URL()}, bin, "submit", "-wait", "-log-format", "json", "-id", "x", "true")
	p.Await(t, regexp.MustCompile(`no service is running`), time.Minute)
	require.NoError(t, p.Cmd.Process.Signal(os.Interrupt))
	assert.Equal(t, 130, p.Wait(t, 30*time.Second), p.Log())
	assert.Equal(t, "warn", jsonRecord(t, p.Log(), "laboro: no service is running; the jobs wait for `laboro serve`")["level"])
	jsonRecord(t, p.Log(), "interrupted; job x runs on")
}

// mixedBatch submits the batch "mixed" to s and cancels its first job as
// it runs: once they end, mixed-1 is cancelled, mixed-2 succeeded and
// mixed-3 failed.
func mixedBatch(t *testing.T, s *system) {
	t.Helper()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	jobs := filepath.Join(dir, "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte(fmt.Sprintf("echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 300\n"+
		"echo ok\nexit 3\n", pidFile)), 0o600))
	_, errText, code := s.run("submit", "-batch", "mixed", "-f", jobs)
	require.Equal(t, 0, code, errText)
	require.Eventually(t, func() bool { _, err := os.Stat(pidFile); return err == nil }, 20*time.Second, 5*time.Millisecond,
		"the long job runs")
	_, errText, code = s.run("cancel", "mixed-1")
	require.Equal(t, 0, code, errText)
}

// status -watch's bar counts the cancelled jobs apart from those that
// failed, as its summary does, rather than among them.
func TestWatchCountsCancelledApart(t *testing.T) {
	s := newSystem(t)
	s.start("-workers", "2")
	mixedBatch(t, s)
	p := e2e.StartOnTerminal(t, nil, []string{"LABORO_NATS=" + s.url}, s.bin, "status", "-watch", "mixed")
	require.Equal(t, 1, p.Wait(t, 2*time.Minute), p.Log())
	assert.True(t, strings.HasPrefix(p.Stdout.String(), "batch mixed: 3 jobs, 1 succeeded, 1 failed, 1 cancelled\n"),
		p.Stdout.String())
	assert.Contains(t, p.Log(), "failed 1, cancelled 1", "the bar counts the cancelled job apart")
	assert.NotContains(t, p.Log(), "failed 2", "the cancelled job is not counted as failed")
}
