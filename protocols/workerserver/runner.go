package workerserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// JobSpec is what a worker needs to run a job: the code that runs it (one
// of the WorkerCode codes a worker announces) and its parameters, spread
// into the JobOrder the worker receives. It is a laboro.Job's Payload; see
// NewJob.
type JobSpec struct {
	Worker string                     `json:"worker"`
	Params map[string]json.RawMessage `json:"params,omitempty"`
}

// String shows the job as its worker code and parameters, for logs and
// summaries.
func (s JobSpec) String() string {
	if len(s.Params) == 0 {
		return s.Worker
	}
	params, err := json.Marshal(s.Params)
	if err != nil {
		return s.Worker
	}
	return s.Worker + " " + string(params)
}

// NewJob returns the laboro.Job of a job for workers of code worker, with
// params (the members of a JSON object; "jobId" and "worker" are taken) as
// its Payload. The job's Meta is left to the caller.
//
// id is the job's id in the table and on the wire. Take it from
// Master.NewID, or see NumericID: the reference worker needs numbers. An
// id "" lets the Executor assign one ("job_N"), which is not a number, and
// which a restarted Executor assigns again: a Run of an id the table has
// already ended returns that end (see Run).
func NewJob(id, worker string, params map[string]json.RawMessage) laboro.Job {
	return laboro.Job{ID: id, Payload: JobSpec{Worker: worker, Params: params}}
}

// maxSafeInteger is the largest integer that a JavaScript number holds
// exactly (Number.MAX_SAFE_INTEGER).
const maxSafeInteger = 1<<53 - 1

// NumericID reports whether a job id is one that the reference worker
// (worker-server 0.9.2) reads back as itself: a decimal integer without
// sign or leading zero, at most 2^53-1. The reference keeps the statuses
// it could not send in a file <jobId>.json, and, replaying them, takes the
// id from the file name as a JavaScript number (`name * 1`): "api-1f" comes
// back as NaN, "007" as 7, and the status goes to a job the master does not
// know. It also puts the id in the URL path unescaped. Ids the master picks
// (NewID, and the user API's) are numeric; a Worker of this package takes
// any id.
func NumericID(id string) bool {
	if id == "" || len(id) > 16 || (id[0] == '0' && id != "0") {
		return false
	}
	n, err := strconv.ParseUint(id, 10, 64)
	return err == nil && n <= maxSafeInteger
}

// NewID returns a job id that no job in the table has and that NewID never
// returned before, also before a restart of the master: the next number of
// a sequence kept in the table, in decimal (see NumericID). It fails with
// ErrMasterClosed while the master is not open. A caller that also picks
// numeric ids of its own may pick one that NewID returns later; use one
// or the other.
func (m *Master) NewID() (string, error) {
	s := m.current()
	if s == nil {
		return "", ErrMasterClosed
	}
	var id string
	err := s.db.Update(func(tx *bolt.Tx) (err error) {
		id, err = newJobID(tx)
		return err
	})
	switch {
	case closedDB(err):
		return "", ErrMasterClosed
	case err != nil:
		return "", fmt.Errorf("workerserver: new job id: %w", err)
	}
	return id, nil
}

var errNoSpec = errors.New("workerserver: a job's Payload is its JobSpec; see NewJob")

