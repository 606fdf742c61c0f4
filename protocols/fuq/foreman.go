package fuq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/lograte"
	"github.com/laboro-go/laboro/transport"
	"go.uber.org/zap"
)

// DefaultGrace is how long the tasks of a worker whose connection dropped
// wait for it to come back before they go to other workers.
const DefaultGrace = 10 * time.Second

// ErrJobCancelled is the error of a job cancelled with Foreman.Cancel.
var ErrJobCancelled = errors.New("fuq: job cancelled")

// ErrTooManyTasks is matched (errors.Is) by the error of a job of more
// tasks than the Foreman takes (Foreman.MaxTasks); errors.As finds its
// *TaskLimitError, which carries both numbers.
var ErrTooManyTasks = errors.New("fuq: a job of too many tasks")

// TaskLimitError refuses a job of more tasks than a Foreman takes. Its
// text names the limit in words, not the field that sets it: a program
// that has a flag for it adds the flag's name.
type TaskLimitError struct {
	Tasks int // the job's
	Max   int // the most the Foreman takes (Foreman.MaxTasks, or its default)
}

func (e *TaskLimitError) Error() string {
	return fmt.Sprintf("fuq: a job of %d tasks is over the foreman's limit of %d tasks a job", e.Tasks, e.Max)
}

// Is reports whether target is ErrTooManyTasks.
func (e *TaskLimitError) Is(target error) bool { return target == ErrTooManyTasks }

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
	// Omitted counts the tasks a bounded list (the control API's, unless
	// asked for every task) would have held but left out.
	Omitted int `json:",omitempty"`
}

// WorkerInfo is one connected worker.
type WorkerInfo struct {
	ID      int
	Addr    string
	Node    string // the name its login got (ServeWeb); "" over plain TCP
	Free    int    // processors free, as it last said
	Running int    // tasks it runs
}

// NewJob returns the laboro.Job of a fuq job: numTasks tasks, each running
// command with its task number (1 … numTasks) as argument, in workingDir,
// logging to loggingDir/<name>_<task>.log. The JobDescription travels in
// the job's Payload; its Meta is left to the caller.
func NewJob(name, command string, numTasks int, workingDir, loggingDir string) laboro.Job {
	return laboro.Job{Payload: JobDescription{Name: name, Command: command, NumTasks: numTasks, WorkingDir: workingDir, LoggingDir: loggingDir}}
}

// DefaultMaxConns bounds the workers' connections a Foreman serves at
// once unless Foreman.MaxConns says otherwise.
const DefaultMaxConns = 1024

// DefaultMaxUnproven bounds the connections one address holds before
// proving the secret unless Foreman.MaxUnproven says otherwise: a worker
// proves it within a round trip, so even many workers behind one address
// restarting together seldom hold as many at once (one refused connects
// again).
const DefaultMaxUnproven = 32

// DefaultMaxTasks bounds the tasks of one job unless Foreman.MaxTasks says
// otherwise. A job of that size is submitted in under 2 s and cancelled in
// under 1 s on a laptop's core.
const DefaultMaxTasks = 1_000_000

// DefaultMaxEndedTasks and DefaultMaxEndedJobs bound what a Foreman
// remembers of the jobs that have ended unless Foreman.MaxEndedTasks and
// Foreman.MaxEndedJobs say otherwise: a million tasks (about 50 MB) and
// ten thousand jobs.
const (
	DefaultMaxEndedTasks = 1_000_000
	DefaultMaxEndedJobs  = 10_000
)

// errRestarted is why the tasks of a resumed job waited for their workers.
var errRestarted = errors.New("fuq: the foreman started again: no worker said it ran them")

