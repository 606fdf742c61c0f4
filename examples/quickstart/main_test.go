package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the quickstart as a user would and checks what they would
// notice in its output.
func TestRun(t *testing.T) {
	// The Executor's run directory goes under TMPDIR: use one of our own to
	// check that nothing is left behind.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	got := out.String()
	t.Log("\n" + got)

	for _, want := range []struct {
		name string
		re   string
	}{
		{"the queue is listed while job_1 runs", `(?m)^while job_1 runs, waiting to start:\n  job_2 .*\n  job_3 .*\n  job_4 .*\n  job_5 .*\n  sleeper +sleep 30\n`},
		{"the slow shell job succeeds with its output", `(?m)^job_1 +succeeded +exit 0 +\S+ +sh -c "sleep 0.3; echo slept for 0.3s"\n +┌─ stdout, 15 bytes\n +│ slept for 0.3s\n +└─\n`},
		{"echo's output appears framed", `(?m)^job_2 +succeeded +exit 0 +\S+ +echo hello from laboro\n +┌─ stdout, 18 bytes\n +│ hello from laboro\n +└─\n`},
		{"ls fails with its stderr", `(?m)^job_3 +failed +exit [1-9]\d* +\S+ +ls /nonexistent/laboro\n +┌─ stderr\n +│ .*/nonexistent/laboro.*\n +└─\n +error: exit status [1-9]`},
		{"uname succeeds", `(?m)^job_4 +succeeded +exit 0 +\S+ +uname -a\n +┌─ stdout`},
		{"a missing program fails to start", `(?m)^job_5 +failed +exit - +\S+ +no-such-command --help\n +error: .*no-such-command.*not found`},
		{"the stopped job never ran", `(?m)^sleeper +stopped +exit - +- +sleep 30\n +error: .*stopped before execution`},
		{"the concurrency is raised", `(?m)^concurrency 1 -> 3: up to 3 jobs run at once$`},
		{"the executor shuts down last", `\nexecutor shut down\n$`},
	} {
		require.Regexp(t, regexp.MustCompile(want.re), got, want.name)
	}

	// Every output was closed and the run directory removed.
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "files left in TMPDIR")
}

// TestRunCanceled checks that run gives up, and leaves no goroutine or
// process behind, when its context ends while jobs run.
func TestRunCanceled(t *testing.T) {
	// The killed job's output is closed after Close has returned, too late
	// for the Executor to remove its run directory: keep that out of the
	// real TMPDIR.
	t.Setenv("TMPDIR", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, &out)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
