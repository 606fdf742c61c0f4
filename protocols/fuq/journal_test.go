package fuq

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A journal replays the jobs it was told of, their ended tasks and their
// ends, in order; a line torn by a crash is skipped; the file is its
// user's alone.
func TestJournalReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j, jobs, err := OpenJournal(path)
	require.NoError(t, err)
	assert.Empty(t, jobs)
	d := JobDescription{Name: "a", Command: "/bin/true", NumTasks: 3}
	j.job("job_1", d)
	d.JobId = 7
	j.job("job_1", d) // the foreman numbered it
	j.task(7, 2, TaskDone, "done", "w1")
	j.job("job_2", JobDescription{Name: "b", Command: "/bin/true", NumTasks: 1, JobId: 8})
	j.task(8, 1, TaskFailed, "exit 1", "w2")
	j.Ended("job_2", laboro.Result{Status: laboro.StatusFailed})
	require.NoError(t, j.Err())
	require.NoError(t, j.Close())
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	f.WriteString(`{"task":{"job":7,"ta`) // torn
	f.Close()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	j, jobs, err = OpenJournal(path)
	require.NoError(t, err)
	defer j.Close()
	require.Len(t, jobs, 2)
	assert.Equal(t, "job_1", jobs[0].Ref)
	assert.Equal(t, uint64(7), jobs[0].Desc.JobId)
	assert.Equal(t, []TaskInfo{{Task: 2, State: TaskDone, Status: "done", Worker: "w1"}}, jobs[0].Ended)
	assert.Empty(t, jobs[0].State, "unfinished")
	assert.Equal(t, "failed", jobs[1].State)
	assert.Equal(t, 3, NextRef(jobs))
}

// A resumed job runs only its tasks that had not ended, under its own
// job number, and ends with the outcomes of all.
func TestForemanResumedJob(t *testing.T) {
	s := startSystem(t, &Foreman{})
	cmd := s.script("echo task $1\n")
	logDir := filepath.Join(s.dir, "logs")
	require.NoError(t, os.MkdirAll(logDir, 0o755))
	h, err := s.ex.Submit(t.Context(), NewResumedJob(JournaledJob{Ref: "job_5", Desc: JobDescription{
		Name: "r", Command: cmd, NumTasks: 4, WorkingDir: s.dir, LoggingDir: logDir, JobId: 42},
		Ended: []TaskInfo{{Task: 1, State: TaskDone, Status: "done"}, {Task: 3, State: TaskDone, Status: "done"}}}))
	require.NoError(t, err)
	s.worker(s.addr, 2)
	res := wait(t, h)
	require.NoError(t, res.Err)
	assert.ElementsMatch(t, []string{"r_2.log", "r_4.log"}, logFiles(t, logDir))
	info, ok := s.f.JobByRef("job_5")
	require.True(t, ok)
	assert.Equal(t, uint64(42), info.JobId)
	assert.Equal(t, 4, info.Done)
}
