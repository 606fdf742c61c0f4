package fuq

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/laboro-go/laboro"
)

// The control API is the user's side of a foreman: fuq-foreman serves it
// on a local Unix socket, so that "fuq-foreman submit" and "fuq-foreman
// status" reach the running foreman. It is HTTP with JSON bodies:
//
//	POST /jobs                           Submission → {"id": "job_1"}
//	GET  /jobs[?tasks=all]               → [JobReport…]
//	GET  /jobs/{id}[?wait=1|D][&tasks=all] → JobReport (with wait: once the job has ended, or after Control.MaxWait, or D if shorter)
//	POST /jobs/{id}/cancel
//	POST /workers/stop?n=N               STOP(N) to every worker; n=now: STOP(immediate)
//
// A report counts every task of its job, and lists the tasks that did not
// succeed, the first MaxListedTasks of them (JobInfo.Omitted counts the
// rest); tasks=all lists every task.

// Submission is a job as a user submits it.
type Submission struct {
	Name       string `json:"name"`
	Command    string `json:"command"`
	Tasks      int    `json:"tasks"`
	WorkingDir string `json:"workdir"`
	LoggingDir string `json:"logdir"`
}

// JobReport is a job as the control API reports it.
type JobReport struct {
	ID    string   `json:"id"`    // the Executor's id, job_N
	State string   `json:"state"` // queued, running, or the Executor's status once ended
	Error string   `json:"error,omitempty"`
	Job   *JobInfo `json:"job,omitempty"` // once the foreman has it
	// Workers is how many workers were connected to the foreman as the
	// report was made, while the job had not ended: a job whose tasks
	// wait with none connected waits for one.
	Workers int `json:"workers,omitempty"`
}

// Ended reports whether the job has ended (its State is the Executor's
// status).
func (r JobReport) Ended() bool { return r.State != "queued" && r.State != "running" }

// DefaultMaxWait is Control.MaxWait's default.
const DefaultMaxWait = 20 * time.Second

// Control serves the control API for a Foreman and the Executor that runs
// its jobs. It names jobs job_1, job_2, … With a Journal (the Foreman's
// own), it records each job as it is submitted and as it ends, and Resume
// takes back the jobs of the journal after a restart. Of the jobs that
// ended it keeps the last Foreman.MaxEndedJobs, as the Foreman does.
type Control struct {
	Foreman  *Foreman
	Executor *laboro.Executor
	Journal  *Journal
	// MaxWait bounds how long a GET of a job with wait=1 waits for the
	// job's end; then it answers as the job stands, and the client asks
	// again. It must stay under the HTTP server's write timeout, which
	// would cut the answer. 0 means DefaultMaxWait.
	MaxWait time.Duration
	// Explain, when set, words a refused submission's error (from
	// Foreman.Validate or Executor.Submit) for the user who submitted it:
	// a program that sets a limit by a flag adds the flag's name (see
	// TaskLimitError). nil means the error's own text.
	Explain func(error) string

	mu      sync.Mutex
	handles map[string]*laboro.Handle
	past    map[string]JobReport // jobs that ended before a restart
	order   []string             // every job kept, and some forgotten
	ended   []string             // the jobs kept that ended, oldest first
	next    int                  // of the next job_N; 0 means 1
}

// Resume takes back the jobs of a journal (see OpenJournal): those that
// ended are reported as they ended; the others are submitted again, with
// their ids, and resume where they were. Call it before serving.
func (c *Control) Resume(jobs []JournaledJob) error {
	c.mu.Lock()
	c.next = max(c.next, NextRef(jobs))
	if c.past == nil {
		c.past = map[string]JobReport{}
	}
	c.mu.Unlock()
	for _, j := range jobs {
		if j.State != "" {
			info := JobInfo{JobDescription: j.Desc, Ref: j.Ref, Tasks: j.Ended}
			info.Status = JobFinished
			for _, t := range j.Ended {
				info.count(t)
			}
			c.mu.Lock()
			c.past[j.Ref] = JobReport{ID: j.Ref, State: j.State, Error: j.Error, Job: &info}
			c.order = append(c.order, j.Ref)
			c.retire(j.Ref)
			c.mu.Unlock()
			continue
		}
		h, err := c.Executor.Submit(context.Background(), NewResumedJob(j))
		if err != nil {
			return fmt.Errorf("fuq: resuming %s: %w", j.Ref, err)
		}
		c.track(h)
	}
	return nil
}

