package transport

import (
	"io"
	"net"
	"os"
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
