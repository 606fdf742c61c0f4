package fuq

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	require.Len(t, jobs, 2)
	assert.Equal(t, "job_1", jobs[0].Ref)
	assert.Equal(t, uint64(7), jobs[0].Desc.JobId)
	assert.Equal(t, []TaskInfo{{Task: 2, State: TaskDone, Status: "done", Worker: "w1"}}, jobs[0].Ended)
	assert.Empty(t, jobs[0].State, "unfinished")
	assert.Equal(t, "failed", jobs[1].State)
	assert.Equal(t, 3, NextRef(jobs))

	// The torn line is gone: the first line written after it is not lost.
	j.job("job_3", JobDescription{Name: "c", Command: "/bin/true", NumTasks: 1, JobId: 9})
	require.NoError(t, j.Close())
	j, jobs, err = OpenJournal(path)
	require.NoError(t, err)
	defer j.Close()
	require.Len(t, jobs, 3)
	assert.Equal(t, "job_3", jobs[2].Ref)
}

// Opened again, a journal forgets the oldest ended jobs past its bounds,
// on disk too; the jobs that did not end stay whole, ended tasks and all.
func TestJournalForgetsOldJobs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j, _, err := OpenJournal(path)
	require.NoError(t, err)
	ended := func(ref string, id uint64, tasks int) {
		j.job(ref, JobDescription{Name: ref, Command: "/bin/true", NumTasks: tasks, JobId: id})
		for n := 1; n <= tasks; n++ {
			j.task(id, n, TaskDone, "done", "w1")
		}
		j.Ended(ref, laboro.Result{Status: laboro.StatusSucceeded})
	}
	ended("job_1", 1, 2)
	j.job("job_2", JobDescription{Name: "open", Command: "/bin/true", NumTasks: 4, JobId: 2})
	j.task(2, 3, TaskFailed, "exit 1", "w2")
	ended("job_3", 3, 2)
	ended("job_4", 4, 3)
	ended("job_5", 5, 1)
	require.NoError(t, j.Close())
	before, err := os.Stat(path)
	require.NoError(t, err)

	j, jobs, err := OpenJournalKeeping(path, 5, 3)
	require.NoError(t, err)
	require.NoError(t, j.Close())
	refs := func(jobs []JournaledJob) []string {
		var r []string
		for _, j := range jobs {
			r = append(r, j.Ref)
		}
		return r
	}
	assert.Equal(t, []string{"job_2", "job_4", "job_5"}, refs(jobs), "4 tasks of ended jobs; job_3's 2 more would be over 5")
	assert.Equal(t, []TaskInfo{{Task: 3, State: TaskFailed, Status: "exit 1", Worker: "w2"}}, jobs[0].Ended)
	assert.Equal(t, 6, NextRef(jobs))

	after, err := os.Stat(path)
	require.NoError(t, err)
	assert.Less(t, after.Size(), before.Size())
	assert.Equal(t, os.FileMode(0o600), after.Mode().Perm())
	j, again, err := OpenJournal(path)
	require.NoError(t, err)
	require.NoError(t, j.Close())
	assert.Equal(t, jobs, again, "the rewritten file replays the same jobs")

	j2, last, err := OpenJournalKeeping(path, 1, 1)
	require.NoError(t, err)
	require.NoError(t, j2.Close())
	assert.Equal(t, []string{"job_2", "job_5"}, refs(last), "the last job to end stays")
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"journal", "journal.lock"}, names, "no temporary file left")
}

// A journal is one foreman's at a time: a second one opening it would give
// out the same job ids, and the jobs of each would be lost to the other.
// It is free again once the first closes it (or its process ends).
func TestJournalInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j, _, err := OpenJournal(path)
	require.NoError(t, err)
	j.job("job_1", JobDescription{Name: "first", Command: "/bin/true", NumTasks: 1, JobId: 1})
	_, _, err = OpenJournal(path)
	require.ErrorIs(t, err, ErrJournalInUse)
	assert.ErrorContains(t, err, path+".lock")
	require.NoError(t, j.Close())
	j, jobs, err := OpenJournal(path)
	require.NoError(t, err)
	defer j.Close()
	require.Len(t, jobs, 1)
	assert.Equal(t, "job_1", jobs[0].Ref)
}

// A cancelled job takes one line of the journal, whatever its tasks, and
// replays with every task that had not ended cancelled; a task's line
// after it (an outcome that came too late) changes nothing.
func TestJournalCancelledJob(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	jn, _, err := OpenJournal(path)
	require.NoError(t, err)
	s := startSystem(t, &Foreman{Journal: jn})
	h, _ := s.submit("big", "/bin/true", 10_000)
	var id uint64
	require.Eventually(t, func() bool {
		info, ok := s.f.JobByRef(h.ID())
		id = info.JobId
		return ok
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, s.f.Cancel(id))
	assert.Equal(t, laboro.StatusKilled, wait(t, h).Status)
	jn.task(id, 1, TaskDone, "done", "late")
	require.NoError(t, jn.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, 3, strings.Count(string(b), "\n"), "the job, its cancellation, the late task:\n%s", b)

	again, jobs, err := OpenJournal(path)
	require.NoError(t, err)
	defer again.Close()
	require.Len(t, jobs, 1)
	require.Len(t, jobs[0].Ended, 10_000)
	for n, task := range jobs[0].Ended {
		require.Equal(t, TaskInfo{Task: n + 1, State: TaskCancelled, Status: ErrJobCancelled.Error()}, task)
	}
}

// A resumed job runs only its tasks that had not ended, under its own
// job number, and ends with the outcomes of all.
func TestForemanResumedJob(t *testing.T) {
	s := startSystem(t, &Foreman{Grace: -1}) // its tasks in line at once
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

// FuzzJournal feeds a foreman's start whatever its journal may hold (torn,
// damaged or edited lines): replay never fails on a line, and what it
// reads survives the rewrite that forgets old jobs: written again and
// replayed, it is the same.
func FuzzJournal(f *testing.F) {
	// More seeds are in testdata/fuzz/FuzzJournal.
	f.Add([]byte(`{"job":{"ref":"job_1","desc":{"JobId":1,"Name":"a","NumTasks":3,"Command":"/bin/true"}}}
{"task":{"job":1,"task":2,"state":"done","status":"done","worker":"w1"}}
{"cancel":{"job":1,"status":"job cancelled"}}
{"end":{"ref":"job_1","state":"cancelled","error":"fuq: job cancelled"}}
{"task":{"job":7,"ta`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "journal")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		const maxTasks = 1000 // a cancelled job's tasks are filled in
		jobs, err := replay(path, maxTasks)
		if err != nil {
			// Only a line over the bound stops the replay.
			require.ErrorContains(t, err, "token too long")
			return
		}
		require.NoError(t, rewrite(path, jobs))
		again, err := replay(path, maxTasks)
		require.NoError(t, err)
		if len(jobs) == 0 {
			require.Empty(t, again)
			return
		}
		require.Equal(t, jobs, again)
	})
}
