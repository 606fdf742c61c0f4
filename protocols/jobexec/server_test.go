package jobexec

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testServer struct {
	srv    *Server
	ex     *laboro.Executor
	addr   string
	dir    string // the output directory
	logs   *observer.ObservedLogs
	served chan error
}

func startServer(t testing.TB, token string, opts ...laboro.Option) *testServer {
	t.Helper()
	return startServerConfig(t, &Server{Token: token}, opts...)
}

// startServerConfig starts a server with cfg's Token, MaxConns and
// RequestTimeout (300 ms if 0).
func startServerConfig(t testing.TB, cfg *Server, opts ...laboro.Option) *testServer {
	t.Helper()
	dir := t.TempDir()
	ex, err := laboro.New(append([]laboro.Option{laboro.WithOutputDir(dir)}, opts...)...)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	core, logs := observer.New(zap.InfoLevel)
	srv := &Server{Executor: ex, Token: cfg.Token, MaxConns: cfg.MaxConns, RequestTimeout: cmp.Or(cfg.RequestTimeout, 300*time.Millisecond),
		WriteTimeout: time.Second, Logger: zap.New(core)}
	ts := &testServer{srv: srv, ex: ex, addr: ln.Addr().String(), dir: dir, logs: logs, served: make(chan error, 1)}
	go func() { ts.served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		ex.Close()
		select {
		case <-ts.served:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return")
		}
	})
	return ts
}

// do runs one command and returns what the commander would print.
func (ts *testServer) do(t *testing.T, token, command string, args ...string) (string, int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	c := &Client{Addr: ts.addr, Token: token}
	code, err := c.Do(ctx, command, args, &out)
	return out.String(), code, err
}

func TestCommands(t *testing.T) {
	ts := startServer(t, "", laboro.WithConcurrency(0), laboro.WithBufferSize(10))
	type answer struct {
		out  string
		code int
		err  error
	}
	first := make(chan answer, 1)
	go func() {
		out, code, err := ts.do(t, "", "issueJob", "sh", "-c", "echo 'a   b'; exit 3")
		first <- answer{out, code, err}
	}()
	require.Eventually(t, func() bool { return len(ts.ex.Queued()) == 1 }, 10*time.Second, time.Millisecond)
	second := make(chan answer, 1)
	go func() {
		out, code, err := ts.do(t, "", "issueJob", "grep", "two words", "/nonexistent")
		second <- answer{out, code, err}
	}()
	require.Eventually(t, func() bool { return len(ts.ex.Queued()) == 2 }, 10*time.Second, time.Millisecond)

	out, code, err := ts.do(t, "", "poll")
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "<job_1, sh -c 'echo '\\''a   b'\\''; exit 3'>\n<job_2, grep 'two words' /nonexistent>\n", out)

	out, _, err = ts.do(t, "", "stop", "job_2")
	require.NoError(t, err)
	assert.Equal(t, "JOB <job_2> REMOVED\n", out)
	out, code, err = ts.do(t, "", "stop", "job_2")
	require.NoError(t, err)
	assert.Equal(t, "JOB <job_2> NOTFOUND\n", out)
	assert.Equal(t, 1, code, "nothing stopped")
	a := <-second
	assert.Equal(t, "JOB <job_2, grep 'two words' /nonexistent> SUBMITTED\nJOB <job_2> REMOVED\n", a.out)

	out, code, err = ts.do(t, "", "setConcurrency", "2")
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "CONCURRENCY SET AT 2\n", out)
	a = <-first
	require.NoError(t, a.err)
	assert.Equal(t, "JOB <job_1, sh -c 'echo '\\''a   b'\\''; exit 3'> SUBMITTED\n-----job_1 output start-----\na   b\n-----job_1 output end-----\n", a.out)
	assert.Equal(t, 3, a.code, "the commander's status is the job's")

	for _, bad := range [][]string{{"setConcurrency", "-1"}, {"setConcurrency", "x"}, {"issueJob"}, {"frobnicate"}, {"poll", "extra"}, {"exit", "extra"}} {
		_, code, err := ts.do(t, "", bad[0], bad[1:]...)
		assert.ErrorIs(t, err, ErrRefused, "%v", bad)
		assert.Equal(t, 1, code)
	}
	_, _, err = ts.do(t, "", "setConcurrency", "x")
	assert.ErrorContains(t, err, "setConcurrency x: not a whole number")
	// "exit extra" was a typo: the server still serves.
	out, code, err = ts.do(t, "", "setConcurrency", "1")
	require.NoError(t, err, "the server stopped after a refused exit")
	assert.Equal(t, 0, code)
	assert.Equal(t, "CONCURRENCY SET AT 1\n", out)
}

