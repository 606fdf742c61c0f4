package transport

import (
	"net"
	"net/netip"
	"sync"
)

// PeerLimit bounds the connections one address holds at once in a stage
// where a peer has proved nothing yet (before its handshake or secret):
// a server's MaxConns bounds them all, and without PeerLimit one host
// opening connections that say nothing could hold every one of them
// until their deadline, keeping out the workers that would prove
// themselves in a moment. The zero value allows nothing; it is safe for
// concurrent use.
type PeerLimit struct {
	// Max is the most connections one address may hold at once.
	Max int

	mu    sync.Mutex
	count map[netip.Addr]int // addresses with connections held; bounded by the server's MaxConns
}

// Acquire counts a connection from addr, and reports whether it is within
// Max; if it is, the caller calls the returned release once (and only
// once) when the connection leaves the stage. Addresses that are not IP
// addresses (a Unix socket's) share one count.
func (l *PeerLimit) Acquire(addr net.Addr) (release func(), ok bool) {
	ip := peerIP(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count[ip] >= l.Max {
		return nil, false
	}
	if l.count == nil {
		l.count = map[netip.Addr]int{}
	}
	l.count[ip]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.count[ip]--; l.count[ip] <= 0 {
			delete(l.count, ip)
		}
	}, true
}

// peerIP is addr's IP address, IPv4 in IPv6 form unmapped; the zero Addr
// for anything else.
func peerIP(addr net.Addr) netip.Addr {
	if a, ok := addr.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
