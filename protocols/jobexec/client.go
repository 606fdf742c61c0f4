package jobexec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// ErrRefused is wrapped by Client.Do when the server refused the command;
// the error's text says why.
var ErrRefused = errors.New("jobexec: command refused")

// Client sends one command per call to a jobExecutorServer. Its zero value
// is not usable: set Addr.
type Client struct {
	// Addr is the server's host:port; the host is resolved by name.
	Addr string
	// Token is sent with every command; "" when the server has none.
	Token string
	// DialTimeout bounds connecting; 0 means 10 s.
	DialTimeout time.Duration
	// MaxFrame bounds a frame from the server; 0 means DefaultMaxFrame.
	MaxFrame int
}

// Do sends the command and copies what the server answers to out, as the
// commander prints it: each line with its newline, job output as it
// arrives. It returns the exit status the server gave (for issueJob, the
// job's own exit status), or an error: the server refused (ErrRefused),
// the connection failed, or the server broke the protocol.
func (c *Client) Do(ctx context.Context, command string, args []string, out io.Writer) (int, error) {
	timeout := c.DialTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()

	payload, err := Request{Token: c.Token, Command: command, Args: args}.AppendBinary(nil)
	if err != nil {
		return 0, err
	}
	if err := WriteFrame(conn, FrameRequest, payload); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	var refusal error
	buf := make([]byte, 0, 512) // lines and output chunks are read into it
	for {
		f, err := readFrame(r, c.MaxFrame, buf)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return 0, fmt.Errorf("jobexec: reading the answer: %w", err)
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