// Foreman is the foreman side: a laboro.Runner whose jobs are fuq jobs
// (see NewJob). Run splits a job into its tasks and hands them to a
// transport.Dispatcher, which the connection of each worker asks for as
// many tasks as the worker has free processors, and sends them in a JOB;
// Run returns when every task has ended. Jobs, Job and Workers tell the
// state of everything; Cancel and StopWorkers act on it.
//
// A task of a worker that vanishes waits Grace for the worker to come back
// (its HELLO names the tasks it still runs), then goes to another worker:
// a task may run twice, but only its first outcome is recorded. So do the
// tasks of a resumed job (ResumedJob) that had not ended: the workers that
// ran them before the restart come back to say so, or send the UPDATEs of
// those that ended meanwhile. A HELLO that names a task nobody waits for
// any more (cancelled, ended, unknown) gets a CANCEL for it. Set the
// fields before first use; a Foreman is safe for concurrent use. It keeps its jobs while they run and the last
// ones that ended (MaxEndedTasks, MaxEndedJobs), its workers while they
// are connected: there is nothing to close.
type Foreman struct {
	// Grace is how long a vanished worker's tasks wait for it; 0 means
	// DefaultGrace, a negative value no wait.
	Grace time.Duration
	// Timeout bounds the wait for a worker's HELLO, for its reply to each
	// request (JOB, CANCEL, STOP: a worker that does not answer is
	// dropped, its tasks waiting Grace for it), and each write; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// MaxBody bounds a message body; 0 means DefaultMaxBody.
	MaxBody int
	// Journal, if not nil, is told of every job queued and every task
	// that ends, so that a Foreman started again can resume the jobs
	// (see Journal, ResumedJob).
	Journal *Journal
	// MaxConns bounds the workers' connections served at once, over both
	// transports (each may hold a message of MaxBody while it arrives);
	// one more is closed at once. ServeWeb also accepts at most MaxConns
	// connections at once, logged in or not: one more waits to be
	// accepted. 0 means DefaultMaxConns.
	MaxConns int
	// MaxTasks bounds the tasks of one job (each costs the foreman about
	// 700 bytes while the job lasts); 0 means DefaultMaxTasks. A larger
	// job is refused at submission.
	MaxTasks int
	// MaxEndedTasks and MaxEndedJobs bound what the Foreman remembers of
	// the jobs that have ended, for Job, JobByRef, Jobs and Cancel: the
	// tasks of those jobs, and their number. Past either, the jobs that
	// ended first are forgotten; the last one to end is kept whatever its
	// size, and a job that runs is never forgotten. 0 means
	// DefaultMaxEndedTasks, DefaultMaxEndedJobs.
	MaxEndedTasks, MaxEndedJobs int
	// Secret, when not empty, is the shared secret a worker must prove it
	// holds on the plain TCP transport before anything else (a challenge
	// and its HMAC: see auth.go); one that cannot is told so and closed,
	// with a log line. Empty means no authentication: anyone who reaches
	// the listener is taken for a worker. (ServeWeb has its own, in
	// WebConfig.)
	Secret []byte
	// MaxUnproven bounds the connections one address may hold at once on
	// the plain TCP transport before proving the Secret: a host that
	// opens connections and says nothing holds that many until Timeout,
	// not every one of MaxConns. One more is closed at once. 0 means
	// DefaultMaxUnproven.
	MaxUnproven int
	// Seq configures the sequence numbering (tests lower MaxSeq).
	Seq SeqConfig
	// Logger; nil means none.
	Logger *zap.Logger

	once       sync.Once
	conns      atomic.Int64 // connections being served
	unproven   transport.PeerLimit
	refusals   lograte.Limited // what a peer causes at will (refusals, bad messages), logged at most once a second
	d          *transport.Dispatcher[TaskPair, Task]
	mu         sync.Mutex
	nextJob    uint64
	jobs       map[uint64]*fjob
	byRef      map[string]*fjob // the last job of each laboro id
	past       []*fjob          // the jobs that ended and are kept, oldest first
	endedTasks int              // their tasks
	workers    map[*fworker]bool
	nextWorker int
}

// fjob is a job at the Foreman. Its fields are guarded by the Foreman's
// mutex.
type fjob struct {
	ref     string // the laboro job's id
	desc    JobDescription
	tickets []*transport.Ticket[TaskPair, Task] // task n's is tickets[n-1]
	tasks   []ftask                             // task n's is tasks[n-1]
	left    int                                 // tasks not yet ended
	done    chan struct{}                       // closed once left is 0
	cause   error                               // why it was cancelled, if it was
	// journaled is set once the journal has the cancellation, which
	// stands for every task cancelled after it.
	journaled bool
}

