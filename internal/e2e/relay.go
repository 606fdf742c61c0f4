package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Relay relays TCP connections to a target, as a network between two
// programs; it can cut them all, and refuse new ones while Down is set, as
// a network that fails would, stall what the clients send, and send new
// connections to another target, as to an address another program took.
type Relay struct {
	// Down, while set, makes the relay close each connection it accepts.
	Down atomic.Bool

	ln      net.Listener
	mu      sync.Mutex
	target  string
	stalled bool
	stallOn []byte        // what stalls the relay when a client sends it
	dropped []byte        // what the clients sent while stalled (its end)
	changed chan struct{} // closed when dropped grows
	conns   []net.Conn
	wg      sync.WaitGroup
}

// NewRelay listens on a loopback port and relays to target until the test
// ends.
func NewRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{ln: ln, target: target, changed: make(chan struct{})}
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
		r.mu.Lock()
		target := r.target
		r.mu.Unlock()
		up, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, up)
		r.mu.Unlock()
		r.wg.Go(func() { r.forward(up, c); up.Close() })
		r.wg.Go(func() { io.Copy(c, up); c.Close() })
	}
}

// maxDropped bounds what a Relay keeps of what it dropped.
const maxDropped = 1 << 20

// forward copies what the client c sends to up, or drops it while the
// relay is stalled.
func (r *Relay) forward(up, c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			r.mu.Lock()
			if r.stallOn != nil && bytes.Contains(buf[:n], r.stallOn) {
				r.stalled, r.stallOn = true, nil
			}
			stalled := r.stalled
			if stalled {
				if len(r.dropped)+n > maxDropped {
					r.dropped = r.dropped[len(r.dropped)-maxDropped/2:]
				}
				r.dropped = append(r.dropped, buf[:n]...)
				close(r.changed)
				r.changed = make(chan struct{})
			}
			r.mu.Unlock()
			if !stalled {
				if _, err := up.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// Stall drops what the clients send from now on, until Resume, as a
// network that stalls: the target sees nothing more from them.
func (r *Relay) Stall() {
	r.mu.Lock()
	r.stalled = true
	r.mu.Unlock()
}

// StallOn stalls the relay (see Stall) as a client sends s: what the
// client sent with it is dropped.
func (r *Relay) StallOn(s string) {
	r.mu.Lock()
	r.stallOn = []byte(s)
	r.mu.Unlock()
}

// Resume passes on what the clients send again.
func (r *Relay) Resume() {
	r.mu.Lock()
	r.stalled, r.stallOn, r.dropped = false, nil, nil
	r.mu.Unlock()
}

// Dropped waits until what the clients sent while the relay was stalled
// holds s, or ctx ends.
func (r *Relay) Dropped(ctx context.Context, s string) error { return r.DroppedTimes(ctx, s, 1) }

// DroppedTimes waits until what the clients sent while the relay was
// stalled holds s n times (a request made again), or ctx ends.
func (r *Relay) DroppedTimes(ctx context.Context, s string, n int) error {
	for {
		r.mu.Lock()
		found, changed := bytes.Count(r.dropped, []byte(s)), r.changed
		r.mu.Unlock()
		if found >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("the relay dropped %q %d times of %d: %w", s, found, n, ctx.Err())
		}
	}
}

// Retarget sends the connections accepted from now on to target.
func (r *Relay) Retarget(target string) {
	r.mu.Lock()
	r.target = target
	r.mu.Unlock()
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
