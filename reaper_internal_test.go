//go:build unix

package laboro

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The reaper's file of groups stays small however many jobs come and go,
// and always notes exactly the groups still live.
func TestReaperFileCompacts(t *testing.T) {
	const fake = 1 << 30 // above any pid_max: no such group exists
	const n = 6000       // notes enough to pass reaperCompact more than once
	defer func() {
		for i := range n {
			reap('-', fake+i)
		}
	}()
	for i := range n {
		reap('+', fake+i)
		if i%3 != 0 {
			reap('-', fake+i)
		}
	}
	reaper.mu.Lock()
	require.NotNil(t, reaper.f, "the reaper did not start")
	size := reaper.size
	b := make([]byte, size)
	_, err := reaper.f.ReadAt(b, 0)
	fi, serr := reaper.f.Stat()
	reaper.mu.Unlock()
	require.NoError(t, err)
	require.NoError(t, serr)
	assert.LessOrEqual(t, size, int64(reaperCompact))
	assert.Equal(t, size, fi.Size(), "the file ends with the notes")
	live := map[int]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		op, id, _ := strings.Cut(line, " ")
		g, err := strconv.Atoi(id)
		require.NoError(t, err, line)
		live[g] = op == "+"
	}
	for i := range n {
		assert.Equal(t, i%3 == 0, live[fake+i], "group %d", fake+i)
	}
}