func TestTokenIsChecked(t *testing.T) {
	ts := startServer(t, "s3cret")
	// A Client with another token finds that the server does not prove
	// it holds that one, and sends no command.
	_, _, err := ts.do(t, "wrong", "poll")
	require.ErrorIs(t, err, ErrServerUnproven)
	assert.Contains(t, err.Error(), "the command was not sent")
	// Without a token, or with a wrong one sent as earlier versions do,
	// the server refuses the command.
	_, _, err = ts.do(t, "", "poll")
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "wrong token")
	p, err := Request{Version: Version - 1, Token: "wrong", Command: "setConcurrency", Args: []string{"0"}}.AppendBinary(nil)
	require.NoError(t, err)
	assert.Contains(t, string(exchangeRaw(t, ts.addr, Frame{FrameRequest, p})), "wrong token")

	out, _, err := ts.do(t, "s3cret", "setConcurrency", "2")
	require.NoError(t, err)
	assert.Equal(t, "CONCURRENCY SET AT 2\n", out)
	// The token as earlier versions send it: still taken.
	p, err = Request{Version: Version - 1, Token: "s3cret", Command: "setConcurrency", Args: []string{"3"}}.AppendBinary(nil)
	require.NoError(t, err)
	assert.Contains(t, string(exchangeRaw(t, ts.addr, Frame{FrameRequest, p})), "CONCURRENCY SET AT 3")
}

// exchangeRaw sends frames on a new connection to addr, closes its
// writing side, and returns all that the server answered.
func exchangeRaw(t *testing.T, addr string, fs ...Frame) []byte {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = conn.Write(frames(fs...))
	require.NoError(t, err)
	answer, err := io.ReadAll(conn)
	require.NoError(t, err)
	return answer
}

// With a token, neither the token nor anything that stands for it crosses
// the wire: what a listener on the path records holds no token, and
// replaying it (a command and its proof) to the server does nothing.
func TestTokenNeverCrossesTheWire(t *testing.T) {
	const token = "s3cret-s3cret-s3cret"
	ts := startServer(t, token)
	var sent, received bytes.Buffer
	proxy := recordingProxy(t, ts.addr, &sent, &received)
	var out bytes.Buffer
	code, err := (&Client{Addr: proxy.addr, Token: token}).Do(t.Context(), "issueJob", []string{"echo", "once"}, &out)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	proxy.wait()
	assert.NotContains(t, sent.String(), token)
	assert.NotContains(t, received.String(), token)
	require.Contains(t, sent.String(), "echo", "the recording is of the exchange")

	// The recorded hello and request, replayed: the server's new nonce
	// makes the proof worthless.
	r := bytes.NewReader(sent.Bytes())
	hello, err := ReadFrame(r, 0)
	require.NoError(t, err)
	request, err := ReadFrame(r, 0)
	require.NoError(t, err)
	answer := exchangeRaw(t, ts.addr, hello, request)
	assert.Contains(t, string(answer), "wrong token")
	assert.NotContains(t, string(answer), "SUBMITTED", "no job replayed")
}

