package pulse

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
)

// A connection carries one request and one response (WIRE-NOTES), so each
// side reads it through a buffer and writes a message with its extra bytes
// together when they are few: a message's length, its bytes and a small
// task or result then take one system call instead of three, on each side.
// The framing is unchanged: every peer reads lengths, not writes.

// smallExtra is the most extra bytes written in one write with their
// message; larger ones are streamed after it.
const smallExtra = 16 << 10

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	writerPool = sync.Pool{New: func() any { b := make([]byte, 0, smallBuf+smallExtra); return &b }}
)

// newReader returns a pooled buffered reader of conn; freeReader gives it
// back once the connection's exchange is over.
func newReader(conn net.Conn) *bufio.Reader {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(conn)
	return br
}

func freeReader(br *bufio.Reader) {
	br.Reset(nil)
	readerPool.Put(br)
}

// ErrTooSlow is matched by the error of an exchange that a peer kept
// going past its whole deadline (Controller.ExchangeTimeout,
// Worker.ExchangeTimeout): one that sends, or reads, a message a little
// at a time, each read or write within Timeout. The error matches
// os.ErrDeadlineExceeded too.
var ErrTooSlow = errors.New("pulse: the peer is too slow: the exchange took longer than its deadline")

// exchangeConn is the connection of one exchange (a request and its
// answer, with their extra bytes). Every read and write has a deadline
// of per ahead, so that a peer that stalls fails it, and none goes past
// end, the deadline of the whole exchange, so that a peer that sends or
// reads a byte now and then cannot hold the connection either: a large
// transfer is bounded per chunk and in total.
type exchangeConn struct {
	net.Conn
	per   time.Duration
	whole time.Duration
	end   time.Time
}

// newExchangeConn returns conn for an exchange that began at begun and
// must be over within whole, each read and write within per.
func newExchangeConn(conn net.Conn, per, whole time.Duration, begun time.Time) *exchangeConn {
	return &exchangeConn{Conn: conn, per: per, whole: whole, end: begun.Add(whole)}
}

func (c *exchangeConn) deadline() time.Time {
	if t := time.Now().Add(c.per); t.Before(c.end) {
		return t
	}
	return c.end
}

func (c *exchangeConn) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(c.deadline())
	n, err := c.Conn.Read(p)
	return n, c.cut(err)
}

func (c *exchangeConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(c.deadline())
	n, err := c.Conn.Write(p)
	return n, c.cut(err)
}

// cut returns err, which matches ErrTooSlow too when the exchange's own
// deadline is what ended the read or write.
func (c *exchangeConn) cut(err error) error {
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(c.end) {
		return fmt.Errorf("%w (%v): %w", ErrTooSlow, c.whole, err)
	}
	return err
}

// timedOut reports whether err is a deadline that passed (a peer silent,
// or too slow: ErrTooSlow), rather than a message that was wrong.
func timedOut(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// writeWithExtra writes m and then n bytes from extra (nil when n is 0) to
// w: in one Write when n is at most smallExtra, else m, then the bytes
// streamed. w is a connection with a deadline set before each write
// (an exchangeConn).
func (c Codec) writeWithExtra(w io.Writer, m proto.Message, extra io.Reader, n int64) error {
	if n > smallExtra {
		if err := c.WriteMessage(w, m); err != nil {
			return err
		}
		_, err := io.CopyN(w, extra, n)
		return err
	}
	bp := writerPool.Get().(*[]byte)
	defer writerPool.Put(bp)
	b, err := c.AppendMessage((*bp)[:0], m)
	if err != nil {
		return err
	}
	head := len(b)
	b = append(b, make([]byte, n)...)
	*bp = b[:0]
	if n > 0 {
		if _, err := io.ReadFull(extra, b[head:]); err != nil {
			return err
		}
	}
	_, err = w.Write(b)
	return err
}
