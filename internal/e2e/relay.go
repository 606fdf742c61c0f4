package e2e

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Relay relays TCP connections to a target, as a network between two
// programs; it can cut them all, and refuse new ones while Down is set, as
// a network that fails would.
type Relay struct {
	// Down, while set, makes the relay close each connection it accepts.
	Down atomic.Bool

	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

// NewRelay listens on a loopback port and relays to target until the test
// ends.
func NewRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{ln: ln, target: target}
	r.wg.Go(r.accept)
	t.Cleanup(func() { ln.Close(); r.Cut(); r.wg.Wait() })
	return r
}

// Addr is the address to connect to instead of the target.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

func (r *Relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if r.Down.Load() {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, up)
		r.mu.Unlock()
		r.wg.Go(func() { io.Copy(up, c); up.Close() })
		r.wg.Go(func() { io.Copy(c, up); c.Close() })
	}
}

// Cut closes every relayed connection.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}
