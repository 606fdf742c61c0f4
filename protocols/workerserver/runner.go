package workerserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport"
	bolt "go.etcd.io/bbolt"
)

// JobSpec is what a worker needs to run a job: the code that runs it (one
// of the WorkerCode codes a worker announces) and its parameters, spread
// into the JobOrder the worker receives. It is a laboro.Job's Payload; see
// NewJob.
type JobSpec struct {
	Worker string                     `json:"worker"`
	Params map[string]json.RawMessage `json:"params,omitempty"`
}

// NewJob returns the laboro.Job of a job for workers of code worker, with
// params (the members of a JSON object; "jobId" and "worker" are taken) as
// its Payload. id "" lets the Executor assign one. The job's Meta is left
// to the caller.
func NewJob(id, worker string, params map[string]json.RawMessage) laboro.Job {
	return laboro.Job{ID: id, Payload: JobSpec{Worker: worker, Params: params}}
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
// *JobError carrying the worker's error. A job the table already has (a
// restarted master submitting Unfinished again) is kept as it is: if it
// has already ended, Run returns that end at once; if it is Processing at
// a server, it is held for that server (see Master).
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
	err := s.db.Update(func(tx *bolt.Tx) error {
		var err error
		if row, err = getJob(tx, id); err != nil {
			return err
		}
		if row != nil {
			return errNoChange
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
	if err != nil && !errors.Is(err, errNoChange) {
		return nil, fmt.Errorf("workerserver: queue job %q: %w", id, err)
	}
	return row, nil
}

// finish reads the end of a job whose Run woke, and returns its record.
// A job that has not ended was left by its Run, whose ctx ended: it
// becomes Cancelled, its server (if any) is told to cancel it, and finish
// returns nil.
func (s *session) finish(ctx context.Context, id string) (*JobRecord, error) {
	var rec *JobRecord
	err := s.db.Update(func(tx *bolt.Tx) error {
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
