package dirlock

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One holder at a time: a second Lock is refused until the first is let
// go; a directory that is not there is an error of its own.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	f, err := Lock(dir)
	require.NoError(t, err)
	_, err = Lock(dir)
	assert.ErrorIs(t, err, ErrHeld)
	require.NoError(t, f.Close())
	f, err = Lock(dir)
	require.NoError(t, err)
	f.Close()

	_, err = Lock(filepath.Join(dir, "missing"))
	assert.Error(t, err)
	assert.NotErrorIs(t, err, ErrHeld)
}
