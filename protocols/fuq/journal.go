package fuq

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/dirlock"
	"github.com/laboro-go/laboro/internal/lines"
)

// A Journal keeps a Foreman's jobs on disk, so that a foreman started
// again after a crash resumes where it was: it is told of each job the
// Foreman queues and of each task that ends, and Control tells it of each
// job that ends. OpenJournal replays it.
//
// The file is JSON lines, appended to and never rewritten while open (it
// is rewritten when opened, to forget old jobs: see OpenJournalKeeping):
//
//	{"job":{"ref":"job_1","desc":{…JobDescription, JobId included…}}}
//	{"task":{"job":1,"task":3,"state":"done","status":"done","worker":"n1"}}
//	{"cancel":{"job":1,"status":"job cancelled"}}
//	{"end":{"ref":"job_1","state":"succeeded","error":""}}
//
// A cancel line stands for every task of the job that has no task line
// before it: they were cancelled, for the status given (a job of a million
// tasks is cancelled in one line).
//
// Each line is one write of the process: a SIGKILL loses none that was
// written (the kernel has it); a machine that loses power may lose the
// last ones, and a torn last line is ignored on replay, and removed before
// the next line is written. A task that was
// running when the foreman died runs again, unless its worker, which
// keeps running it, comes back in time to say so: the job and task
// numbers stay the same across the restart, so the worker's HELLO names
// tasks the new foreman knows.
type Journal struct {
	mu     sync.Mutex
	f      *os.File
	lock   *os.File // <path>.lock, held while open
	path   string
	w      *bufio.Writer
	err    error // the first write error
	closed bool
}

// ErrJournalInUse is returned by OpenJournal while another foreman (or
// another Journal of this process) has the journal open: two foremen on
// one journal would give out the same job ids and lose each other's jobs.
var ErrJournalInUse = errors.New("fuq: the journal is in use by another foreman")

// lockJournal takes <path>.lock for this process until the returned file
// is closed, or the process ends however it does.
func lockJournal(path string) (*os.File, error) {
	lockPath := path + ".lock"
	f, err := os.OpenFile(lockPath, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fuq: journal: %w", err)
	}
	f.Close()
	held, err := dirlock.Lock(lockPath)
	if errors.Is(err, dirlock.ErrHeld) {
		return nil, fmt.Errorf("%w: %s (its lock, %s, is held: stop that foreman, or give this one -journal of its own)",
			ErrJournalInUse, path, lockPath)
	}
	if err != nil {
		return nil, fmt.Errorf("fuq: journal: %w", err)
	}
	return held, nil
}

// JournaledJob is a job the journal knows, as OpenJournal replays it.
type JournaledJob struct {
	Ref   string         // the Executor's id of the job
	Desc  JobDescription // its JobId included
	Ended []TaskInfo     // the tasks that ended, with their outcome
	State string         // its Executor status once it ended; "" while unfinished
	Error string         // with State, the Result's error, if any
}

type journalLine struct {
	Job    *journalJob    `json:"job,omitempty"`
	Task   *journalTask   `json:"task,omitempty"`
	Cancel *journalCancel `json:"cancel,omitempty"`
	End    *journalEnd    `json:"end,omitempty"`
}

type journalCancel struct {
	Job    uint64 `json:"job"`
	Status string `json:"status"`
}

type journalJob struct {
	Ref  string         `json:"ref"`
	Desc JobDescription `json:"desc"`
}

type journalTask struct {
	Job    uint64 `json:"job"`
	Task   int    `json:"task"`
	State  string `json:"state"`
	Status string `json:"status,omitempty"`
	Worker string `json:"worker,omitempty"`
}

