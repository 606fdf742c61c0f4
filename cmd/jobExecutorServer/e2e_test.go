package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { e2e.Main(m) }

// build compiles both binaries, once per test run.
func build(t testing.TB) (server, commander string) {
	return e2e.Build(t, "github.com/laboro-go/laboro/cmd/jobExecutorServer"), e2e.Build(t, "github.com/laboro-go/laboro/cmd/jobCommander")
}

// server is a running jobExecutorServer process.
type server struct {
	cmd       *exec.Cmd
	commander string
	host      string // a name, resolved by the commander
	port      string
	work      string // its working directory, where outputs go

	mu   sync.Mutex
	logs strings.Builder
	eof  chan struct{} // closed when its stderr ends
}

// startServer runs jobExecutorServer with args (port 0 is chosen by the
// system) in a fresh working directory, and waits until it serves.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	return startServerIn(t, t.TempDir(), args...)
}

// startServerIn is startServer with work as its working directory.
func startServerIn(t testing.TB, work string, args ...string) *server {
	t.Helper()
	bin, commander := build(t)
	s := &server{commander: commander, work: work, eof: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = s.work
	stderr, err := s.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, s.cmd.Start())
	addr := make(chan string, 1)
	re := regexp.MustCompile(`serving.*"addr": "([^"]+)"`)
	go func() {
		defer close(s.eof)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.logs.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.eof
		s.cmd.Wait()
	})
	select {
	case a := <-addr:
		host, port, _ := net.SplitHostPort(a)
		s.host, s.port = strings.Replace(host, "127.0.0.1", "localhost", 1), port
	case <-s.eof:
		t.Fatalf("the server did not start:\n%s", s.log())
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not start")
	}
	return s
}

func (s *server) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// logged reports how many log lines contain text.
func (s *server) logged(text string) int {
	return strings.Count(s.log(), text)
}

// wait waits for the server process to end and returns its error.
func (s *server) wait(t testing.TB) error {
	t.Helper()
	select {
	case <-s.eof:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not end")
	}
	return s.cmd.Wait()
}

// run runs one commander to its end: its stdout, stderr and exit status.
func (s *server) run(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	c := s.start(t, args...)
	return c.wait(t)
}

// runEnv is run with env added to the commander's environment.
func (s *server) runEnv(t testing.TB, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	c := s.startEnv(t, env, args...)
	return c.wait(t)
}

// commander is a running jobCommander process, read line by line.
type commander struct {
	cmd    *exec.Cmd
	lines  chan line
	stderr strings.Builder // read only after the process ended
}

// line is a line of a commander's output and when it was read.
type line struct {
	text string
	at   time.Time
}

func (s *server) start(t testing.TB, args ...string) *commander {
	t.Helper()
	return s.startEnv(t, nil, args...)
}

// startEnv starts a commander with env added to the tests' environment.
func (s *server) startEnv(t testing.TB, env []string, args ...string) *commander {
	t.Helper()
	c := &commander{lines: make(chan line, 1024)}
	c.cmd = exec.Command(s.commander, append([]string{s.host, s.port}, args...)...)
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Dir = s.work
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.cmd.Start())
	go func() {
		defer close(c.lines)
		r := bufio.NewReader(stdout)
		for {
			text, err := r.ReadString('\n')
			if text != "" {
				c.lines <- line{text, time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		for range c.lines {
		}
		c.cmd.Wait()
	})
	return c
}

// next returns the commander's next line, failing after a generous wait.
func (c *commander) next(t testing.TB) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		require.True(t, ok, "the commander ended early")
		return l.text
	case <-time.After(30 * time.Second):
		t.Fatal("no line from the commander")
		return ""
	}
}

// quiet asserts that the commander prints nothing for d: it is blocked.
func (c *commander) quiet(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case l := <-c.lines:
		t.Fatalf("the commander should be blocked, but printed %q", l.text)
	case <-time.After(d):
	}
}

// wait reads the commander's remaining output and its exit status.
func (c *commander) wait(t testing.TB) (stdout, stderr string, code int) {
	t.Helper()
	var out strings.Builder
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if ok {
				out.WriteString(l.text)
				continue
			}
		case <-timeout:
			t.Fatal("the commander did not end")
		}
		break
	}
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), c.stderr.String(), code
}

// gate is a shell command that waits until the file go exists in the
// server's working directory, then prints what.
func gate(what string) []string {
	return []string{"sh", "-c", "while [ ! -e go ]; do sleep 0.01; done; echo " + what}
}

func (s *server) open(t testing.TB) {
	require.NoError(t, os.WriteFile(filepath.Join(s.work, "go"), nil, 0o644))
}

