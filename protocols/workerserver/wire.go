package workerserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Paths are where a master serves the worker's three POSTs; each ends with
// the id it is about (":serverId" or ":jobId" in the reference's routes).
type Paths struct {
	Status string // a worker's own status: Status + serverId
	Job    string // a job's status: Job + jobId
	Ping   string // asking for work: Ping + serverId
}

// DefaultPaths are the paths unless configured.
var DefaultPaths = Paths{Status: "/api/servers/status/", Job: "/api/jobs/status/", Ping: "/api/servers/ping/"}

// The form fields of every POST (application/x-www-form-urlencoded).
const (
	FieldStatus   = "status"         // the new status
	FieldData     = "data"           // a JSON document, as a string
	FieldServerID = "serverId"       // the worker's id
	FieldPassword = "serverPassword" // the worker's password

	// FieldSlots, in a ping, is how many jobs it may bring: a Worker of
	// this package sends its free slots, and the master answers with up
	// to that many (PingData.Jobs), at most MaxSlots. A ping without it
	// (the reference's) brings one job at most. In the status of a job's
	// end, it asks for jobs as a ping would, and the answer's data holds
	// PingData's members beside jobId and status.
	FieldSlots = "slots"

	// FieldCancels ("1"), in any job status, asks for the ids of the jobs
	// this server is to cancel: the answer's data holds them as cancelJobs
	// (the end of a job that asks for jobs gets them anyway). A Worker of
	// this package sends it with each Processing, so that a job cancelled
	// on the master reaches a worker whose every slot is busy, and so
	// pings no more, within its progress interval.
	FieldCancels = "cancels"

	// FieldInstance, in every request of a Worker of this package, is
	// its process's instance: a random token drawn as Run starts, so that
	// the master tells two processes under one serverId apart, and
	// refuses the second while the first shows life (see Master.Handler).
	// A request without it (the reference's) is of a process that does
	// not say which: two such under one serverId cannot be told apart.
	FieldInstance = "instance"

	// FieldProcess, in a Worker's server statuses, describes its process
	// for the master: a WorkerProcess as JSON, without its instance. The
	// master names the process that holds a serverId in its refusals, and
	// takes a process that starts (Connecting) on the same host with the
	// same cache folder as the one that holds it for its restart: the
	// lock a Worker takes on its CacheDir says the other has ended.
	FieldProcess = "process"
)

// HeaderRefusal is the header of a master's refusal of a worker's request
// that says why in a word a worker acts on: RefusalInUse.
const HeaderRefusal = "Workerserver-Refusal"

// RefusalInUse (with HTTP 409, and Retry-After) is the refusal of a request
// whose process is not the one that holds its serverId, while that one
// shows life: see Master.Handler.
const RefusalInUse = "in-use"

// HeaderHolderRequests, in a RefusalInUse, counts the requests the master
// accepted under the serverId since it started (a decimal number). A
// refused process that sees it grow has heard that the holder lives: it
// made a request since.
const HeaderHolderRequests = "Workerserver-Holder-Requests"

// WorkerProcess is a worker process as the master knows it: its instance
// (FieldInstance) and what it says of itself (FieldProcess).
type WorkerProcess struct {
	Instance string `json:"instance,omitempty"`
	Host     string `json:"host,omitempty"`
	PID      int    `json:"pid,omitempty"`
	CacheDir string `json:"cacheDir,omitempty"`
}

// String describes the process for a person.
func (p WorkerProcess) String() string {
	if p.Instance == "" {
		return "a worker process that does not name its instance (one like the reference's)"
	}
	if p.Host == "" && p.PID == 0 {
		return "worker process " + p.Instance
	}
	s := fmt.Sprintf("pid %d on host %q", p.PID, p.Host)
	if p.CacheDir != "" {
		s += fmt.Sprintf(", cache %q", p.CacheDir)
	}
	return s
}

// sameSite reports whether p and q ran on the same host with the same
// cache folder, both known.
func (p WorkerProcess) sameSite(q WorkerProcess) bool {
	return p.Host != "" && p.CacheDir != "" && p.Host == q.Host && p.CacheDir == q.CacheDir
}

