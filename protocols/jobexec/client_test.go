package jobexec

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// peer is a scripted server on a loopback port: each connection is handed
// to script, in a goroutine of its own, after the request has been read.
type peer struct {
	addr     string
	requests chan Request // every request read, in order
}

func startPeer(t *testing.T, script func(conn net.Conn, q Request)) *peer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &peer{addr: ln.Addr().String(), requests: make(chan Request, 16)}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(30 * time.Second))
				f, err := ReadFrame(conn, 0)
				if err != nil {
					return
				}
				q, _ := ParseRequest(f.Payload)
				p.requests <- q
				script(conn, q)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return p
}

// frames is the bytes of the given frames.
func frames(fs ...Frame) []byte {
	var b bytes.Buffer
	for _, f := range fs {
		WriteFrame(&b, f.Type, f.Payload)
	}
	return b.Bytes()
}

// A peer that is not a jobExecutorServer of this project gets a clear
// error within AckTimeout, whatever it does with the request; before the
// acknowledgement a commander would wait forever on the silent ones.
func TestClientNotServer(t *testing.T) {
	const ackTimeout = 300 * time.Millisecond
	scripts := map[string]func(conn net.Conn, q Request){
		// What the student servers stegiks/System-Programming-Project-2 and
		// ConstArc/jobExecutor do with our request: read it as a length of
		// their own wire and wait for bytes that never come.
		"silent": func(conn net.Conn, _ Request) { io.Copy(io.Discard, conn) },
		// DimitrisChrysos/jobExecutorServer-…: its controller thread dies
		// on the request and the connection closes with nothing sent.
		"closes": func(net.Conn, Request) {},
		// An HTTP server answering what it cannot parse.
		"http": func(conn net.Conn, _ Request) {
			conn.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"))
		},
		// stegiks's reply to exit on its own wire: a little-endian length
		// that counts itself, then the text.
		"another wire": func(conn net.Conn, _ Request) {
			msg := "SERVER TERMINATED"
			conn.Write(append(binary.LittleEndian.AppendUint32(nil, uint32(4+len(msg))), msg...))
		},
		// Frames of this protocol, but not as a server of this version
		// answers a version 2 request: a line before the acknowledgement.
		"no acknowledgement": func(conn net.Conn, _ Request) {
			conn.Write(frames(Frame{FrameLine, []byte("CONCURRENCY SET AT 2")}, Frame{FrameExit, ExitPayload(0)}))
		},
	}
	for name, script := range scripts {
		t.Run(name, func(t *testing.T) {
			p := startPeer(t, script)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out bytes.Buffer
			start := time.Now()
			_, err := (&Client{Addr: p.addr, AckTimeout: ackTimeout}).Do(ctx, "setConcurrency", []string{"2"}, &out)
			require.ErrorIs(t, err, ErrNotServer)
			assert.Contains(t, err.Error(), p.addr)
			assert.Less(t, time.Since(start), 10*ackTimeout)
			assert.Empty(t, out.String())
			assert.Len(t, p.requests, 1, "one request, no retry")
		})
	}
}

// An HTTP server on the port: no hang, ErrNotServer.
func TestClientHTTPServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") }))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := (&Client{Addr: srv.Listener.Addr().String(), AckTimeout: 300 * time.Millisecond}).Do(ctx, "issueJob", []string{"ls"}, io.Discard)
	require.ErrorIs(t, err, ErrNotServer)
}

// The exact bytes a server from before the acknowledgement answers to a
// request of a later version; the Client then speaks version 1 to it, and waits as
// long as it takes for an issueJob's SUBMITTED (such a server sends
// nothing while the job waits for a place in a full buffer) and for exit's
// answer (it answers once the running jobs are done).
func TestClientOlderServer(t *testing.T) {
	const ackTimeout = 100 * time.Millisecond
	p := startPeer(t, func(conn net.Conn, q Request) {
		if q.Version != 1 {
			conn.Write(frames(Frame{FrameRefusal, fmt.Appendf(nil, "bad request: jobexec: request version %d, want 1", q.Version)}, Frame{FrameExit, ExitPayload(1)}))
			return
		}
		switch q.Command {
		case "setConcurrency":
			conn.Write(frames(Frame{FrameLine, []byte("CONCURRENCY SET AT " + q.Args[0])}, Frame{FrameExit, ExitPayload(0)}))
		case "issueJob":
			<-time.After(5 * ackTimeout) // blocked on a full buffer, longer than the ack timeout
			conn.Write(frames(Frame{FrameLine, []byte("JOB <job_1, true> SUBMITTED")},
				Frame{FrameLine, []byte("-----job_1 output start-----")}, Frame{FrameLine, []byte("-----job_1 output end-----")}, Frame{FrameExit, ExitPayload(0)}))
		case "exit":
			<-time.After(5 * ackTimeout) // draining
			conn.Write(frames(Frame{FrameLine, []byte("SERVER TERMINATED")}, Frame{FrameExit, ExitPayload(0)}))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := &Client{Addr: p.addr, AckTimeout: ackTimeout}
	var out bytes.Buffer
	code, err := c.Do(ctx, "setConcurrency", []string{"2"}, &out)
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "CONCURRENCY SET AT 2\n", out.String())
	assert.Equal(t, 4, (<-p.requests).Version, "each version refused, the one before is tried")
	assert.Equal(t, 3, (<-p.requests).Version)
	assert.Equal(t, 2, (<-p.requests).Version)
	assert.Equal(t, 1, (<-p.requests).Version)

	out.Reset()
	code, err = c.Do(ctx, "issueJob", []string{"true"}, &out)
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "JOB <job_1, true> SUBMITTED\n-----job_1 output start-----\n-----job_1 output end-----\n", out.String())

	out.Reset()
	code, err = c.Do(ctx, "exit", nil, &out)
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "SERVER TERMINATED\n", out.String())
}

