package workerserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// DefaultMaxBody is the largest request body a Master reads unless told.
const DefaultMaxBody = 1 << 20

// DefaultLockTimeout is how long Open waits for another process's lock on
// the table's file unless told.
const DefaultLockTimeout = time.Second

// Errors of the master's own operations; match them with errors.Is.
var (
	// ErrUnknownJob: no job with that id is in the table.
	ErrUnknownJob = errors.New("workerserver: unknown job")
	// ErrJobFinished: the job already ended (Done, Failed or Cancelled).
	ErrJobFinished = errors.New("workerserver: job already finished")
	// ErrMasterClosed: the master is not open. A Run interrupted by Close
	// returns StatusKilled with an error matching both it and laboro.ErrKilled;
	// its job stays in the table as it was, for the next Open.
	ErrMasterClosed = errors.New("workerserver: master closed")
)

// JobSpec is what a worker needs to run a job: the code that runs it (one
// of the WorkerCode codes a worker announces) and its parameters, spread
// into the JobOrder the worker receives. It is a laboro.Job's Meta; see
// NewJob.
type JobSpec struct {
	Worker string                     `json:"worker"`
	Params map[string]json.RawMessage `json:"params,omitempty"`
}

// NewJob returns the laboro.Job of a job for workers of code worker, with
// params (the members of a JSON object; "jobId" and "worker" are taken).
// id "" lets the Executor assign one.
func NewJob(id, worker string, params map[string]json.RawMessage) laboro.Job {
	return laboro.Job{ID: id, Meta: JobSpec{Worker: worker, Params: params}}
}

// JobRecord is a job in the master's table.
type JobRecord struct {
	ID     string                     `json:"id"`
	Worker string                     `json:"worker"`
	Params map[string]json.RawMessage `json:"params,omitempty"`
	// Status is Queued, Processing, Done, Failed or Cancelled. Once final it
	// never changes.
	Status string `json:"status"`
	// Server is the worker the job was handed to; "" while Queued.
	Server string `json:"server,omitempty"`
	// Data is the data of the status that set Status.
	Data json.RawMessage `json:"data,omitempty"`
	// History is every status recorded for the job, in order of arrival:
	// the master's own Queued (at submission), Processing (at hand-out,
	// without data) and Cancelled (of a job no worker had), and every
	// status a worker sent, including those that changed nothing (a
	// duplicate replayed from a worker's cache, a status after the final
	// one, a status from a server the job was not handed to).
	History []StatusEvent `json:"history,omitempty"`
	// Created is when the job entered the table; Updated when Status or
	// Data last changed.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// StatusEvent is one status recorded for a job or a server.
type StatusEvent struct {
	Status string          `json:"status"`
	Data   json.RawMessage `json:"data,omitempty"`
	At     time.Time       `json:"at"`
	// Server is the worker that sent it; "" for the master's own.
	Server string `json:"server,omitempty"`
}

// ServerRecord is a worker as the master last heard of it.
type ServerRecord struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Data   json.RawMessage `json:"data,omitempty"`
	// Startup is the data of the server's last Online status: the worker
	// codes it runs. nil until it has been Online.
	Startup *Startup `json:"startup,omitempty"`
	// History is every status the server sent, in order of arrival.
	History []StatusEvent `json:"history,omitempty"`
	Updated time.Time     `json:"updated"`
}

// JobError is how a job that a worker failed or cancelled ended: the
// detail from the data of its Failed or Cancelled status.
type JobError struct {
	JobID  string
	Status string // Failed or Cancelled
	Server string // "" when the master cancelled it before any worker had it
	Detail ErrorDetail
}

func (e *JobError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "workerserver: job %q %s", e.JobID, strings.ToLower(e.Status))
	if e.Server != "" {
		fmt.Fprintf(&b, " on %q", e.Server)
	}
	if e.Detail.Name != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail.Name)
	}
	if e.Detail.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail.Message)
	}
	return b.String()
}

