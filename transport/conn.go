package transport

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
)

// Deadlined returns conn with a deadline of d set before every Read and
// Write: a peer that stalls mid-message fails the call after d, and a large
// transfer is bounded per chunk, not in total. It is how every connection
// of the project's servers and workers gets a deadline on each read and
// write.
func Deadlined(conn net.Conn, d time.Duration) net.Conn { return deadlined{conn, d} }

type deadlined struct {
	net.Conn
	d time.Duration
}

func (c deadlined) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.d))
	return c.Conn.Read(p)
}

func (c deadlined) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.d))
	return c.Conn.Write(p)
}

// SaveOutput copies r into a new file of dir (os.TempDir when ""), named
// after pattern as os.CreateTemp does, and returns it as a job's Output,
// whose Close removes it: how a manager keeps the output a worker sent, so
// that it is never held in memory. On an error the file is removed.
func SaveOutput(dir, pattern string, r io.Reader) (*laboro.Output, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, err
	}
	return laboro.NewOutput(f.Name(), n), nil
}

// Interruptible returns conn wrapped so that the end of ctx interrupts
// its reads and writes under way and fails every later one at once: a
// deadline its user sets after ctx has ended, even one set in the same
// moment (clearing the deadline before a long wait), cannot undo the
// interruption. stop stops watching ctx, as context.AfterFunc's stop
// does; call it when done with the connection.
func Interruptible(ctx context.Context, conn net.Conn) (c net.Conn, stop func() bool) {
	ic := &interruptible{Conn: conn}
	return ic, context.AfterFunc(ctx, ic.interrupt)
}

// past is a deadline that has passed: the calls it applies to fail at once.
var past = time.Unix(1, 0)

type interruptible struct {
	net.Conn
	mu    sync.Mutex // orders interrupt against the deadlines set
	ended bool
}

func (c *interruptible) interrupt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	c.Conn.SetDeadline(past)
}

// deadline returns t, or past once the connection has been interrupted.
// c.mu is held.
func (c *interruptible) deadline(t time.Time) time.Time {
	if c.ended {
		return past
	}
	return t
}

func (c *interruptible) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetDeadline(c.deadline(t))
}

func (c *interruptible) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetReadDeadline(c.deadline(t))
}

func (c *interruptible) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetWriteDeadline(c.deadline(t))
}
