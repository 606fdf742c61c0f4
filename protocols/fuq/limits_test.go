package fuq

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest/observer"
)

// A peer that starts a message and then sends a byte now and then, each
// within the timeout, is cut off once the whole message is overdue: it
// cannot hold the message, and the memory it takes, for long.
func TestForemanCutsATricklingMessage(t *testing.T) {
	s := startSystem(t, &Foreman{Timeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	defer c.Close()
	hdr := make([]byte, HeaderSize)
	binary.LittleEndian.PutUint16(hdr[0:], Magic)
	hdr[2] = byte(TypeHello)
	binary.LittleEndian.PutUint32(hdr[4:], 1)
	binary.LittleEndian.PutUint32(hdr[12:], 1<<20) // a body of 1 MiB, announced
	_, err = c.Write(hdr)
	require.NoError(t, err)
	start := time.Now()
	cut := false
	for range 200 { // 10 s at most
		if _, err := c.Write([]byte{0x90}); err != nil {
			cut = true
			break
		}
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 64)); err != nil && !isTimeout(err) {
			cut = true
			break
		}
	}
	require.True(t, cut, "a message trickling for %v was not cut off", time.Since(start))
	require.Eventually(t, func() bool { return s.logs.FilterMessageSnippet("worker connection ended").Len() == 1 }, 10*time.Second, 10*time.Millisecond)
}

// Beyond MaxConns, a connection is closed at once; the others are served.
func TestForemanMaxConns(t *testing.T) {
	s := startSystem(t, &Foreman{MaxConns: 1, Timeout: time.Minute})
	first, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	defer first.Close()
	require.Eventually(t, func() bool { return s.f.conns.Load() == 1 }, 10*time.Second, time.Millisecond)
	second, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	defer second.Close()
	second.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = second.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the connection over the limit was not closed")
	refused := s.logs.FilterMessageSnippet("too many connections").All()
	require.Len(t, refused, 1)
	assertSaysLimit(t, refused[0], 1)
	first.Close()
	require.Eventually(t, func() bool { return s.f.conns.Load() == 0 }, 10*time.Second, time.Millisecond)
	h, _ := s.submit("after", s.script("true\n"), 1)
	s.worker(s.addr, 1)
	require.NoError(t, wait(t, h).Err)
}

// assertSaysLimit checks that a refusal's log line gives the limit, max,
// in words an operator reads, not by the name of a Go field.
func assertSaysLimit(t *testing.T, e observer.LoggedEntry, max int) {
	t.Helper()
	assert.NotRegexp(t, `Foreman\.|Max[A-Z]`, e.Message)
	assert.EqualValues(t, max, e.ContextMap()["at most"], "%s", e.Message)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A host that opens connections and never proves the secret holds at most
// MaxUnproven of them: the rest are closed at once, and a worker from
// elsewhere still finds room among MaxConns.
func TestForemanMaxUnproven(t *testing.T) {
	secret := []byte("s3cret")
	s := startSystem(t, &Foreman{Secret: secret, MaxConns: 3, MaxUnproven: 2, Timeout: time.Minute})
	flooder := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var held, closed int
	for range 6 {
		c, err := flooder.Dial("tcp", s.addr)
		require.NoError(t, err)
		defer c.Close()
		// The foreman speaks first (its challenge) to a connection it
		// keeps; one it refuses is closed without a word.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		if errors.Is(err, io.EOF) {
			closed++
		} else {
			require.NoError(t, err)
			held++
		}
	}
	assert.Equal(t, 2, held, "MaxUnproven from one address")
	assert.Equal(t, 4, closed)
	refused := s.logs.FilterMessageSnippet("too many connections from its address still to prove the secret").All()
	require.Len(t, refused, 1, "once a second at most")
	assertSaysLimit(t, refused[0], 2)

	h, _ := s.submit("through", s.script("true\n"), 1)
	s.workerWith(s.addr, 1, secret)
	require.NoError(t, wait(t, h).Err, "the worker found room")
}