func jobSpec(job laboro.Job) (JobSpec, error) {
	var spec JobSpec
	switch s := job.Payload.(type) {
	case JobSpec:
		spec = s
	case *JobSpec:
		if s == nil {
			return spec, errNoSpec
		}
		spec = *s
	default:
		return spec, errNoSpec
	}
	if spec.Worker == "" {
		return spec, errors.New("workerserver: a job needs a worker code")
	}
	if !codeName(spec.Worker) {
		// No worker runs it (a worker's codes are the files of a
		// directory): it would wait for ever.
		return spec, fmt.Errorf("workerserver: worker code %q: a file's name, without / or \\, not starting with a dot", spec.Worker)
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

// Validate refuses a job whose Payload is not a JobSpec (or *JobSpec) with
// a worker code and JSON parameters other than "jobId" and "worker".
func (m *Master) Validate(job laboro.Job) error {
	_, err := jobSpec(job)
	return err
}

// Run queues job under its id (which it needs: an Executor assigns one) and
// returns when a worker has ended it: Done gives StatusSucceeded with the
// Done data as Output (a file in OutputDir; the consumer closes it),
// Failed gives StatusFailed and Cancelled StatusKilled, both with a
// *JobError carrying the worker's error, and with the job's exit status
// and the end of its standard error when the worker reported them
// (ErrorDetail.ExitCode and Stderr; ExitCode is -1 when it did not). A
// job the table already has (a restarted master submitting Unfinished
// again) is kept as it is: if it has already ended, Run returns that end
// at once; if it is Processing at a server, it is held for that server
// (see Master).
//
// If ctx ends first (Executor.Cancel, the Job.Timeout the Executor applies,
// the Executor's Close), the job becomes Cancelled in the table and Run
// returns at once with the status laboro.Interruption gives; a worker that
// has the job is told to cancel it at its next ping, and what it reports
// afterwards is recorded in the job's history only. Run applies no timeout
// of its own.
func (m *Master) Run(ctx context.Context, job laboro.Job) laboro.Result {
	res := laboro.Result{ID: job.ID, ExitCode: -1, Started: time.Now()}
	fail := func(err error) laboro.Result {
		res.Status, res.Err, res.Ended = laboro.StatusFailed, err, time.Now()
		return res
	}
	closed := func() laboro.Result {
		res.Status, res.Err, res.Ended = laboro.StatusKilled, fmt.Errorf("%w: %w", laboro.ErrKilled, ErrMasterClosed), time.Now()
		return res
	}
	spec, err := jobSpec(job)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", laboro.ErrInvalidJob, err))
	}
	if job.ID == "" {
		return fail(fmt.Errorf("%w: workerserver: a job needs an id", laboro.ErrInvalidJob))
	}
	s := m.current()
	if s == nil {
		return closed()
	}
	s.pin(job.ID)
	defer s.unpin(job.ID)

	row, err := s.enqueue(job.ID, spec)
	switch {
	case closedDB(err):
		return closed()
	case err != nil:
		return fail(err)
	case Final(row.Status):
		return s.result(res, &row.JobRecord)
	}
	t, err := s.add(ctx, JobOrder{JobID: row.ID, Worker: row.Worker, Params: row.Params})
	switch {
	case errors.Is(err, transport.ErrClosed):
		return closed()
	case errors.Is(err, transport.ErrDuplicate):
		return fail(fmt.Errorf("%w: workerserver: job %q is already running", laboro.ErrDuplicateID, job.ID))
	case err != nil:
		return fail(err)
	}
	got := s.d.Wait(ctx, t)
	if errors.Is(got.Err, transport.ErrClosed) {
		return closed() // the table stays as it is, for the next Open
	}
	rec, err := s.finish(ctx, job.ID)
	switch {
	case closedDB(err):
		return closed()
	case err != nil:
		return fail(err)
	case rec == nil: // ended by ctx
		res.Status, res.Err, res.Ended = got.Status, got.Err, time.Now()
		return res
	}
	return s.result(res, rec)
}

// enqueue puts the job in the table, Queued, unless it is there, and
// returns its row.
func (s *session) enqueue(id string, spec JobSpec) (*jobRow, error) {
	var row *jobRow
	var unoffered bool
	// With the updates of other jobs queued at the same time, and of
	// pings and statuses: one sync of the table for all.
	err := s.commit.update(func(tx *bolt.Tx) error {
		var err error
		unoffered = false
		if row, err = getJob(tx, id); err != nil {
			return err
		}
		if row != nil {
			return errNoChange
		}
		codes, err := s.servers.offered(tx)
		if err != nil {
			return err
		}
		unoffered = !codes.offer(spec.Worker)
		seq, err := newJobSeq(tx, id)
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
		tx.OnCommit(func() { s.inTable(id) })
		return appendEvent(tx, bucketJobHistory, id, StatusEvent{Status: JobQueued, At: now})
	})
	switch {
	case errors.Is(err, errNoChange):
		return row, nil
	case err != nil:
		return nil, fmt.Errorf("workerserver: queue job %q: %w", id, err)
	}
	if !NumericID(id) {
		s.idWarning.Do(func() {
			s.log.Warn("a job id is not a decimal number: a reference worker (worker-server 0.9.2) would lose "+
				"the statuses of such a job that it had to keep for a while; take ids from Master.NewID",
				zap.String("job", id))
		})
	}
	if unoffered {
		if _, warned := s.unoffered.LoadOrStore(spec.Worker, true); !warned {
			s.log.Warn("no server offers the job's worker code; its jobs wait for one that does (said once per code)",
				zap.String("job", id), zap.String("worker", spec.Worker))
		}
	}
	return row, nil
}

// finish reads the end of a job whose Run woke, and returns its record.
// A job that has not ended was left by its Run, whose ctx ended: it
// becomes Cancelled, its server (if any) is told to cancel it, and finish
// returns nil.
func (s *session) finish(ctx context.Context, id string) (*JobRecord, error) {
	var rec *JobRecord
	// Most jobs have ended: a read needs no turn among the writers.
	err := s.db.View(func(tx *bolt.Tx) error {
		row, err := getJob(tx, id)
		if err == nil && row != nil && Final(row.Status) {
			rec = &row.JobRecord
		}
		return err
	})
	if err == nil && rec != nil {
		return rec, nil
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		rec = nil
		row, err := getJob(tx, id)
		switch {
		case err != nil:
			return err
		case row == nil:
			return fmt.Errorf("%w: %q", ErrUnknownJob, id)
		case Final(row.Status):
			rec = &row.JobRecord
			return errNoChange
		case ctx.Err() == nil:
			return fmt.Errorf("workerserver: job %q is %s, yet its Run woke", id, row.Status)
		}
		if row.Status == JobProcessing {
			// The Dispatcher told the server that holds it; a server
			// that has it in the table but lost it meanwhile is told
			// too, should it still run it.
			if err := putCancel(tx, row.Server, id); err != nil {
				return err
			}
			server := row.Server
			tx.OnCommit(func() { s.nudge(server) })
		}
		_, cause := laboro.Interruption(ctx)
		return endRow(tx, row, JobCancelled, cause.Error())
	})
	if err != nil && !errors.Is(err, errNoChange) {
		if closedDB(err) {
			return nil, err
		}
		return nil, fmt.Errorf("workerserver: job %q: %w", id, err)
	}
	return rec, nil
}

