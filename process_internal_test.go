package laboro

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An output whose <pid>.output name is taken (an earlier process of the
// same pid whose output was not consumed yet) gets the next free name, and
// the earlier file is left alone.
func TestOutputNameNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	r := &ProcessRunner{Dir: dir}
	for _, name := range []string{"4242.output", "4242_2.output"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("earlier "+name), 0o600))
	}
	tmp := filepath.Join(dir, ".laboro-x.output")
	require.NoError(t, os.WriteFile(tmp, []byte("new"), 0o600))

	got := r.nameOutput(tmp, dir, 4242)
	assert.Equal(t, filepath.Join(dir, "4242_3.output"), got)
	for name, want := range map[string]string{
		"4242.output":   "earlier 4242.output",
		"4242_2.output": "earlier 4242_2.output",
		"4242_3.output": "new",
	} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, want, string(b), name)
	}
	assert.NoFileExists(t, tmp)

	fresh := filepath.Join(dir, ".laboro-y.output")
	require.NoError(t, os.WriteFile(fresh, nil, 0o600))
	assert.Equal(t, filepath.Join(dir, "7.output"), r.nameOutput(fresh, dir, 7))
}