// ftask is what the Foreman records of a task beyond its ticket.
type ftask struct {
	state    TaskState // TaskPending until it has ended: the ticket tells the rest
	attempts int32     // once the job has ended (and its tickets are gone)
	status   string    // the worker's word on it, or why it was cancelled
	worker   string    // the worker whose outcome was recorded, or that last had it
}

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
		f.byRef = map[string]*fjob{}
		f.workers = map[*fworker]bool{}
		f.d = transport.NewDispatcher[TaskPair, Task](transport.Config{Grace: f.grace(), Logger: f.Logger})
		f.d.OnSettle(f.settled)
		f.unproven.Max = cmp.Or(f.MaxUnproven, DefaultMaxUnproven)
	})
}

func (f *Foreman) grace() time.Duration {
	switch {
	case f.Grace < 0:
		return 0
	case f.Grace == 0:
		return DefaultGrace
	}
	return f.Grace
}

// Validate refuses a job that is not a fuq job.
func (f *Foreman) Validate(job laboro.Job) error {
	d, _, ok := description(job)
	switch {
	case !ok:
		return errors.New("fuq: a job's Payload is its JobDescription; see NewJob")
	case d.NumTasks < 1:
		return errors.New("fuq: a job needs at least one task")
	case d.NumTasks > cmp.Or(f.MaxTasks, DefaultMaxTasks):
		return &TaskLimitError{Tasks: d.NumTasks, Max: cmp.Or(f.MaxTasks, DefaultMaxTasks)}
	case d.Command == "":
		return errors.New("fuq: a job needs a command")
	}
	return checkName(d.Name)
}

// checkName refuses a job name that would put its tasks' logs,
// <LoggingDir>/<name>_<task>.log, elsewhere than in LoggingDir.
func checkName(name string) error {
	if strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("fuq: job name %q: it names the log files, in the logging directory, and cannot hold a / or a NUL", name)
	}
	return nil
}

// description returns a job's JobDescription and, for a ResumedJob, the
// tasks that had ended.
func description(job laboro.Job) (JobDescription, *ResumedJob, bool) {
	switch p := job.Payload.(type) {
	case JobDescription:
		return p, nil, true
	case ResumedJob:
		return p.JobDescription, &p, true
	}
	return JobDescription{}, nil, false
}

// Run runs the job's tasks on the workers and waits for all of them. The
// job succeeds when every task succeeded. When ctx ends (Executor.Cancel,
// a Job.Timeout applied by the Executor, Close), its tasks still in line
// leave it and its running ones are cancelled on their workers (CANCEL),
// and Run returns at once with the status laboro.Interruption gives.
func (f *Foreman) Run(ctx context.Context, job laboro.Job) laboro.Result {
	f.init()
	res := laboro.Result{ID: job.ID, ExitCode: -1, Started: time.Now()}
	if err := f.Validate(job); err != nil {
		res.Status, res.Err, res.Ended = laboro.StatusFailed, err, time.Now()
		return res
	}
	d, resumed, _ := description(job)
	j, err := f.add(ctx, job.ID, d, resumed)
	if err != nil {
		res.Status, res.Err, res.Ended = laboro.StatusFailed, err, time.Now()
		return res
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		st, cause := laboro.Interruption(ctx)
		f.cancel(j, st, cause)
		<-j.done // at once: the abandoned tasks are settled by now
	}
	res.Ended = time.Now()
	f.mu.Lock()
	failed, cancelled := 0, 0
	firstN := 0 // the first task that failed
	for i, t := range j.tasks {
		switch t.state {
		case TaskDone:
		case TaskCancelled:
			cancelled++
		default:
			failed++
			if firstN == 0 {
				firstN = i + 1
			}
		}
	}
	switch {
	case cancelled > 0:
		res.Status, res.Err = laboro.StatusKilled, j.cause
		if st, cause := laboro.Interruption(ctx); st != 0 {
			res.Status, res.Err = st, cause
		}
	case failed > 0:
		res.Status = laboro.StatusFailed
	default:
		res.Status, res.ExitCode = laboro.StatusSucceeded, 0
	}
	var why string
	if res.Status == laboro.StatusFailed {
		why = cmp.Or(j.tasks[firstN-1].status, "no word from the worker")
	}
	d = j.desc
	f.mu.Unlock()
	if res.Status == laboro.StatusFailed {
		// The first failure in the worker's words: what the job's log
		// line and its Result say of why (status -tasks lists them all),
		// where its standard output and error are, and their end when
		// the log is readable here (the UPDATE carries none: the
		// reference's peers know no such field). Read outside f.mu: the
		// logging directory may be slow to answer. A job of many
		// processes has no exit status of its own: ExitCode stays -1.
		log, tail := TaskLog(d, firstN)
		if log == "" {
			log = filepath.Join(d.LoggingDir, fmt.Sprintf("%s_%d*.log", d.Name, firstN)) + ", not readable on the foreman's host"
		}
		res.Err = fmt.Errorf("fuq: %d of %d tasks of job %d failed; the first, task %d (%s %d): %s (its standard output and error: %s)",
			failed, len(j.tasks), d.JobId, firstN, d.Command, firstN, why, log)
		res.Stderr = tail
	}
	return res
}

