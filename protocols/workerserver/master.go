package workerserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/lograte"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// DefaultMaxBody is the largest request body a Master reads unless told.
const DefaultMaxBody = 1 << 20

// DefaultLockTimeout is how long Open waits for another process's lock on
// the table's file unless told.
const DefaultLockTimeout = time.Second

// DefaultLease is how long a server may show no life before its jobs go
// to others, unless told: three of the reference worker's 30 s pings.
const DefaultLease = 90 * time.Second

// MaxHistory is how many statuses the table keeps in the history of a job
// or a server: beyond it, the oldest go, so that a job that reports its
// progress for weeks, or a server that reconnects again and again, does
// not grow the table without bound.
const MaxHistory = 1000

// DefaultMaxEndedJobs is how many ended jobs a Master's table keeps unless
// told (Master.MaxEndedJobs): at about a kilobyte a job and its history,
// a table of some hundred megabytes.
const DefaultMaxEndedJobs = 100_000

// DefaultHold is how long a ping that finds no job for its server waits for
// one, unless told: well under a minute, the master's write timeout, and
// under its lease.
const DefaultHold = 20 * time.Second

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
	// Unoffered is set, when the record is read, for a Queued job whose
	// worker code no server offers: no server that is not Stopping or
	// Offline offered it at its last Online that listed codes (a server
	// that never listed them offers every code). The job waits until one
	// does. It is not stored.
	Unoffered bool `json:"unoffered,omitempty"`
	// Cancelling is set when Cancel was asked while a server had the job:
	// the job ends when the server reports it, or, should the server lose
	// it first (a new process of it comes Online, it says Stopping or
	// Offline, it shows no life for a lease), Cancelled at once; it never
	// goes back in line. It stays set once the job has ended.
	Cancelling bool `json:"cancelling,omitempty"`
	// History is every status recorded for the job, in order of arrival
	// (the last MaxHistory of them):
	// the master's own Queued (at submission, and again, with the server
	// that lost it and data {"reason": …}, when it goes back in line),
	// Processing (at hand-out, without data) and Cancelled (when its Run
	// ended first, or on Cancel of a job no worker had), and every status
	// a worker sent, including those that changed nothing (a duplicate
	// replayed from a worker's cache, a status after the final one, a
	// status from a server the job was not handed to).
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
	// Server is the worker that sent it; for the master's own Queued of a
	// job going back in line, the server that lost it; "" for the master's
	// other statuses.
	Server string `json:"server,omitempty"`
}

