package pulse

import (
	"bufio"
	"io"
	"net"
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

// extraReader reads a message's extra bytes through br, setting conn's
// read deadline d ahead before each read that goes to the connection: a
// large transfer is bounded per chunk, as transport.Deadlined bounds it.
type extraReader struct {
	conn net.Conn
	br   *bufio.Reader
	d    time.Duration
}

func (r extraReader) Read(p []byte) (int, error) {
	if r.br.Buffered() == 0 {
		r.conn.SetReadDeadline(time.Now().Add(r.d))
	}
	return r.br.Read(p)
}

// writeWithExtra writes m and then n bytes from extra (nil when n is 0) to
// w: in one Write when n is at most smallExtra, else m, then the bytes
// streamed. w is a connection with a deadline set before each write
// (transport.Deadlined).
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
