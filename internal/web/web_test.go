package web

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/laboro-go/laboro"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheckAddr(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080"} {
		assert.NoError(t, CheckAddr(addr, false), addr)
	}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.0.2.1:8080"} {
		err := CheckAddr(addr, false)
		if assert.Error(t, err, addr) {
			assert.Contains(t, err.Error(), "-http-public", addr)
		}
		assert.NoError(t, CheckAddr(addr, true), addr)
	}
	assert.Error(t, CheckAddr("8080", true), "an address without a port")
}

// serve runs a console of a new Executor on the loopback and returns its
// address, the Executor, and the token; both end with the test.
func serve(t *testing.T) (addr string, ex *laboro.Executor, token string) {
	t.Helper()
	ex, err := laboro.New(laboro.WithHistory(History), laboro.WithOutputDir(t.TempDir()))
	require.NoError(t, err)
	token = "web-test-token"
	w := New(token, nil)
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- w.Serve(ctx, ln, ex, "the test", zap.NewNop()) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-served, "Serve once its context ended")
		ex.Close()
	})
	return ln.Addr().String(), ex, token
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// The console and the metrics are served behind the token, and show the
// Executor's jobs.
func TestServe(t *testing.T) {
	addr, ex, token := serve(t)
	h, err := ex.Submit(context.Background(), laboro.Job{ID: "web-job", Func: func(context.Context) error { return nil }})
	require.NoError(t, err)
	_, err = h.Wait(context.Background())
	require.NoError(t, err)
	defer http.DefaultClient.CloseIdleConnections()

	code, _ := get(t, "http://"+addr+"/api/state", "")
	assert.Equal(t, http.StatusUnauthorized, code, "the state without the token")
	code, _ = get(t, "http://"+addr+"/metrics", "")
	assert.Equal(t, http.StatusUnauthorized, code, "the metrics without the token")

	code, body := get(t, "http://"+addr+"/api/state", token)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "web-job", "the finished job in the console's state")
	code, body = get(t, "http://"+addr+"/metrics", token)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "laboro_jobs_finished_total")
	assert.Contains(t, body, "go_goroutines", "the Go collector")
}

// At most MaxConns connections are served at once: one more is answered
// only once another closes.
func TestServeBoundsConnections(t *testing.T) {
	addr, _, token := serve(t)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// Each of these has been answered once, so the server holds it.
	for range MaxConns {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		held = append(held, c)
		ask(t, c, token)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
		status, err := bufio.NewReader(c).ReadString('\n')
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(status, "HTTP/1.1 200"), status)
	}
	extra, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer extra.Close()
	ask(t, extra, token)
	require.NoError(t, extra.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	_, err = extra.Read(make([]byte, 1))
	var ne net.Error
	require.ErrorAs(t, err, &ne, "an answer beyond MaxConns connections")
	assert.True(t, ne.Timeout(), "%v", err)

	held[0].Close()
	held = held[1:]
	require.NoError(t, extra.SetReadDeadline(time.Now().Add(time.Minute)))
	status, err := bufio.NewReader(extra).ReadString('\n')
	require.NoError(t, err, "no answer once a place was free")
	assert.True(t, strings.HasPrefix(status, "HTTP/1.1 200"), status)
}

func ask(t *testing.T, c net.Conn, token string) {
	t.Helper()
	_, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer "+token+"\r\n\r\n")
	require.NoError(t, err)
}

// A client that stops reading an answer holds its connection, and the
// handler's goroutine, no longer than the server's write timeout: the
// write fails, and the connection closes.
func TestServeEndsAnAnswerNobodyReads(t *testing.T) {
	defer func(d time.Duration) { writeTimeout = d }(writeTimeout)
	writeTimeout = 200 * time.Millisecond
	// A state of some 10 MB: 100 queued jobs of long commands, more than
	// the sockets' buffers hold.
	ex, err := laboro.New(laboro.WithHistory(History), laboro.WithOutputDir(t.TempDir()),
		laboro.WithConcurrency(0), laboro.WithBufferSize(100))
	require.NoError(t, err)
	defer ex.Close()
	for range 100 {
		_, err := ex.Submit(context.Background(), laboro.Job{Args: []string{"echo", strings.Repeat("x", 100_000)}})
		require.NoError(t, err)
	}
	token := "web-test-token"
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	timedOut := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- New(token, nil).Serve(ctx, watchWrites{Listener: ln, timedOut: timedOut}, ex, "the test", zap.NewNop())
	}()
	defer func() {
		cancel()
		assert.NoError(t, <-served)
	}()

	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.(*net.TCPConn).SetReadBuffer(4096))
	_, err = io.WriteString(c, "GET /api/state HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer "+token+"\r\n\r\n")
	require.NoError(t, err)
	// The client reads nothing: the server's write must give up.
	select {
	case <-timedOut:
	case <-time.After(time.Minute):
		t.Fatal("the answer's write still waits for a client that reads nothing")
	}
}

// watchWrites closes timedOut once a write on one of its connections has
// failed for its deadline.
type watchWrites struct {
	net.Listener
	timedOut chan struct{}
}

func (l watchWrites) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, timedOut: l.timedOut}, nil
}

type watchedConn struct {
	net.Conn
	timedOut chan struct{}
	once     sync.Once
}

func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.once.Do(func() { close(c.timedOut) })
	}
	return n, err
}