// outputsLeft lists the <pid>.output files left in the working directory.
func (s *server) outputsLeft(t testing.TB) []string {
	entries, err := os.ReadDir(s.work)
	require.NoError(t, err)
	var left []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".output") {
			left = append(left, e.Name())
		}
	}
	return left
}

// A server whose port the system chose says which at every log level, or
// no commander could reach it.
func TestServingAddressIsSaidAtEveryLogLevel(t *testing.T) {
	for _, level := range []string{"warn", "error"} {
		t.Run(level, func(t *testing.T) {
			s := startServer(t, "0", "4", "2", "-log", level)
			assert.NotEqual(t, "0", s.port)
			stdout, _, code := s.run(t, "issueJob", "echo", "reached")
			assert.Equal(t, 0, code)
			assert.Contains(t, stdout, "reached")
		})
	}
}

// startNamed starts a commander's job that writes "partial" to its output,
// and returns once the output file has its name (the job sees it, and says
// so through a fifo): the file a server killed now leaves behind. Where
// servers note their outputs, the job waits for its own to be noted too.
func (s *server) startNamed(t testing.TB) (output string) {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "named")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	// Opened for reading and writing, a fifo does not block its opener;
	// the read below waits for the job's line, with a deadline.
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	s.start(t, "issueJob", "sh", "-c",
		`echo partial; o=$$.output
		until [ -e $o ] && { ! ls .jobExecutorServer-*.outputs >/dev/null 2>&1 || grep -qx "+ $o" .jobExecutorServer-*.outputs; }; do sleep 0.01; done
		echo $o >`+fifo+`; exec sleep 1000`)
	require.NoError(t, f.SetReadDeadline(time.Now().Add(30*time.Second)))
	name, err := bufio.NewReader(f).ReadString('\n')
	require.NoError(t, err, "the job did not start")
	return strings.TrimSpace(name)
}

// A server killed with SIGKILL leaves the outputs of its running jobs; the
// next server started on the same directory removes them, and touches
// neither a live server's outputs nor a user's own file of that form.
func TestRestartRemovesAKilledServersOutputs(t *testing.T) {
	work := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(work, "42.output"), []byte("mine\n"), 0o644))
	live := startServerIn(t, work, "0", "4", "2")
	liveOut := live.startNamed(t)
	killed := startServerIn(t, work, "0", "4", "2")
	left := killed.startNamed(t)
	require.NoError(t, killed.cmd.Process.Kill())
	require.Error(t, killed.wait(t))
	require.FileExists(t, filepath.Join(work, left), "left behind by the killed server")

	next := startServerIn(t, work, "0", "4", "2")
	assert.NoFileExists(t, filepath.Join(work, left), "removed by the next server")
	assert.Contains(t, next.log(), "removed the outputs a killed server left")
	assert.Contains(t, next.log(), left)
	assert.FileExists(t, filepath.Join(work, liveOut), "a live server's output is not touched")
	mine, err := os.ReadFile(filepath.Join(work, "42.output"))
	require.NoError(t, err, "a user's file is not touched")
	assert.Equal(t, "mine\n", string(mine))
	stdout, _, code := next.run(t, "issueJob", "echo", "served")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "served")
}

