package laboro_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// On Linux a script for /bin/sh leaves no file in the output directory: it
// is kept in memory, and the shell reads it as $0 like a file. The
// descriptor that holds it is not the job's.
func TestShellScriptInMemory(t *testing.T) {
	dir := t.TempDir()
	ex, err := laboro.New(laboro.WithRunner(&laboro.ProcessRunner{Dir: dir}))
	require.NoError(t, err)
	t.Cleanup(func() { ex.Close() })
	script := "ls -A \"$DIR\" | grep -c 'script$'\ncase $0 in /proc/*) echo in memory;; esac\n" +
		"grep -c '^case' \"$0\"\nls -l /proc/self/fd | grep -c memfd\ntrue\n"
	res := wait(t, submit(t, ex, laboro.Job{Script: script, Env: append(os.Environ(), "DIR="+dir)}))
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v %s", res.Err, res.Stderr)
	assert.Equal(t, "0\nin memory\n1\n0\n", output(t, res), "no script file; $0 reads as the script; no memfd open in the job")
}

// A failed script's standard error reads as the shell's own, not naming the
// descriptor its script is read through: what an operator sees of why the
// job failed.
func TestShellScriptErrorsNameTheShell(t *testing.T) {
	ex, err := laboro.New(laboro.WithRunner(&laboro.ProcessRunner{Dir: t.TempDir()}))
	require.NoError(t, err)
	t.Cleanup(func() { ex.Close() })
	res := wait(t, submit(t, ex, laboro.Job{Script: "echo fine\nno-such-command-here --x\n"}))
	require.Equal(t, laboro.StatusFailed, res.Status)
	assert.Equal(t, 127, res.ExitCode)
	// dash: "sh: 2: …: not found"; bash as sh: "sh: line 2: …: command not found".
	assert.Regexp(t, `(?m)^sh: (line )?2: no-such-command-here: (command )?not found$`, string(res.Stderr))
	assert.NotContains(t, string(res.Stderr), "/proc/")
}

// A process made undumpable (as the project's binaries are when they hold a
// secret from their environment) closes its /proc files to its jobs: its
// scripts go to files, which the shell can open. (A privileged job, as
// these tests may be run, could open the memfd anyway: what is asserted
// is where the script was put.)
func TestShellScriptOfAnUndumpableProcess(t *testing.T) {
	if os.Getenv("LABORO_TEST_UNDUMPABLE") != "" {
		require.NoError(t, unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0))
		dir := t.TempDir()
		ex, err := laboro.New(laboro.WithRunner(&laboro.ProcessRunner{Dir: dir}))
		require.NoError(t, err)
		defer ex.Close()
		res := wait(t, submit(t, ex, laboro.Job{Script: "case $0 in /proc/*) echo in memory;; *) echo in a file;; esac\n"}))
		require.Equal(t, laboro.StatusSucceeded, res.Status, "%v %s", res.Err, res.Stderr)
		os.Stdout.WriteString("script " + output(t, res))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestShellScriptOfAnUndumpableProcess$")
	cmd.Env = append(os.Environ(), "LABORO_TEST_UNDUMPABLE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "script in a file\n")
}