// ServerRecord is a worker as the master last heard of it.
type ServerRecord struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Data   json.RawMessage `json:"data,omitempty"`
	// Startup is the data of the server's last Online status that listed
	// the worker codes it runs (an Online without "workers", like the
	// reference's "{}" when it reconnects, keeps the earlier one); nil
	// until it has been Online.
	Startup *Startup `json:"startup,omitempty"`
	// Process is the worker process that holds the serverId, as of the
	// server's last status: the last one accepted (see Handler), as it
	// described itself; nil for one that does not name its instance (the
	// reference's).
	Process *WorkerProcess `json:"process,omitempty"`
	// History is every status the server sent, in order of arrival (the
	// last MaxHistory of them).
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
// buffer, Stop, Cancel, Job.Timeout, Queued and concurrency then apply, and
// only jobs whose Run is waiting are handed out.
//
// Who waits for a job, which server holds it, what goes back in line and
// which result counts are the business of a transport.Dispatcher, keyed by
// job id, to which every server is joined by its serverId. The job table
// (every job not ended and the last MaxEndedJobs to end, with their
// histories of statuses, and every server's) is the durable record of the
// same, kept in a bbolt file, one update transaction
// (synced on commit) per change, so that a master reopened on the same
// file (Open) has it whole: Unfinished lists what to submit again, a job
// the table has at a server is held for that server, and workers'
// replayed statuses are accepted.
//
// A server holds its jobs until it says Stopping or Offline, until a new
// process of it says Online (after Connecting, not Reconnecting), or until
// it shows no life (no request of any kind) for Lease: its jobs then go
// back to the front of the line, and to the servers that ping next.
//
// Workers authenticate every request with their serverId and
// serverPassword (Servers). The user API on the same Handler (GET
// /api/jobs, which lists the last DefaultListLimit jobs submitted or
// ?limit= of them, up to MaxListLimit; GET /api/jobs/{id}, POST
// /api/jobs/{id}/cancel, POST /api/jobs with Submit, GET /api/servers, GET
// /api/servers/{id}) takes the bearer
// token APIToken, and refuses what a web page could make a browser send:
// a request with an Origin or a Sec-Fetch-Site other than none or
// same-origin, a POST whose Content-Type is not application/json, and a
// Host that is a name other than localhost or one of Hosts (an IP
// address is always taken: DNS rebinding needs a name).
//
// Set the fields, then Open; a Master is safe for concurrent use and must
// not be copied. Its fields must not change while it is open.
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
	// Lease is how long a server may show no life (no ping, no status of
	// its own or of a job) before the jobs it holds go back in line for
	// other servers, which their history records; and how long a server
	// that shows life may hold a job it was handed without speaking of it
	// (see Handler). 0 means DefaultLease; a negative Lease means none (a
	// silent server keeps its jobs). It must exceed the servers' ping
	// interval, and, for a Worker, which pings only with a free slot, its
	// Progress interval: a running job's progress is sent once per
	// interval, the first as it starts.
	Lease time.Duration
	// Hold is how long a ping that finds no job for its server waits for
	// one before it answers without: a server that pings is handed a job
	// the moment one comes in line for it, rather than at its next ping
	// (the reference worker pings every 30 s). A job to cancel at that
	// server ends the wait too. 0 means DefaultHold; a negative Hold
	// answers at once. It must stay under the HTTP server's write timeout.
	Hold time.Duration
	// APIToken, if not empty, is the token every request of the user API
	// must carry (Authorization: Bearer TOKEN); it is compared in a time
	// that tells nothing of it. Empty means none: serve the Handler on a
	// trusted address only.
	APIToken string
	// Hosts are the host names (without port) the user API answers to,
	// besides localhost and IP addresses.
	Hosts []string
	// Submit, if set, serves POST /api/jobs: it is given NewJob(id, worker,
	// params) from the request and should submit it to the Executor whose
	// runner this Master is. An id the table already has is refused first;
	// an empty id is replaced with one from NewID.
	Submit func(laboro.Job) error
	// MaxEndedJobs bounds the jobs the table keeps once ended (Done,
	// Failed, Cancelled), so that its file stops growing: beyond it, the
	// jobs that ended first are forgotten, their records and histories,
	// as others end (and at Open, for a table that holds more). A job
	// forgotten is unknown to Job, Cancel and the user API; a Run of its
	// id runs it again; a worker's status for it, replayed from its cache,
	// is answered with success and recorded nowhere (see Handler). A job
	// stays while its Run is under way. 0 means DefaultMaxEndedJobs; a
	// negative value keeps every job.
	MaxEndedJobs int

	mu sync.RWMutex
	s  *session // nil while not open

	refusals lograte.Limited // what a peer causes at will (wrong passwords), logged at most once a second
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
	if m.s != nil {
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
	s := newSession(db, m.lease(), m.logger(), m.OutputDir, m.maxEnded())
	s.hold = m.hold()
	n, err := s.forgetAll()
	if err != nil {
		s.d.Close()
		db.Close()
		return fmt.Errorf("workerserver: open %s: forgetting the jobs ended first: %w", path, err)
	}
	if n > 0 {
		s.log.Info("forgot the jobs that ended first, beyond MaxEndedJobs", zap.Int("jobs", n), zap.Int("maxEndedJobs", s.maxEnded))
	}
	m.s = s
	return nil
}

// maxEnded returns MaxEndedJobs with its default; negative means every job.
func (m *Master) maxEnded() int {
	if m.MaxEndedJobs == 0 {
		return DefaultMaxEndedJobs
	}
	return max(m.MaxEndedJobs, -1)
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
	s := m.s
	m.s = nil
	m.mu.Unlock()
	if s == nil {
		return nil
	}
	s.close()
	s.d.Close()
	return s.db.Close()
}

// Release answers the pings held for a job (see Hold) at once, and every
// later ping without waiting. Call it before shutting down the HTTP server
// that serves the Handler, which waits for the requests in progress
// (http.Server.RegisterOnShutdown does); Close calls it too.
func (m *Master) Release() {
	if s := m.current(); s != nil {
		s.release()
	}
}