// MaxSlots is the most jobs one ping's answer brings.
const MaxSlots = 64

// A worker's statuses, in the order it goes through them.
const (
	ServerConnecting   = "Connecting"
	ServerReconnecting = "Reconnecting"
	ServerOnline       = "Online"
	ServerStopping     = "Stopping"
	ServerOffline      = "Offline"
)

// A job's statuses.
const (
	JobQueued     = "Queued" // the master's own, before a worker has it
	JobProcessing = "Processing"
	JobDone       = "Done"
	JobFailed     = "Failed"
	JobCancelled  = "Cancelled"
)

// Final reports whether a job status is an end.
func Final(status string) bool {
	return status == JobDone || status == JobFailed || status == JobCancelled
}

// Startup is the data of a worker's Online status. The reference sends it
// whole at the first Online of its process only; the Online of a
// reconnection carries "{}" (no startup, no workers).
type Startup struct {
	Startup bool    `json:"startup"`
	Version Version `json:"version"`
	// Workers are the codes the worker offers. nil (absent or null) means
	// the Online did not list them; an empty list means it offers none.
	Workers []WorkerCode `json:"workers"`
}

// WorkerCode is one kind of job a worker can run (the reference: a module
// workers/<code>.js; here an executable).
type WorkerCode struct {
	Code    string  `json:"code"`
	Version Version `json:"version"`
}

// Version is a version as a worker announces it. The reference takes a
// worker module's from its `version` and its own from its package.json,
// so it may come as a JSON string, a number (`version: 2`) or anything
// else: UnmarshalJSON keeps a string as it is, null as "", and any other
// value as its JSON text (2 becomes "2"; bytes in it that are not UTF-8
// become U+FFFD, as in a string); it is written back as a JSON string. A
// version is shown, never compared, so no worker is refused for it.
type Version string

// UnmarshalJSON reads any JSON value; see Version.
func (v *Version) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*v = Version(s)
		return nil
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		return err
	}
	if c.String() == "null" {
		*v = ""
		return nil
	}
	// Text for people, as a string's: bytes that are not UTF-8 become
	// U+FFFD, as json.Unmarshal makes them in a string.
	*v = Version(strings.ToValidUTF8(c.String(), "\uFFFD"))
	return nil
}

// Progress is the data of a Processing status.
type Progress struct {
	Progress ProgressCount `json:"progress"`
}

// ProgressCount says how far a job is.
type ProgressCount struct {
	Total   int     `json:"total"`
	Done    int     `json:"done"`
	Percent float64 `json:"percent"`
}

