package fuq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport"
	"go.uber.org/zap"
)

// DefaultGrace is how long the tasks of a worker whose connection dropped
// wait for it to come back before they go to other workers.
const DefaultGrace = 10 * time.Second

// ErrJobCancelled is the error of a job cancelled with Foreman.Cancel.
var ErrJobCancelled = errors.New("fuq: job cancelled")

// TaskState is where a task of a job stands.
type TaskState uint8

// The states of a task.
const (
	TaskPending   TaskState = iota // waiting for a worker
	TaskRunning                    // pushed to a worker
	TaskDone                       // its UPDATE said success
	TaskFailed                     // its UPDATE said failure
	TaskCancelled                  // cancelled before it ended
)

var taskStates = [...]string{"pending", "running", "done", "failed", "cancelled"}

func (s TaskState) String() string {
	if int(s) < len(taskStates) {
		return taskStates[s]
	}
	return fmt.Sprintf("TaskState(%d)", s)
}

func (s TaskState) final() bool { return s >= TaskDone }

// TaskInfo is the state of one task.
type TaskInfo struct {
	Task     int
	State    TaskState
	Worker   string // the worker that ran it, or runs it
	Status   string // the worker's word on it ("done", "error encountered: …")
	Attempts int    // times it was pushed to a worker
}

// JobInfo is the state of one job and its tasks.
type JobInfo struct {
	JobDescription
	Ref                            string // the laboro job's id
	Tasks                          []TaskInfo
	Pending, Running, Done, Failed int
	Cancelled                      int
}

// WorkerInfo is one connected worker.
type WorkerInfo struct {
	ID      int
	Addr    string
	Free    int // processors free, as it last said
	Running int // tasks it runs
}

// NewJob returns the laboro.Job of a fuq job: numTasks tasks, each running
// command with its task number (1 … numTasks) as argument, in workingDir,
// logging to loggingDir/<name>_<task>.log.
func NewJob(name, command string, numTasks int, workingDir, loggingDir string) laboro.Job {
	return laboro.Job{Meta: JobDescription{Name: name, Command: command, NumTasks: numTasks, WorkingDir: workingDir, LoggingDir: loggingDir}}
}

// Foreman is the foreman side: a laboro.Runner whose jobs are fuq jobs
// (see NewJob). Run splits a job into its tasks and the Foreman pushes
// them to connected workers, as many to each as it has free processors;
// Run returns when every task has ended. Jobs, Job and Workers tell the
// state of everything; Cancel and StopWorkers act on it.
//
// A task of a worker that vanishes waits Grace for the worker to come back
// (its HELLO names the tasks it still runs), then goes to another worker:
// a task may run twice, but only its first outcome is recorded. Set the
// fields before first use; a Foreman is safe for concurrent use.
type Foreman struct {
	// Grace is how long a vanished worker's tasks wait for it; 0 means
	// DefaultGrace, a negative value no wait.
	Grace time.Duration
	// Timeout bounds the wait for a worker's HELLO and each write; 0
	// means DefaultTimeout.
	Timeout time.Duration
	// MaxBody bounds a message body; 0 means DefaultMaxBody.
	MaxBody int
	// Seq configures the sequence numbering (tests lower MaxSeq).
	Seq SeqConfig
	// Logger; nil means none.
	Logger *zap.Logger

	once       sync.Once
	mu         sync.Mutex
	nextJob    uint64
	jobs       map[uint64]*fjob
	pending    []*ftask
	workers    map[*fworker]bool
	nextWorker int
}

type fjob struct {
	ref   string // the laboro job's id
	desc  JobDescription
	tasks []*ftask
	left  int
	done  chan struct{}
	err   error // why it ended early
}

type ftask struct {
	job      *fjob
	n        int
	state    TaskState
	worker   *fworker
	status   string
	attempts int
	orphaned *time.Timer // running at a worker that vanished
}

func (t *ftask) pair() TaskPair { return TaskPair{JobId: t.job.desc.JobId, Task: t.n} }

