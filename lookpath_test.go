package laboro_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outputText returns a finished job's output and removes it.
func outputText(t *testing.T, res laboro.Result) string {
	t.Helper()
	require.NotNil(t, res.Output, "%v", res.Err)
	defer res.Output.Close()
	b, err := res.Output.ReadAll()
	require.NoError(t, err)
	return string(b)
}

// A program named without a slash is the one $PATH holds when the job
// starts: when $PATH changes, the next job runs the program of the new
// $PATH; the program sees its name as the job gave it; a name that $PATH
// does not hold fails the job with exec's own words.
func TestProgramsFollowPath(t *testing.T) {
	ex := newExecutor(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	for i, dir := range dirs {
		script := "#!/bin/sh\necho from " + string(rune('A'+i)) + "\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, "laboro-test-prog"), []byte(script), 0o755))
	}
	path := os.Getenv("PATH")
	for i, dir := range append(dirs, dirs[0]) {
		t.Setenv("PATH", dir+string(os.PathListSeparator)+path)
		for range 3 {
			res := wait(t, submit(t, ex, laboro.Job{Command: "laboro-test-prog"}))
			require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
			assert.Equal(t, "from "+string(rune('A'+i%2))+"\n", outputText(t, res))
		}
	}

	res := wait(t, submit(t, ex, laboro.Job{Args: []string{"sh", "-c", "echo $0"}}))
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "sh\n", outputText(t, res))

	res = wait(t, submit(t, ex, laboro.Job{Command: "laboro-no-such-program"}))
	assert.Equal(t, laboro.StatusFailed, res.Status)
	require.Error(t, res.Err)
	assert.Contains(t, res.Err.Error(), `exec: "laboro-no-such-program": executable file not found in $PATH`)
	if res.Output != nil {
		res.Output.Close()
	}
}
