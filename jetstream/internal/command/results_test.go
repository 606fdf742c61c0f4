package command

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/require"
)

// FuzzJobLog feeds -resume whatever a job log may hold (one of GNU
// parallel's, edited, cut by a crash), and has run log a job in it,
// whatever its command (tabs, line breaks): reading never panics and
// refuses only a line that is not one of the log's, and the job run is
// found, as succeeded or not, beside what the log listed.
func FuzzJobLog(f *testing.F) {
	// More seeds are in testdata/fuzz/FuzzJobLog.
	f.Add([]byte("Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\tSignal\tCommand\n"+
		"1\th\t1764370000.000\t0.010\t0\t3\t0\t0\techo a\n2\th\t1764370000.000\t0.010\t0\t0\t1\t0\tfalse\n"),
		"sh -c 'echo a\tb\nc'", 0)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, log []byte, command string, exit int) {
		path := filepath.Join(dir, "joblog")
		require.NoError(t, os.WriteFile(path, log, 0o644))
		listed, err := readJobLog(path, false)
		if err != nil {
			require.Regexp(t, `not a job log line|token too long`, err.Error())
		}
		if err != nil || (len(log) > 0 && !bytes.HasPrefix(log, []byte(jobLogHeader))) {
			// Not a job log (run would not make it): the job goes to a
			// new one.
			require.NoError(t, os.Remove(path))
			listed = map[string]bool{}
		}
		succeeded, err := readJobLog(path, true)
		require.NoError(t, err)
		for seq := range succeeded {
			require.True(t, listed[seq], "succeeded but not listed: %q", seq)
		}

		r, err := newRecorder(runOptions{joblog: path})
		require.NoError(t, err)
		now := time.Now()
		res := laboro.Result{ID: "7", Status: laboro.StatusSucceeded, ExitCode: exit, Started: now, Ended: now}
		if exit != 0 {
			res.Status = laboro.StatusFailed
		}
		require.NoError(t, r.record(laboro.Job{ID: "7", Script: command}, res))
		require.NoError(t, r.close())
		after, err := readJobLog(path, false)
		require.NoError(t, err, "after logging job 7")
		listed["7"] = true
		require.Equal(t, listed, after)
		ok, err := readJobLog(path, true)
		require.NoError(t, err)
		require.Equal(t, exit == 0 || succeeded["7"], ok["7"], "exit %d", exit)
	})
}

// A job log cut by a crash loses its cut line, which -resume ignored; a
// file named as the job log that is not one (a file of jobs, by mistake)
// loses nothing: its last line is ended before the log's lines.
func TestJobLogTornLine(t *testing.T) {
	dir := t.TempDir()
	logJob := func(path string) {
		r, err := newRecorder(runOptions{joblog: path})
		require.NoError(t, err)
		now := time.Now()
		require.NoError(t, r.record(laboro.Job{ID: "2", Script: "echo b"},
			laboro.Result{ID: "2", Status: laboro.StatusSucceeded, Started: now, Ended: now}))
		require.NoError(t, r.close())
	}
	line1 := "1\th\t1764370000.000\t0.010\t0\t2\t0\t0\techo a\n"

	log := filepath.Join(dir, "log.tsv")
	require.NoError(t, os.WriteFile(log, []byte(jobLogHeader+line1+"2\th\t17643"), 0o644))
	listed, err := readJobLog(log, false)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"1": true}, listed)
	logJob(log)
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	require.Regexp(t, `^`+regexp.QuoteMeta(jobLogHeader+line1)+`2\t[^\n]*\techo b\n$`, string(b))

	jobs := filepath.Join(dir, "jobs.txt")
	require.NoError(t, os.WriteFile(jobs, []byte("echo a\necho b"), 0o644))
	logJob(jobs)
	b, err = os.ReadFile(jobs)
	require.NoError(t, err)
	require.Regexp(t, `^echo a\necho b\n2\t[^\n]*\techo b\n$`, string(b))
}
