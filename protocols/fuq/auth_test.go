package fuq

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Foreman with a Secret runs tasks on a worker that holds it; a worker
// with another secret stops with ErrAuth and gets no task; a client that
// speaks at once, as a worker of a foreman without secret would, is closed
// without being taken for a worker.
func TestForemanSecret(t *testing.T) {
	s := startSystem(t, &Foreman{Secret: []byte("s3cret")})
	cmd := s.script("echo task $1\n")

	_, ran := s.workerWith(s.addr, 1, []byte("wrong"))
	select {
	case err := <-ran:
		require.ErrorIs(t, err, ErrAuth)
	case <-time.After(10 * time.Second):
		t.Fatal("a worker with a wrong secret did not stop")
	}

	c, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	defer c.Close()
	hello, err := Message{Header: Header{Type: TypeHello, Seq: 1}, Hello: &Hello{NumProcs: 4, Running: []Task{}}}.AppendBinary(nil)
	require.NoError(t, err)
	_, err = c.Write(hello)
	require.NoError(t, err)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, _ := readAll(c)
	assert.Contains(t, string(b), authMagic, "the foreman challenged")
	assert.Equal(t, byte(authRefuse), b[len(b)-1], "and refused")
	require.Eventually(t, func() bool {
		return s.logs.FilterMessageSnippet("did not prove it holds the shared secret").Len() == 2
	}, 10*time.Second, 10*time.Millisecond)

	h, logDir := s.submit("auth", cmd, 2)
	s.workerWith(s.addr, 2, []byte("s3cret"))
	res := wait(t, h)
	require.NoError(t, res.Err)
	assert.Len(t, logFiles(t, logDir), 2)
}

// readAll reads c to its end or its deadline.
func readAll(c net.Conn) ([]byte, error) {
	var out []byte
	buf := make([]byte, 256)
	for {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			if os.IsTimeout(err) {
				return out, err
			}
			return out, nil
		}
	}
}