// A request of version 5 whose command was changed on the way, or that
// comes without its hello, is refused: the proof covers the command and
// its arguments, under the server's nonce.
func TestProofCoversTheCommand(t *testing.T) {
	const token = "s3cret"
	ts := startServer(t, token, laboro.WithConcurrency(0))
	conn, err := net.Dial("tcp", ts.addr)
	require.NoError(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	nonce := bytes.Repeat([]byte{7}, NonceSize)
	require.NoError(t, WriteFrame(conn, FrameHello, HelloPayload(Version, nonce)))
	r := bufio.NewReader(conn)
	f, err := ReadFrame(r, 0)
	require.NoError(t, err)
	require.Equal(t, FrameChallenge, f.Type)
	theirs, proof, err := ParseChallenge(f.Payload)
	require.NoError(t, err)
	assert.Equal(t, ServerProof(token, nonce, theirs), proof, "the server proves it holds the token")
	q, err := Request{Command: "issueJob", Args: []string{"echo", "harmless"}}.Prove(token, nonce, theirs)
	require.NoError(t, err)
	q.Args = []string{"touch", "pwned"} // changed on the way
	p, err := q.AppendBinary(nil)
	require.NoError(t, err)
	require.NoError(t, WriteFrame(conn, FrameRequest, p))
	answer, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Contains(t, string(answer), "wrong token")

	q.Args = []string{"echo", "harmless"} // a proven request, without its hello
	p, err = q.AppendBinary(nil)
	require.NoError(t, err)
	assert.Contains(t, string(exchangeRaw(t, ts.addr, Frame{FrameRequest, p})), "comes after a hello")
	assert.Len(t, ts.ex.Queued(), 0)
}

// proxy relays one connection to a server, recording each direction.
type proxy struct {
	addr string
	done chan struct{}
}

func (p *proxy) wait() { <-p.done }

func recordingProxy(t *testing.T, to string, sent, received *bytes.Buffer) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{addr: ln.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer ln.Close()
		in, err := ln.Accept()
		if err != nil {
			return
		}
		defer in.Close()
		out, err := net.Dial("tcp", to)
		if err != nil {
			return
		}
		defer out.Close()
		var wg sync.WaitGroup
		wg.Go(func() {
			io.Copy(io.MultiWriter(out, sent), in)
			out.(*net.TCPConn).CloseWrite()
		})
		io.Copy(io.MultiWriter(in, received), out)
		in.(*net.TCPConn).CloseWrite()
		wg.Wait()
	}()
	t.Cleanup(func() { ln.Close(); <-p.done })
	return p
}

// Garbage, a 4 GiB length and a stalled half frame each cost only their own
// connection; the server goes on serving others.
func TestBadInputClosesOnlyThatConnection(t *testing.T) {
	ts := startServer(t, "")
	inputs := map[string][]byte{
		"garbage":        []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"4 GiB length":   append(binary.BigEndian.AppendUint32(nil, 0xffffffff), 'Q'),
		"wrong frame":    {0, 0, 0, 0, 'L'},
		"bad request":    {0, 0, 0, 2, 'Q', 9, 9},
		"half a frame":   {0, 0, 0, 50, 'Q', 1, 2},
		"nothing at all": nil,
	}
	var wg sync.WaitGroup
	for name, input := range inputs {
		wg.Go(func() {
			conn, err := net.Dial("tcp", ts.addr)
			if !assert.NoError(t, err, name) {
				return
			}
			defer conn.Close()
			conn.Write(input)
			// The server answers with a refusal, or closes after its
			// request deadline (300 ms here); it never hangs.
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.ReadAll(conn)
			var ne net.Error
			assert.False(t, errors.As(err, &ne) && ne.Timeout(), "%s: the server kept the connection open", name)
		})
	}
	out, _, err := ts.do(t, "", "setConcurrency", "3")
	require.NoError(t, err, "served while bad connections are open")
	assert.Equal(t, "CONCURRENCY SET AT 3\n", out)
	wg.Wait()
}

