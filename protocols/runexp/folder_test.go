package runexp

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Load reads a job file into the job sent to runners; a file larger than a
// runner takes (DefaultMaxSize) is refused without being read.
func TestFolderLoad(t *testing.T) {
	base := t.TempDir()
	f := Folder{Runs: filepath.Join(base, "runs"), Outputs: filepath.Join(base, "outputs")}
	require.NoError(t, os.MkdirAll(filepath.Join(f.Runs, "sweep"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(f.Runs, "sweep", "a.sh"), []byte("echo a\n"), 0o644))
	huge := filepath.Join(f.Runs, "huge.sh")
	require.NoError(t, os.WriteFile(huge, []byte("echo huge\n"), 0o644))
	require.NoError(t, os.Truncate(huge, DefaultMaxSize+1)) // a hole: no disk used

	todo, done, skipped, err := f.Jobs()
	require.NoError(t, err)
	assert.Zero(t, done)
	assert.Empty(t, skipped)
	require.Len(t, todo, 2)
	byName := map[string]FolderJob{}
	for _, j := range todo {
		byName[j.Name] = j
	}

	job, err := f.Load(byName["sweep/a"])
	require.NoError(t, err)
	assert.Equal(t, "sweep/a", job.ID)
	want := NewJob("sweep/a", ".sh", "echo a\n")
	want.Payload = byName["sweep/a"] // its type, and its file for log lines
	assert.Equal(t, want, job)
	assert.Equal(t, byName["sweep/a"].Path, job.Payload.(fmt.Stringer).String())
	require.NoError(t, (&Manager{}).Validate(job))

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = f.Load(byName["huge"])
	runtime.ReadMemStats(&after)
	assert.ErrorContains(t, err, "huge.sh: a job file over 1073741824 bytes, more than a runner takes")
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated to refuse it")
}

// One process at a time holds a folder: a second Lock is refused, and
// taken again once the first is let go.
func TestFolderLock(t *testing.T) {
	base := t.TempDir()
	f := Folder{Runs: filepath.Join(base, "runs"), Outputs: filepath.Join(base, "outputs")}
	unlock, err := f.Lock()
	require.NoError(t, err)
	assert.DirExists(t, f.Outputs)
	_, err = f.Lock()
	assert.ErrorIs(t, err, ErrFolderBusy)
	assert.ErrorContains(t, err, f.Outputs)
	unlock()
	unlock, err = f.Lock()
	require.NoError(t, err)
	unlock()
}

// Two files of one job name (a.py and a.sh, a.sh and an editor's a.sh~)
// would share a result file: the first in lexical order is the job, the
// others are skipped, each naming the file whose name it has.
func TestFolderSameNameTwice(t *testing.T) {
	base := t.TempDir()
	f := Folder{Runs: filepath.Join(base, "runs"), Outputs: filepath.Join(base, "outputs")}
	require.NoError(t, os.MkdirAll(f.Runs, 0o755))
	for _, name := range []string{"a.sh", "a.sh~", "b.py", "b.sh", "c.sh"} {
		require.NoError(t, os.WriteFile(filepath.Join(f.Runs, name), []byte("echo RES:ok\n"), 0o644))
	}
	todo, _, skipped, err := f.Jobs()
	require.NoError(t, err)
	var files []string
	for _, j := range todo {
		files = append(files, filepath.Base(j.Path))
	}
	assert.Equal(t, []string{"a.sh", "b.py", "c.sh"}, files)
	require.Len(t, skipped, 2)
	assert.EqualError(t, skipped[0], fmt.Sprintf(`runexp: %s: not served: its job name, "a", is %s's (a job is named by its path without extension)`,
		filepath.Join(f.Runs, "a.sh~"), filepath.Join(f.Runs, "a.sh")))
	assert.ErrorContains(t, skipped[1], `b.sh: not served: its job name, "b", is `)
}