func (t *ftask) wire() Task { return Task{Task: t.n, JobDescription: t.job.desc} }

var (
	_ laboro.Runner    = (*Foreman)(nil)
	_ laboro.Validator = (*Foreman)(nil)
)

func (f *Foreman) init() {
	f.once.Do(func() {
		if f.Logger == nil {
			f.Logger = zap.NewNop()
		}
		f.jobs = map[uint64]*fjob{}
		f.workers = map[*fworker]bool{}
	})
}

// Validate refuses a job that is not a fuq job.
func (f *Foreman) Validate(job laboro.Job) error {
	d, ok := job.Meta.(JobDescription)
	switch {
	case !ok:
		return errors.New("fuq: a job's Meta is its JobDescription; see NewJob")
	case d.NumTasks < 1:
		return errors.New("fuq: a job needs at least one task")
	case d.Command == "":
		return errors.New("fuq: a job needs a command")
	}
	return nil
}

// Run runs the job's tasks on the workers and waits for all of them. The
// job succeeds when every task succeeded. When ctx ends, the tasks still
// pending are dropped and the running ones cancelled.
func (f *Foreman) Run(ctx context.Context, job laboro.Job) laboro.Result {
	f.init()
	res := laboro.Result{ID: job.ID, ExitCode: -1, Started: time.Now()}
	if err := f.Validate(job); err != nil {
		res.Status, res.Err, res.Ended = laboro.StatusFailed, err, time.Now()
		return res
	}
	j := f.add(job.ID, job.Meta.(JobDescription))
	f.kick()
	select {
	case <-j.done:
	case <-ctx.Done():
		f.cancel(j, context.Cause(ctx))
		<-j.done
	}
	res.Ended = time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	failed := 0
	for _, t := range j.tasks {
		if t.state != TaskDone {
			failed++
		}
	}
	switch {
	case j.err != nil:
		res.Status, res.Err = laboro.StatusKilled, j.err
		if errors.Is(j.err, laboro.ErrTimeout) {
			res.Status = laboro.StatusTimedOut
		}
	case failed > 0:
		res.Status, res.ExitCode = laboro.StatusFailed, 1
		res.Err = fmt.Errorf("fuq: %d of %d tasks of job %d failed", failed, len(j.tasks), j.desc.JobId)
	default:
		res.Status, res.ExitCode = laboro.StatusSucceeded, 0
	}
	return res
}

// add registers a job and queues its tasks.
func (f *Foreman) add(ref string, d JobDescription) *fjob {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextJob++
	d.JobId = f.nextJob
	d.Status = JobRunning
	j := &fjob{ref: ref, desc: d, left: d.NumTasks, done: make(chan struct{})}
	for n := 1; n <= d.NumTasks; n++ {
		t := &ftask{job: j, n: n}
		j.tasks = append(j.tasks, t)
		f.pending = append(f.pending, t)
	}
	f.jobs[d.JobId] = j
	f.Logger.Info("job queued", zap.Uint64("job", d.JobId), zap.String("name", d.Name), zap.Int("tasks", d.NumTasks))
	return j
}

// Cancel cancels a job: its pending tasks are dropped and its running ones
// cancelled on their workers; its Run returns with ErrJobCancelled.
func (f *Foreman) Cancel(jobID uint64) error {
	f.init()
	f.mu.Lock()
	j := f.jobs[jobID]
	f.mu.Unlock()
	if j == nil {
		return fmt.Errorf("fuq: no job %d", jobID)
	}
	f.cancel(j, ErrJobCancelled)
	return nil
}

func (f *Foreman) cancel(j *fjob, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if j.left == 0 {
		return
	}
	j.err = cause
	byWorker := map[*fworker][]TaskPair{}
	for _, t := range j.tasks {
		if t.state.final() {
			continue
		}
		if t.state == TaskRunning && t.worker != nil && t.orphaned == nil {
			byWorker[t.worker] = append(byWorker[t.worker], t.pair())
			delete(t.worker.running, t.pair())
		}
		f.settle(t, TaskCancelled, cause.Error())
	}
	for w, pairs := range byWorker {
		w.outbox = append(w.outbox, Message{Header: Header{Type: TypeCancel}, Cancel: pairs})
		w.wake()
	}
}

