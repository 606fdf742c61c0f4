package fuq

import (
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// A Foreman with a Secret runs tasks on a worker that holds it; a worker
// with another secret stops with ErrAuth and gets no task; a client that
// speaks at once, as a worker of a foreman without secret would, is refused
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
	_, err = c.Write(append(hello, make([]byte, 64)...)) // as long as an answer
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

// fakeForeman listens on loopback and answers one worker with answer,
// given the challenge's nonce and the worker's answer; it sends on got what
// the worker sent after the handshake (nothing when it left before).
func fakeForeman(t *testing.T, magic string, answer func(nonce, reply []byte) []byte) (string, <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	got := make(chan []byte, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var rest []byte
		defer func() { got <- rest }()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		nonce := make([]byte, authNonce)
		rand.Read(nonce)
		if _, err := c.Write(append([]byte(magic), nonce...)); err != nil {
			return
		}
		reply := make([]byte, authNonce+sha256.Size)
		if magic == authMagicOneWay {
			reply = reply[:sha256.Size]
		}
		if _, err := io.ReadFull(c, reply); err != nil {
			return
		}
		c.Write(answer(nonce, reply))
		rest, _ = io.ReadAll(c) // to the worker's close
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), got
}

// A worker takes commands only from a foreman that proves it holds the
// secret: not from a program on the foreman's address that accepts
// whatever the worker answers, nor from one that asks for the one-way
// proof of earlier versions. It stops with ErrForemanUnproven, having sent
// no HELLO.
func TestWorkerRefusesAnUnprovenForeman(t *testing.T) {
	secret := []byte("s3cret")
	for name, fake := range map[string]struct {
		magic  string
		answer func(nonce, reply []byte) []byte
	}{
		"accepts without proof": {authMagic, func(_, _ []byte) []byte { return append([]byte{authAccept}, make([]byte, sha256.Size)...) }},
		"proves another secret": {authMagic, func(nonce, reply []byte) []byte {
			return append([]byte{authAccept}, authMAC([]byte("other"), "foreman", nonce, reply[:authNonce])...)
		}},
		"echoes the worker's proof": {authMagic, func(_, reply []byte) []byte { return append([]byte{authAccept}, reply[authNonce:]...) }},
		"one-way challenge":         {authMagicOneWay, func(_, _ []byte) []byte { return []byte{authAccept} }},
	} {
		t.Run(name, func(t *testing.T) {
			addr, got := fakeForeman(t, fake.magic, fake.answer)
			w := &Worker{Addr: addr, Secret: secret, Procs: 1, SpoolDir: t.TempDir(), Logger: zap.NewNop()}
			err := w.Run(t.Context())
			require.ErrorIs(t, err, ErrForemanUnproven)
			assert.Empty(t, <-got, "the worker sent nothing after its proof")
		})
	}
}

// A foreman's proof is the one the worker checks: the real handshake,
// over a real connection, from both ends.
func TestHandshakeProvesBothEnds(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	foreman := make(chan error, 1)
	go func() { foreman <- authWorkerConn(a, []byte("s3cret"), 10*time.Second) }()
	require.NoError(t, authForemanConn(b, []byte("s3cret"), 10*time.Second))
	require.NoError(t, <-foreman)
}
