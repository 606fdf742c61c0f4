package jobexec

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// ErrRefused is wrapped by Client.Do when the server refused the command;
// the error's text says why.
var ErrRefused = errors.New("jobexec: command refused")

// ErrNotServer is wrapped by Client.Do when the peer did not answer as a
// jobExecutorServer of this project does: it did not acknowledge the
// request within Client.AckTimeout, closed the connection without a word,
// or sent something that is not this protocol (another program's wire, an
// HTTP server). The error's text says which.
var ErrNotServer = errors.New("jobexec: not a laboro jobExecutorServer")

// DefaultAckTimeout is how long a Client waits for the server to
// acknowledge its request unless configured.
const DefaultAckTimeout = 5 * time.Second

// errBeforeAck is how do tells Do that the server refused a request of
// version 2 before acknowledging it: a server that predates FrameAck.
var errBeforeAck = errors.New("refused before the acknowledgement")

// Client sends one command per call to a jobExecutorServer. Its zero value
// is not usable: set Addr. It holds no state between calls and is safe for
// concurrent use.
type Client struct {
	// Addr is the server's host:port; the host is resolved by name.
	Addr string
	// Token is proven to the server with every command, without being
	// sent, once the server has proven that it holds it (see Do); "" when
	// the server has none.
	Token string
	// DialTimeout bounds connecting; 0 means 10 s.
	DialTimeout time.Duration
	// AckTimeout bounds sending the request and receiving the server's
	// acknowledgement of it; for every command but issueJob (whose answer
	// waits for its job) it bounds each read of the answer too, unless the
	// server predates the acknowledgement. 0 means DefaultAckTimeout.
	AckTimeout time.Duration
	// MaxFrame bounds a frame from the server; 0 means DefaultMaxFrame.
	MaxFrame int
	// Stderr receives the end of the standard error of an issued job that
	// did not succeed, in one write, before Do returns; nil drops it.
	Stderr io.Writer
	// Why receives, for an issued job that did not exit by itself (killed,
	// timed out, never started), one line saying how it ended, in one
	// write, before Do returns; nil drops it. A server from before version
	// 4 sends none.
	Why io.Writer
}

// Do sends the command and copies what the server answers to out, as the
// commander prints it: each line with its newline, job output as it
// arrives. It returns the exit status the server gave (for issueJob, the
// job's own exit status), or an error: the server refused (ErrRefused),
// the peer is not a jobExecutorServer of this project (ErrNotServer), it
// did not prove that it holds the token (ErrServerUnproven), the
// connection failed, or the server broke the protocol; ctx.Err() when ctx
// ended first.
//
// With a Token, the server must first prove that it holds it, and the
// command carries the Client's proof, never the token itself (version 5):
// a program that took the server's port while it was down, or anyone on
// the path, learns neither the token nor a proof that it could use again.
// The request asks for an acknowledgement, for the end of the standard
// error of an issued job that does not succeed (version 3), which goes to
// Stderr, and for why one did not exit by itself (version 4), which goes
// to Why. A server from before a version refuses it at once; Do
// then sends the command again with the version before, on a new
// connection (the refused request did nothing) — but a Client with a
// Token never goes below version 5, which would send it in the clear.
func (c *Client) Do(ctx context.Context, command string, args []string, out io.Writer) (int, error) {
	v := Version
	if c.Token == "" {
		v = Version - 1 // nothing to prove: no hello
	}
	for ; ; v-- {
		code, err := c.do(ctx, v, command, args, out)
		if errors.Is(err, errBeforeAck) && v == Version {
			return 0, fmt.Errorf("%w: %s refused the hello of version %d (a server of an earlier version, which would take the token only in the clear; upgrade it)",
				ErrServerUnproven, c.Addr, Version)
		}
		if !errors.Is(err, errBeforeAck) || v == MinVersion {
			return code, err
		}
	}
}

// ErrServerUnproven is wrapped by Client.Do when a Client with a Token
// found that the server does not prove it holds it: another program
// answers on the server's address (one that took the port while the
// server was down, say), the server has another token, or it is of a
// version that cannot prove it. The command was not sent.
var ErrServerUnproven = errors.New("jobexec: the server did not prove it holds the token")