// A commander from before the acknowledgement sends version 1 and reads
// exactly the frames it knows: no FrameAck, which it would take for a
// broken protocol.
func TestServerAnswersVersion1WithoutAck(t *testing.T) {
	ts := startServer(t, "")
	conn, err := net.Dial("tcp", ts.addr)
	require.NoError(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	p, err := Request{Version: 1, Command: "setConcurrency", Args: []string{"2"}}.AppendBinary(nil)
	require.NoError(t, err)
	require.NoError(t, WriteFrame(conn, FrameRequest, p))
	answer, err := io.ReadAll(conn)
	require.NoError(t, err)
	assert.Equal(t, frames(Frame{FrameLine, []byte("CONCURRENCY SET AT 2")}, Frame{FrameExit, ExitPayload(0)}), answer)

	// Version 2: the same answer after the acknowledgement.
	conn2, err := net.Dial("tcp", ts.addr)
	require.NoError(t, err)
	defer conn2.Close()
	conn2.SetDeadline(time.Now().Add(10 * time.Second))
	p[0] = 2
	require.NoError(t, WriteFrame(conn2, FrameRequest, p))
	answer, err = io.ReadAll(conn2)
	require.NoError(t, err)
	assert.Equal(t, frames(Frame{FrameAck, nil}, Frame{FrameLine, []byte("CONCURRENCY SET AT 2")}, Frame{FrameExit, ExitPayload(0)}), answer)
}

// An issueJob that waits for a place in a full buffer far longer than the
// ack timeout is acknowledged at once, so the Client waits for it.
func TestIssueJobAcknowledgedWhileBlocked(t *testing.T) {
	ts := startServer(t, "", laboro.WithConcurrency(0), laboro.WithBufferSize(1))
	const ackTimeout = 100 * time.Millisecond
	type answer struct {
		out  string
		code int
		err  error
	}
	issue := func(word string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out bytes.Buffer
			code, err := (&Client{Addr: ts.addr, AckTimeout: ackTimeout}).Do(ctx, "issueJob", []string{"echo", word}, &out)
			ch <- answer{out.String(), code, err}
		}()
		return ch
	}
	first := issue("one")
	require.Eventually(t, func() bool { return ts.ex.Stats().Queued == 1 }, 10*time.Second, time.Millisecond)
	second := issue("two")
	require.Eventually(t, func() bool { return ts.ex.Stats().Blocked == 1 }, 10*time.Second, time.Millisecond)
	select {
	case a := <-second:
		t.Fatalf("the blocked commander gave up: %q %v", a.out, a.err)
	case <-time.After(5 * ackTimeout):
	}
	require.NoError(t, ts.ex.SetConcurrency(1))
	for i, ch := range []chan answer{first, second} {
		a := <-ch
		require.NoError(t, a.err)
		assert.Equal(t, 0, a.code)
		id, word := []string{"job_1", "job_2"}[i], []string{"one", "two"}[i]
		assert.Equal(t, "JOB <"+id+", echo "+word+"> SUBMITTED\n-----"+id+" output start-----\n"+word+"\n-----"+id+" output end-----\n", a.out)
	}
}