// exit is answered at once, while a job runs; then the server drains: the
// queued and blocked jobs' commanders are told, commands are refused, and
// Serve returns once the running job's output has reached its commander.
func TestExitDrains(t *testing.T) {
	ts := startServer(t, "", laboro.WithBufferSize(1), laboro.WithPoolSize(1))
	gate := filepath.Join(t.TempDir(), "gate")
	type answer struct {
		out  string
		code int
		err  error
	}
	issue := func(args ...string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			out, code, err := ts.do(t, "", "issueJob", args...)
			ch <- answer{out, code, err}
		}()
		return ch
	}
	running := issue("sh", "-c", "while [ ! -e "+gate+" ]; do sleep 0.01; done; echo done")
	require.Eventually(t, func() bool { return ts.ex.Stats().Running == 1 }, 10*time.Second, time.Millisecond)
	queued := issue("echo", "never")
	require.Eventually(t, func() bool { return ts.ex.Stats().Queued == 1 }, 10*time.Second, time.Millisecond)
	blocked := issue("echo", "blocked")
	require.Eventually(t, func() bool { return ts.ex.Stats().Blocked == 1 }, 10*time.Second, time.Millisecond)

	exit := make(chan answer, 1)
	go func() {
		out, code, err := ts.do(t, "", "exit")
		exit <- answer{out, code, err}
	}()
	select {
	case a := <-exit:
		require.NoError(t, a.err)
		assert.Equal(t, 0, a.code)
		assert.Equal(t, "SERVER TERMINATED\n", a.out)
	case <-time.After(10 * time.Second):
		t.Fatal("exit is not answered while a job runs")
	}
	a := <-queued
	assert.Equal(t, "JOB <job_2, echo never> SUBMITTED\nSERVER TERMINATED BEFORE EXECUTION\n", a.out)
	assert.Equal(t, 1, a.code)
	a = <-blocked
	assert.Equal(t, "SERVER TERMINATED BEFORE EXECUTION\n", a.out)
	for _, cmd := range [][]string{{"poll"}, {"exit"}, {"issueJob", "echo", "late"}} {
		_, _, err := ts.do(t, "", cmd[0], cmd[1:]...)
		require.ErrorIs(t, err, ErrRefused, "%v during the drain", cmd)
		assert.Contains(t, err.Error(), "server is terminating")
	}
	select {
	case err := <-ts.served:
		t.Fatalf("Serve returned before the running job was delivered: %v", err)
	default:
	}

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	a = <-running
	require.NoError(t, a.err)
	assert.Equal(t, "JOB <job_1, sh -c 'while [ ! -e "+gate+" ]; do sleep 0.01; done; echo done'> SUBMITTED\n-----job_1 output start-----\ndone\n-----job_1 output end-----\n", a.out)
	select {
	case err := <-ts.served:
		assert.ErrorIs(t, err, ErrServerTerminated)
		ts.served <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
}

// A commander that reads nothing while its job's output is sent costs the
// server only that exchange: the write deadline passes, the output is
// discarded, and an exit still drains.
func TestServerWriteDeadline(t *testing.T) {
	ts := startServer(t, "")
	conn, err := net.Dial("tcp", ts.addr)
	require.NoError(t, err)
	defer conn.Close()
	p, err := Request{Version: Version - 1, Command: "issueJob", Args: []string{"head", "-c", "50000000", "/dev/zero"}}.AppendBinary(nil)
	require.NoError(t, err)
	require.NoError(t, WriteFrame(conn, FrameRequest, p))
	// Read up to SUBMITTED only.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	for {
		f, err := ReadFrame(r, 0)
		require.NoError(t, err)
		if f.Type == FrameLine {
			require.Contains(t, string(f.Payload), "SUBMITTED")
			break
		}
	}
	require.Eventually(t, func() bool { return ts.logged("commander gone before the end of the exchange") }, 20*time.Second, 10*time.Millisecond)
	out, _, err := ts.do(t, "", "exit")
	require.NoError(t, err)
	assert.Equal(t, "SERVER TERMINATED\n", out)
	select {
	case err := <-ts.served:
		assert.ErrorIs(t, err, ErrServerTerminated)
		ts.served <- err
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after exit")
	}
}

// Many commanders at once: every output reaches its own commander, once.
func TestManyCommanders(t *testing.T) {
	ts := startServer(t, "", laboro.WithConcurrency(4), laboro.WithPoolSize(4), laboro.WithBufferSize(16))
	const n = 100
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			word := fmt.Sprintf("unique-%03d", i)
			out, code, err := ts.do(t, "", "issueJob", "echo", word)
			if !assert.NoError(t, err) {
				return
			}
			assert.Equal(t, 0, code)
			id := strings.TrimPrefix(strings.SplitN(out, ",", 2)[0], "JOB <")
			assert.Equal(t, fmt.Sprintf("JOB <%s, echo %s> SUBMITTED\n-----%[1]s output start-----\n%[2]s\n-----%[1]s output end-----\n", id, word), out)
		})
	}
	wg.Wait()
}

// logged reports whether the server has logged a message containing text.
func (ts *testServer) logged(text string) bool {
	return ts.logs.FilterMessageSnippet(text).Len() > 0
}

