package transport_test

import (
	"net"
	"testing"

	"github.com/laboro-go/laboro/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One address holds at most Max; another address, or the same after a
// release, is let in; IPv4 and its IPv6 form are one address.
func TestPeerLimit(t *testing.T) {
	l := &transport.PeerLimit{Max: 2}
	a := &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 1000}
	aAgain := &net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1"), Port: 2000}
	b := &net.TCPAddr{IP: net.ParseIP("10.0.0.2"), Port: 1000}

	r1, ok := l.Acquire(a)
	require.True(t, ok)
	r2, ok := l.Acquire(aAgain)
	require.True(t, ok)
	_, ok = l.Acquire(a)
	assert.False(t, ok, "a third from the same address")
	rb, ok := l.Acquire(b)
	assert.True(t, ok, "another address is not held back")
	r1()
	r3, ok := l.Acquire(aAgain)
	assert.True(t, ok, "a place freed")
	for _, r := range []func(){r2, r3, rb} {
		r()
	}
	for range 2 {
		r, ok := l.Acquire(&net.UnixAddr{Name: "@", Net: "unix"})
		require.True(t, ok)
		defer r()
	}
	_, ok = l.Acquire(&net.UnixAddr{Name: "/other", Net: "unix"})
	assert.False(t, ok, "addresses that are not IPs share one count")
}
