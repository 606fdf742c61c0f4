package command

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSplitHostPort(t *testing.T) {
	for _, tc := range []struct {
		addr string
		host string
		port int
		ok   bool
	}{
		{"127.0.0.1:4222", "127.0.0.1", 4222, true},
		{"0.0.0.0:0", "0.0.0.0", -1, true}, // any free port
		{"[::1]:80", "::1", 80, true},
		{"localhost", "", 0, false},
		{"host:http", "", 0, false},
		{"host:70000", "", 0, false},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			host, port, err := splitHostPort(tc.addr)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.host, host)
			assert.Equal(t, tc.port, port)
		})
	}
}

// A NATS URL is shown without the credentials it may carry.
func TestShownURLs(t *testing.T) {
	for in, want := range map[string]string{
		"":                               "",
		"nats://127.0.0.1:4222":          "nats://127.0.0.1:4222",
		"nats://tok@10.0.0.1:4222":       "nats://10.0.0.1:4222",
		"nats://u:p@a:1,tls://u:p@b:2":   "nats://a:1,tls://b:2",
		"u:p@host:4222":                  "host:4222",
		"nats://host:4222/x@y":           "nats://host:4222/x@y",
		"nats://u:p@w@host:4222?q=a@b#c": "nats://host:4222?q=a@b#c",
	} {
		assert.Equal(t, want, shown(in), in)
	}
}

func TestReadJobs(t *testing.T) {
	name := filepath.Join(t.TempDir(), "jobs.txt")
	require.NoError(t, os.WriteFile(name, []byte("# comment\n\n  echo a  \n\t\necho 'b c'\n  # indented comment\n"), 0o600))
	jf, err := openJobFile(name)
	require.NoError(t, err)
	defer jf.Close()
	assert.Equal(t, 2, jf.total, "counted at open")
	var lines []string
	for l, err := range jf.lines() {
		require.NoError(t, err)
		lines = append(lines, l)
	}
	assert.Equal(t, []string{"echo a", "echo 'b c'"}, lines)
	_, err = openJobFile(filepath.Join(t.TempDir(), "nosuch"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestPrintJobs(t *testing.T) {
	var b bytes.Buffer
	printJobs(&b, nil, false)
	assert.Empty(t, b.String(), "nothing for no jobs")
	printJobs(&b, []jetstream.JobStatus{
		{ID: "a", State: "succeeded", ExitCode: 0, Command: "echo a"},
		{ID: "long-id", State: "cancelled", ExitCode: -1, Error: "laboro: job cancelled", Command: "sleep 60"},
		{ID: "b", State: "failed", ExitCode: 3, Error: "exit status 3", Command: "ls /nonexistent;\n exit 3",
			Stderr: "ls: cannot access '/nonexistent'\nsecond line\n"},
	}, true)
	assert.Equal(t, "JOB      STATE      EXIT  COMMAND                  ERROR\n"+
		"a        succeeded  0     echo a                   \n"+
		"long-id  cancelled  -     sleep 60                 laboro: job cancelled\n"+
		"b        failed     3     ls /nonexistent; exit 3  exit status 3\n"+
		"(more jobs not listed)\n"+
		"\nstandard error of b (its end):\n"+
		"  ls: cannot access '/nonexistent'\n"+
		"  second line\n", b.String())
}

// The first interrupt calls first; the second ends the context.
func TestInterruptTwice(t *testing.T) {
	firsts := make(chan struct{}, 2)
	ctx, stop := interruptTwice(func() { firsts <- struct{}{} })
	defer stop()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	select {
	case <-firsts:
	case <-time.After(10 * time.Second):
		t.Fatal("the first interrupt was not seen")
	}
	require.NoError(t, ctx.Err(), "the first interrupt does not end the context")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the second interrupt did not end the context")
	}
	assert.Len(t, firsts, 0, "first is called once")
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"status", "-watch"}, {"cancel"}, {"worker", "extra"}, {"submit", "-nosuchflag"}} {
		assert.Equal(t, exitUsage, Main(args), "%q", args)
	}
	assert.Equal(t, 0, Main([]string{"cancel", "-h"}))
}

// -batch and -id are checked as the jetstream package checks them, and a
// refusal names the flag.
func TestCheckName(t *testing.T) {
	assert.Empty(t, checkName("batch", "nightly"))
	assert.Empty(t, checkName("batch", jetstream.NewBatch()))
	assert.Empty(t, checkName("id", "nightly-7"))
	assert.Equal(t, `-batch "bad name!": must be UTF-8 without '.', '*', '>' or white space`, checkName("batch", "bad name!"))
	assert.Equal(t, `-id "a.b": must be UTF-8 without '.', '*', '>' or white space`, checkName("id", "a.b"))
	assert.Equal(t, `-id "x>": must be UTF-8 without '.', '*', '>' or white space`, checkName("id", "x>"))
}