// cancelOn is an io.Writer that cancels a context once it has seen text.
type cancelOn struct {
	text   string
	cancel context.CancelFunc
	buf    bytes.Buffer
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.text) {
		w.cancel()
	}
	return len(p), nil
}

// A commander that leaves (Ctrl-C) does not disturb the server: a job it
// left while queued or running still runs, its output is discarded and its
// file removed; a job it left while blocked on a full buffer is dropped.
func TestCommanderGone(t *testing.T) {
	ts := startServer(t, "", laboro.WithBufferSize(1), laboro.WithPoolSize(1))
	gate := filepath.Join(t.TempDir(), "gate")
	job := []string{"sh", "-c", "while [ ! -e " + gate + " ]; do sleep 0.01; done; echo discarded"}

	leave := func(want string, args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w := &cancelOn{text: want, cancel: cancel}
		_, err := (&Client{Addr: ts.addr}).Do(ctx, "issueJob", args, w)
		return err
	}
	// The first job runs, the second waits in the buffer; both commanders
	// leave once their jobs are submitted.
	require.ErrorIs(t, leave("SUBMITTED", job...), context.Canceled)
	require.Eventually(t, func() bool { return ts.logged("commander gone; its job runs on") }, 10*time.Second, time.Millisecond)
	require.ErrorIs(t, leave("SUBMITTED", "echo", "queued"), context.Canceled)
	require.Eventually(t, func() bool { return ts.logs.FilterMessageSnippet("commander gone; its job runs on").Len() == 2 }, 10*time.Second, time.Millisecond)

	// The third blocks on the full buffer; its commander leaves too.
	ctx, cancel := context.WithCancel(context.Background())
	blocked := make(chan error, 1)
	go func() {
		_, err := (&Client{Addr: ts.addr}).Do(ctx, "issueJob", []string{"echo", "blocked"}, io.Discard)
		blocked <- err
	}()
	require.Eventually(t, func() bool { return ts.ex.Stats().Blocked == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-blocked, context.Canceled)
	require.Eventually(t, func() bool { return ts.logged("job dropped") }, 10*time.Second, time.Millisecond)

	out, _, err := ts.do(t, "", "poll")
	require.NoError(t, err, "the server goes on serving")
	assert.Equal(t, "<job_2, echo queued>\n", out, "the blocked job was dropped, the queued one kept")

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	require.Eventually(t, func() bool { return ts.logs.FilterMessageSnippet("output discarded").Len() == 2 }, 10*time.Second, time.Millisecond)
	for _, e := range ts.logs.FilterMessageSnippet("output discarded").All() {
		assert.Equal(t, "succeeded", e.ContextMap()["status"])
	}
	require.Eventually(t, func() bool {
		entries, err := os.ReadDir(ts.dir)
		return err == nil && len(entries) == 0
	}, 10*time.Second, time.Millisecond, "output files removed")
	out, _, err = ts.do(t, "", "issueJob", "echo", "next")
	require.NoError(t, err)
	assert.Equal(t, "JOB <job_3, echo next> SUBMITTED\n-----job_3 output start-----\nnext\n-----job_3 output end-----\n", out)
}

// openFiles counts this process's open file descriptors.
func openFiles(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd here")
	}
	return len(entries)
}

// Every kind of exchange, good and bad, gives back its descriptors.
func TestNoDescriptorLeak(t *testing.T) {
	ts := startServer(t, "tok", laboro.WithConcurrency(2))
	_, _, err := ts.do(t, "tok", "poll") // warm up: listener, poller, runtime
	require.NoError(t, err)
	// and the watcher of jobs a first job starts (laboro's reaper), which
	// holds a descriptor for good
	_, _, err = ts.do(t, "tok", "issueJob", "true")
	require.NoError(t, err)
	before := openFiles(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			ts.do(t, "tok", "issueJob", "sh", "-c", fmt.Sprintf("echo %d; echo err >&2; exit %d", i, i%3))
			ts.do(t, "bad", "poll")
			ts.do(t, "tok", "stop", "job_1000")
			ts.do(t, "tok", "issueJob", "no-such-program")
			if conn, err := net.Dial("tcp", ts.addr); err == nil {
				conn.Write([]byte{0, 0, 0, 50, 'Q', 1})
				conn.Close()
			}
		})
	}
	wg.Wait()
	assert.Eventually(t, func() bool { return openFiles(t) <= before }, 10*time.Second, 10*time.Millisecond,
		"open descriptors: %d before, %d after", before, openFiles(t))
}