// track registers a submitted job, and has its end journaled: unless it
// was killed or terminated by the Executor's Close or Shutdown, which the
// next start resumes.
func (c *Control) track(h *laboro.Handle) {
	c.mu.Lock()
	if c.handles == nil {
		c.handles = map[string]*laboro.Handle{}
	}
	c.handles[h.ID()] = h
	c.order = append(c.order, h.ID())
	c.mu.Unlock()
	go func() {
		res, _ := h.Wait(context.Background())
		switch res.Status {
		case laboro.StatusKilled, laboro.StatusTerminated:
		default:
			c.Journal.Ended(h.ID(), res)
		}
		c.mu.Lock()
		c.retire(h.ID())
		c.mu.Unlock()
	}()
}

// retire counts the job id among the ended ones, and forgets the oldest
// of those past the Foreman's MaxEndedJobs. c.mu is held.
func (c *Control) retire(id string) {
	c.ended = append(c.ended, id)
	_, maxJobs := c.Foreman.endedBounds()
	for len(c.ended) > maxJobs {
		delete(c.handles, c.ended[0])
		delete(c.past, c.ended[0])
		c.ended[0] = ""
		c.ended = c.ended[1:]
	}
	if n := len(c.handles) + len(c.past); len(c.order) > 2*n+16 {
		kept := c.order[:0]
		for _, id := range c.order {
			if c.handles[id] != nil || c.past[id].ID != "" {
				kept = append(kept, id)
			}
		}
		clear(c.order[len(kept):])
		c.order = kept
	}
}

// Handler returns the API's HTTP handler.
func (c *Control) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /jobs", c.submit)
	mux.HandleFunc("GET /jobs", c.list)
	mux.HandleFunc("GET /jobs/{id}", c.get)
	mux.HandleFunc("POST /jobs/{id}/cancel", c.cancel)
	mux.HandleFunc("POST /workers/stop", c.stop)
	return mux
}

func (c *Control) submit(w http.ResponseWriter, r *http.Request) {
	var s Submission
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&s); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	job := NewJob(s.Name, s.Command, s.Tasks, s.WorkingDir, s.LoggingDir)
	if err := c.Foreman.Validate(job); err != nil {
		http.Error(w, c.explain(err), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.next = max(c.next, 1)
	job.ID = "job_" + strconv.Itoa(c.next)
	c.next++
	c.mu.Unlock()
	// Journaled before it is queued: a crash while it waits in the
	// Executor's buffer does not lose it.
	c.Journal.job(job.ID, job.Payload.(JobDescription))
	h, err := c.Executor.Submit(r.Context(), job)
	if err != nil {
		c.Journal.Ended(job.ID, laboro.Result{Status: laboro.StatusStopped, Err: err})
		http.Error(w, c.explain(err), http.StatusBadRequest)
		return
	}
	c.track(h)
	writeJSON(w, map[string]string{"id": h.ID()})
}

// explain is err as the user who submitted a job is told it.
func (c *Control) explain(err error) string {
	if c.Explain != nil {
		return c.Explain(err)
	}
	return err.Error()
}

// MaxListedTasks bounds the tasks of a job that the control API lists
// unless asked for every one (tasks=all): the tasks that did not succeed,
// the first MaxListedTasks of them; JobInfo.Omitted counts the others.
const MaxListedTasks = 100

// allTasks reports whether the request asks for every task (tasks=all).
func allTasks(r *http.Request) bool { return r.URL.Query().Get("tasks") == "all" }

func (c *Control) list(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	ids := append([]string(nil), c.order...)
	c.mu.Unlock()
	out := make([]JobReport, 0, len(ids))
	all := allTasks(r)
	for _, id := range ids {
		if st, ok := c.status(id, all); ok {
			out = append(out, st)
		}
	}
	writeJSON(w, out)
}

func (c *Control) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c.mu.Lock()
	h := c.handles[id]
	c.mu.Unlock()
	if q := r.URL.Query().Get("wait"); h != nil && q != "" {
		// A client that bounds its request asks for a shorter wait (a
		// duration), so that a foreman that answers is told from one that
		// does not.
		d := cmp.Or(c.MaxWait, DefaultMaxWait)
		if asked, err := time.ParseDuration(q); err == nil && asked > 0 {
			d = min(d, asked)
		}
		wait := time.NewTimer(d)
		defer wait.Stop()
		select {
		case <-h.Done():
		case <-wait.C:
		case <-r.Context().Done():
			return
		}
	}
	st, ok := c.status(id, allTasks(r))
	if !ok {
		http.Error(w, "no job "+id, http.StatusNotFound)
		return
	}
	writeJSON(w, st)
}