// run lists the failures in job order, whatever order they ended in, and
// a timeout with its limit.
func TestTidyFailures(t *testing.T) {
	sum := cli.Summary{Failures: []cli.Failure{
		{ID: "10", Command: "exit 1", Status: "failed", ExitCode: 1, Err: "exit status 1"},
		{ID: "2", Command: "sleep 60", Status: "timed out", ExitCode: -1, Err: laboro.ErrTimeout.Error()},
		{ID: "9", Command: "sleep 9", Status: "killed", ExitCode: -1, Err: "laboro: job killed"},
	}}
	tidyFailures(&sum, 1500*time.Millisecond)
	var b bytes.Buffer
	writeSummary(&b, sum, "not run", "")
	assert.Equal(t, "0 jobs: 0 succeeded, 0 failed\n"+
		"2 timed out after 1.5s: sleep 60\n"+
		"9 killed: sleep 9\n    laboro: job killed\n"+
		"10 failed, exit status 1: exit 1\n", b.String())
	b.Reset()
	writeSummary(&b, cli.Summary{Counts: cli.Counts{Total: 1, Succeeded: 1}}, "not run", "")
	assert.Equal(t, "1 job: 1 succeeded, 0 failed\n", b.String())
}

// A command cut off from its server tries again after 100 ms, then twice
// as long each round up to 2 s, each wait up to half as long again at
// random: a worker is back on a server started again within a fraction of
// a second, and a fleet does not knock all at once.
func TestReconnectDelay(t *testing.T) {
	for _, c := range []struct {
		attempts int
		min      time.Duration
	}{{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {3, 400 * time.Millisecond},
		{4, 800 * time.Millisecond}, {5, 1600 * time.Millisecond}, {6, 2 * time.Second}, {1000, 2 * time.Second}} {
		spread := map[time.Duration]bool{}
		for range 50 {
			d := reconnectDelay(c.attempts)
			require.GreaterOrEqual(t, d, c.min, "round %d", c.attempts)
			require.Less(t, d, c.min*3/2, "round %d", c.attempts)
			spread[d] = true
		}
		assert.Greater(t, len(spread), 1, "round %d: at random", c.attempts)
	}
}

// A batch's cancelled jobs are said apart from its failures, in the
// status table and in its summary line.
func TestBatchCounts(t *testing.T) {
	batches := []jetstream.BatchStatus{
		{Batch: "b1", Jobs: 9, Succeeded: 1, Failed: 8, Cancelled: 1, TimedOut: 1},
		{Batch: "b2", Jobs: 1, Succeeded: 1},
	}
	assert.Equal(t, "6 failed, 1 timed out, 1 cancelled", batchSummary(batches[0]).FailedText())
	assert.Equal(t, "2 cancelled", batchSummary(jetstream.BatchStatus{Jobs: 2, Failed: 2, Cancelled: 2}).FailedText())
	assert.Equal(t, "0 failed", batchSummary(batches[1]).FailedText())
	var b bytes.Buffer
	printBatches(&b, batches[:1])
	assert.Regexp(t, `(?m)^BATCH\s+JOBS\s+WAITING\s+DISPATCHED\s+SUCCEEDED\s+FAILED\s+CANCELLED\s+SUBMITTED\n`+
		`b1\s+9\s+0\s+0\s+1\s+7\s+1\s`, b.String())
}

// status shows the first jobs that failed, each with its command, exit
// status and standard error, and how many more did; from a service that
// lists none (an older version), how many failed and how to see why.
func TestPrintFailures(t *testing.T) {
	batches := []jetstream.BatchStatus{
		{Batch: "b1", Jobs: 9, Succeeded: 1, Failed: 8, Cancelled: 1, TimedOut: 1},
		{Batch: "b2", Jobs: 1, Succeeded: 1},
	}
	listed := []jetstream.JobStatus{
		{ID: "b1-2", Batch: "b1", State: "failed", ExitCode: 3, Command: "echo oops >&2; exit 3",
			Error: "jetstream: on the worker: exit status 3", Stderr: "oops\n"},
		{ID: "b1-3", Batch: "b1", State: "timed out", ExitCode: -1, Command: "sleep 60", Error: "laboro: job timed out"},
	}
	var b bytes.Buffer
	printFailures(&b, batches, listed, false)
	assert.Equal(t, "\njobs that failed (the first 2 of 7):\n"+
		"JOB   STATE      EXIT  COMMAND                ERROR\n"+
		"b1-2  failed     3     echo oops >&2; exit 3  jetstream: on the worker: exit status 3\n"+
		"b1-3  timed out  -     sleep 60               laboro: job timed out\n"+
		"\nstandard error of b1-2 (its end):\n  oops\n"+
		"\n(5 more failed: laboro status -failed b1 lists every job that did not succeed)\n", b.String())

	b.Reset()
	printFailures(&b, batches, listed[:1], true)
	assert.Contains(t, b.String(), "(6 more failed: laboro status -failed lists every job that did not succeed)\n")
	b.Reset()
	printFailures(&b, batches[:1], nil, false)
	assert.Equal(t, "\n7 jobs failed: laboro status -failed b1 shows why\n", b.String(), "an older service")
	b.Reset()
	printFailures(&b, []jetstream.BatchStatus{{Batch: "c", Jobs: 2, Failed: 2, Cancelled: 2}}, nil, false)
	assert.Empty(t, b.String(), "cancelled, none failed")
	b.Reset()
	printFailures(&b, batches[1:], nil, false)
	assert.Empty(t, b.String(), "none failed")
}
