package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each port is free, below the ephemeral range, and given once.
func TestPort(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := Port(t)
		assert.False(t, seen[p], "port %d given twice", p)
		seen[p] = true
		assert.GreaterOrEqual(t, p, lowest)
		assert.Less(t, p, ephemeralStart())
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		require.NoError(t, err, "port %d is not free", p)
		ln.Close()
	}
}

// A port that a listener holds is never given.
func TestPortSkipsTaken(t *testing.T) {
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	taken := map[int]bool{}
	for p := lowest; p < lowest+2000; p++ {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			held = append(held, ln)
			taken[p] = true
		}
	}
	for range 200 {
		p := Port(t)
		assert.False(t, taken[p], "port %d is held by a listener", p)
	}
}
