package transport_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/laboro-go/laboro/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each read gets a deadline of its own: data that came while nobody read
// is read however long after the first read, and a peer that stalls
// fails the read after the deadline.
func TestDeadlinedConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer peer.Close()
	raw, err := ln.Accept()
	require.NoError(t, err)
	conn := transport.Deadlined(raw, 100*time.Millisecond)
	defer conn.Close()

	buf := make([]byte, 1)
	_, err = peer.Write([]byte("ab"))
	require.NoError(t, err)
	_, err = conn.Read(buf)
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // past the first read's deadline
	_, err = conn.Read(buf)
	require.NoError(t, err, "the second read has a deadline of its own")
	_, err = conn.Read(buf) // the peer stalls now
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
}

// The end of the context interrupts a read under way without a deadline,
// and no deadline set afterwards, not even one that clears it for a long
// wait as a session waiting for its peer does, brings the connection
// back: a session cut off by a server's shutdown cannot outlive it.
func TestInterruptibleConn(t *testing.T) {
	tcpPair := func(t *testing.T) (net.Conn, net.Conn) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		peer, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { peer.Close() })
		raw, err := ln.Accept()
		require.NoError(t, err)
		t.Cleanup(func() { raw.Close() })
		return raw, peer
	}
	timedOut := func(t *testing.T, err error) {
		t.Helper()
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		assert.True(t, ne.Timeout(), "%v", err)
	}
	buf := make([]byte, 1)

	t.Run("while it waits", func(t *testing.T) {
		raw, peer := tcpPair(t)
		ctx, cancel := context.WithCancel(t.Context())
		conn, stop := transport.Interruptible(ctx, raw)
		defer stop()
		require.NoError(t, conn.SetReadDeadline(time.Time{}))
		read := make(chan error, 1)
		go func() { _, err := conn.Read(buf); read <- err }()
		cancel()
		timedOut(t, <-read)
		_, err := peer.Write([]byte("a"))
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Time{}))
		_, err = conn.Read(buf)
		timedOut(t, err)
		require.NoError(t, conn.SetWriteDeadline(time.Now().Add(time.Hour)))
		_, err = conn.Write([]byte("b"))
		timedOut(t, err)
	})

	t.Run("deadline cleared as it ends", func(t *testing.T) {
		for range 1000 {
			raw, _ := tcpPair(t)
			ctx, cancel := context.WithCancel(t.Context())
			conn, stop := transport.Interruptible(ctx, raw)
			cancel() // its watch runs now, in a goroutine of its own
			require.NoError(t, conn.SetDeadline(time.Time{}))
			_, err := conn.Read(buf)
			timedOut(t, err)
			stop()
		}
	})

	t.Run("stopped", func(t *testing.T) {
		raw, peer := tcpPair(t)
		ctx, cancel := context.WithCancel(t.Context())
		conn, stop := transport.Interruptible(ctx, raw)
		require.True(t, stop())
		cancel()
		_, err := peer.Write([]byte("a"))
		require.NoError(t, err)
		_, err = conn.Read(buf)
		require.NoError(t, err, "once stopped, the context's end does not reach the connection")
	})
}

func TestSaveOutput(t *testing.T) {
	dir := t.TempDir()
	out, err := transport.SaveOutput(dir, "r-*.out", strings.NewReader("result"))
	require.NoError(t, err)
	b, err := out.ReadAll()
	require.NoError(t, err)
	assert.Equal(t, "result", string(b))
	assert.Equal(t, int64(6), out.Size())
	require.NoError(t, out.Close())
	_, err = os.Stat(out.Path())
	assert.ErrorIs(t, err, os.ErrNotExist, "Close removes it")

	_, err = transport.SaveOutput(dir, "r-*.out", iotest.ErrReader(errors.New("peer gone")))
	require.ErrorContains(t, err, "peer gone")
	left, _ := os.ReadDir(dir)
	assert.Empty(t, left, "nothing is left of a failed copy")
}
