package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/laboro-go/laboro/protocols/fuq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// The control socket cuts off a request whose body never comes and closes
// a connection left idle after its answer, so that no client holds one of
// its connections for ever.
func TestControlLimits(t *testing.T) {
	t.Setenv("FUQ_AUTH", "a-secret-of-some-length")
	dir := t.TempDir()
	control := filepath.Join(dir, "c.sock")
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- serve(ctx, "127.0.0.1:0", control, filepath.Join(dir, "journal"), time.Second,
			limits{tasks: 10, endedTasks: 10, endedJobs: 10, control: time.Second}, webFlags{}, zap.NewNop(), zap.NewNop())
	}()
	defer func() { cancel(); require.NoError(t, <-served) }()
	dial := func() net.Conn {
		var c net.Conn
		require.Eventually(t, func() bool {
			var err error
			c, err = net.Dial("unix", control)
			return err == nil
		}, 10*time.Second, 10*time.Millisecond)
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closed waits until the foreman closes c (the read ends without an
	// answer), at most a minute: far beyond the limit.
	closed := func(c net.Conn, r io.Reader) bool {
		c.SetReadDeadline(time.Now().Add(time.Minute))
		_, err := io.Copy(io.Discard, r)
		return err == nil // io.Copy reports the end of the connection as nil
	}

	// A submission announced with 100 bytes of body that never come.
	slow := dial()
	_, err := io.WriteString(slow, "POST /jobs HTTP/1.1\r\nHost: fuq\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	require.NoError(t, err)
	assert.True(t, closed(slow, slow), "a request whose body never came was not cut off")

	// A listing answered, then nothing: the connection is closed.
	idle := dial()
	_, err = io.WriteString(idle, "GET /jobs HTTP/1.1\r\nHost: fuq\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, closed(idle, br), "an idle connection was kept open")

	// A wait for a job's end outlasts those limits: the foreman answers
	// as the job stands before they cut the request, and a client that
	// follows the job asks again.
	cl := fuq.ControlClient{Socket: control}
	var sub map[string]string
	require.NoError(t, cl.Do(ctx, "POST", "/jobs", fuq.Submission{Name: "j", Command: "/bin/true", Tasks: 1}, &sub))
	for range 3 { // no worker: it never ends
		var st fuq.JobReport
		require.NoError(t, cl.Do(ctx, "GET", "/jobs/"+sub["id"]+"?wait=1", nil, &st))
		assert.Equal(t, sub["id"], st.ID)
		assert.False(t, st.Ended(), "state %s", st.State)
	}
}