// status reports the job id, with every task if all is set, else as
// MaxListedTasks says; false if the job is not kept (any more).
func (c *Control) status(id string, all bool) (JobReport, bool) {
	c.mu.Lock()
	h := c.handles[id]
	past, ended := c.past[id]
	c.mu.Unlock()
	switch {
	case ended:
		return past.bounded(all), true
	case h == nil:
		return JobReport{}, false
	}
	st := JobReport{ID: id, State: "queued", Workers: len(c.Foreman.Workers())}
	keep, max := notDone, MaxListedTasks
	if all {
		keep, max = nil, -1
	}
	if info, ok := c.Foreman.jobByRefTasks(id, keep, max); ok {
		st.State, st.Job = "running", &info
	}
	select {
	case <-h.Done():
		res, _ := h.Wait(context.Background())
		st.State = res.Status.String()
		if res.Err != nil {
			st.Error = res.Err.Error()
		}
	default:
	}
	return st, true
}

// notDone keeps the tasks that did not succeed.
func notDone(t TaskInfo) bool { return t.State != TaskDone }

// bounded returns the report with its tasks listed as status lists them.
func (st JobReport) bounded(all bool) JobReport {
	if all || st.Job == nil {
		return st
	}
	info := *st.Job
	info.Tasks, info.Omitted = nil, 0
	for _, t := range st.Job.Tasks {
		info.list(t, notDone, MaxListedTasks)
	}
	st.Job = &info
	return st
}

// cancel ends a job through the Executor: a queued one leaves the queue
// (stopped), a running one's tasks are dropped or cancelled on their
// workers (cancelled).
func (c *Control) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := c.Executor.Stop(id); err == nil {
		writeJSON(w, map[string]string{"id": id, "state": "removed"})
		return
	}
	if err := c.Executor.Cancel(id); err != nil {
		if st, ok := c.status(id, false); ok {
			http.Error(w, "job "+id+" has ended ("+st.State+"): nothing to cancel", http.StatusConflict)
			return
		}
		http.Error(w, "no job "+id, http.StatusNotFound)
		return
	}
	writeJSON(w, map[string]string{"id": id, "state": "cancelled"})
}

func (c *Control) stop(w http.ResponseWriter, r *http.Request) {
	n := r.URL.Query().Get("n")
	var arg uint32
	if n == "now" {
		arg = StopImmediate
	} else {
		v, err := strconv.ParseUint(n, 10, 31)
		if err != nil {
			http.Error(w, "n is a number of processors, or now", http.StatusBadRequest)
			return
		}
		arg = uint32(v)
	}
	c.Foreman.StopWorkers(arg)
	writeJSON(w, map[string]any{"workers": len(c.Foreman.Workers())})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// Unreachable reports whether err, from ControlClient.Do, says that no
// foreman answered on the socket: none listens there, or the one that did
// went away before it answered.
func Unreachable(err error) bool {
	var ne net.Error
	if errors.Is(err, ErrForeignSocket) {
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || (errors.As(err, &ne) && !ne.Timeout())
}

// ErrForeignSocket is matched by the error of a ControlClient whose socket
// is served by a process of another user (Linux): it is refused before a
// request is sent.
var ErrForeignSocket = errors.New("fuq: the control socket is another user's")

// ControlClient talks to a foreman's control API over its Unix socket, one
// that a process of this user serves.
type ControlClient struct {
	Socket string
	// MaxAnswer bounds the answer Do decodes (DefaultMaxAnswer if 0).
	MaxAnswer int64
	// Timeout bounds each request, its answer included; 0 means
	// DefaultControlTimeout.
	Timeout time.Duration
}

// DefaultControlTimeout is ControlClient.Timeout's default: above
// DefaultMaxWait, with room for the largest answer.
const DefaultControlTimeout = 2 * time.Minute

// DefaultMaxAnswer is ControlClient.MaxAnswer's default: room for the
// tasks of a job of a million tasks (tasks=all).
const DefaultMaxAnswer = 256 << 20

func (c ControlClient) http() *http.Client {
	return &http.Client{Timeout: cmp.Or(c.Timeout, DefaultControlTimeout), Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", c.Socket)
			if err != nil {
				return nil, err
			}
			if err := checkPeer(conn, c.Socket); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		},
	}}
}

// Do sends a request and decodes the JSON answer into out (if not nil).
func (c ControlClient) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://foreman"+path, rd)
	if err != nil {
		return err
	}
	hc := c.http()
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("fuq: no foreman answers on %s (is fuq-foreman serve running, with this -control?): %w", c.Socket, err)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("fuq: %s %s: %s", method, path, bytes.TrimSpace(msg))
	}
	if out == nil {
		return nil
	}
	limit := c.MaxAnswer
	if limit <= 0 {
		limit = DefaultMaxAnswer
	}
	answer := &io.LimitedReader{R: resp.Body, N: limit + 1}
	if err := json.NewDecoder(answer).Decode(out); err != nil {
		if answer.N <= 0 {
			return fmt.Errorf("fuq: %s %s: the foreman's answer is over %d bytes, the most this client reads", method, path, limit)
		}
		return errors.Join(errors.New("fuq: bad answer from the foreman"), err)
	}
	return nil
}