// The example session of the specification, on local files and commands.
func TestExampleSession(t *testing.T) {
	s := startServer(t, "0", "8", "5")
	require.NoError(t, os.WriteFile(filepath.Join(s.work, "file1"), []byte("a keyword here\nnothing\nkeyword again\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(s.work, "file2"), []byte("contents of file2\n"), 0o644))

	out, _, code := s.run(t, "issueJob", "ls", "file1", "file2")
	assert.Equal(t, "JOB <job_1, ls file1 file2> SUBMITTED\n-----job_1 output start-----\nfile1\nfile2\n-----job_1 output end-----\n", out)
	assert.Equal(t, 0, code)
	out, _, _ = s.run(t, "setConcurrency", "2")
	assert.Equal(t, "CONCURRENCY SET AT 2\n", out)
	out, _, _ = s.run(t, "issueJob", "grep", "keyword here", "file1")
	assert.Equal(t, "JOB <job_2, grep 'keyword here' file1> SUBMITTED\n-----job_2 output start-----\na keyword here\n-----job_2 output end-----\n", out)
	out, _, _ = s.run(t, "issueJob", "cat", "file2")
	assert.Equal(t, "JOB <job_3, cat file2> SUBMITTED\n-----job_3 output start-----\ncontents of file2\n-----job_3 output end-----\n", out)
	out, _, code = s.run(t, "issueJob", "sh", "-c", "sleep 0.2; printf 'a   b'")
	assert.Equal(t, "JOB <job_4, sh -c 'sleep 0.2; printf '\\''a   b'\\'''> SUBMITTED\n-----job_4 output start-----\na   b\n-----job_4 output end-----\n", out,
		"argument boundaries survive; a missing last newline is added before the end marker")
	assert.Equal(t, 0, code)
	out, _, code = s.run(t, "issueJob", "no-such-program")
	assert.Equal(t, "JOB <job_5, no-such-program> SUBMITTED\n-----job_5 output start-----\n-----job_5 output end-----\n", out)
	assert.Equal(t, 1, code)
	out, errOut, code := s.run(t, "issueJob", "sh", "-c", "exit 7")
	assert.Contains(t, out, "-----job_6 output end-----\n")
	assert.Equal(t, 7, code, "the commander's status is the job's")
	assert.Equal(t, "jobCommander: the job exited with status 7\n", errOut, "and said, as a status alone could be the commander's own")
	// Why a job failed: the end of its standard error, on the commander's
	// standard error; its standard output stays as the protocol frames it.
	out, errOut, code = s.run(t, "issueJob", "ls", "no-such-file") // in the server's own temporary directory
	assert.Equal(t, "JOB <job_7, ls no-such-file> SUBMITTED\n-----job_7 output start-----\n-----job_7 output end-----\n", out)
	assert.Equal(t, 2, code)
	assert.Equal(t, "jobCommander: the job's standard error (its end):\n  ls: cannot access 'no-such-file': No such file or directory\n"+
		"jobCommander: the job exited with status 2\n", errOut)
	out, _, _ = s.run(t, "poll")
	assert.Equal(t, "", out)
	out, _, code = s.run(t, "stop", "job_1")
	assert.Equal(t, "JOB <job_1> NOTFOUND\n", out)
	assert.Equal(t, 1, code, "nothing stopped")
	out, _, _ = s.run(t, "stop", "job_15")
	assert.Equal(t, "JOB <job_15> NOTFOUND\n", out)
	out, _, code = s.run(t, "exit")
	assert.Equal(t, "SERVER TERMINATED\n", out)
	assert.Equal(t, 0, code)
	require.NoError(t, s.wait(t), "the server ends with status 0")
	assert.Empty(t, s.outputsLeft(t))
}

// startEnd parses the two timestamps that a timed job prints.
func startEnd(t *testing.T, out string) (start, end float64) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^start (\d+\.\d+)\nend (\d+\.\d+)$`).FindStringSubmatch(out)
	require.NotNil(t, m, "no timestamps in %q", out)
	start, _ = strconv.ParseFloat(m[1], 64)
	end, _ = strconv.ParseFloat(m[2], 64)
	return start, end
}

// Concurrency is observed from the jobs' own clocks: at 1 the three sleeps
// run one after another, at 3 they overlap.
func TestConcurrencyObserved(t *testing.T) {
	s := startServer(t, "0", "16", "4")
	sleeps := func() [][2]float64 {
		var cs []*commander
		for range 3 {
			cs = append(cs, s.start(t, "issueJob", "sh", "-c", "echo start $(date +%s.%N); sleep 1; echo end $(date +%s.%N)"))
		}
		var spans [][2]float64
		for _, c := range cs {
			out, _, code := c.wait(t)
			require.Equal(t, 0, code, out)
			start, end := startEnd(t, out)
			spans = append(spans, [2]float64{start, end})
		}
		slices.SortFunc(spans, func(a, b [2]float64) int { return int((a[0] - b[0]) * 1e9) })
		return spans
	}

	spans := sleeps()
	for i := 1; i < len(spans); i++ {
		assert.GreaterOrEqual(t, spans[i][0], spans[i-1][1], "at concurrency 1, job %d started before the one before it ended: %v", i, spans)
	}

	out, _, _ := s.run(t, "setConcurrency", "3")
	require.Equal(t, "CONCURRENCY SET AT 3\n", out)
	spans = sleeps()
	lastStart, firstEnd := spans[2][0], spans[0][1]
	for _, sp := range spans {
		firstEnd = min(firstEnd, sp[1])
	}
	assert.Less(t, lastStart, firstEnd, "at concurrency 3 the three sleeps should overlap: %v", spans)
}

// With a buffer of 2 and one job at a time, the fourth issueJob blocks
// until a place frees; stop and poll see exactly the queued jobs.
func TestFullBufferStopAndPoll(t *testing.T) {
	s := startServer(t, "0", "2", "1")
	first := s.start(t, append([]string{"issueJob"}, gate("one")...)...)
	require.Equal(t, "JOB <job_1, sh -c 'while [ ! -e go ]; do sleep 0.01; done; echo one'> SUBMITTED\n", first.next(t))
	require.Eventually(t, func() bool { out, _, _ := s.run(t, "poll"); return out == "" }, 10*time.Second, 10*time.Millisecond, "job_1 runs")

	second := s.start(t, "issueJob", "echo", "two")
	assert.Equal(t, "JOB <job_2, echo two> SUBMITTED\n", second.next(t))
	third := s.start(t, "issueJob", "echo", "three")
	assert.Equal(t, "JOB <job_3, echo three> SUBMITTED\n", third.next(t))
	fourth := s.start(t, "issueJob", "echo", "four")
	fourth.quiet(t, 500*time.Millisecond)

	out, _, _ := s.run(t, "poll")
	assert.Equal(t, "<job_2, echo two>\n<job_3, echo three>\n", out, "the blocked job is not in the buffer")

	out, _, _ = s.run(t, "stop", "job_2")
	assert.Equal(t, "JOB <job_2> REMOVED\n", out)
	assert.Equal(t, "JOB <job_4, echo four> SUBMITTED\n", fourth.next(t), "the freed place goes to the blocked job")
	out, _, code := second.wait(t)
	assert.Equal(t, "JOB <job_2> REMOVED\n", out, "the stopped job's commander is told")
	assert.Equal(t, 1, code)

	out, _, _ = s.run(t, "poll")
	assert.Equal(t, "<job_3, echo three>\n<job_4, echo four>\n", out)
	js, err := exec.Command(s.commander, "-json", s.host, s.port, "poll").Output()
	require.NoError(t, err)
	assert.JSONEq(t, `[{"id": "job_3", "command": "echo three"}, {"id": "job_4", "command": "echo four"}]`, string(js))
	for _, id := range []string{"job_1", "job_2", "job_99", "nonsense"} {
		out, _, code = s.run(t, "stop", id)
		assert.Equal(t, "JOB <"+id+"> NOTFOUND\n", out, "running, already removed and unknown ids")
		assert.Equal(t, 1, code, "nothing stopped")
	}

	s.open(t)
	for i, c := range []*commander{first, third, fourth} {
		out, _, code := c.wait(t)
		id := []string{"job_1", "job_3", "job_4"}[i]
		word := []string{"one", "three", "four"}[i]
		assert.Equal(t, "-----"+id+" output start-----\n"+word+"\n-----"+id+" output end-----\n", strings.TrimPrefix(out, fmt.Sprintf("JOB <%s, echo %s> SUBMITTED\n", id, word)))
		assert.Equal(t, 0, code)
	}
	assert.Empty(t, s.outputsLeft(t))
}

// exit with a job running, two queued and one blocked on the full buffer:
// the exit commander is answered at once; every other commander gets its
// message, commands during the drain are refused, and the server ends with
// status 0 once the running job is delivered.
func TestExitDrains(t *testing.T) {
	s := startServer(t, "0", "2", "1")
	running := s.start(t, append([]string{"issueJob"}, gate("finished")...)...)
	running.next(t)
	require.Eventually(t, func() bool { out, _, _ := s.run(t, "poll"); return out == "" }, 10*time.Second, 10*time.Millisecond)
	var queued []*commander
	for _, w := range []string{"two", "three"} {
		c := s.start(t, "issueJob", "echo", w)
		c.next(t)
		queued = append(queued, c)
	}
	blocked := s.start(t, "issueJob", "echo", "four")
	blocked.quiet(t, 300*time.Millisecond)

	out, stderr, code := s.run(t, "exit")
	assert.Equal(t, "SERVER TERMINATED\n", out, "answered while job_1 runs; stderr %q", stderr)
	assert.Equal(t, 0, code)
	for _, c := range append(queued, blocked) {
		out, _, code := c.wait(t)
		assert.Equal(t, "SERVER TERMINATED BEFORE EXECUTION\n", out)
		assert.Equal(t, 1, code)
	}
	for _, cmd := range [][]string{{"poll"}, {"issueJob", "echo", "late"}, {"setConcurrency", "4"}, {"exit"}} {
		out, stderr, code := s.run(t, cmd...)
		assert.Empty(t, out, "%v", cmd)
		assert.Contains(t, stderr, "server is terminating", "%v", cmd)
		assert.Equal(t, 1, code, "%v", cmd)
	}
	select {
	case <-s.eof:
		t.Fatal("the server ended before job_1 was delivered")
	default:
	}

	s.open(t)
	out, _, code = running.wait(t)
	assert.Equal(t, "-----job_1 output start-----\nfinished\n-----job_1 output end-----\n", out)
	assert.Equal(t, 0, code)
	require.NoError(t, s.wait(t), "the server ends with status 0")
	assert.Empty(t, s.outputsLeft(t))
}

// A first Ctrl-C drains as exit does: the queued job's commander is told,
// commands are refused, the running job finishes and is delivered, and
// the server ends with status 0. A second one, on a server draining a job
// that will not end, kills it: its commander is told why, and the server
// ends with status 130.
func TestInterruptDrainsThenKills(t *testing.T) {
	s := startServer(t, "0", "2", "1")
	running := s.start(t, append([]string{"issueJob"}, gate("finished")...)...)
	running.next(t)
	require.Eventually(t, func() bool { out, _, _ := s.run(t, "poll"); return out == "" }, 10*time.Second, 10*time.Millisecond)
	queued := s.start(t, "issueJob", "echo", "two")
	queued.next(t)

	require.NoError(t, s.cmd.Process.Signal(os.Interrupt))
	out, _, code := queued.wait(t)
	assert.Equal(t, "SERVER TERMINATED BEFORE EXECUTION\n", out)
	assert.Equal(t, 1, code)
	_, stderr, code := s.run(t, "poll")
	assert.Contains(t, stderr, "server is terminating")
	assert.Equal(t, 1, code)
	s.open(t)
	out, _, code = running.wait(t)
	assert.Equal(t, "-----job_1 output start-----\nfinished\n-----job_1 output end-----\n", out)
	assert.Equal(t, 0, code)
	require.NoError(t, s.wait(t), "the server ends with status 0")
	assert.Contains(t, s.log(), "interrupted: draining as exit does")

	s = startServer(t, "0", "2", "1")
	stuck := s.start(t, "issueJob", "sleep", "1000")
	stuck.next(t)
	require.Eventually(t, func() bool { return len(s.outputsLeft(t)) == 1 }, 10*time.Second, 10*time.Millisecond, "the job started")
	require.NoError(t, s.cmd.Process.Signal(os.Interrupt))
	require.Eventually(t, func() bool { return s.logged("interrupted: draining") == 1 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, s.cmd.Process.Signal(os.Interrupt))
	out, stderr, code = stuck.wait(t)
	assert.Equal(t, "-----job_1 output start-----\n-----job_1 output end-----\n", out)
	assert.Equal(t, "jobCommander: job killed\n", stderr)
	assert.Equal(t, 1, code)
	var ee *exec.ExitError
	require.ErrorAs(t, s.wait(t), &ee)
	assert.Equal(t, 130, ee.ExitCode())
	assert.Empty(t, s.outputsLeft(t))
	assert.Regexp(t, `job killed.*"job": "job_1", "command": "sleep 1000", "status": "killed"`, s.log(), "the server says which jobs it killed")
}

// What the student test scripts do: a long job, exit, then the job is
// killed. exit is answered at once, the killed job's commander gets its
// (empty) output, and the server ends.
func TestExitThenStopLongJob(t *testing.T) {
	s := startServer(t, "0", "8", "4")
	long := s.start(t, "issueJob", "sleep", "1000")
	assert.Equal(t, "JOB <job_1, sleep 1000> SUBMITTED\n", long.next(t))
	pid := 0 // the job's, from its <pid>.output
	require.Eventually(t, func() bool {
		for _, f := range s.outputsLeft(t) {
			if n, err := strconv.Atoi(strings.TrimSuffix(f, ".output")); err == nil {
				pid = n
			}
		}
		return pid != 0
	}, 10*time.Second, 10*time.Millisecond)

	out, stderr, code := s.run(t, "exit")
	assert.Equal(t, "SERVER TERMINATED\n", out, "stderr %q", stderr)
	assert.Equal(t, 0, code)

	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	out, _, code = long.wait(t)
	assert.Equal(t, "-----job_1 output start-----\n-----job_1 output end-----\n", out)
	assert.Equal(t, 1, code, "a job killed by a signal")
	require.NoError(t, s.wait(t), "the server ends with status 0")
}

// A jobCommander pointed at something that is not a laboro
// jobExecutorServer says so and ends with status 1, within a few seconds,
// however the peer takes the request: silence (as the student servers
// do), closing, or bytes of another protocol.
func TestCommanderNotServer(t *testing.T) {
	_, commander := build(t)
	peers := map[string]func(net.Conn){
		"silent": func(c net.Conn) { io.Copy(io.Discard, c) },
		"closes": func(c net.Conn) { c.Read(make([]byte, 64)) },
		"http": func(c net.Conn) {
			c.Read(make([]byte, 64))
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
		},
	}
	for name, peer := range peers {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer ln.Close()
			wg.Go(func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					wg.Go(func() {
						defer c.Close()
						c.SetDeadline(time.Now().Add(30 * time.Second))
						peer(c)
					})
				}
			})
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			start := time.Now()
			cmd := exec.Command(commander, "localhost", port, "issueJob", "sleep", "1000")
			cmd.WaitDelay = time.Second
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "%s", out)
			assert.Equal(t, 1, ee.ExitCode())
			assert.Contains(t, string(out), "jobCommander: jobexec: not a laboro jobExecutorServer: localhost:"+port)
			assert.Less(t, time.Since(start), 15*time.Second, "the default acknowledgement timeout is 5 s")
		})
	}
}

// openFiles counts a process's open file descriptors.
func openFiles(t *testing.T, pid int) int {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skip("no /proc here")
	}
	return len(entries)
}

// 200 commanders at once, each printing a unique line: every output
// arrives exactly once, at its own commander, and the server holds no more
// descriptors afterwards than before.
func TestLoad(t *testing.T) {
	s := startServer(t, "0", "64", "4")
	out, _, _ := s.run(t, "setConcurrency", "4")
	require.Equal(t, "CONCURRENCY SET AT 4\n", out)
	// A first job starts the process's watcher of jobs (laboro's reaper),
	// which holds a descriptor for good: counted before.
	_, _, code := s.run(t, "issueJob", "true")
	require.Equal(t, 0, code)
	before := openFiles(t, s.cmd.Process.Pid)

	const n = 200
	cs := make([]*commander, n)
	for i := range cs {
		cs[i] = s.start(t, "issueJob", "echo", fmt.Sprintf("unique-%03d", i))
	}
	ids := map[string]int{}
	re := regexp.MustCompile(`^JOB <(job_\d+), echo (unique-\d+)> SUBMITTED\n-----(job_\d+) output start-----\n(unique-\d+)\n-----(job_\d+) output end-----\n$`)
	for i, c := range cs {
		out, stderr, code := c.wait(t)
		want := fmt.Sprintf("unique-%03d", i)
		m := re.FindStringSubmatch(out)
		if !assert.NotNil(t, m, "commander %d printed %q (stderr %q)", i, out, stderr) {
			continue
		}
		assert.Equal(t, []string{want, want}, []string{m[2], m[4]}, "commander %d", i)
		assert.Equal(t, []string{m[1], m[1]}, []string{m[3], m[5]}, "commander %d", i)
		assert.Equal(t, 0, code)
		ids[m[1]]++
	}
	assert.Len(t, ids, n, "every job has its own id")
	for id := range ids {
		num, err := strconv.Atoi(strings.TrimPrefix(id, "job_"))
		require.NoError(t, err)
		assert.True(t, num >= 2 && num <= n+1, "id %s (job_1 was the first job)", id)
	}
	assert.Eventually(t, func() bool { return openFiles(t, s.cmd.Process.Pid) <= before }, 10*time.Second, 10*time.Millisecond,
		"server descriptors: %d before, %d after", before, openFiles(t, s.cmd.Process.Pid))
	assert.Empty(t, s.outputsLeft(t))
}

// A commander interrupted with Ctrl-C leaves with status 130; the server
// runs its job on, discards the output, removes the file, logs it, and
// keeps serving.
func TestCommanderInterrupted(t *testing.T) {
	s := startServer(t, "0", "4", "1")
	c := s.start(t, append([]string{"issueJob"}, gate("lost")...)...)
	c.next(t)
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGINT))
	out, stderr, code := c.wait(t)
	assert.Empty(t, out)
	assert.Contains(t, stderr, "interrupted")
	assert.Equal(t, 130, code)
	require.Eventually(t, func() bool { return s.logged("its job runs on") == 1 }, 10*time.Second, 10*time.Millisecond, s.log())

	s.open(t)
	require.Eventually(t, func() bool { return s.logged("output discarded") == 1 }, 10*time.Second, 10*time.Millisecond, s.log())
	assert.Empty(t, s.outputsLeft(t))
	out, _, code = s.run(t, "issueJob", "echo", "next")
	assert.Equal(t, "JOB <job_2, echo next> SUBMITTED\n-----job_2 output start-----\nnext\n-----job_2 output end-----\n", out)
	assert.Equal(t, 0, code)
}

// Garbage, a 4 GiB length and a half frame that stalls each cost only their
// own connection, and are logged; others are served meanwhile.
func TestBadInput(t *testing.T) {
	s := startServer(t, "0", "4", "1", "-request-timeout", "500ms")
	addr := net.JoinHostPort(s.host, s.port)
	inputs := [][]byte{
		[]byte("\x00garbage that is not a frame at all"),
		{0xff, 0xff, 0xff, 0xff, 'Q'},
		{0, 0, 0, 64, 'Q', 1, 0, 4}, // half a frame, then silence
	}
	var wg sync.WaitGroup
	for i, in := range inputs {
		wg.Go(func() {
			conn, err := net.Dial("tcp", addr)
			if !assert.NoError(t, err) {
				return
			}
			defer conn.Close()
			_, err = conn.Write(in)
			assert.NoError(t, err)
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err = io.ReadAll(conn)
			var ne net.Error
			assert.False(t, errors.As(err, &ne) && ne.Timeout(), "input %d: the server kept the connection open", i)
		})
	}
	out, _, code := s.run(t, "issueJob", "echo", "served")
	assert.Contains(t, out, "\nserved\n")
	assert.Equal(t, 0, code)
	wg.Wait()
	assert.Eventually(t, func() bool { return s.logged("bad request") == 3 }, 10*time.Second, 10*time.Millisecond, s.log())
}

// A server requires a token by default: it creates it at its first start,
// in a file its user alone can read, where jobCommander finds it. A
// commander without it (another account) or with another token is refused
// with a message that says what to do, and no job ever sees the token.
func TestToken(t *testing.T) {
	s := startServer(t, "0", "4", "1")
	tok := e2e.Token(t, "jobexec") // made at its first start, its user's alone
	require.Len(t, tok, 64)
	out, _, code := s.run(t, "issueJob", "env")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "PATH=")
	assert.NotContains(t, out, tok, "a job sees the token")

	out, stderr, code := s.runEnv(t, []string{"LABORO_STATE_DIR=" + t.TempDir()}, "issueJob", "touch", "pwned")
	assert.Empty(t, out)
	assert.Contains(t, stderr, "wrong token")
	assert.Contains(t, stderr, "set LABORO_TOKEN")
	assert.Equal(t, 1, code)
	for _, wrong := range []string{"s3cret", tok[:len(tok)-1], tok + "0"} {
		out, stderr, code := s.runEnv(t, []string{"LABORO_TOKEN=" + wrong}, "issueJob", "touch", "pwned")
		assert.Empty(t, out)
		assert.Contains(t, stderr, "the server did not prove it holds the token")
		assert.Contains(t, stderr, "the server has another token")
		assert.Equal(t, 1, code)
	}
	require.Eventually(t, func() bool { return strings.Contains(s.log(), "commander left after the server's proof") }, 10*time.Second, 10*time.Millisecond)
	assert.NoFileExists(t, filepath.Join(s.work, "pwned"))

	// LABORO_TOKEN, when set, is the token, beyond loopback too if it is
	// long enough to guard it; the server's jobs do not see it either.
	bin, _ := build(t)
	short := exec.Command(bin, "0", "4", "1", "-listen", "0.0.0.0")
	short.Env = append(os.Environ(), "LABORO_TOKEN=s3cret")
	shortOut, err := short.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", shortOut)
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, string(shortOut), `$LABORO_TOKEN holds 6 characters; a server listening on 0.0.0.0 needs at least 16`)
	t.Setenv("LABORO_TOKEN", "s3cret-s3cret-s3cret")
	s = startServer(t, "0", "4", "1", "-listen", "0.0.0.0")
	out, _, code = s.run(t, "issueJob", "env")
	assert.Equal(t, 0, code)
	assert.NotContains(t, out, "s3cret")
	_, stderr, code = s.runEnv(t, []string{"LABORO_TOKEN=" + tok}, "poll")
	assert.Contains(t, stderr, "the server did not prove it holds the token")
	assert.Equal(t, 1, code)
}

func TestServerUsage(t *testing.T) {
	server, _ := build(t)
	missing := filepath.Join(t.TempDir(), "missing", "outputs")
	for _, args := range [][]string{{}, {"7856", "0", "5"}, {"7856", "8", "0"}, {"x", "8", "5"}, {"70000", "8", "5"}, {"7856", "8", "5", "-bogus"}, {"7856", "8", "5", "-request-timeout", "0s"},
		{"0", "8", "5", "-dir", missing}, {"0", "8", "1000000"}, {"-listen", "127.0.0.1", "0", "8"}} {
		cmd := exec.Command(server, args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
		assert.True(t, strings.HasPrefix(string(out), "jobExecutorServer: "), "%v: %s", args, out)
		assert.Contains(t, string(out), "\nusage: jobExecutorServer portNum bufferSize threadPoolSize", "%v", args)
		if slices.Contains(args, "-dir") {
			assert.Contains(t, string(out), fmt.Sprintf("jobExecutorServer: -dir %q: no such file or directory", missing))
		}
	}
	out, _ := exec.Command(server, "0", "8", "1000000").CombinedOutput()
	assert.Contains(t, string(out), `threadPoolSize "1000000": must be a number from 1 to 10000`, "refused before a goroutine is started for each")
	// The three numbers may follow the flags.
	s := startServer(t, "-listen", "127.0.0.1", "0", "4", "1")
	out2, _, code := s.run(t, "issueJob", "echo", "after the flags")
	assert.Equal(t, 0, code)
	assert.Contains(t, out2, "after the flags\n")
}

// --help and --version answer on standard output, with status 0.
func TestHelpAndVersion(t *testing.T) {
	server, commander := build(t)
	for _, bin := range []string{server, commander} {
		cmd := exec.Command(bin, "--help")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "%s --help", bin)
		assert.Empty(t, stderr.String())
		assert.Contains(t, string(out), "usage: "+filepath.Base(bin))
		assert.Contains(t, string(out), "-version")
		out, err = exec.Command(bin, "--version").Output()
		require.NoError(t, err)
		assert.Regexp(t, "^"+filepath.Base(bin)+" .*go1", string(out))
	}
	out, err := exec.Command(server, "--help").Output()
	require.NoError(t, err)
	for _, flag := range []string{"-listen", "-dir", "-log", "-request-timeout"} {
		assert.Contains(t, string(out), flag)
	}
	out, err = exec.Command(commander, "--help").Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "-ack-timeout")
}

func TestCommanderUsage(t *testing.T) {
	_, commander := build(t)
	for _, args := range [][]string{{}, {"localhost"}, {"localhost", "7856"}, {"localhost", "x", "poll"}, {"localhost", "0", "poll"}, {"localhost", "7856", "frobnicate"},
		{"-ack-timeout", "0s", "localhost", "7856", "poll"}, {"-ack-timeout", "soon", "localhost", "7856", "poll"},
		// A command's arguments are checked before anything is sent (no
		// server listens at 7856 here: a usage error, not a refused
		// connection).
		{"localhost", "7856", "issueJob"}, {"localhost", "7856", "issueJob", " "},
		{"localhost", "7856", "setConcurrency"}, {"localhost", "7856", "setConcurrency", "x"},
		{"localhost", "7856", "setConcurrency", "-1"}, {"localhost", "7856", "setConcurrency", "1", "2"},
		{"localhost", "7856", "stop"}, {"localhost", "7856", "stop", "job_1", "job_2"},
		{"localhost", "7856", "poll", "extra"}, {"localhost", "7856", "exit", "extra"}} {
		out, err := exec.Command(commander, args...).CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
		assert.True(t, strings.HasPrefix(string(out), "jobCommander: "), "%v: %s", args, out)
		assert.Contains(t, string(out), "\nusage: jobCommander [-ack-timeout D] [-json] serverName portNum", "%v", args)
	}
	// A flag after the address: where it goes, said.
	out, err := exec.Command(commander, "localhost", "7856", "-json", "poll").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "jobCommander: -json after serverName and portNum: flags go before them (jobCommander -json localhost 7856 …)")
	// No server there: status 1 and a reason.
	port := strconv.Itoa(freeport.Port(t)) // nothing listens there
	out, err = exec.Command(commander, "127.0.0.1", port, "poll").CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, string(out), "no jobExecutorServer answers at 127.0.0.1:"+port+" (is it running, on this port?)")
	assert.Contains(t, string(out), "connection refused")
}

// -http serves the console and the metrics, behind the server's token,
// and only on the loopback unless told otherwise.
func TestConsoleAndMetrics(t *testing.T) {
	s := startServer(t, "0", "4", "2", "-http", "127.0.0.1:0")
	re := regexp.MustCompile(`console.*"url": "(http://[^/]+)/\?token=…"`)
	require.Eventually(t, func() bool { return re.MatchString(s.log()) }, 20*time.Second, time.Millisecond, s.log())
	base := re.FindStringSubmatch(s.log())[1]
	token := e2e.Token(t, "jobexec")
	assert.NotContains(t, s.log(), token, "the token is never logged")

	_, _, code := s.run(t, "issueJob", "sh", "-c", "echo out; echo why >&2; exit 3")
	require.Equal(t, 3, code, "the job's exit status")
	getAuth := func(path, tok string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	var body string
	require.Eventually(t, func() bool {
		code, body = getAuth("/metrics", token)
		return code == http.StatusOK && strings.Contains(body, `laboro_jobs_finished_total{status="failed"} 1`)
	}, 20*time.Second, 10*time.Millisecond, "the job's end in the metrics: %s", body)
	assert.Contains(t, body, "laboro_concurrency 1")
	code, body = getAuth("/api/state", token)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"stderr":"why\n"`)
	code, _ = getAuth("/metrics", "wrong")
	assert.Equal(t, http.StatusUnauthorized, code)

	bin, _ := build(t)
	out, err := exec.Command(bin, "0", "4", "2", "-http", "0.0.0.0:0").CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Contains(t, string(out), "-http-public")
}