// current returns the open session, or nil.
func (m *Master) current() *session {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.s
}

func (m *Master) logger() *zap.Logger {
	if m.Logger == nil {
		return zap.NewNop()
	}
	return m.Logger
}

func (m *Master) lease() time.Duration { return orDefault(m.Lease, DefaultLease) }

func (m *Master) hold() time.Duration { return orDefault(m.Hold, DefaultHold) }

// orDefault reads a duration setting: 0 means def, a negative one none (0).
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
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

// Cancel cancels a job: one still Queued becomes Cancelled at once (its Run
// returns StatusKilled); one at a worker is cancelled through that
// worker's next ping, and ends when the worker reports it Cancelled (or
// otherwise ended), or Cancelled as soon as the worker loses it (see
// JobRecord.Cancelling): a worker that is down when the job is cancelled
// never runs it again. It returns an error matching ErrUnknownJob or
// ErrJobFinished for a job it cannot cancel.
//
// (A job whose Run ends first, by Executor.Cancel, its timeout or the
// Executor's Close, is cancelled at its worker too, but ends at once.)
func (m *Master) Cancel(id string) error {
	s := m.current()
	if s == nil {
		return ErrMasterClosed
	}
	var queued bool
	err := s.db.Update(func(tx *bolt.Tx) error {
		row, err := getJob(tx, id)
		switch {
		case err != nil:
			return err
		case row == nil:
			return fmt.Errorf("%w: %q", ErrUnknownJob, id)
		case Final(row.Status):
			return fmt.Errorf("%w: %q is %s", ErrJobFinished, id, row.Status)
		case row.Status == JobQueued:
			queued = true
			return endRow(tx, row, JobCancelled, "cancelled on the master")
		}
		row.Cancelling = true
		if err := putJob(tx, row); err != nil {
			return err
		}
		server := row.Server
		tx.OnCommit(func() { s.nudge(server) })
		return putCancel(tx, server, id)
	})
	if closedDB(err) {
		return ErrMasterClosed
	}
	if err != nil {
		return err
	}
	if queued {
		s.abandon([]string{id})
	}
	s.log.Info("job cancelled", zap.String("job", id), zap.Bool("atWorker", !queued))
	return nil
}

// Job returns a job's record, with its history.
func (m *Master) Job(id string) (JobRecord, bool) {
	s := m.current()
	if s == nil {
		return JobRecord{}, false
	}
	var rec JobRecord
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) error {
		row, err := getJob(tx, id)
		if err != nil || row == nil {
			return err
		}
		rec, ok = row.JobRecord, true
		if rec.History, err = history(tx, bucketJobHistory, id); err != nil {
			return err
		}
		if rec.Status == JobQueued {
			codes, err := s.servers.offered(tx)
			rec.Unoffered = err == nil && !codes.offer(rec.Worker)
			return err
		}
		return nil
	})
	if err != nil {
		s.logRead(err)
		return JobRecord{}, false
	}
	return rec, ok
}

// Queued returns a channel that is closed once job id is in the table
// (at once if it is), and a func that stops waiting for it, to be called
// when done. A program that submits a job through the Executor (as the
// user API's Submit does) waits on it, beside the job's Handle.Done, to
// know that the job survives a crash of the master; the channel is never
// closed for a job that ends before its Run queues it.
func (m *Master) Queued(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	s := m.current()
	if s == nil {
		return ch, func() {}
	}
	s.queuedMu.Lock()
	s.queued[id] = append(s.queued[id], ch)
	s.queuedMu.Unlock()
	stop := func() { s.unwait(id, ch, false) }
	// A commit before the channel was registered is in the table.
	var in bool
	err := s.db.View(func(tx *bolt.Tx) error {
		in = tx.Bucket(bucketJobs).Get([]byte(id)) != nil
		return nil
	})
	if err == nil && in {
		s.unwait(id, ch, true)
	}
	return ch, stop
}

// inTable closes the channels that wait for job id to be in the table.
func (s *session) inTable(id string) {
	s.queuedMu.Lock()
	chs := s.queued[id]
	delete(s.queued, id)
	s.queuedMu.Unlock()
	for _, ch := range chs {
		close(ch)
	}
}