// do runs one exchange with a request of the given version.
func (c *Client) do(ctx context.Context, version int, command string, args []string, out io.Writer) (int, error) {
	q := Request{Version: version, Token: c.Token, Command: command, Args: args}
	payload, err := q.AppendBinary(nil)
	if err != nil {
		return 0, err
	}
	dialTimeout := c.DialTimeout
	if dialTimeout <= 0 {
		dialTimeout = 10 * time.Second
	}
	timeout := c.AckTimeout
	if timeout <= 0 {
		timeout = DefaultAckTimeout
	}
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	// Closing, unlike a deadline, is not undone by the next SetReadDeadline.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	fail := func(err error) (int, error) {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, err
	}

	w, r := bufio.NewWriter(conn), bufio.NewReader(conn)
	if version == Version {
		if q, err = c.handshake(conn, w, r, q, timeout); err == nil {
			payload, err = q.AppendBinary(payload[:0])
		}
		if err != nil {
			return fail(err)
		}
	}
	conn.SetWriteDeadline(time.Now().Add(timeout))
	err = WriteFrame(w, FrameRequest, payload)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return fail(fmt.Errorf("jobexec: sending the request: %w", err))
	}
	acked := version < 2 // version 1 has no acknowledgement
	if !acked {
		conn.SetReadDeadline(time.Now().Add(timeout))
		f, err := ReadFrame(r, c.MaxFrame)
		if err = c.expect(f, err, FrameAck, "acknowledging the request", timeout); err != nil {
			return fail(err)
		}
		acked = true
	}
	// An issueJob answer waits for the job, which may take hours: after
	// the acknowledgement only TCP keepalive (on by default) watches the
	// connection. Other commands are answered at once, except by a server
	// from before the acknowledgement, whose exit waits for the drain.
	deadline := version >= 2 && command != "issueJob"
	var refusal error
	buf := make([]byte, 0, 512) // lines and output chunks are read into it
	for {
		if deadline {
			conn.SetReadDeadline(time.Now().Add(timeout))
		} else {
			conn.SetReadDeadline(time.Time{})
		}
		f, err := readFrame(r, c.MaxFrame, buf)
		if err != nil {
			return fail(fmt.Errorf("jobexec: reading the answer: %w", err))
		}
		switch f.Type {
		case FrameLine:
			buf = append(f.Payload, '\n') // one write per line
			_, err = out.Write(buf)
		case FrameOutput:
			_, err = out.Write(f.Payload)
			buf = f.Payload
		case FrameRefusal:
			refusal = fmt.Errorf("%w: %s", ErrRefused, f.Payload)
		case FrameStderr:
			if c.Stderr != nil {
				_, err = c.Stderr.Write(f.Payload)
			}
		case FrameWhy:
			if c.Why != nil {
				_, err = c.Why.Write(f.Payload)
			}
		case FrameExit:
			code, err := ParseExit(f.Payload)
			if err != nil {
				return 0, err
			}
			return code, refusal
		default:
			return 0, protocolErrorf("unexpected %v frame from the server", f.Type)
		}
		if err != nil {
			return 0, err
		}
	}
}

// isTimeout reports whether err is a deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// handshake sends the hello of version 5, checks the server's proof that it
// holds the token, and returns q with the Client's own proof in the
// token's place.
func (c *Client) handshake(conn net.Conn, w *bufio.Writer, r *bufio.Reader, q Request, timeout time.Duration) (Request, error) {
	nonce := make([]byte, NonceSize)
	rand.Read(nonce) // never fails
	conn.SetWriteDeadline(time.Now().Add(timeout))
	err := WriteFrame(w, FrameHello, HelloPayload(Version, nonce))
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return q, fmt.Errorf("jobexec: sending the hello: %w", err)
	}
	conn.SetReadDeadline(time.Now().Add(timeout))
	f, err := ReadFrame(r, c.MaxFrame)
	if err = c.expect(f, err, FrameChallenge, "answering the hello", timeout); err != nil {
		return q, err
	}
	theirs, proof, err := ParseChallenge(f.Payload)
	if err != nil {
		return q, fmt.Errorf("%w: %s: %w", ErrNotServer, c.Addr, err)
	}
	if !hmac.Equal(proof, ServerProof(c.Token, nonce, theirs)) {
		return q, fmt.Errorf("%w: %s answered with a wrong proof (the server has another token, or another program holds its port); the command was not sent",
			ErrServerUnproven, c.Addr)
	}
	return q.Prove(c.Token, nonce, theirs)
}

// expect checks that the frame read (f, or the read's error err) is of
// type want, the server's first answer to a hello or a request: a refusal
// of the request as bad is errBeforeAck, another refusal (too many
// connections) ErrRefused, anything else says that the peer is not a server of
// this project (ErrNotServer), doing what.
func (c *Client) expect(f Frame, err error, want FrameType, doing string, timeout time.Duration) error {
	switch {
	case err == nil && f.Type == want:
		return nil
	case err == nil && f.Type == FrameRefusal && bytes.HasPrefix(f.Payload, []byte("bad request")):
		return errBeforeAck // what a server of an earlier version says
	case err == nil && f.Type == FrameRefusal:
		return fmt.Errorf("%w: %s", ErrRefused, f.Payload) // too many connections
	case err == nil:
		return fmt.Errorf("%w: %s answered with a %v frame before %s", ErrNotServer, c.Addr, f.Type, doing)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %s closed the connection without %s: %w", ErrNotServer, c.Addr, doing, err)
	case isTimeout(err):
		return fmt.Errorf("%w: %s did not finish %s within %v: %w", ErrNotServer, c.Addr, doing, timeout, err)
	default:
		return fmt.Errorf("%w: %s does not speak this protocol: %w", ErrNotServer, c.Addr, err)
	}
}