// add registers a job and puts its tasks in the Dispatcher's line; those
// of a resumed job that had ended are recorded as they ended, and do not
// run again.
func (f *Foreman) add(ctx context.Context, ref string, d JobDescription, resumed *ResumedJob) (*fjob, error) {
	f.mu.Lock()
	if resumed != nil && d.JobId != 0 {
		f.nextJob = max(f.nextJob, d.JobId)
	} else {
		f.nextJob++
		d.JobId = f.nextJob
	}
	d.Status = JobRunning
	j := &fjob{ref: ref, desc: d, left: d.NumTasks, done: make(chan struct{}), tasks: make([]ftask, d.NumTasks)}
	j.tickets = make([]*transport.Ticket[TaskPair, Task], d.NumTasks)
	if resumed != nil {
		for _, t := range resumed.Ended {
			if t.Task >= 1 && t.Task <= d.NumTasks && t.State.final() && !j.tasks[t.Task-1].state.final() {
				j.tasks[t.Task-1] = ftask{state: t.State, status: t.Status, worker: t.Worker}
				j.left--
			}
		}
	}
	// Add settles nothing, so it may be called with f.mu held (the
	// Dispatcher's OnSettle takes f.mu): the job is whole before anyone
	// looks at it.
	keys, values := make([]TaskPair, 0, j.left), make([]Task, 0, j.left)
	for n := 1; n <= d.NumTasks; n++ {
		if !j.tasks[n-1].state.final() {
			keys = append(keys, TaskPair{JobId: d.JobId, Task: n})
			values = append(values, Task{Task: n, JobDescription: d})
		}
	}
	ts, err := f.d.AddAll(ctx, keys, values)
	for i, t := range ts {
		j.tickets[keys[i].Task-1] = t
	}
	if err == nil && resumed != nil {
		// Some of its tasks may be running on workers, or have ended there
		// while this foreman was away, their UPDATEs kept: they wait Grace
		// for those workers to come back and say so (HELLO, UPDATE),
		// rather than run again elsewhere at once.
		f.d.Await("the foreman before its restart", keys, errRestarted)
	}
	endedBefore := d.NumTasks - j.left
	if err == nil {
		if resumed == nil {
			// Before anyone can find the job: a Cancel's line must come
			// after this one, or a replay would not know its job.
			f.Journal.job(ref, d)
		}
		f.jobs[d.JobId] = j
		if old := f.byRef[ref]; old == nil || old.desc.JobId < d.JobId {
			f.byRef[ref] = j
		}
		if j.left == 0 {
			j.desc.Status = JobFinished
			close(j.done)
			f.retire(j)
		}
	}
	f.mu.Unlock()
	if err != nil { // not in f.jobs: settled ignores these tickets
		f.d.AbandonAll(j.live(), laboro.Result{Status: laboro.StatusFailed, ExitCode: -1, Err: err})
		return nil, err
	}
	f.Logger.Info("job queued", zap.Uint64("job", d.JobId), zap.String("name", d.Name), zap.Int("tasks", d.NumTasks),
		zap.Int("ended before", endedBefore))
	return j, nil
}

