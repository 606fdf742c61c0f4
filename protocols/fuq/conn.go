package fuq

import (
	"bufio"
	"net"
	"time"
)

// msgConn is a connection that carries whole messages: a byte stream (the
// plain TCP conversation of the spec), or a websocket with one message in
// each binary websocket message (the reference's transport, see web.go).
// The codec and the Seq are the same over both; only the framing differs.
//
// One goroutine reads (readMessage) while another writes (writeMessage);
// close may be called from any goroutine, and makes both fail.
type msgConn interface {
	// readMessage waits for the next message and reads it. The wait for
	// a message to begin is as long as the peer is alive (TCP keepalive
	// on a stream, pings on a websocket); once it has begun, each read
	// has the connection's timeout. A body longer than maxBody is
	// refused before it is allocated (ErrBodyTooLarge).
	readMessage(maxBody int) (Message, error)
	// writeMessage writes one encoded message within the connection's
	// timeout.
	writeMessage(b []byte) error
	// close closes the connection.
	close() error
}

// streamConn is a msgConn over a byte stream: messages follow one another,
// each framed by its header.
type streamConn struct {
	conn    net.Conn
	r       *bufio.Reader
	dr      *deadlineReader
	timeout time.Duration
}

// newStreamConn returns conn as a msgConn whose reads and writes, once a
// message has begun, each have timeout.
func newStreamConn(conn net.Conn, timeout time.Duration) *streamConn {
	dr := &deadlineReader{conn: conn, d: timeout}
	return &streamConn{conn: conn, r: bufio.NewReader(dr), dr: dr, timeout: timeout}
}

func (c *streamConn) readMessage(maxBody int) (Message, error) {
	// No deadline while the connection is idle: the spec has no message
	// to keep a quiet connection alive. Once a message's first byte has
	// come, the whole message must arrive within the timeout, so a peer
	// that stalls, or trickles, mid-message fails.
	c.dr.armed = false
	if _, err := c.r.Peek(1); err != nil {
		return Message{}, err
	}
	c.dr.arm()
	return ReadMessage(c.r, maxBody)
}

func (c *streamConn) writeMessage(b []byte) error {
	c.conn.SetWriteDeadline(time.Now().Add(c.timeout))
	_, err := c.conn.Write(b)
	return err
}

func (c *streamConn) close() error { return c.conn.Close() }

// deadlineReader reads with no deadline while not armed, and, once armed,
// with one deadline d after it was armed: the whole message must arrive
// within d, however its bytes are spread (a peer that sends a byte now
// and then cannot hold a message, and the memory it takes, for long).
type deadlineReader struct {
	conn     net.Conn
	d        time.Duration
	armed    bool
	deadline time.Time // while armed
}

// arm starts the message's deadline.
func (r *deadlineReader) arm() {
	r.armed, r.deadline = true, time.Now().Add(r.d)
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	var t time.Time
	if r.armed {
		t = r.deadline
	}
	r.conn.SetReadDeadline(t)
	return r.conn.Read(p)
}
