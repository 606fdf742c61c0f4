package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBatchRunsReportsAndSums(t *testing.T) {
	ex, err := laboro.New(laboro.WithConcurrency(2), laboro.WithPoolSize(2), laboro.WithBufferSize(2))
	require.NoError(t, err)
	defer ex.Close()
	var progress bytes.Buffer
	saved := map[string]string{}
	b := Batch{
		Progress: NewProgress(&progress, time.Nanosecond),
		OnResult: func(job laboro.Job, res laboro.Result) error {
			out, err := res.Output.ReadAll()
			saved[job.Command] = string(out)
			if job.Command == "echo unsaved" {
				return errors.New("disk full")
			}
			return err
		},
	}
	jobs := []laboro.Job{
		{Command: "echo one"}, {Command: "echo two"}, {Command: "echo unsaved"},
		{Script: "echo partial; echo 'no such file' >&2; exit 4"}, {Command: "true"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := b.Run(ctx, ex, jobs)
	require.NoError(t, err)
	assert.Equal(t, "one\n", saved["echo one"])
	assert.Equal(t, Counts{Total: 5, Succeeded: 3, Failed: 2}, sum.Counts)
	assert.Equal(t, ExitFailed, sum.Code())
	require.Len(t, sum.Failures, 2)

	var out bytes.Buffer
	sum.Write(&out)
	text := out.String()
	assert.Contains(t, text, "5 jobs: 3 succeeded, 2 failed\n")
	assert.Contains(t, text, "failed, exit status 4: script\n")
	assert.Contains(t, text, "    | no such file\n", "the stderr tail")
	assert.Contains(t, text, "not saved, exit status 0: echo unsaved\n    disk full\n")
	assert.Contains(t, progress.String(), "5 of 5 done", "plain progress lines when not on a terminal")
}

func TestBatchAllSucceeded(t *testing.T) {
	ex, err := laboro.New()
	require.NoError(t, err)
	defer ex.Close()
	sum, err := (&Batch{}).Run(context.Background(), ex, []laboro.Job{{Command: "true"}})
	require.NoError(t, err)
	assert.Equal(t, ExitOK, sum.Code())
	assert.NoError(t, sum.Err())
}

func TestWriteFailuresKeepsTheLastLines(t *testing.T) {
	var out bytes.Buffer
	WriteFailures(&out, []Failure{{ID: "j1", Command: "make\nall", Status: "timed out", ExitCode: -1, Err: "laboro: job timed out",
		Stderr: []byte("1\n2\n3\n4\n5\n6\n7\n")}})
	assert.Equal(t, "j1 timed out: make all\n    laboro: job timed out\n    | 3\n    | 4\n    | 5\n    | 6\n    | 7\n", out.String())
}

// Prepare makes each job as it is submitted, not before: with room for one
// job running and one waiting, at most those and the one being submitted
// have been made and not yet ended. A job it cannot make fails in the
// summary, saying why, and the others run.
func TestBatchPreparesEachJobWhenSubmitted(t *testing.T) {
	ex, err := laboro.New(laboro.WithConcurrency(1), laboro.WithPoolSize(1), laboro.WithBufferSize(1))
	require.NoError(t, err)
	defer ex.Close()
	var mu sync.Mutex
	var made, ended, most int
	b := Batch{
		Prepare: func(job laboro.Job) (laboro.Job, error) {
			if job.ID == "j7" {
				return job, errors.New("open j7.sh: no such file or directory")
			}
			mu.Lock()
			made++
			most = max(most, made-ended)
			mu.Unlock()
			job.Func = func(context.Context) error {
				mu.Lock()
				ended++
				mu.Unlock()
				return nil
			}
			return job, nil
		},
		Command: func(job laboro.Job) string { return job.ID + ".sh" },
	}
	jobs := make([]laboro.Job, 20)
	for i := range jobs {
		jobs[i].ID = fmt.Sprintf("j%d", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := b.Run(ctx, ex, jobs)
	require.NoError(t, err)
	assert.Equal(t, Counts{Total: 20, Succeeded: 19, Failed: 1}, sum.Counts)
	assert.Equal(t, 19, made)
	assert.LessOrEqual(t, most, 3, "jobs made and not yet ended")
	var out bytes.Buffer
	sum.Write(&out)
	assert.Contains(t, out.String(), "j7 not loaded: j7.sh\n    open j7.sh: no such file or directory\n")
}
