package fuq

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TaskLog returns the end of the newest log of a task, whole lines of at
// most MaxLogTail bytes, and reads nothing that is not a regular file.
func TestTaskLog(t *testing.T) {
	dir := t.TempDir()
	d := JobDescription{Name: "j", LoggingDir: dir}
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}

	path, tail := TaskLog(d, 1)
	assert.Empty(t, path, "no log")
	assert.Nil(t, tail)

	write("j_1.log", "one\ntwo\n")
	path, tail = TaskLog(d, 1)
	assert.Equal(t, filepath.Join(dir, "j_1.log"), path)
	assert.Equal(t, "one\ntwo", string(tail))

	long := strings.Repeat("x", 100) + "\n"
	write("j_2.log", strings.Repeat(long, 1000)+"the end\n")
	path, tail = TaskLog(d, 2)
	assert.Equal(t, filepath.Join(dir, "j_2.log"), path)
	assert.LessOrEqual(t, len(tail), MaxLogTail)
	assert.True(t, strings.HasPrefix(string(tail), strings.Repeat("x", 100)+"\n"), "whole lines: %q", tail)
	assert.True(t, strings.HasSuffix(string(tail), "\nthe end"))

	// A FIFO by a log's name is not opened for reading (it would wait).
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "j_3.log"), 0o600))
	path, tail = TaskLog(d, 3)
	assert.Empty(t, path)
	assert.Nil(t, tail)

	// Elsewhere than the foreman's host: nothing.
	path, _ = TaskLog(JobDescription{Name: "j", LoggingDir: filepath.Join(dir, "missing")}, 1)
	assert.Empty(t, path)
}