// endRow ends a job on the master's own account (status JobCancelled, with
// why as the error's message).
func endRow(tx *bolt.Tx, row *jobRow, status, why string) error {
	data, err := json.Marshal(ErrorData{Error: ErrorDetail{Name: status, Message: why}})
	if err != nil {
		return err
	}
	now := time.Now()
	row.Status, row.Data, row.Updated = status, data, now
	if err := putJob(tx, row); err != nil {
		return err
	}
	return appendEvent(tx, bucketJobHistory, row.ID, StatusEvent{Status: status, Data: data, At: now})
}

// result completes res from a job's final record.
func (s *session) result(res laboro.Result, rec *JobRecord) laboro.Result {
	res.Ended = time.Now()
	switch rec.Status {
	case JobDone:
		out, err := s.output(rec.Data)
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
	// The exit status and the end of standard error are what the worker
	// reported; a worker that sent only a message (the reference) leaves
	// them unknown, ExitCode -1, rather than guessed from its text.
	if c := jerr.Detail.ExitCode; c != nil {
		res.ExitCode = *c
	}
	if jerr.Detail.Stderr != "" {
		res.Stderr = []byte(jerr.Detail.Stderr)
	}
	if rec.Status == JobCancelled {
		res.Status, res.Err = laboro.StatusKilled, fmt.Errorf("%w: %w", laboro.ErrKilled, jerr)
	} else {
		res.Status, res.Err = laboro.StatusFailed, jerr
	}
	return res
}

// output keeps a job's Done data in a file.
func (s *session) output(data []byte) (*laboro.Output, error) {
	return transport.SaveOutput(s.outputDir, "workerserver-*.json", bytes.NewReader(data))
}

// codeName reports whether code may name a worker code: a file of a
// worker's code directory, not a path, not hidden.
func codeName(code string) bool {
	return code != "" && !strings.ContainsAny(code, `/\`) && code[0] != '.'
}