// unwait takes ch out of those waiting for job id, closing it if closeIt
// is set; a channel taken out already (closed) is left alone.
func (s *session) unwait(id string, ch chan struct{}, closeIt bool) {
	s.queuedMu.Lock()
	defer s.queuedMu.Unlock()
	chs := s.queued[id]
	i := slices.Index(chs, ch)
	if i < 0 {
		return
	}
	if chs = slices.Delete(chs, i, i+1); len(chs) == 0 {
		delete(s.queued, id)
	} else {
		s.queued[id] = chs
	}
	if closeIt {
		close(ch)
	}
}

// Jobs returns every job in the table, with its history, in order of
// submission: as many as the table has ever run (LastJobs bounds them).
func (m *Master) Jobs() []JobRecord {
	return m.jobs(func(tx *bolt.Tx) ([]JobRecord, error) { return allJobs(tx, true) })
}

// LastJobs returns the last n jobs submitted, with their history, in order
// of submission; it reads those jobs alone.
func (m *Master) LastJobs(n int) []JobRecord {
	return m.jobs(func(tx *bolt.Tx) ([]JobRecord, error) { return lastJobs(tx, n) })
}

// Unfinished returns the jobs that have not ended (Queued or Processing),
// in order of submission: what a restarted master submits again. It reads
// those jobs alone, however many the table holds that ended.
func (m *Master) Unfinished() []JobRecord { return m.jobs(openJobs) }

func (m *Master) jobs(read func(*bolt.Tx) ([]JobRecord, error)) []JobRecord {
	s := m.current()
	if s == nil {
		return nil
	}
	var recs []JobRecord
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		recs, err = read(tx)
		return err
	})
	if err != nil {
		s.logRead(err)
		return nil
	}
	return recs
}

// Server returns what the master knows of a worker, with its history.
func (m *Master) Server(id string) (ServerRecord, bool) {
	s := m.current()
	if s == nil {
		return ServerRecord{}, false
	}
	var rec *ServerRecord
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		if rec, err = getServer(tx, id); err != nil || rec == nil {
			return err
		}
		rec.History, err = history(tx, bucketServerHistory, id)
		return err
	})
	if err != nil || rec == nil {
		if err != nil {
			s.logRead(err)
		}
		return ServerRecord{}, false
	}
	return *rec, true
}

// ServerRecords returns every worker the master has heard from, by id.
func (m *Master) ServerRecords() []ServerRecord {
	s := m.current()
	if s == nil {
		return nil
	}
	var recs []ServerRecord
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		recs, err = allServers(tx)
		return err
	})
	if err != nil {
		s.logRead(err)
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
// (compared in constant time), 409 while another worker process holds the
// serverId (see the package's "One process per serverId": the answer
// carries HeaderRefusal RefusalInUse, and in Retry-After the seconds until
// the holder would have shown no life for a lease), 403 when the serverId
// of the form is not the one of the path, 404 for an unknown job, 400 and
// formErrors for an unknown status, a data field that is not JSON (or,
// for Online, not a Startup), or a process field that is not a
// WorkerProcess.
//
// A ping hands out the job first in line (jobs that a server lost go back
// to the front) whose Run is waiting and whose worker code the server
// offered (see ServerRecord.Startup: any code if it never listed its
// codes, none if it listed none; no job while the server is Stopping or
// Offline), recording it Processing at
// that server before answering, and carries the ids of the jobs the
// server is to cancel, once each. A job handed out that its server does
// not speak of (a status of the job) within Lease goes back in line: the
// answer never reached the server.
//
// A job's status is always appended to its History, and is a success; it
// changes the job's Status and Data only if the job has not ended and is
// at that server, or, for Done, was at that server before it lost it (the
// first result wins: the server that has it now is told to cancel it). So
// a final status is never replaced and a worker's replayed cache drains.
// A server's jobs stay assigned to it through Reconnecting.
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
			m.worker(w, r, path[len(p.Status):], routeStatus, (*session).serverStatus)
		case strings.HasPrefix(path, p.Job):
			m.worker(w, r, path[len(p.Job):], routeJob, (*session).jobStatus)
		case strings.HasPrefix(path, p.Ping):
			m.worker(w, r, path[len(p.Ping):], routePing, (*session).ping)
		default:
			m.guardAPI(mux).ServeHTTP(w, r)
		}
	})
}
