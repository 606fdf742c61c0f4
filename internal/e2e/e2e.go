// Package e2e runs the project's binaries in end-to-end tests: it builds
// them once per test binary, starts them as processes whose standard error
// is collected, and cleans up after them.
package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var (
	binDir string
	builds sync.Map // import path → *build
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Main runs a package's tests under goleak, and removes the binaries they
// built once they are done. Call it from TestMain.
//
// The binaries it starts keep their state (the token files of servers,
// journals) in a directory of the tests' own, $LABORO_STATE_DIR, where the
// clients they start find it, as they would in the user's state directory;
// the secrets' environment variables are unset, so that the tests see the
// defaults a user gets.
func Main(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "laboro-e2e"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stateDir := binDir + "/state"
	os.Setenv("LABORO_STATE_DIR", stateDir)
	for _, env := range []string{"LABORO_TOKEN", "FUQ_AUTH", "WORKERSERVER_API_TOKEN"} {
		os.Unsetenv(env)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(binDir)
		os.Exit(code)
	}))
}

// Build builds the command with the given import path, once per test
// binary, and returns the binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, new(build))
	b := v.(*build)
	b.once.Do(func() {
		if binDir == "" {
			b.err = errors.New("e2e: call e2e.Main from TestMain")
			return
		}
		b.path = binDir + "/" + path.Base(pkg)
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("%w: %s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Process is a running binary. Its standard output goes to Stdout, its
// standard error is collected line by line (Log).
type Process struct {
	Cmd    *exec.Cmd
	Stdout strings.Builder // read it only after Wait
	// TempDir is the process's $TMPDIR, a directory of the test's own:
	// what the process leaves there (a process killed at the end of its
	// test cannot clean up) goes with the test, and a test can see what
	// it left.
	TempDir string

	mu   sync.Mutex
	logs strings.Builder
	eof  chan struct{}
}

// Start runs bin with args (and env added to this process's environment,
// TMPDIR set to Process.TempDir unless env sets it); the process is killed
// when the test ends, and, on Linux, when the test process ends without
// ending its tests (a timeout, a kill).
func Start(t testing.TB, env []string, bin string, args ...string) *Process {
	t.Helper()
	return StartInput(t, nil, env, bin, args...)
}

// StartInput is Start with stdin as the process's standard input (nil:
// none).
func StartInput(t testing.TB, stdin io.Reader, env []string, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(bin, args...), eof: make(chan struct{}), TempDir: t.TempDir()}
	p.Cmd.Env = append(append(os.Environ(), "TMPDIR="+p.TempDir), env...)
	p.Cmd.Stdin = stdin
	p.Cmd.Stdout = &p.Stdout
	p.Cmd.SysProcAttr = sysProcAttr()
	stderr, err := p.Cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.eof)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.Kill)
	return p
}

// StartOnTerminal is StartInput with a terminal (a pseudo-terminal's) as
// the process's standard error, where a command shows a bar rather than
// lines: Log returns what the terminal showed, as it showed it (its lines
// end in "\r\n", a bar is drawn with "\r"). It skips the test where no
// pseudo-terminal can be made.
func StartOnTerminal(t testing.TB, stdin io.Reader, env []string, bin string, args ...string) *Process {
	t.Helper()
	master, tty := OpenPTY(t)
	p := &Process{Cmd: exec.Command(bin, args...), eof: make(chan struct{}), TempDir: t.TempDir()}
	p.Cmd.Env = append(append(os.Environ(), "TMPDIR="+p.TempDir), env...)
	p.Cmd.Stdin, p.Cmd.Stdout, p.Cmd.Stderr = stdin, &p.Stdout, tty
	p.Cmd.SysProcAttr = sysProcAttr()
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close() // the process has its own: the terminal closes with it
	go func() {
		defer close(p.eof)
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b) // EIO once the process has closed the terminal
			p.mu.Lock()
			p.logs.Write(b[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(p.Kill)
	return p
}

// Log returns what the process wrote to standard error so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Logged counts the lines of standard error that contain text.
func (p *Process) Logged(text string) int {
	return strings.Count(p.Log(), text)
}

// Kill kills the process (waking it first, should it be stopped) and
// waits for it.
func (p *Process) Kill() {
	p.Cmd.Process.Signal(syscall.SIGCONT)
	p.Cmd.Process.Kill()
	<-p.eof
	p.Cmd.Wait()
}

// Wait waits at most within for the process to end, and returns its exit
// status.
func (p *Process) Wait(t testing.TB, within time.Duration) int {
	t.Helper()
	select {
	case <-p.eof:
	case <-time.After(within):
		t.Fatalf("%s did not end:\n%s", path.Base(p.Cmd.Path), p.Log())
	}
	err := p.Cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// ServingAddr matches the line a server of the project logs as it starts
// serving; Await with it returns the address it serves on (the port it
// took, when told port 0).
var ServingAddr = regexp.MustCompile(`serving.*"addr": "([^"]+)"`)

// Await waits at most within for a line of standard error that re
// matches, and returns its first submatch (or the whole match).
func (p *Process) Await(t testing.TB, re *regexp.Regexp, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if m := re.FindStringSubmatch(p.Log()); m != nil {
			return m[len(m)-1]
		}
		select {
		case <-p.eof:
			if m := re.FindStringSubmatch(p.Log()); m != nil {
				return m[len(m)-1]
			}
			t.Fatalf("%s ended:\n%s", path.Base(p.Cmd.Path), p.Log())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no line matching %v:\n%s", path.Base(p.Cmd.Path), re, p.Log())
		}
	}
}

// JSONRecords returns the records of log, what a process run with
// -log-format json wrote to standard error (on a terminal or not), failing
// t for each line that is not a JSON object: a line a log collector would
// refuse.
func JSONRecords(t testing.TB, log string) []map[string]any {
	t.Helper()
	var records []map[string]any
	for line := range strings.Lines(log) {
		if line = strings.TrimRight(line, "\r\n"); line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Errorf("not a JSON object: %q", line)
			continue
		}
		records = append(records, r)
	}
	return records
}

// LastRecord returns the last record of logger in a JSON log, failing t
// if a line of it is not JSON (see JSONRecords), or if there is none.
func LastRecord(t testing.TB, log, logger string) map[string]any {
	t.Helper()
	var last map[string]any
	for _, r := range JSONRecords(t, log) {
		if r["logger"] == logger {
			last = r
		}
	}
	if last == nil {
		t.Fatalf("no record of %q:\n%s", logger, log)
	}
	return last
}

// Starters start a command with its standard error on a terminal
// (StartOnTerminal: where a progress bar would be drawn) or on a pipe
// (StartInput: where lines of counts would be), for a test of what a
// command writes there to run both ways.
var Starters = []struct {
	Where string
	Start func(t testing.TB, stdin io.Reader, env []string, bin string, args ...string) *Process
}{{"terminal", StartOnTerminal}, {"pipe", StartInput}}

// Token returns the token a server started by the test keeps in the
// state directory as NAME.token, failing t unless the file is there and
// its user's alone (0600).
func Token(t testing.TB, name string) string {
	t.Helper()
	path := os.Getenv("LABORO_STATE_DIR") + "/" + name + ".token"
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
