package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each port is free, below the ephemeral range, and given once.
func TestPort(t *testing.T) {
	seen := map[int]bool{}
	for range 100 {
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

// A port that a listener holds is never given. The listeners hold ports
// this process was given (and so claimed), so that no other process's test
// can be given one of them meanwhile; Port is then made to try them first.
func TestPortSkipsTaken(t *testing.T) {
	held := map[int]bool{}
	var order []int
	for range 50 {
		p := Port(t)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		require.NoError(t, err)
		defer ln.Close()
		held[p] = true
		order = append(order, p)
	}
	mu.Lock()
	for p := range held {
		delete(given, p) // as if never given: only the listener is in the way
	}
	mu.Unlock()
	defer func(old func(int, int) int) { pick = old }(pick)
	pick = func(lo, hi int) int {
		if len(order) > 0 {
			p := order[0]
			order = order[1:]
			return p
		}
		return lo + rand.IntN(hi-lo+1)
	}
	for range 50 {
		p := Port(t)
		assert.False(t, held[p], "port %d is held by a listener", p)
	}
	assert.Empty(t, order, "every held port was tried")
}

// A port given to one process is not given to another while the first
// runs: go test runs the tests of several packages at once. The other
// process (this test binary again) is made to try this one's ports first.
func TestPortNotGivenToAnotherProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ports are claimed across processes on Linux")
	}
	var mine []string
	for range 20 {
		mine = append(mine, strconv.Itoa(Port(t)))
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestOtherProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "FREEPORT_TRY="+strings.Join(mine, ","))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var theirs []string
	for line := range strings.Lines(string(out)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "port "); ok {
			theirs = append(theirs, p)
		}
	}
	require.Len(t, theirs, len(mine), "%s", out)
	for _, p := range theirs {
		assert.NotContains(t, mine, p, "port %s given to both processes", p)
	}
}

// TestOtherProcess is TestPortNotGivenToAnotherProcess's other process: it
// tries the ports of $FREEPORT_TRY first, and prints the ports it is given.
func TestOtherProcess(t *testing.T) {
	try := os.Getenv("FREEPORT_TRY")
	if try == "" {
		t.Skip("run by TestPortNotGivenToAnotherProcess")
	}
	first := strings.Split(try, ",")
	pick = func(lo, hi int) int {
		if len(first) > 0 {
			p, err := strconv.Atoi(first[0])
			require.NoError(t, err)
			first = first[1:]
			return p
		}
		return lo + rand.IntN(hi-lo+1)
	}
	for range strings.Count(try, ",") + 1 {
		fmt.Printf("port %d\n", Port(t))
	}
}