// Master is the master side of worker-server: an HTTP server (Handler) that
// workers report their statuses and their jobs' statuses to and ping for
// jobs, and a laboro.Runner whose Run queues a job (see NewJob), lets a
// worker that pings take it, and returns when the worker reports it Done,
// Failed or Cancelled. Use it as an Executor's runner: the Executor's
// buffer, Stop, Queued and concurrency then apply, and only jobs whose Run
// is waiting are handed out.
//
// The job table (every job with its history of statuses, and every
// server's) is kept in a bbolt file, one update transaction (synced on
// commit) per change, so that a master reopened on the same file (Open)
// has it whole: Unfinished lists what to submit again, and workers'
// replayed statuses are accepted.
//
// Workers authenticate every request with their serverId and
// serverPassword (Servers). The user API on the same Handler (GET
// /api/jobs, GET /api/jobs/{id}, POST /api/jobs/{id}/cancel, POST /api/jobs
// with Submit, GET /api/servers, GET /api/servers/{id}) asks for no
// password: serve the Handler on a trusted address, or put the user API
// behind your own authentication.
//
// Set the fields, then Open; a Master is safe for concurrent use and must
// not be copied.
type Master struct {
	// Paths are the worker routes; a zero field means its DefaultPaths one.
	Paths Paths
	// Servers maps each worker's serverId to its serverPassword; a worker
	// must send both.
	Servers map[string]string
	// MaxBody is the largest request body read; 0 means DefaultMaxBody.
	// Beyond it a request is refused with 413. Forms are also bounded by
	// net/http's own 10 MB.
	MaxBody int64
	// OutputDir receives the Done data of jobs, as Result.Output; "" means
	// os.TempDir.
	OutputDir string
	// Logger; nil means none.
	Logger *zap.Logger
	// LockTimeout bounds Open's wait for another process's lock on the
	// file; 0 means DefaultLockTimeout.
	LockTimeout time.Duration
	// Submit, if set, serves POST /api/jobs: it is given NewJob(id, worker,
	// params) from the request and should submit it to the Executor whose
	// runner this Master is. An id the table already has is refused first;
	// an empty id is replaced with a random one.
	Submit func(laboro.Job) error

	mu      sync.RWMutex
	db      *bolt.DB           // nil while not open
	waiters map[string]*waiter // jobs whose Run is waiting, by id
}

// waiter is a Run waiting for its job's final status.
type waiter struct {
	done  chan struct{} // closed by wake
	woken bool
}

func (w *waiter) wake() {
	if !w.woken {
		w.woken = true
		close(w.done)
	}
}

var (
	_ laboro.Runner    = (*Master)(nil)
	_ laboro.Validator = (*Master)(nil)
)

// Open opens the job table at path, creating the file if needed, and
// waits at most LockTimeout for another process that holds it. A Master
// closed with Close may be opened again.
func (m *Master) Open(path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.db != nil {
		return errors.New("workerserver: master already open")
	}
	timeout := m.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	db, err := openDB(path, timeout)
	if err != nil {
		return err
	}
	m.db, m.waiters = db, make(map[string]*waiter)
	return nil
}

// Close closes the table. Waiting Runs return StatusKilled with
// ErrMasterClosed, leaving their jobs as they are in the table; the
// Handler answers 503 until the next Open.
//
// To keep unfinished jobs for the next Open, close the Master before the
// Executor: the Executor's Close ends its Runs' contexts, which cancels
// their jobs (see Run).
func (m *Master) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.db == nil {
		return nil
	}
	for _, w := range m.waiters {
		w.wake()
	}
	m.waiters = nil
	db := m.db
	m.db = nil
	return db.Close()
}

func (m *Master) logger() *zap.Logger {
	if m.Logger == nil {
		return zap.NewNop()
	}
	return m.Logger
}

func (m *Master) paths() Paths {
	p := m.Paths
	if p.Status == "" {
		p.Status = DefaultPaths.Status
	}
	if p.Job == "" {
		p.Job = DefaultPaths.Job
	}
	if p.Ping == "" {
		p.Ping = DefaultPaths.Ping
	}
	return p
}

func (m *Master) maxBody() int64 {
	if m.MaxBody <= 0 {
		return DefaultMaxBody
	}
	return m.MaxBody
}

func jobSpec(job laboro.Job) (JobSpec, error) {
	var spec JobSpec
	switch s := job.Meta.(type) {
	case JobSpec:
		spec = s
	case *JobSpec:
		if s == nil {
			return spec, errors.New("workerserver: a job's Meta is its JobSpec; see NewJob")
		}
		spec = *s
	default:
		return spec, errors.New("workerserver: a job's Meta is its JobSpec; see NewJob")
	}
	if spec.Worker == "" {
		return spec, errors.New("workerserver: a job needs a worker code")
	}
	for k, v := range spec.Params {
		if k == "jobId" || k == "worker" {
			return spec, fmt.Errorf("workerserver: parameter %q is reserved", k)
		}
		if !json.Valid(v) {
			return spec, fmt.Errorf("workerserver: parameter %q is not JSON", k)
		}
	}
	return spec, nil
}