// An issued job that did not exit by itself (it never started, or was
// killed) has why sent after its output (version 4), to the Client's Why;
// one that exited with a status has none, nor does a request of version 3.
func TestClientWhyJobDidNotExit(t *testing.T) {
	ts := startServer(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, why bytes.Buffer
	c := &Client{Addr: ts.addr, Why: &why}
	code, err := c.Do(ctx, "issueJob", []string{"no-such-command-here"}, &out)
	require.NoError(t, err)
	assert.Equal(t, 1, code)
	assert.Equal(t, "JOB <job_1, no-such-command-here> SUBMITTED\n-----job_1 output start-----\n-----job_1 output end-----\n", out.String())
	assert.Regexp(t, `^failed: .*"no-such-command-here": executable file not found in \$PATH$`, why.String())

	why.Reset()
	code, err = c.Do(ctx, "issueJob", []string{"sh", "-c", "kill -9 $$"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 1, code)
	assert.Equal(t, "failed: signal: killed", why.String())

	why.Reset()
	code, err = c.Do(ctx, "issueJob", []string{"sh", "-c", "exit 3"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 3, code)
	assert.Empty(t, why.String(), "its exit status says it all")

	// Version 3: the same answer, without the frame.
	conn, err := net.Dial("tcp", ts.addr)
	require.NoError(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	p, err := Request{Version: 3, Command: "issueJob", Args: []string{"no-such-command-here"}}.AppendBinary(nil)
	require.NoError(t, err)
	require.NoError(t, WriteFrame(conn, FrameRequest, p))
	answer, err := io.ReadAll(conn)
	require.NoError(t, err)
	r := bufio.NewReader(bytes.NewReader(answer))
	frames := 0
	for ; ; frames++ {
		f, err := ReadFrame(r, DefaultMaxFrame)
		if err != nil {
			break
		}
		assert.NotEqual(t, FrameWhy, f.Type)
	}
	assert.Equal(t, 5, frames, "the ack, three lines, the exit")
}

// An issued job that fails has the end of its standard error sent after
// its output (version 3), to the Client's Stderr: the output itself stays
// as the protocol frames it. A job that succeeds sends none, nor does a
// request of version 2.
func TestClientStderrOfFailedJob(t *testing.T) {
	ts := startServer(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	c := &Client{Addr: ts.addr, Stderr: &errOut}
	code, err := c.Do(ctx, "issueJob", []string{"sh", "-c", "echo out; echo 'no such file' >&2; exit 3"}, &out)
	require.NoError(t, err)
	assert.Equal(t, 3, code)
	assert.Regexp(t, `^JOB <job_1, sh -c .*> SUBMITTED\n-----job_1 output start-----\nout\n-----job_1 output end-----\n$`, out.String())
	assert.Equal(t, "no such file\n", errOut.String())

	errOut.Reset()
	code, err = c.Do(ctx, "issueJob", []string{"sh", "-c", "echo fine >&2"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Empty(t, errOut.String(), "a job that succeeds")

	// Version 2: the same answer, without the frame.
	conn, err := net.Dial("tcp", ts.addr)
	require.NoError(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	p, err := Request{Version: 2, Command: "issueJob", Args: []string{"sh", "-c", "echo e >&2; exit 1"}}.AppendBinary(nil)
	require.NoError(t, err)
	require.NoError(t, WriteFrame(conn, FrameRequest, p))
	answer, err := io.ReadAll(conn)
	require.NoError(t, err)
	assert.NotContains(t, string(answer), string(FrameStderr)+"e\n")
	r := bufio.NewReader(bytes.NewReader(answer))
	for {
		f, err := ReadFrame(r, DefaultMaxFrame)
		if err != nil {
			break
		}
		assert.NotEqual(t, FrameStderr, f.Type)
	}
}

// A Client with a token sends its command only to a server that proves it
// holds the token: not to a program on the server's port that answers the
// hello as it can (a made-up proof, the Client's own nonce back), nor to
// one that refuses the hello as a server of an earlier version would (a
// request of version 4 would carry the token in the clear). Each ends in
// ErrServerUnproven, on one connection, with no request sent.
func TestClientRefusesAnUnprovenServer(t *testing.T) {
	answers := map[string]func(hello []byte) []Frame{
		"made-up proof": func([]byte) []Frame {
			return []Frame{{FrameChallenge, ChallengePayload(make([]byte, NonceSize), make([]byte, 32))}}
		},
		"proof of another token": func(hello []byte) []Frame {
			ours := bytes.Repeat([]byte{1}, NonceSize)
			return []Frame{{FrameChallenge, ChallengePayload(ours, ServerProof("other", hello[1:], ours))}}
		},
		"the nonce sent back": func(hello []byte) []Frame {
			return []Frame{{FrameChallenge, ChallengePayload(hello[1:], ServerProof("", hello[1:], hello[1:]))}}
		},
		"hello refused": func(hello []byte) []Frame {
			return []Frame{{FrameRefusal, []byte("bad request: jobexec: unknown frame type H")}, {FrameExit, ExitPayload(1)}}
		},
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			after := make(chan []byte, 1) // what the Client sent after the hello
			next := make(chan string, 1)  // the first bytes of the next connection
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				conn.SetDeadline(time.Now().Add(30 * time.Second))
				f, err := ReadFrame(conn, 0)
				if err != nil || f.Type != FrameHello {
					after <- []byte("no hello")
				} else {
					conn.Write(frames(answer(f.Payload)...))
					rest, _ := io.ReadAll(conn)
					after <- rest
				}
				conn.Close()
				if conn, err = ln.Accept(); err == nil {
					conn.SetDeadline(time.Now().Add(30 * time.Second))
					b := make([]byte, 4)
					io.ReadFull(conn, b)
					next <- string(b)
					conn.Close()
				}
			}()
			_, err = (&Client{Addr: ln.Addr().String(), Token: "s3cret", AckTimeout: 10 * time.Second}).Do(t.Context(), "issueJob", []string{"touch", "x"}, io.Discard)
			require.ErrorIs(t, err, ErrServerUnproven)
			assert.Empty(t, <-after, "nothing sent after the hello")
			// Connections are accepted in order: the test's own comes
			// next unless the Client tried again (with an earlier version).
			mark, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			defer mark.Close()
			mark.Write([]byte("MARK"))
			assert.Equal(t, "MARK", <-next, "no second connection")
		})
	}
}