type journalEnd struct {
	Ref   string `json:"ref"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// maxJournalLine bounds a line on replay (a job's description is short).
const maxJournalLine = 1 << 20

// maxJournalTasks bounds the tasks of a job on replay.
const maxJournalTasks = 1 << 27

// OpenJournal opens (creating it, 0600) the journal at path, and returns
// the jobs it holds, in the order they were queued: OpenJournalKeeping
// with DefaultMaxEndedTasks and DefaultMaxEndedJobs.
func OpenJournal(path string) (*Journal, []JournaledJob, error) {
	return OpenJournalKeeping(path, DefaultMaxEndedTasks, DefaultMaxEndedJobs)
}

// OpenJournalKeeping opens (creating it, 0600) the journal at path, and
// returns the jobs it holds, in the order they were queued: every job
// that had not ended, and of those that ended the last ones, within
// maxEndedTasks tasks and maxEndedJobs jobs (as Foreman.MaxEndedTasks and
// MaxEndedJobs; the last one to end is kept whatever its size). When it
// held more, the file is first rewritten with those alone (a new file
// renamed over the old one), so that it does not grow for ever.
func OpenJournalKeeping(path string, maxEndedTasks, maxEndedJobs int) (_ *Journal, _ []JournaledJob, err error) {
	lock, err := lockJournal(path)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	jobs, err := replay(path, maxJournalTasks)
	if err != nil {
		return nil, nil, err
	}
	if kept := keepJobs(jobs, maxEndedTasks, maxEndedJobs); len(kept) < len(jobs) {
		if err := rewrite(path, kept); err != nil {
			return nil, nil, err
		}
		jobs = kept
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("fuq: journal: %w", err)
	}
	// A last line cut by a crash, which replay skipped, goes: the next
	// line starts a line of its own rather than end it, and be lost.
	if err := lines.DropCut(f); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("fuq: journal: %w", err)
	}
	return &Journal{f: f, lock: lock, path: path, w: bufio.NewWriterSize(f, 4096)}, jobs, nil
}

// replay reads the jobs of the journal at path (none if there is no such
// file); a cancelled job of more than maxTasks tasks is not one this
// foreman made, and its tasks are not filled in.
func replay(path string, maxTasks int) ([]JournaledJob, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fuq: journal: %w", err)
	}
	defer f.Close()
	byRef := map[string]*JournaledJob{}
	byID := map[uint64]*JournaledJob{}
	cancelled := map[*JournaledJob]string{} // with why, for the tasks without a line
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxJournalLine)
	for n := 1; sc.Scan(); n++ {
		var l journalLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			continue // a line torn by a crash
		}
		switch {
		case l.Job != nil:
			j := &JournaledJob{Ref: l.Job.Ref, Desc: l.Job.Desc}
			if byRef[j.Ref] == nil {
				order = append(order, j.Ref)
			}
			byRef[j.Ref], byID[j.Desc.JobId] = j, j
		case l.Task != nil:
			if j := byID[l.Task.Job]; j != nil {
				if _, ok := cancelled[j]; !ok {
					j.Ended = append(j.Ended, TaskInfo{Task: l.Task.Task, State: parseTaskState(l.Task.State), Status: l.Task.Status, Worker: l.Task.Worker})
				}
			}
		case l.Cancel != nil:
			if j := byID[l.Cancel.Job]; j != nil {
				if _, ok := cancelled[j]; !ok {
					cancelled[j] = l.Cancel.Status
				}
			}
		case l.End != nil:
			// An end says how the job ended: without a state it is none.
			if j := byRef[l.End.Ref]; j != nil && l.End.State != "" {
				j.State, j.Error = l.End.State, l.End.Error
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("fuq: journal %s: %w", path, err)
	}
	for j, why := range cancelled {
		j.Ended = cancelRest(j.Ended, j.Desc.NumTasks, maxTasks, why)
	}
	jobs := make([]JournaledJob, 0, len(order))
	for _, ref := range order {
		jobs = append(jobs, *byRef[ref])
	}
	return jobs, nil
}

// cancelRest returns ended with the tasks of 1…n it does not hold
// appended, cancelled for why; ended as it is if n is not within 1…limit.
func cancelRest(ended []TaskInfo, n, limit int, why string) []TaskInfo {
	if n < 1 || n > limit {
		return ended // not a job this foreman made
	}
	seen := make([]bool, n+1)
	for _, t := range ended {
		if t.Task >= 1 && t.Task <= n {
			seen[t.Task] = true
		}
	}
	ended = slices.Grow(ended, n-len(ended))
	for task := 1; task <= n; task++ {
		if !seen[task] {
			ended = append(ended, TaskInfo{Task: task, State: TaskCancelled, Status: why})
		}
	}
	return ended
}

// keepJobs returns the jobs that did not end and the last that ended
// within the bounds, in their order.
func keepJobs(jobs []JournaledJob, maxEndedTasks, maxEndedJobs int) []JournaledJob {
	keep := make([]bool, len(jobs))
	tasks, ended, full := 0, 0, false
	for i := len(jobs) - 1; i >= 0; i-- {
		j := &jobs[i]
		switch {
		case j.State == "":
			keep[i] = true
		case !full:
			tasks += j.Desc.NumTasks
			ended++
			full = overBounds(tasks, ended, maxEndedTasks, maxEndedJobs)
			keep[i] = !full // once one is over, the older ones go too
		}
	}
	kept := make([]JournaledJob, 0, len(jobs))
	for i, j := range jobs {
		if keep[i] {
			kept = append(kept, j)
		}
	}
	return kept
}

// rewrite replaces the journal at path with one that holds jobs alone.
func rewrite(path string, jobs []JournaledJob) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("fuq: journal: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("fuq: rewriting the journal %s: %w", path, err)
		}
	}()
	w := bufio.NewWriter(tmp)
	enc := json.NewEncoder(w)
	for _, j := range jobs {
		if err := enc.Encode(journalLine{Job: &journalJob{Ref: j.Ref, Desc: j.Desc}}); err != nil {
			return err
		}
		for _, t := range j.Ended {
			l := journalTask{Job: j.Desc.JobId, Task: t.Task, State: t.State.String(), Status: t.Status, Worker: t.Worker}
			if err := enc.Encode(journalLine{Task: &l}); err != nil {
				return err
			}
		}
		if j.State != "" {
			if err := enc.Encode(journalLine{End: &journalEnd{Ref: j.Ref, State: j.State, Error: j.Error}}); err != nil {
				return err
			}
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if dir, err := os.Open(filepath.Dir(path)); err == nil {
		dir.Sync() // the rename, on disk
		dir.Close()
	}
	return nil
}

func parseTaskState(s string) TaskState {
	for i, name := range taskStates {
		if name == s {
			return TaskState(i)
		}
	}
	return TaskFailed
}

// write appends one line and flushes it (one write of the process).
func (j *Journal) write(l journalLine) {
	if j == nil {
		return
	}
	b, err := json.Marshal(l)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	if err == nil && j.err == nil {
		j.w.Write(append(b, '\n'))
		err = j.w.Flush()
	}
	if err != nil && j.err == nil {
		j.err = fmt.Errorf("fuq: journal %s: %w", j.path, err)
	}
}

func (j *Journal) job(ref string, d JobDescription) {
	j.write(journalLine{Job: &journalJob{Ref: ref, Desc: d}})
}

func (j *Journal) task(job uint64, n int, state TaskState, status, worker string) {
	j.write(journalLine{Task: &journalTask{Job: job, Task: n, State: state.String(), Status: status, Worker: worker}})
}

// cancel records that every task of job that has not ended is cancelled,
// for why.
func (j *Journal) cancel(job uint64, why string) {
	j.write(journalLine{Cancel: &journalCancel{Job: job, Status: why}})
}

// Ended records that the job ref ended with res.
func (j *Journal) Ended(ref string, res laboro.Result) {
	e := &journalEnd{Ref: ref, State: res.Status.String()}
	if res.Err != nil {
		e.Error = res.Err.Error()
	}
	j.write(journalLine{End: e})
}

// Err returns the first error writing the journal met, if any.
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Close closes the file; what the Foreman would record afterwards is
// not recorded. A foreman that stops closes its journal before its
// Executor, whose Close ends the Runs of its jobs: the journal keeps them
// as they were, not cancelled, and the next start resumes them, as after
// a crash. Calling Close again does nothing.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	err := j.f.Close()
	j.lock.Close() // the next foreman may open it
	return err
}

// NextRef returns the first job_N id that none of jobs has.
func NextRef(jobs []JournaledJob) int {
	next := 1
	for _, j := range jobs {
		if n, err := strconv.Atoi(strings.TrimPrefix(j.Ref, "job_")); err == nil && n >= next {
			next = n + 1
		}
	}
	return next
}

// ResumedJob is the Payload of a job the Foreman had before it was started
// again (see Journal): its JobDescription, JobId included, and the tasks
// that had ended, which do not run again.
type ResumedJob struct {
	JobDescription
	Ended []TaskInfo
}

// NewResumedJob returns the laboro job that resumes j.
func NewResumedJob(j JournaledJob) laboro.Job {
	ended := append([]TaskInfo(nil), j.Ended...)
	sort.Slice(ended, func(a, b int) bool { return ended[a].Task < ended[b].Task })
	return laboro.Job{ID: j.Ref, Payload: ResumedJob{JobDescription: j.Desc, Ended: ended}}
}