// Validate refuses a job whose Meta is not a JobSpec (or *JobSpec) with a
// worker code and JSON parameters other than "jobId" and "worker".
func (m *Master) Validate(job laboro.Job) error {
	_, err := jobSpec(job)
	return err
}

// Run queues job under its id (which it needs: an Executor assigns one) and
// returns when a worker has ended it: Done gives StatusSucceeded with the
// Done data as Output (a file in OutputDir; the consumer closes it),
// Failed gives StatusFailed and Cancelled StatusKilled, both with a
// *JobError carrying the worker's error. A job the table already has (a
// restarted master submitting Unfinished again) is kept as it is; if it
// has already ended, Run returns that end at once.
//
// If ctx ends first (or job.Timeout passes), a job still Queued becomes
// Cancelled, and a job at a worker is cancelled there through the worker's
// next ping; Run returns StatusKilled (StatusTimedOut for the timeout) at
// once.
func (m *Master) Run(ctx context.Context, job laboro.Job) laboro.Result {
	res := laboro.Result{ID: job.ID, ExitCode: -1, Started: time.Now()}
	fail := func(err error) laboro.Result {
		res.Status, res.Err, res.Ended = laboro.StatusFailed, err, time.Now()
		return res
	}
	spec, err := jobSpec(job)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", laboro.ErrInvalidJob, err))
	}
	if job.ID == "" {
		return fail(fmt.Errorf("%w: workerserver: a job needs an id", laboro.ErrInvalidJob))
	}
	if job.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, job.Timeout, laboro.ErrTimeout)
		defer cancel()
	}

	w, rec, err := m.enqueue(job.ID, spec)
	if err != nil {
		if errors.Is(err, ErrMasterClosed) {
			res.Status, res.Err, res.Ended = laboro.StatusKilled, fmt.Errorf("%w: %w", laboro.ErrKilled, err), time.Now()
			return res
		}
		return fail(err)
	}
	if w != nil {
		select {
		case <-w.done:
		case <-ctx.Done():
		}
		rec, err = m.leave(ctx, job.ID, w)
		if err != nil {
			if errors.Is(err, ErrMasterClosed) {
				res.Status, res.Err, res.Ended = laboro.StatusKilled, fmt.Errorf("%w: %w", laboro.ErrKilled, err), time.Now()
				return res
			}
			return fail(err)
		}
	}
	if rec == nil || !Final(rec.Status) {
		res.Status, res.Err = interruption(ctx)
		res.Ended = time.Now()
		return res
	}
	return m.result(res, rec)
}

// interruption says how a Run whose ctx ended ends.
func interruption(ctx context.Context) (laboro.Status, error) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, laboro.ErrTimeout):
		return laboro.StatusTimedOut, laboro.ErrTimeout
	case errors.Is(cause, laboro.ErrKilled):
		return laboro.StatusKilled, laboro.ErrKilled
	case cause == nil:
		return laboro.StatusKilled, laboro.ErrKilled
	}
	return laboro.StatusKilled, fmt.Errorf("%w: %w", laboro.ErrKilled, cause)
}