// settle gives t its final state. f.mu is held.
func (f *Foreman) settle(t *ftask, s TaskState, status string) {
	if t.orphaned != nil {
		t.orphaned.Stop()
		t.orphaned = nil
	}
	if t.state == TaskPending {
		f.unqueue(t)
	}
	t.state, t.status = s, status
	t.job.left--
	if t.job.left == 0 {
		t.job.desc.Status = JobFinished
		if t.job.err != nil {
			t.job.desc.Status = JobCancelled
		}
		close(t.job.done)
	}
}

// unqueue removes t from the pending line. f.mu is held.
func (f *Foreman) unqueue(t *ftask) {
	for i, p := range f.pending {
		if p == t {
			f.pending = append(f.pending[:i], f.pending[i+1:]...)
			return
		}
	}
}

// StopWorkers sends STOP(n) to every worker: each gives up n processors
// (0: all of them, and ends once its tasks are done); StopImmediate makes
// them exit at once.
func (f *Foreman) StopWorkers(n uint32) {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.workers {
		w.outbox = append(w.outbox, Message{Header: Header{Type: TypeStop, Arg0: n}})
		w.wake()
	}
}

// Job returns the state of a job.
func (f *Foreman) Job(id uint64) (JobInfo, bool) {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	if j == nil {
		return JobInfo{}, false
	}
	return j.info(), true
}

// JobByRef returns the state of the job that the laboro job ref (its id)
// runs; the last one, if the id was used more than once.
func (f *Foreman) JobByRef(ref string) (JobInfo, bool) {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	var found *fjob
	for _, j := range f.jobs {
		if j.ref == ref && (found == nil || j.desc.JobId > found.desc.JobId) {
			found = j
		}
	}
	if found == nil {
		return JobInfo{}, false
	}
	return found.info(), true
}

// Jobs returns the state of every job, in the order they came.
func (f *Foreman) Jobs() []JobInfo {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	infos := make([]JobInfo, 0, len(f.jobs))
	for _, j := range f.jobs {
		infos = append(infos, j.info())
	}
	sort.Slice(infos, func(a, b int) bool { return infos[a].JobId < infos[b].JobId })
	return infos
}

func (j *fjob) info() JobInfo {
	info := JobInfo{JobDescription: j.desc, Ref: j.ref}
	for _, t := range j.tasks {
		ti := TaskInfo{Task: t.n, State: t.state, Status: t.status, Attempts: t.attempts}
		if t.worker != nil {
			ti.Worker = t.worker.name
		}
		info.Tasks = append(info.Tasks, ti)
		switch t.state {
		case TaskPending:
			info.Pending++
		case TaskRunning:
			info.Running++
		case TaskDone:
			info.Done++
		case TaskFailed:
			info.Failed++
		case TaskCancelled:
			info.Cancelled++
		}
	}
	return info
}

// Workers returns the connected workers.
func (f *Foreman) Workers() []WorkerInfo {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	var infos []WorkerInfo
	for w := range f.workers {
		infos = append(infos, WorkerInfo{ID: w.id, Addr: w.addr, Free: w.free(), Running: len(w.running)})
	}
	sort.Slice(infos, func(a, b int) bool { return infos[a].ID < infos[b].ID })
	return infos
}

// kick wakes every worker's loop to look at the pending tasks.
func (f *Foreman) kick() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.workers {
		w.wake()
	}
}

// Serve accepts workers on ln until ctx ends, then closes ln and every
// connection and waits for the goroutines it started. It returns ctx.Err()
// or the listener's error.
func (f *Foreman) Serve(ctx context.Context, ln net.Listener) error {
	f.init()
	return transport.Serve(ctx, ln, f.serveConn)
}
