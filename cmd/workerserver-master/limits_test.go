package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/laboro-go/laboro/internal/freeport"
)

// The master cuts off a client that sends its request too slowly, and
// closes an idle connection.
func TestHTTPLimits(t *testing.T) {
	addr := freeport.Addr(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- serve(ctx, config{listen: addr, db: filepath.Join(dir, "t.db"), lease: -1, maxConns: 2,
			read: 300 * time.Millisecond, idle: 300 * time.Millisecond}, zap.NewNop())
	}()
	defer func() { cancel(); <-served }()
	var c net.Conn
	var err error
	require.Eventually(t, func() bool { c, err = net.Dial("tcp", addr); return err == nil }, 10*time.Second, 10*time.Millisecond)
	defer c.Close()

	// One byte at a time, more slowly than the read timeout allows as a
	// whole: the master closes the connection before the body is over.
	start := time.Now()
	_, err = io.WriteString(c, "POST /api/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
	require.NoError(t, err)
	cut := false
	for range 1000 {
		if _, err := c.Write([]byte("x")); err != nil {
			cut = true
			break
		}
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1024)); err != nil && !isTimeout(err) {
			cut = true
			break
		}
	}
	assert.True(t, cut, "a body sent a byte at a time was never cut off (after %v)", time.Since(start))

	// An idle keep-alive connection is closed.
	idle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer idle.Close()
	_, err = io.WriteString(idle, "GET /api/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n")
	require.NoError(t, err)
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(idle) // the answer (401: no token), then the close
	require.NoError(t, err, "the idle connection was not closed")
	assert.True(t, strings.HasPrefix(string(b), "HTTP/1.1 401"), "%s", b)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