// enqueue puts the job in the table unless it is there, and registers its
// Run as waiting. It returns the record instead, and no waiter, for a job
// that has already ended.
func (m *Master) enqueue(id string, spec JobSpec) (*waiter, *JobRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.db == nil {
		return nil, nil, ErrMasterClosed
	}
	if _, dup := m.waiters[id]; dup {
		return nil, nil, fmt.Errorf("%w: workerserver: job %q is already running", laboro.ErrDuplicateID, id)
	}
	var final *JobRecord
	err := m.db.Update(func(tx *bolt.Tx) error {
		row, err := getJob(tx, id)
		if err != nil {
			return err
		}
		if row != nil {
			if Final(row.Status) {
				final = &row.JobRecord
			}
			return nil
		}
		seq, err := newJobSeq(tx)
		if err != nil {
			return err
		}
		now := time.Now()
		row = &jobRow{Seq: seq, JobRecord: JobRecord{
			ID: id, Worker: spec.Worker, Params: spec.Params,
			Status: JobQueued, Created: now, Updated: now,
		}}
		if err := putJob(tx, row); err != nil {
			return err
		}
		return appendEvent(tx, bucketJobHistory, id, StatusEvent{Status: JobQueued, At: now})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("workerserver: queue job %q: %w", id, err)
	}
	if final != nil {
		return nil, final, nil
	}
	w := &waiter{done: make(chan struct{})}
	m.waiters[id] = w
	return w, nil, nil
}

// leave unregisters a Run that was woken or whose ctx ended, and returns
// its job's record. If the job has not ended, ctx has: a Queued job is
// cancelled, a Processing one is to be cancelled by its worker.
func (m *Master) leave(ctx context.Context, id string, w *waiter) (*JobRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.db == nil {
		return nil, ErrMasterClosed
	}
	if m.waiters[id] == w {
		delete(m.waiters, id)
	}
	var rec *JobRecord
	err := m.db.Update(func(tx *bolt.Tx) error {
		row, err := getJob(tx, id)
		if err != nil || row == nil {
			return err
		}
		r := row.JobRecord // as it was: cancelQueued changes row
		rec = &r
		if Final(row.Status) || ctx.Err() == nil {
			return nil
		}
		_, cause := interruption(ctx)
		switch row.Status {
		case JobQueued:
			return cancelQueued(tx, row, cause.Error())
		case JobProcessing:
			return putCancel(tx, row.Server, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("workerserver: job %q: %w", id, err)
	}
	return rec, nil
}

// cancelQueued makes a job that no worker has Cancelled.
func cancelQueued(tx *bolt.Tx, row *jobRow, why string) error {
	data, err := json.Marshal(ErrorData{Error: ErrorDetail{Name: "Cancelled", Message: why}})
	if err != nil {
		return err
	}
	now := time.Now()
	row.Status, row.Data, row.Updated = JobCancelled, data, now
	if err := putJob(tx, row); err != nil {
		return err
	}
	return appendEvent(tx, bucketJobHistory, row.ID, StatusEvent{Status: JobCancelled, Data: data, At: now})
}

// result completes res from a job's final record.
func (m *Master) result(res laboro.Result, rec *JobRecord) laboro.Result {
	res.Ended = time.Now()
	switch rec.Status {
	case JobDone:
		out, err := m.output(rec.Data)
		if err != nil {
			res.Status, res.Err = laboro.StatusFailed, fmt.Errorf("workerserver: job %q done, but its data could not be kept: %w", rec.ID, err)
			return res
		}
		res.Status, res.Output = laboro.StatusSucceeded, out
		return res
	}
	jerr := &JobError{JobID: rec.ID, Status: rec.Status, Server: rec.Server}
	var ed ErrorData
	if json.Unmarshal(rec.Data, &ed) == nil {
		jerr.Detail = ed.Error
	}
	if jerr.Detail.Message == "" && jerr.Detail.Name == "" && len(rec.Data) > 0 {
		jerr.Detail.Message = string(rec.Data)
	}
	if rec.Status == JobCancelled {
		res.Status, res.Err = laboro.StatusKilled, fmt.Errorf("%w: %w", laboro.ErrKilled, jerr)
	} else {
		res.Status, res.Err = laboro.StatusFailed, jerr
	}
	return res
}

// output keeps a job's Done data in a file.
func (m *Master) output(data []byte) (*laboro.Output, error) {
	f, err := os.CreateTemp(m.OutputDir, "workerserver-*.json")
	if err != nil {
		return nil, err
	}
	n, err := f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, err
	}
	return laboro.NewOutput(f.Name(), int64(n)), nil
}

// Cancel cancels a job: one still Queued becomes Cancelled at once (its Run
// returns StatusKilled); one at a worker is cancelled through that
// worker's next ping, and ends when the worker reports it Cancelled (or
// otherwise ended). It returns an error matching ErrUnknownJob or
// ErrJobFinished for a job it cannot cancel.
func (m *Master) Cancel(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.db == nil {
		return ErrMasterClosed
	}
	var woke bool
	err := m.db.Update(func(tx *bolt.Tx) error {
		row, err := getJob(tx, id)
		switch {
		case err != nil:
			return err
		case row == nil:
			return fmt.Errorf("%w: %q", ErrUnknownJob, id)
		case Final(row.Status):
			return fmt.Errorf("%w: %q is %s", ErrJobFinished, id, row.Status)
		case row.Status == JobQueued:
			woke = true
			return cancelQueued(tx, row, "cancelled on the master")
		}
		return putCancel(tx, row.Server, id)
	})
	if err != nil {
		return err
	}
	if w := m.waiters[id]; woke && w != nil {
		w.wake()
	}
	m.logger().Info("job cancelled", zap.String("job", id), zap.Bool("atWorker", !woke))
	return nil
}

// Job returns a job's record, with its history.
func (m *Master) Job(id string) (JobRecord, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.db == nil {
		return JobRecord{}, false
	}
	var rec JobRecord
	var ok bool
	err := m.db.View(func(tx *bolt.Tx) error {
		row, err := getJob(tx, id)
		if err != nil || row == nil {
			return err
		}
		rec, ok = row.JobRecord, true
		rec.History, err = history(tx, bucketJobHistory, id)
		return err
	})
	if err != nil {
		m.logger().Error("reading the job table", zap.Error(err))
		return JobRecord{}, false
	}
	return rec, ok
}

// Jobs returns every job in the table, with its history, in order of
// submission.
func (m *Master) Jobs() []JobRecord { return m.jobs(nil) }

// Unfinished returns the jobs that have not ended (Queued or Processing),
// in order of submission: what a restarted master submits again.
func (m *Master) Unfinished() []JobRecord {
	return m.jobs(func(r *JobRecord) bool { return !Final(r.Status) })
}

func (m *Master) jobs(keep func(*JobRecord) bool) []JobRecord {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.db == nil {
		return nil
	}
	var recs []JobRecord
	err := m.db.View(func(tx *bolt.Tx) (err error) {
		recs, err = allJobs(tx, true)
		return err
	})
	if err != nil {
		m.logger().Error("reading the job table", zap.Error(err))
		return nil
	}
	if keep != nil {
		recs = slices.DeleteFunc(recs, func(r JobRecord) bool { return !keep(&r) })
	}
	return recs
}

// Server returns what the master knows of a worker, with its history.
func (m *Master) Server(id string) (ServerRecord, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.db == nil {
		return ServerRecord{}, false
	}
	var rec *ServerRecord
	err := m.db.View(func(tx *bolt.Tx) (err error) {
		if rec, err = getServer(tx, id); err != nil || rec == nil {
			return err
		}
		rec.History, err = history(tx, bucketServerHistory, id)
		return err
	})
	if err != nil || rec == nil {
		if err != nil {
			m.logger().Error("reading the server table", zap.Error(err))
		}
		return ServerRecord{}, false
	}
	return *rec, true
}

// ServerRecords returns every worker the master has heard from, by id.
func (m *Master) ServerRecords() []ServerRecord {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.db == nil {
		return nil
	}
	var recs []ServerRecord
	err := m.db.View(func(tx *bolt.Tx) (err error) {
		recs, err = allServers(tx)
		return err
	})
	if err != nil {
		m.logger().Error("reading the server table", zap.Error(err))
		return nil
	}
	return recs
}

// Handler returns the master's HTTP handler: the worker routes (POST
// Paths.Status+serverId, Paths.Job+jobId, Paths.Ping+serverId) and the user
// API (see Master). Every answer is a JSON Answer.
//
// A worker's POST is refused, changing nothing, with 405 unless it is a
// POST, 413 beyond MaxBody (read no further), 400 and formErrors for a
// body that is not a form, 401 for a wrong serverId or serverPassword
// (compared in constant time), 403 when the serverId of the form is not
// the one of the path, 404 for an unknown job, 400 and formErrors for an
// unknown status or a data field that is not JSON (or, for Online, not a
// Startup).
//
// A ping hands out the oldest Queued job whose Run is waiting and whose
// worker code the server announced when it went Online (any code if it
// announced none; no job while the server is Stopping or Offline),
// recording it Processing at that server before answering, and carries
// the ids of the server's jobs cancelled since its last ping.
//
// A job's status is always appended to its History, and is a success; it
// changes the job's Status and Data only if the job is at that server and
// has not ended, so a final status is never replaced and a worker's
// replayed cache drains. A server's jobs stay assigned to it through
// Offline and Reconnecting.
func (m *Master) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/jobs", m.apiJobs)
	mux.HandleFunc("POST /api/jobs", m.apiSubmit)
	mux.HandleFunc("GET /api/jobs/{id}", m.apiJob)
	mux.HandleFunc("POST /api/jobs/{id}/cancel", m.apiCancel)
	mux.HandleFunc("GET /api/servers", m.apiServers)
	mux.HandleFunc("GET /api/servers/{id}", m.apiServer)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not found")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := m.paths()
		path := r.URL.EscapedPath()
		switch {
		case strings.HasPrefix(path, p.Status):
			m.worker(w, r, path[len(p.Status):], m.serverStatus)
		case strings.HasPrefix(path, p.Job):
			m.worker(w, r, path[len(p.Job):], m.jobStatus)
		case strings.HasPrefix(path, p.Ping):
			m.worker(w, r, path[len(p.Ping):], m.ping)
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

func writeAnswer(w http.ResponseWriter, code int, a Answer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(a)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeAnswer(w, code, Answer{Error: msg})
}

func writeFormErrors(w http.ResponseWriter, errs map[string]string) {
	writeAnswer(w, http.StatusBadRequest, Answer{FormErrors: errs})
}

func writeData(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeAnswer(w, http.StatusOK, Answer{Data: b})
}

// workerRequest is an authenticated worker's POST.
type workerRequest struct {
	id       string // from the path: the server's or the job's
	serverID string
	status   string
	data     json.RawMessage // nil when the form had none
}

// worker reads and authenticates a worker's POST, then calls handle.
func (m *Master) worker(w http.ResponseWriter, r *http.Request, rawID string, handle func(http.ResponseWriter, *workerRequest)) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "method not allowed: use POST")
		return
	}
	id, err := url.PathUnescape(rawID)
	if err != nil || id == "" {
		writeError(w, http.StatusNotFound, "not found")
		return
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/x-www-form-urlencoded" {
		writeFormErrors(w, map[string]string{"form": "the body must be application/x-www-form-urlencoded"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, m.maxBody())
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) || err.Error() == "http: POST too large" {
			writeError(w, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		writeFormErrors(w, map[string]string{"form": err.Error()})
		return
	}
	f := r.PostForm
	req := &workerRequest{id: id, serverID: f.Get(FieldServerID), status: f.Get(FieldStatus)}
	if !m.authenticate(req.serverID, f.Get(FieldPassword)) {
		m.logger().Warn("worker refused: wrong serverId or serverPassword",
			zap.String("serverId", req.serverID), zap.String("remote", r.RemoteAddr))
		writeError(w, http.StatusUnauthorized, "wrong serverId or serverPassword")
		return
	}
	if d := f.Get(FieldData); d != "" {
		if !json.Valid([]byte(d)) {
			writeFormErrors(w, map[string]string{FieldData: "not a JSON document"})
			return
		}
		req.data = json.RawMessage(d)
	}
	handle(w, req)
}

// authenticate compares in constant time (of hashes, so that not even the
// password's length shows).
func (m *Master) authenticate(id, password string) bool {
	want, ok := m.Servers[id]
	if !ok {
		want = password + "\x00" // compare anyway, and fail
	}
	a, b := sha256.Sum256([]byte(password)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1 && ok && id != ""
}

// errNoChange rolls back an update transaction that changed nothing.
var errNoChange = errors.New("no change")

// update runs fn in one update transaction; the caller holds the master's
// lock. It answers 503 and returns false when the master is closed, 500
// when the transaction fails. fn returns errNoChange to roll back a
// transaction that changed nothing, which is a success.
func (m *Master) update(w http.ResponseWriter, fn func(tx *bolt.Tx) error) bool {
	if m.db == nil {
		writeError(w, http.StatusServiceUnavailable, ErrMasterClosed.Error())
		return false
	}
	if err := m.db.Update(fn); err != nil && !errors.Is(err, errNoChange) {
		m.logger().Error("writing the table", zap.Error(err))
		writeError(w, http.StatusInternalServerError, err.Error())
		return false
	}
	return true
}

// httpError carries an answer's code out of a transaction, rolling it back.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func (m *Master) serverStatus(w http.ResponseWriter, req *workerRequest) {
	if req.id != req.serverID {
		writeError(w, http.StatusForbidden, "the serverId of the form is not the one of the path")
		return
	}
	var startup *Startup
	switch req.status {
	case ServerOnline:
		startup = new(Startup)
		if len(req.data) > 0 {
			if err := json.Unmarshal(req.data, startup); err != nil {
				writeFormErrors(w, map[string]string{FieldData: "not a startup document: " + err.Error()})
				return
			}
		}
	case ServerConnecting, ServerReconnecting, ServerStopping, ServerOffline:
	default:
		writeFormErrors(w, map[string]string{FieldStatus: fmt.Sprintf("unknown server status %q", req.status)})
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	ok := m.update(w, func(tx *bolt.Tx) error {
		rec, err := getServer(tx, req.id)
		if err != nil {
			return err
		}
		if rec == nil {
			rec = &ServerRecord{ID: req.id}
		}
		if req.status == ServerOnline && rec.Status == ServerConnecting {
			// A worker process that starts says Connecting, then replays
			// its cache, then Online: a job still Processing at it now
			// died with its previous process, and goes back in line.
			if err := requeueServerJobs(tx, req.id, now); err != nil {
				return err
			}
		}
		rec.Status, rec.Data, rec.Updated = req.status, req.data, now
		if startup != nil {
			rec.Startup = startup
		}
		if err := putServer(tx, rec); err != nil {
			return err
		}
		return appendEvent(tx, bucketServerHistory, req.id, StatusEvent{Status: req.status, Data: req.data, At: now, Server: req.id})
	})
	if !ok {
		return
	}
	m.logger().Info("server status", zap.String("server", req.id), zap.String("status", req.status))
	writeData(w, map[string]string{"status": req.status})
}

// requeueServerJobs puts back in line the jobs Processing at a server
// whose process started again.
func requeueServerJobs(tx *bolt.Tx, server string, now time.Time) error {
	var lost []*jobRow
	err := tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
		row := new(jobRow)
		if err := json.Unmarshal(v, row); err != nil {
			return fmt.Errorf("workerserver: stored job %q: %w", k, err)
		}
		if row.Status == JobProcessing && row.Server == server {
			lost = append(lost, row)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, row := range lost {
		row.Status, row.Server, row.Data, row.Updated = JobQueued, "", nil, now
		if err := putJob(tx, row); err != nil {
			return err
		}
		if err := appendEvent(tx, bucketJobHistory, row.ID, StatusEvent{Status: JobQueued, At: now, Server: server}); err != nil {
			return err
		}
	}
	return nil
}

func (m *Master) jobStatus(w http.ResponseWriter, req *workerRequest) {
	switch req.status {
	case JobProcessing, JobDone, JobFailed, JobCancelled:
	default:
		writeFormErrors(w, map[string]string{FieldStatus: fmt.Sprintf("not a worker's job status: %q", req.status)})
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.db == nil {
		writeError(w, http.StatusServiceUnavailable, ErrMasterClosed.Error())
		return
	}
	var (
		status string // the job's, after this one
		ended  bool   // this status ended the job
		kept   bool   // this status was recorded in History only
	)
	now := time.Now()
	err := m.db.Update(func(tx *bolt.Tx) error {
		row, err := getJob(tx, req.id)
		if err != nil {
			return err
		}
		if row == nil {
			return &httpError{code: http.StatusNotFound, msg: fmt.Sprintf("unknown job %q", req.id)}
		}
		if err := appendEvent(tx, bucketJobHistory, req.id, StatusEvent{Status: req.status, Data: req.data, At: now, Server: req.serverID}); err != nil {
			return err
		}
		status = row.Status
		if Final(row.Status) || row.Status == JobQueued || row.Server != req.serverID {
			kept = true
			return nil
		}
		row.Status, row.Data, row.Updated = req.status, req.data, now
		status = row.Status
		if err := putJob(tx, row); err != nil {
			return err
		}
		if Final(req.status) {
			ended = true
			return deleteCancel(tx, row.Server, row.ID)
		}
		return nil
	})
	var he *httpError
	switch {
	case errors.As(err, &he):
		writeError(w, he.code, he.msg)
		return
	case err != nil:
		m.logger().Error("writing the job table", zap.Error(err))
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	log := m.logger()
	switch {
	case ended:
		if wt := m.waiters[req.id]; wt != nil {
			wt.wake()
		}
		log.Info("job ended", zap.String("job", req.id), zap.String("status", req.status), zap.String("server", req.serverID))
	case kept && req.status != status:
		log.Info("job status recorded only", zap.String("job", req.id), zap.String("status", req.status),
			zap.String("jobStatus", status), zap.String("server", req.serverID))
	default:
		log.Debug("job status", zap.String("job", req.id), zap.String("status", req.status), zap.String("server", req.serverID))
	}
	writeData(w, map[string]string{"jobId": req.id, "status": status})
}

func (m *Master) ping(w http.ResponseWriter, req *workerRequest) {
	if req.id != req.serverID {
		writeError(w, http.StatusForbidden, "the serverId of the form is not the one of the path")
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var pd PingData
	now := time.Now()
	ok := m.update(w, func(tx *bolt.Tx) error {
		pd = PingData{}
		cancels, err := takeCancels(tx, req.id)
		if err != nil {
			return err
		}
		for _, id := range cancels {
			row, err := getJob(tx, id)
			if err != nil {
				return err
			}
			if row != nil && !Final(row.Status) && row.Server == req.id {
				pd.CancelJobs = append(pd.CancelJobs, id)
			}
		}
		srv, err := getServer(tx, req.id)
		if err != nil {
			return err
		}
		var row *jobRow
		if srv == nil || (srv.Status != ServerStopping && srv.Status != ServerOffline) {
			// (no new work for a worker on its way out)
			if row, err = m.nextJob(tx, srv); err != nil {
				return err
			}
		}
		if row == nil {
			if len(cancels) == 0 {
				return errNoChange // spare the commit's sync
			}
			return nil
		}
		row.Status, row.Server, row.Data, row.Updated = JobProcessing, req.id, nil, now
		if err := putJob(tx, row); err != nil {
			return err
		}
		pd.Job = &JobOrder{JobID: row.ID, Worker: row.Worker, Params: row.Params}
		return appendEvent(tx, bucketJobHistory, row.ID, StatusEvent{Status: JobProcessing, At: now, Server: req.id})
	})
	if !ok {
		return
	}
	if pd.Job != nil {
		m.logger().Info("job handed out", zap.String("job", pd.Job.JobID), zap.String("server", req.id))
	}
	if len(pd.CancelJobs) > 0 {
		m.logger().Info("jobs to cancel sent", zap.Strings("jobs", pd.CancelJobs), zap.String("server", req.id))
	}
	writeData(w, pd)
}

// nextJob returns the oldest Queued job whose Run is waiting and whose
// worker code the server announced (any, if it announced none).
func (m *Master) nextJob(tx *bolt.Tx, srv *ServerRecord) (*jobRow, error) {
	var codes []string
	if srv != nil && srv.Startup != nil {
		for _, c := range srv.Startup.Workers {
			codes = append(codes, c.Code)
		}
	}
	var best *jobRow
	for id, wt := range m.waiters {
		if wt.woken {
			continue
		}
		row, err := getJob(tx, id)
		if err != nil {
			return nil, err
		}
		if row == nil || row.Status != JobQueued || (len(codes) > 0 && !slices.Contains(codes, row.Worker)) {
			continue
		}
		if best == nil || row.Seq < best.Seq {
			best = row
		}
	}
	return best, nil
}

// The user API.

func (m *Master) apiJobs(w http.ResponseWriter, r *http.Request) {
	if !m.open(w) {
		return
	}
	recs := m.Jobs()
	if recs == nil {
		recs = []JobRecord{}
	}
	writeData(w, recs)
}

func (m *Master) apiJob(w http.ResponseWriter, r *http.Request) {
	if !m.open(w) {
		return
	}
	rec, ok := m.Job(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown job %q", r.PathValue("id")))
		return
	}
	writeData(w, rec)
}

func (m *Master) apiCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := m.Cancel(id)
	switch {
	case errors.Is(err, ErrUnknownJob):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrJobFinished):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, ErrMasterClosed):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		rec, _ := m.Job(id)
		writeData(w, rec)
	}
}

// submitRequest is the body of POST /api/jobs.
type submitRequest struct {
	ID     string                     `json:"id"`
	Worker string                     `json:"worker"`
	Params map[string]json.RawMessage `json:"params"`
}

func (m *Master) apiSubmit(w http.ResponseWriter, r *http.Request) {
	if m.Submit == nil {
		writeError(w, http.StatusNotImplemented, "submission is not enabled on this master")
		return
	}
	if !m.open(w) {
		return
	}
	var sr submitRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, m.maxBody()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sr); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		writeFormErrors(w, map[string]string{"body": "want {\"id\", \"worker\", \"params\"}: " + err.Error()})
		return
	}
	if sr.ID == "" {
		var b [8]byte
		rand.Read(b[:])
		sr.ID = "api-" + hex.EncodeToString(b[:])
	} else if _, exists := m.Job(sr.ID); exists {
		writeError(w, http.StatusConflict, fmt.Sprintf("job %q already exists", sr.ID))
		return
	}
	job := NewJob(sr.ID, sr.Worker, sr.Params)
	if err := m.Validate(job); err != nil {
		writeFormErrors(w, map[string]string{"body": err.Error()})
		return
	}
	if err := m.Submit(job); err != nil {
		code := http.StatusServiceUnavailable
		switch {
		case errors.Is(err, laboro.ErrDuplicateID):
			code = http.StatusConflict
		case errors.Is(err, laboro.ErrInvalidJob):
			code = http.StatusBadRequest
		}
		writeError(w, code, err.Error())
		return
	}
	writeData(w, map[string]string{"id": sr.ID})
}

func (m *Master) apiServers(w http.ResponseWriter, r *http.Request) {
	if !m.open(w) {
		return
	}
	recs := m.ServerRecords()
	if recs == nil {
		recs = []ServerRecord{}
	}
	writeData(w, recs)
}

func (m *Master) apiServer(w http.ResponseWriter, r *http.Request) {
	if !m.open(w) {
		return
	}
	rec, ok := m.Server(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown server %q", r.PathValue("id")))
		return
	}
	writeData(w, rec)
}

// open answers 503 and returns false when the master is closed.
func (m *Master) open(w http.ResponseWriter) bool {
	m.mu.RLock()
	ok := m.db != nil
	m.mu.RUnlock()
	if !ok {
		writeError(w, http.StatusServiceUnavailable, ErrMasterClosed.Error())
	}
	return ok
}