// live returns the tickets of j's tasks that had not ended when it was
// added (a resumed job's others have none).
func (j *fjob) live() []*transport.Ticket[TaskPair, Task] {
	ts := make([]*transport.Ticket[TaskPair, Task], 0, len(j.tickets))
	for _, t := range j.tickets {
		if t != nil {
			ts = append(ts, t)
		}
	}
	return ts
}

// Cancel cancels a job: its pending tasks are dropped and its running ones
// cancelled on their workers; its Run returns StatusKilled with
// ErrJobCancelled. Cancelling a job that has ended does nothing; a job
// the Foreman never had is an error.
func (f *Foreman) Cancel(jobID uint64) error {
	f.init()
	f.mu.Lock()
	j := f.jobs[jobID]
	f.mu.Unlock()
	if j == nil {
		return fmt.Errorf("fuq: no job %d", jobID)
	}
	f.cancel(j, laboro.StatusKilled, ErrJobCancelled)
	return nil
}

// cancel ends every task of j that has not ended: the Dispatcher drops
// those in line and has the workers of the others told (CANCEL). f.mu is
// not held: the Dispatcher reports the settled tasks to settled.
func (f *Foreman) cancel(j *fjob, st laboro.Status, cause error) {
	f.mu.Lock()
	if j.left == 0 {
		f.mu.Unlock()
		return
	}
	if j.cause == nil {
		j.cause = cause
	}
	if !j.journaled {
		f.Journal.cancel(j.desc.JobId, cancelStatus(cause))
		j.journaled = true
	}
	tickets := j.live()
	f.mu.Unlock()
	f.d.AbandonAll(tickets, laboro.Result{Status: st, ExitCode: -1, Err: cause, Ended: time.Now()})
}