// Connections beyond MaxConns are refused at once and closed, while those
// within it are served; once one ends, another is served again.
func TestConnectionLimit(t *testing.T) {
	// The held connections must outlive the test's steps, however slow.
	ts := startServerConfig(t, &Server{MaxConns: 2, RequestTimeout: time.Minute}, laboro.WithConcurrency(0), laboro.WithBufferSize(4))
	held := make([]net.Conn, 2)
	for i := range held {
		c, err := net.Dial("tcp", ts.addr)
		require.NoError(t, err)
		defer c.Close()
		held[i] = c
	}
	// The two held connections send nothing yet: the server waits for
	// their requests. A third commander is refused.
	require.Eventually(t, func() bool { return ts.srv.conns.Load() == 2 }, 10*time.Second, time.Millisecond)
	_, _, err := ts.do(t, "", "poll")
	require.ErrorIs(t, err, ErrRefused)
	assert.ErrorContains(t, err, "too many connections")
	assert.True(t, ts.logged("too many connections"))
	// A Client with a token is told the same, not taken for one that
	// meets a server of an earlier version.
	_, _, err = ts.do(t, "s3cret", "poll")
	require.ErrorIs(t, err, ErrRefused)
	assert.ErrorContains(t, err, "too many connections")

	// One held connection sends its command and is answered: within the
	// limit, serving goes on.
	payload, err := Request{Version: Version - 1, Command: "poll"}.AppendBinary(nil)
	require.NoError(t, err)
	require.NoError(t, WriteFrame(held[0], FrameRequest, payload))
	held[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(held[0])
	var types []FrameType
	for {
		f, err := ReadFrame(r, 0)
		require.NoError(t, err)
		types = append(types, f.Type)
		if f.Type == FrameExit {
			break
		}
	}
	assert.NotContains(t, types, FrameRefusal)
	held[0].Close()
	held[1].Close()
	require.Eventually(t, func() bool {
		_, code, err := ts.do(t, "", "poll")
		return err == nil && code == 0
	}, 10*time.Second, 10*time.Millisecond, "a commander is served once the others left")
}

// A frame that announces a large payload and sends little of it costs
// the reader what arrived, not what was announced.
func TestReadFrameAllocatesWhatArrives(t *testing.T) {
	hdr := binary.BigEndian.AppendUint32(nil, DefaultMaxFrame)
	stalled := io.MultiReader(bytes.NewReader(append(hdr, byte(FrameRequest))), strings.NewReader("only this"))
	var before, after runtimeMem
	before.read()
	_, err := ReadFrame(stalled, 0)
	after.read()
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Less(t, after.total-before.total, uint64(DefaultMaxFrame/4), "bytes allocated for a frame announced at %d bytes", DefaultMaxFrame)

	// A whole frame still reads whole, across the growth steps.
	big := bytes.Repeat([]byte("x"), 3*growStep+5)
	var buf bytes.Buffer
	require.NoError(t, WriteFrame(&buf, FrameLine, big))
	f, err := ReadFrame(iotestHalf(&buf), 0)
	require.NoError(t, err)
	assert.Equal(t, big, f.Payload)
}

// runtimeMem reads the bytes allocated so far.
type runtimeMem struct{ total uint64 }

func (m *runtimeMem) read() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.total = ms.TotalAlloc
}

// iotestHalf reads at most half of what is asked each time.
func iotestHalf(r io.Reader) io.Reader { return iotest.HalfReader(r) }

// A request over the server's limit is refused with the limit named, and
// the server serves on.
func TestRequestTooLarge(t *testing.T) {
	ts := startServer(t, "")
	_, _, err := ts.do(t, "", "issueJob", "echo", strings.Repeat("x", DefaultMaxRequest))
	require.ErrorIs(t, err, ErrRefused)
	assert.ErrorContains(t, err, fmt.Sprintf("limit %d", DefaultMaxRequest))
	out, code, err := ts.do(t, "", "issueJob", "echo", strings.Repeat("x", DefaultMaxRequest/2))
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Contains(t, out, strings.Repeat("x", 100))
}
