package transport_test

import (
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
