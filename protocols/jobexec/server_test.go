package jobexec

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testServer struct {
	ex     *laboro.Executor
	addr   string
	served chan error
}

func startServer(t *testing.T, token string, opts ...laboro.Option) *testServer {
	t.Helper()
	ex, err := laboro.New(append([]laboro.Option{laboro.WithOutputDir(t.TempDir())}, opts...)...)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	srv := &Server{Executor: ex, Token: token, RequestTimeout: 300 * time.Millisecond}
	ts := &testServer{ex: ex, addr: ln.Addr().String(), served: make(chan error, 1)}
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
	out, _, err = ts.do(t, "", "stop", "job_2")
	require.NoError(t, err)
	assert.Equal(t, "JOB <job_2> NOTFOUND\n", out)
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

	for _, bad := range [][]string{{"setConcurrency", "-1"}, {"setConcurrency", "x"}, {"issueJob"}, {"frobnicate"}, {"poll", "extra"}} {
		_, code, err := ts.do(t, "", bad[0], bad[1:]...)
		assert.ErrorIs(t, err, ErrRefused, "%v", bad)
		assert.Equal(t, 1, code)
	}
}

func TestTokenIsChecked(t *testing.T) {
	ts := startServer(t, "s3cret")
	_, _, err := ts.do(t, "wrong", "poll")
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "wrong token")
	out, _, err := ts.do(t, "s3cret", "setConcurrency", "2")
	require.NoError(t, err)
	assert.Equal(t, "CONCURRENCY SET AT 2\n", out)
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

func TestExitDrains(t *testing.T) {
	ts := startServer(t, "", laboro.WithBufferSize(1), laboro.WithPoolSize(1))
	type answer struct {
		out string
		err error
	}
	running := make(chan answer, 1)
	go func() {
		out, _, err := ts.do(t, "", "issueJob", "sh", "-c", "sleep 0.5; echo done")
		running <- answer{out, err}
	}()
	require.Eventually(t, func() bool { return ts.ex.Stats().Running == 1 }, 10*time.Second, time.Millisecond)
	queued := make(chan answer, 1)
	go func() {
		out, _, err := ts.do(t, "", "issueJob", "echo", "never")
		queued <- answer{out, err}
	}()
	require.Eventually(t, func() bool { return ts.ex.Stats().Queued == 1 }, 10*time.Second, time.Millisecond)
	blocked := make(chan answer, 1)
	go func() {
		out, _, err := ts.do(t, "", "issueJob", "echo", "blocked")
		blocked <- answer{out, err}
	}()
	require.Eventually(t, func() bool { return ts.ex.Stats().Blocked == 1 }, 10*time.Second, time.Millisecond)

	out, code, err := ts.do(t, "", "exit")
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "SERVER TERMINATED\n", out)

	a := <-running
	require.NoError(t, a.err)
	assert.Equal(t, "JOB <job_1, sh -c 'sleep 0.5; echo done'> SUBMITTED\n-----job_1 output start-----\ndone\n-----job_1 output end-----\n", a.out)
	a = <-queued
	assert.Equal(t, "JOB <job_2, echo never> SUBMITTED\nSERVER TERMINATED BEFORE EXECUTION\n", a.out)
	a = <-blocked
	assert.Equal(t, "SERVER TERMINATED BEFORE EXECUTION\n", a.out)
	select {
	case err := <-ts.served:
		assert.ErrorIs(t, err, ErrServerTerminated)
		ts.served <- err // for the cleanup
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
