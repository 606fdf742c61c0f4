package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// build compiles both binaries into a temporary directory.
func build(t *testing.T) (server, commander string) {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/laboro-go/laboro/cmd/jobExecutorServer", "github.com/laboro-go/laboro/cmd/jobCommander").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return filepath.Join(dir, "jobExecutorServer"), filepath.Join(dir, "jobCommander")
}

// The example session of the specification, on local files and commands.
func TestExampleSession(t *testing.T) {
	server, commander := build(t)
	work := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(work, "file1"), []byte("a keyword here\nnothing\nkeyword again\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(work, "file2"), []byte("contents of file2\n"), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := exec.CommandContext(ctx, server, "0", "8", "5")
	srv.Dir = work
	stderr, err := srv.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, srv.Start())
	addr := make(chan string, 1)
	logs := make(chan string, 1)
	go func() {
		var all bytes.Buffer
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`"addr": "([^"]+)"`)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil && strings.Contains(sc.Text(), "serving") {
				addr <- m[1]
			}
		}
		logs <- all.String()
	}()
	var hostPort string
	select {
	case hostPort = <-addr:
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not start")
	}
	host, port, _ := strings.Cut(hostPort, ":")
	host = strings.Replace(host, "127.0.0.1", "localhost", 1) // a name, resolved

	run := func(args ...string) (string, int) {
		cmd := exec.CommandContext(ctx, commander, append([]string{host, port}, args...)...)
		cmd.Dir = work
		out, err := cmd.Output()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return string(out), code
	}

	out, code := run("issueJob", "ls", "file1", "file2")
	assert.Equal(t, "JOB <job_1, ls file1 file2> SUBMITTED\n-----job_1 output start-----\nfile1\nfile2\n-----job_1 output end-----\n", out)
	assert.Equal(t, 0, code)
	out, _ = run("setConcurrency", "2")
	assert.Equal(t, "CONCURRENCY SET AT 2\n", out)
	out, _ = run("issueJob", "grep", "keyword", "file1")
	assert.Equal(t, "JOB <job_2, grep keyword file1> SUBMITTED\n-----job_2 output start-----\na keyword here\nkeyword again\n-----job_2 output end-----\n", out)
	out, _ = run("issueJob", "cat", "file2")
	assert.Equal(t, "JOB <job_3, cat file2> SUBMITTED\n-----job_3 output start-----\ncontents of file2\n-----job_3 output end-----\n", out)
	out, code = run("issueJob", "no-such-program")
	assert.Equal(t, "JOB <job_4, no-such-program> SUBMITTED\n-----job_4 output start-----\n-----job_4 output end-----\n", out)
	assert.Equal(t, 1, code)
	out, code = run("issueJob", "sh", "-c", "exit 7")
	assert.Contains(t, out, "-----job_5 output end-----\n")
	assert.Equal(t, 7, code, "the commander's status is the job's")
	out, _ = run("poll")
	assert.Equal(t, "", out)
	out, _ = run("stop", "job_1")
	assert.Equal(t, "JOB <job_1> NOTFOUND\n", out)
	out, _ = run("stop", "job_15")
	assert.Equal(t, "JOB <job_15> NOTFOUND\n", out)
	_, code = run("frobnicate")
	assert.Equal(t, 2, code, "usage error")
	out, code = run("exit")
	assert.Equal(t, "SERVER TERMINATED\n", out)
	assert.Equal(t, 0, code)
	require.NoError(t, srv.Wait(), "the server ends with status 0")
	<-logs
	entries, err := os.ReadDir(work)
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, strings.HasSuffix(e.Name(), ".output"), "output file %s left behind", e.Name())
	}
}

func TestServerUsage(t *testing.T) {
	server, _ := build(t)
	for _, args := range [][]string{{}, {"7856", "0", "5"}, {"7856", "8", "0"}, {"x", "8", "5"}, {"70000", "8", "5"}} {
		err := exec.Command(server, args...).Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
	}
}