// settled hears from the Dispatcher of every task that has ended. The
// outcomes of workers are recorded by the connection that delivered them
// (see fworker.complete), which knows the worker; here are the others:
// tasks abandoned, by Cancel or because their Run's context ended. (No
// MaxAttempts is set, so the Dispatcher fails no task of its own.)
func (f *Foreman) settled(t *transport.Ticket[TaskPair, Task]) {
	res, _ := t.Result()
	if res.Status == laboro.StatusSucceeded || res.Status == laboro.StatusFailed {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[t.Key.JobId]
	if j == nil {
		return // a job whose Add failed
	}
	f.ended(j, t.Key.Task, TaskCancelled, cancelStatus(res.Err), "")
}

// cancelStatus is the status of a task cancelled for err.
func cancelStatus(err error) string {
	if err == nil {
		return "cancelled"
	}
	return err.Error()
}

// ended records the end of task n of j. f.mu is held.
func (f *Foreman) ended(j *fjob, n int, state TaskState, status, worker string) {
	t := &j.tasks[n-1]
	if t.state.final() {
		return
	}
	t.state, t.status = state, status
	if worker != "" {
		t.worker = worker
	}
	if state != TaskCancelled || !j.journaled {
		f.Journal.task(j.desc.JobId, n, state, status, t.worker)
	}
	j.left--
	if j.left == 0 {
		j.desc.Status = JobFinished
		if j.cause != nil {
			j.desc.Status = JobCancelled
		}
		close(j.done)
		f.retire(j)
	}
}

// endedBounds returns MaxEndedTasks and MaxEndedJobs, or their defaults.
func (f *Foreman) endedBounds() (tasks, jobs int) {
	return cmp.Or(f.MaxEndedTasks, DefaultMaxEndedTasks), cmp.Or(f.MaxEndedJobs, DefaultMaxEndedJobs)
}

// overBounds reports whether ended jobs holding tasks tasks in all are
// more than the bounds allow; the last one to end is kept whatever its
// size, so one job never is.
func overBounds(tasks, jobs, maxTasks, maxJobs int) bool {
	return jobs > 1 && (tasks > maxTasks || jobs > maxJobs)
}

// retire keeps j, which has ended, among the ended jobs, without its
// tickets (the bulk of a job's memory), and forgets the oldest ended jobs
// past the bounds. f.mu is held.
func (f *Foreman) retire(j *fjob) {
	for i, t := range j.tickets {
		if t != nil {
			j.tasks[i].attempts = int32(min(t.Attempts(), math.MaxInt32))
		}
	}
	j.tickets = nil
	f.past = append(f.past, j)
	f.endedTasks += len(j.tasks)
	maxTasks, maxJobs := f.endedBounds()
	for overBounds(f.endedTasks, len(f.past), maxTasks, maxJobs) {
		old := f.past[0]
		f.past[0] = nil
		f.past = f.past[1:]
		f.endedTasks -= len(old.tasks)
		if f.jobs[old.desc.JobId] == old {
			delete(f.jobs, old.desc.JobId)
		}
		if f.byRef[old.ref] == old {
			delete(f.byRef, old.ref)
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
		w.send(Message{Header: Header{Type: TypeStop, Arg0: n}})
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
func (f *Foreman) JobByRef(ref string) (JobInfo, bool) { return f.jobByRefTasks(ref, nil, -1) }

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

// info returns the state of j. f.mu is held.
func (j *fjob) info() JobInfo { return j.summary(nil, -1) }

// summary returns the state of j with, in Tasks, the tasks that keep
// accepts (nil: every task), at most max of them (negative: no bound);
// Omitted counts those accepted past max. f.mu is held.
func (j *fjob) summary(keep func(TaskInfo) bool, max int) JobInfo {
	info := JobInfo{JobDescription: j.desc, Ref: j.ref}
	if keep == nil && max < 0 {
		info.Tasks = make([]TaskInfo, 0, len(j.tasks))
	}
	for i, t := range j.tasks {
		var tk *transport.Ticket[TaskPair, Task]
		if j.tickets != nil {
			tk = j.tickets[i]
		}
		ti := TaskInfo{Task: i + 1, State: t.state, Status: t.status, Worker: t.worker, Attempts: int(t.attempts)}
		if tk != nil {
			ti.Attempts = tk.Attempts()
		}
		if !t.state.final() && tk != nil {
			ti.Worker = tk.Holder()
			if ti.Worker != "" {
				ti.State = TaskRunning
			}
		}
		info.count(ti)
		info.list(ti, keep, max)
	}
	return info
}

// list adds t to Tasks if keep accepts it (nil: every task) and Tasks
// holds fewer than max (negative: no bound); one accepted past max counts
// in Omitted.
func (info *JobInfo) list(t TaskInfo, keep func(TaskInfo) bool, max int) {
	switch {
	case keep != nil && !keep(t):
	case max < 0 || len(info.Tasks) < max:
		info.Tasks = append(info.Tasks, t)
	default:
		info.Omitted++
	}
}

// count counts t in its state's total.
func (info *JobInfo) count(t TaskInfo) {
	switch t.State {
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

// jobByRefTasks is JobByRef with the tasks listed as summary says.
func (f *Foreman) jobByRefTasks(ref string, keep func(TaskInfo) bool, max int) (JobInfo, bool) {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.byRef[ref]
	if j == nil {
		return JobInfo{}, false
	}
	return j.summary(keep, max), true
}

// Workers returns the connected workers.
func (f *Foreman) Workers() []WorkerInfo {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	var infos []WorkerInfo
	for w := range f.workers {
		held := w.held()
		infos = append(infos, WorkerInfo{ID: w.id, Addr: w.addr, Node: w.node, Free: max(0, w.procs-held), Running: held})
	}
	sort.Slice(infos, func(a, b int) bool { return infos[a].ID < infos[b].ID })
	return infos
}

// Serve accepts workers on ln until ctx ends, then closes ln and every
// connection and waits for the goroutines it started. It returns ctx.Err()
// or the listener's error.
func (f *Foreman) Serve(ctx context.Context, ln net.Listener) error {
	f.init()
	return transport.Serve(ctx, ln, f.serveConn)
}