// ErrorData is the data of a Failed or Cancelled status.
type ErrorData struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes why a job failed.
type ErrorDetail struct {
	Message string `json:"message"`
	Name    string `json:"name"`
	Stack   string `json:"stack,omitempty"`
	// ExitCode and Stderr, beyond the reference's {message, name, stack},
	// are a Worker's of this package: the job's exit status (nil when its
	// process did not exit, killed or never started) and the end of its
	// standard error, so that the master's Result, and its log line of the
	// failed job, have them. The Message says them too, for whoever reads
	// only that. A reference worker sends neither: they stay unknown.
	ExitCode *int   `json:"exitCode,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
}

// Answer is every JSON answer of the master: the worker uses Data; Error,
// FormErrors or Redirect "/login" make it a failure.
type Answer struct {
	Data       json.RawMessage   `json:"data,omitempty"`
	Error      string            `json:"error,omitempty"`
	FormErrors map[string]string `json:"formErrors,omitempty"`
	Redirect   string            `json:"redirect,omitempty"`
}

// Err returns the failure an answer carries, or nil.
func (a Answer) Err() error {
	switch {
	case a.Error != "":
		return &RefusedError{Reason: a.Error}
	case len(a.FormErrors) > 0:
		return &RefusedError{Reason: fmt.Sprint("form errors: ", a.FormErrors)}
	case a.Redirect == "/login":
		return &RefusedError{Reason: "not logged in (redirect to /login)"}
	}
	return nil
}

// RefusedError is a master's refusal, with its reason and the HTTP status
// it came with (0 when unknown).
type RefusedError struct {
	Reason string
	Code   int
	// Refusal is the answer's HeaderRefusal ("" when it had none), and
	// RetryAfter its Retry-After (0 when it had none).
	Refusal    string
	RetryAfter time.Duration
	// HolderRequests is a RefusalInUse's HeaderHolderRequests (0 when it
	// had none).
	HolderRequests uint64
}

// InUse reports whether the master refused the request because another
// worker process holds the serverId (RefusalInUse).
func (e *RefusedError) InUse() bool {
	return e.Code == http.StatusConflict && e.Refusal == RefusalInUse
}

// Permanent reports whether sending the same request again cannot help:
// the master refused it for what it is (a malformed request, an unknown
// job), not for who sent it or when.
func (e *RefusedError) Permanent() bool {
	if e.InUse() {
		return false // for who sent it: another process holds the serverId
	}
	switch e.Code {
	case 400, 404, 409, 413:
		return true
	}
	return false
}

func (e *RefusedError) Error() string { return "workerserver: refused: " + e.Reason }

// ErrRefused is matched by every *RefusedError.
var ErrRefused = errors.New("workerserver: refused")

// Is makes errors.Is(err, ErrRefused) match.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// PingData is the data of a ping's answer: a job to run (nil when none),
// more jobs for a ping that asked for several (FieldSlots), and the ids of
// jobs to cancel.
type PingData struct {
	Job        *JobOrder  `json:"job,omitempty"`
	Jobs       []JobOrder `json:"jobs,omitempty"`
	CancelJobs []string   `json:"cancelJobs,omitempty"`
}

// UnmarshalJSON reads a ping's answer. A job id may be a JSON string or a
// number (the reference takes its master's ids as numbers); a number is
// kept as its JSON text.
func (p *PingData) UnmarshalJSON(b []byte) error {
	var raw struct {
		Job        *JobOrder         `json:"job"`
		Jobs       []JobOrder        `json:"jobs"`
		CancelJobs []json.RawMessage `json:"cancelJobs"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	p.Job, p.Jobs, p.CancelJobs = raw.Job, raw.Jobs, nil
	for _, r := range raw.CancelJobs {
		id, err := jobID(r)
		if err != nil {
			return fmt.Errorf("workerserver: cancelJobs: %w", err)
		}
		p.CancelJobs = append(p.CancelJobs, id)
	}
	return nil
}

// jobID reads a job id: a JSON string (not empty), or a number as its
// text.
func jobID(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil && s != "" {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil && n != "" {
		return n.String(), nil
	}
	return "", fmt.Errorf("a job id is a string or a number, not %.40q", raw)
}

// JobOrder is a job handed to a worker: its id, the code to run it with,
// and its parameters (the reference spreads them into the same object;
// MarshalJSON and UnmarshalJSON do the same).
type JobOrder struct {
	JobID  string
	Worker string
	Params map[string]json.RawMessage
}

// MarshalJSON writes {"jobId":…, "worker":…, …params}.
func (j JobOrder) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(j.Params)+2)
	for k, v := range j.Params {
		m[k] = v
	}
	m["jobId"], m["worker"] = j.JobID, j.Worker
	return json.Marshal(m)
}

// UnmarshalJSON reads {"jobId":…, "worker":…, …params}; the jobId may be
// a string or a number (see PingData.UnmarshalJSON).
func (j *JobOrder) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	id, err := jobID(m["jobId"])
	if err != nil {
		return fmt.Errorf("workerserver: job without a jobId: %w", err)
	}
	j.JobID = id
	if err := json.Unmarshal(m["worker"], &j.Worker); err != nil {
		return fmt.Errorf("workerserver: job without a worker: %w", err)
	}
	delete(m, "jobId")
	delete(m, "worker")
	j.Params = m
	return nil
}
