package jetstream

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The output files left by a process that ended before closing them are
// removed by the next Manager or Client of the same directory; those of a
// live process, and other files, stay.
func TestSweepOutputs(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	live := exec.Command("sleep", "60")
	require.NoError(t, live.Start())
	defer func() { live.Process.Kill(); live.Wait() }()
	name := func(pid int) string {
		return filepath.Join(dir, "laboro-js-"+strconv.Itoa(pid)+"-123.output")
	}
	files := map[string]bool{
		name(dead.Process.Pid):                     false, // removed
		name(live.Process.Pid):                     true,
		name(os.Getpid()):                          true,
		filepath.Join(dir, "laboro-js-x-1.output"): true,
		filepath.Join(dir, "other.output"):         true,
	}
	for f := range files {
		require.NoError(t, os.WriteFile(f, nil, 0o600))
	}
	sweepOutputs(dir)
	for f, stays := range files {
		_, err := os.Stat(f)
		assert.Equal(t, stays, err == nil, f)
	}
}
