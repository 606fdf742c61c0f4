// Package freeport gives tests a TCP port of the loopback that nothing
// listens on: for a server a test starts later on an address its clients
// must know first, or for a client that must find nothing there.
//
// A port found by listening on port 0 and closing the listener does for
// neither: until the test uses it, the kernel may hand the same port to any
// other program of the machine that asks for port 0 (a test of another
// package running meanwhile) or to an outgoing connection. Worse, a client
// that retries while nothing listens there (a server not up yet, or
// restarting) may be given that very port as its own end and connect to
// itself: TCP lets a connection from a port to the same port of the same
// address succeed. Port takes one below the kernel's range of ephemeral
// ports, where none of these can land.
//
// go test runs the tests of several packages at once, each in a process of
// its own: a port given to one process is not given to another while the
// first lives (on Linux; see claim).
package freeport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowest is the lowest port Port returns: above the ports that well-known
// services use.
const lowest = 20000

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// pick returns the port to try next, from lo to hi; tests replace it.
var pick = func(lo, hi int) int { return lo + rand.IntN(hi-lo+1) }

// Port returns a port of 127.0.0.1 that is free now, below the kernel's
// range of ephemeral ports, and that Port has not returned before in this
// process, nor in another process that still runs. Where that range starts
// too low to leave room below it, the port is one the kernel picked, free
// now.
func Port(t testing.TB) int {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	highest := ephemeralStart() - 1
	for range 1000 {
		p := 0
		if highest > lowest {
			p = pick(lowest, highest)
			if given[p] {
				continue
			}
			given[p] = true // whether another process has it or this one takes it
			if !claim(p) {
				continue // another process's
			}
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken
		}
		p = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		given[p] = true
		return p
	}
	t.Fatal("freeport: no free port of the loopback found in 1,000 tries")
	return 0
}

// Addr returns "127.0.0.1:<Port(t)>".
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t)))
}

// ephemeralStart returns the first port of the kernel's ephemeral range:
// Linux's setting, or 32768 (Linux's default; macOS's and Windows' start
// higher) where it cannot be read.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return n
}
