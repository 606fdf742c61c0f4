package workerserver

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/dirlock"
	"github.com/laboro-go/laboro/internal/lograte"
	"github.com/laboro-go/laboro/transport/link"
	"go.uber.org/zap"
)

// Worker is the worker side: it talks to a master over HTTP through a
// link.Link (so that no status is lost or sent out of order: what
// cannot be sent waits in CacheDir), asks it for jobs (with the end of
// each job, and by pinging when that brings none), and runs each job
// with the executable CodeDir/<worker> (the job's "worker" field), its
// params as JSON on standard input, its standard output (JSON) the result.
// Each job runs as a job of a local laboro.Executor; the cancelJobs of an
// answer cancel theirs (Executor.Cancel: the process group is killed), and
// the job is reported Cancelled.
//
// Set the fields before Run; a Worker runs once.
//
// One process per serverId: a Worker names its process in every request
// (FieldInstance, FieldProcess), and the master refuses a second process
// under the same serverId while the first shows life (HTTP 409, see
// Master.Handler). A Worker so refused logs why, and tries again, at each
// Reconnect, for as long as the master says the other process may yet
// prove to have ended (the master takes a process under a serverId whose
// process showed no life for a lease; its Retry-After says when): refused
// still after that, or refused again after the other process made a
// request (HeaderHolderRequests: it lives), Run returns an error matching
// ErrInUse. A Worker locks
// its CacheDir while it runs: Run fails at once with ErrCacheDirInUse
// should another process hold it.
//
// A wrong serverId or password: should the master refuse the Worker's
// first request (HTTP 401) before it has ever accepted one of this Run,
// Run returns an error matching ErrPasswordRefused at once, naming the
// worker and the master. Once the master has accepted the Worker, a 401
// is retried (the master may be restarted with another servers file), with
// a warning.
type Worker struct {
	// URL is the master's base URL, like http://master:8080; required.
	URL string
	// Paths are the master's routes; zero means DefaultPaths.
	Paths Paths
	// ServerID and Password identify the worker; required.
	ServerID, Password string
	// CodeDir holds one executable per kind of job; required. Its
	// entries are announced in the Online status.
	CodeDir string
	// Version is announced in the Online status.
	Version string
	// CacheDir keeps the statuses that wait for the master; required.
	CacheDir string
	// Concurrency is how many jobs run at once; 0 means runtime.NumCPU.
	Concurrency int
	// Ping, Progress and Reconnect are the link's intervals; 0 means the
	// defaults (30 s, 10 s, 10 s).
	Ping, Progress, Reconnect time.Duration
	// FirstProgress is how long a job runs before its first Processing
	// status is sent (then one every Progress): a job that ends sooner
	// sends its end alone, one request and one commit of the master's
	// table fewer. The master marks a job Processing when it hands it out,
	// and hears of it within Progress either way. 0 means
	// DefaultFirstProgress; it is never more than Progress; a negative
	// value sends it as the job starts, as the reference's worker does.
	FirstProgress time.Duration
	// MaxResult is the largest output of a job the worker sends as the
	// job's result (the data of its Done); 0 means DefaultMaxResult. A job
	// that prints more fails, saying so: its output is neither read into
	// memory nor cached.
	MaxResult int64
	// Client makes the requests; nil means one with a 30 s timeout that
	// keeps a connection open for each slot and the pings (NewClient).
	Client *http.Client
	// Logger; nil means none.
	Logger *zap.Logger

	// Set by Run.
	ctx    context.Context
	ex     *laboro.Executor
	up     *link.Link
	pinger *link.Pinger
	jobs   sync.WaitGroup // the jobs' goroutines

	mu       sync.Mutex
	running  map[string][]*running // by the master's job id
	free     int                   // slots neither running a job nor asking for one
	stopping bool                  // Run's ctx ended, or Drain: no more jobs asked for

	drainOnce sync.Once
	drainMu   sync.Mutex
	draining  chan struct{} // closed by Drain

	process  WorkerProcess // this process, as the master is told of it
	warnings lograte.Limited
	failOnce sync.Once
	failed   chan struct{} // closed by fail
	failErr  error         // why, set before failed is closed
	// Under mu: the master has accepted a request of this Run (its
	// password), and since when and until when it refused this process
	// as another holds the serverId (zero while it does not).
	admitted          bool
	unauthorized      bool // the master refused the password after it had accepted it
	inUseSince, inUse time.Time
	// The holder's count of requests at the last refusal
	// (RefusedError.HolderRequests).
	holderRequests uint64
}

// Errors that end a Worker's Run; match them with errors.Is.
var (
	// ErrPasswordRefused: the master refused the worker's first request
	// for its serverId or password (HTTP 401).
	ErrPasswordRefused = errors.New("workerserver: password refused")
	// ErrInUse: another worker process holds the serverId at the master,
	// and showed life for longer than the master's lease while this one
	// was refused.
	ErrInUse = errors.New("workerserver: another worker process already runs under this serverId")
	// ErrCacheDirInUse: another process runs a Worker with the same
	// CacheDir.
	ErrCacheDirInUse = errors.New("workerserver: another worker process runs with this cache folder")
)

// running is a job this worker runs, as the local Executor knows it.
type running struct {
	local     string // the local Executor's id of its job; "" until submitted
	cancelled bool   // the master cancelled it
}

// leftToMaster is runJob's status for a job killed by Run's end: none is
// sent, and the master gives the job to another worker.
const leftToMaster = ""

// Drain makes Run take no more jobs, let the running ones finish and send
// their ends, then say Stopping and Offline and return nil. Run's context
// ending meanwhile kills the jobs still running, as it always does.
func (w *Worker) Drain() {
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	w.drainOnce.Do(func() { close(w.drainCh()) })
}

// drainCh is the channel that Drain closes.
func (w *Worker) drainCh() chan struct{} {
	w.drainMu.Lock()
	defer w.drainMu.Unlock()
	if w.draining == nil {
		w.draining = make(chan struct{})
	}
	return w.draining
}

// Run serves the master until ctx ends; it then stops the link (the
// statuses of running jobs are cached), kills the running jobs (the master
// gives them to other workers: no end is sent for them), says Stopping and
// Offline, and returns ctx.Err(). After Drain, it returns nil once the
// running jobs have finished and their ends are sent.
func (w *Worker) Run(ctx context.Context) error {
	if w.URL == "" || w.ServerID == "" || w.CodeDir == "" || w.CacheDir == "" {
		return errors.New("workerserver: Worker needs URL, ServerID, CodeDir and CacheDir")
	}
	if w.MaxResult < 0 {
		return errors.New("workerserver: negative Worker.MaxResult")
	}
	if w.Logger == nil {
		w.Logger = zap.NewNop()
	}
	if w.Paths == (Paths{}) {
		w.Paths = DefaultPaths
	}
	n := w.Concurrency
	if n <= 0 {
		n = runtime.NumCPU()
	}
	if w.Client == nil {
		w.Client = NewClient(n, nil)
	}
	w.running, w.free = map[string][]*running{}, n
	// The cache is this process's alone: two processes replaying and
	// deleting each other's statuses would lose them. The lock also tells
	// the master that a process starting with this folder on this host
	// is the restart of the one before it (FieldProcess).
	if err := os.MkdirAll(w.CacheDir, 0o700); err != nil {
		return fmt.Errorf("workerserver: cache folder: %w", err)
	}
	lock, err := dirlock.Lock(w.CacheDir)
	if errors.Is(err, dirlock.ErrHeld) {
		return fmt.Errorf("%w: %s is held by another running worker (each worker process needs its own -cache folder, and its own serverId)", ErrCacheDirInUse, w.CacheDir)
	}
	if err != nil {
		return fmt.Errorf("workerserver: cache folder: %w", err)
	}
	defer lock.Close()
	if err := w.describe(); err != nil {
		return err
	}
	w.failed = make(chan struct{})
	ex, err := laboro.New(laboro.WithPoolSize(n), laboro.WithConcurrency(n), laboro.WithBufferSize(n), laboro.WithLogger(w.Logger))
	if err != nil {
		return err
	}
	up, err := link.New(&masterAPI{w: w}, link.Config{
		CacheDir: w.CacheDir, Reconnect: w.Reconnect, Progress: w.Progress, Ping: w.Ping, Logger: w.Logger,
		MaxMessage: w.maxMessage(),
	})
	if err != nil {
		ex.Close()
		return err
	}
	w.ctx, w.ex, w.up = ctx, ex, up
	w.pinger = up.NewPinger(w.ping)
	up.Start()
	drained := false
	var idle chan struct{} // closed once no job runs, while draining
	select {
	case <-ctx.Done():
	case <-w.failed:
	case <-w.drainCh():
		w.Logger.Info("draining: no new job; the running ones finish")
		idle = make(chan struct{})
		go func() { w.jobs.Wait(); close(idle) }() // no job starts once stopping
		select {
		case <-idle:
			drained = true
		case <-ctx.Done():
		case <-w.failed:
		}
	}
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	// Jobs still running are killed, and left to the master; the ends
	// of the others go to the cache if the link cannot send them.
	ex.Close()
	w.jobs.Wait()
	if idle != nil {
		<-idle
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := up.Stop(stopCtx); err != nil {
		w.Logger.Warn("stopping the link", zap.Error(err))
	}
	select {
	case <-w.failed:
		return w.failErr
	default:
	}
	if drained {
		return nil
	}
	return ctx.Err()
}

// describe sets w.process: a new instance, and where this process runs.
func (w *Worker) describe() error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("workerserver: drawing the worker's instance: %w", err)
	}
	host, _ := os.Hostname()
	dir, err := filepath.Abs(w.CacheDir)
	if err != nil {
		return fmt.Errorf("workerserver: cache folder: %w", err)
	}
	w.process = WorkerProcess{Instance: hex.EncodeToString(b[:]), Host: host, PID: os.Getpid(), CacheDir: dir}
	return nil
}

// fail ends Run with err (the first one given).
func (w *Worker) fail(err error) {
	w.failOnce.Do(func() {
		w.failErr = err
		w.Logger.Error("the worker stops", zap.Error(err))
		close(w.failed)
	})
}

// answered follows the master's answer to a request: an acceptance
// (refused nil) or a refusal.
func (w *Worker) answered(refused *RefusedError) {
	now := time.Now()
	w.mu.Lock()
	admitted, unauthorized, since, until := w.admitted, w.unauthorized, w.inUseSince, w.inUse
	// The holder made a request since this process was first refused: it
	// lives, and waiting for its silence is waiting in vain. (A count
	// that fell is a restarted master's: counted from there.)
	lives := false
	switch {
	case refused == nil:
		w.admitted, w.unauthorized, w.inUseSince, w.inUse = true, false, time.Time{}, time.Time{}
	case refused.Code == http.StatusUnauthorized && admitted:
		w.unauthorized = true
	case refused.InUse():
		w.admitted = true // the master took the password before it looked at the process
		if since.IsZero() {
			// Past the Retry-After, the master would have taken this
			// process had the other one shown no life since: a refusal
			// then says that it lives.
			until = now.Add(refused.RetryAfter)
			w.inUseSince, w.inUse = now, until
		} else {
			lives = refused.HolderRequests > w.holderRequests
		}
		w.holderRequests = refused.HolderRequests
	}
	w.mu.Unlock()
	switch {
	case refused == nil:
		if !since.IsZero() {
			w.Logger.Info("the master takes this worker process under its serverId now: the other one has ended", zap.String("id", w.ServerID))
		}
		if unauthorized {
			w.Logger.Info("the master accepts this worker's password again", zap.String("id", w.ServerID), zap.String("master", w.URL))
		}
	case refused.Code == http.StatusUnauthorized && !admitted:
		w.fail(fmt.Errorf("%w: the master at %s refused the password of worker %q at its first request (HTTP 401: %s): "+
			"the master's servers file gives this id another password, or does not have the id", ErrPasswordRefused, w.URL, w.ServerID, refused.Reason))
	case refused.Code == http.StatusUnauthorized:
		w.warnings.Of(w.Logger).Warn("the master refused this worker's serverId or password, which it accepted before: trying again "+
			"(was the master restarted with another servers file?)", zap.String("id", w.ServerID), zap.String("master", w.URL), zap.String("reason", refused.Reason))
	case refused.InUse() && since.IsZero():
		w.Logger.Warn("another worker already runs under this id: the master refuses this process while that one shows life; "+
			"this one tries again, should the other prove to have ended, until the time below, then stops",
			zap.String("id", w.ServerID), zap.String("master", w.URL), zap.Time("until", until), zap.String("reason", refused.Reason))
	case refused.InUse() && lives:
		w.fail(fmt.Errorf("%w: the master at %s has refused worker %q since %s, and the other process has made requests since, "+
			"so it runs: %s", ErrInUse, w.URL, w.ServerID, since.Format(time.RFC3339), refused.Reason))
	case refused.InUse() && !now.Before(until):
		w.fail(fmt.Errorf("%w: the master at %s has refused worker %q since %s: %s",
			ErrInUse, w.URL, w.ServerID, since.Format(time.RFC3339), refused.Reason))
	}
}

// ping asks the master for a job for each free slot, cancels what it
// says, and starts the jobs it gives.
func (w *Worker) ping(ctx context.Context) (bool, error) {
	n := w.claim()
	if n == 0 {
		// Every slot is busy: a job would only wait here. The end of a
		// job asks for the next (and brings any cancelJobs then).
		return false, nil
	}
	var form url.Values
	if n > 1 {
		// One ping brings a job for every free slot (FieldSlots).
		form = url.Values{FieldSlots: {strconv.Itoa(n)}}
	}
	var answer PingData
	if err := w.post(ctx, w.Paths.Ping+url.PathEscape(w.ServerID), form, &answer); err != nil {
		w.unclaim(n)
		return false, err
	}
	return w.take(n, answer) > 0, nil
}

// claim takes the free slots, at most MaxSlots, for a request that asks
// for jobs, and returns how many; none while Run stops.
func (w *Worker) claim() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return 0
	}
	n := min(w.free, MaxSlots)
	w.free -= n
	return n
}

// isStopping reports whether Run stops.
func (w *Worker) isStopping() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopping
}

// unclaim gives back n slots claimed.
func (w *Worker) unclaim(n int) {
	w.mu.Lock()
	w.free += n
	w.mu.Unlock()
}

// take follows an answer to a request that claimed n slots: it cancels
// the jobs the answer names, starts those it brings, gives back the slots
// left over, and returns how many jobs it started.
func (w *Worker) take(n int, answer PingData) int {
	for _, id := range answer.CancelJobs {
		w.cancel(id)
	}
	orders := answer.Jobs
	if answer.Job != nil {
		orders = append([]JobOrder{*answer.Job}, orders...)
	}
	started := 0
	for i, order := range orders {
		if i == n {
			// More than asked for: no slot for them. The master gives
			// them to others when the lease passes.
			w.Logger.Warn("the master gave more jobs than asked for: not run", zap.Int("asked", n), zap.Int("given", len(orders)))
			break
		}
		if w.start(order) {
			started++
		}
	}
	if left := n - started; left > 0 {
		w.unclaim(left)
	}
	return started
}

// cancel kills the process of a job the master cancelled, through the
// local Executor (its process group is killed); a job not submitted yet is
// cancelled as soon as it is.
func (w *Worker) cancel(id string) {
	w.mu.Lock()
	var local []string
	for _, r := range w.running[id] {
		r.cancelled = true
		if r.local != "" {
			local = append(local, r.local)
		}
	}
	w.mu.Unlock()
	for _, l := range local {
		if err := w.ex.Cancel(l); err == nil {
			w.Logger.Info("job cancelled by the master", zap.String("job", id))
		}
	}
}

// start runs one job, in a slot claimed for it, and sends its statuses
// through the link; it reports whether it did. As the job ends, its slot
// is free before its end is sent: the end asks for the next job
// (masterAPI.Send). A job that comes while Run stops is not run: the
// master gives it back to the others at the worker's Stopping.
func (w *Worker) start(order JobOrder) bool {
	r := new(running)
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		w.Logger.Info("job left to the master: stopping", zap.String("job", order.JobID))
		return false
	}
	w.running[order.JobID] = append(w.running[order.JobID], r)
	w.jobs.Add(1) // under mu: Run waits for the jobs once stopping is set
	w.mu.Unlock()
	stream := w.up.Job(order.JobID)
	processing := statusBody(JobProcessing, Progress{Progress: ProgressCount{Total: 1}})
	var first *time.Timer
	if d := w.firstProgress(); d > 0 {
		first = time.AfterFunc(d, func() { stream.Progress(processing) })
	} else {
		stream.Progress(processing)
	}
	go func() {
		defer w.jobs.Done()
		status, data := w.runJob(context.WithoutCancel(w.ctx), order, r)
		if first != nil {
			first.Stop() // should it fire now, Complete orders the two
		}
		if status == leftToMaster {
			// The master gives it to another worker at this one's
			// Stopping: it must not end Failed for the stop.
			w.Logger.Info("job killed by the worker's stop: left to the master to run again", zap.String("job", order.JobID))
			stream.Abandon()
			return
		}
		w.Logger.Info("job ended", zap.String("job", order.JobID), zap.String("status", status))
		w.mu.Lock()
		rs := slices.DeleteFunc(w.running[order.JobID], func(x *running) bool { return x == r })
		if len(rs) == 0 {
			delete(w.running, order.JobID)
		} else {
			w.running[order.JobID] = rs
		}
		w.free++
		w.mu.Unlock()
		stream.Complete(statusBody(status, data))
	}()
	return true
}

// NewClient returns the HTTP client of a Worker running n jobs at once:
// a 30 s timeout, and an idle connection kept to the master for each job's
// statuses and for the pings (Go's default keeps two, so that a worker of
// more slots opened a new connection for many of its requests). tlsConfig,
// if not nil, is that of an https:// master.
func NewClient(n int, tlsConfig *tls.Config) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = n + 2
	t.TLSClientConfig = tlsConfig
	return &http.Client{Timeout: 30 * time.Second, Transport: t}
}

// DefaultMaxResult is Worker.MaxResult's default: a quarter of the
// master's default limit on a request (DefaultMaxBody), so that the Done
// of a result this size fits it, form-encoded (which triples a byte of
// JSON at worst: %22), with the fields around it.
const DefaultMaxResult = DefaultMaxBody / 4

// maxMessage is the link's limit on a status: a result of MaxResult bytes
// that is not JSON, sent as a JSON string, each byte escaped (\u0000) at
// worst, and the status around it.
func (w *Worker) maxMessage() int {
	return int(min(6*cmp.Or(w.MaxResult, DefaultMaxResult)+64<<10, math.MaxInt32))
}

// DefaultFirstProgress is Worker.FirstProgress's default.
const DefaultFirstProgress = time.Second

// firstProgress is FirstProgress with its default, capped at the
// progress interval.
func (w *Worker) firstProgress() time.Duration {
	d := cmp.Or(w.FirstProgress, DefaultFirstProgress)
	return min(d, cmp.Or(w.Progress, link.DefaultProgress))
}

// runJob runs the job's executable and returns its final status and data.
func (w *Worker) runJob(ctx context.Context, order JobOrder, r *running) (string, any) {
	ex := w.ex
	fail := func(name string, err error) (string, any) {
		return JobFailed, ErrorData{Error: ErrorDetail{Name: name, Message: err.Error()}}
	}
	if !codeName(order.Worker) {
		return fail("UnknownWorker", fmt.Errorf("no worker %q", order.Worker))
	}
	exe := filepath.Join(w.CodeDir, order.Worker)
	if _, err := os.Stat(exe); err != nil {
		return fail("UnknownWorker", err)
	}
	params, err := json.Marshal(order.Params)
	if err != nil {
		return fail("BadParams", err)
	}
	// Under the master's id, so that the worker's log lines name the job
	// as the master does; under one of its own, should that id run here
	// already (given again after its lease was thought lost).
	job := laboro.Job{ID: order.JobID, Args: []string{exe}, Stdin: bytes.NewReader(params)}
	h, err := ex.Submit(ctx, job)
	if errors.Is(err, laboro.ErrDuplicateID) {
		job.ID = ""
		h, err = ex.Submit(ctx, job)
	}
	if err != nil {
		return fail("NotStarted", err)
	}
	w.mu.Lock()
	r.local = h.ID()
	cancelled := r.cancelled
	w.mu.Unlock()
	if cancelled {
		ex.Cancel(h.ID()) // cancelled before it was submitted
	}
	res, err := h.Wait(ctx)
	if err != nil {
		return fail("NotStarted", err)
	}
	defer res.Output.Close()
	w.mu.Lock()
	cancelled = r.cancelled
	w.mu.Unlock()
	if cancelled && res.Status != laboro.StatusSucceeded && res.Status != laboro.StatusFailed {
		return JobCancelled, ErrorData{Error: ErrorDetail{Name: "Cancelled", Message: "cancelled by the master"}}
	}
	if res.Status == laboro.StatusKilled && w.isStopping() {
		return leftToMaster, nil // killed by Run's end: no outcome of the job's
	}
	if res.Status != laboro.StatusSucceeded {
		msg := fmt.Sprint(res.Err)
		if len(res.Stderr) > 0 {
			msg += ": " + strings.TrimSpace(string(res.Stderr))
		}
		return JobFailed, processFailure(res.Status.String(), msg, res)
	}
	if max := cmp.Or(w.MaxResult, DefaultMaxResult); res.Output.Size() > max {
		return JobFailed, processFailure("ResultTooLarge", fmt.Sprintf("the job printed %d bytes, over the worker's limit of %d on a result (MaxResult, -max-result)",
			res.Output.Size(), max), res)
	}
	out, err := res.Output.ReadAll()
	if err != nil {
		return JobFailed, processFailure("OutputLost", err.Error(), res)
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return JobDone, nil
	}
	if !json.Valid(out) {
		return JobDone, string(out) // not JSON: sent as a string
	}
	return JobDone, json.RawMessage(out)
}

// processFailure is the data of a Failed status for a job whose process
// ran: with its exit status, when it exited, and the end of its standard
// error, for the master's Result and log.
func processFailure(name, msg string, res laboro.Result) ErrorData {
	d := ErrorDetail{Name: name, Message: msg, Stderr: string(res.Stderr)}
	if res.ExitCode >= 0 {
		code := res.ExitCode
		d.ExitCode = &code
	}
	return ErrorData{Error: d}
}

// statusBody is a job message as the link carries it: {status, data}.
func statusBody(status string, data any) []byte {
	b, _ := json.Marshal(struct {
		Status string `json:"status"`
		Data   any    `json:"data"`
	}{status, data})
	return b
}

// post sends one form POST to path and decodes the answer's data into
// out (when not nil).
func (w *Worker) post(ctx context.Context, path string, form url.Values, out any) error {
	if form == nil {
		form = url.Values{}
	}
	form.Set(FieldServerID, w.ServerID)
	form.Set(FieldPassword, w.Password)
	form.Set(FieldInstance, w.process.Instance)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(w.URL, "/")+path, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := w.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var a Answer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&a); err != nil {
		return fmt.Errorf("workerserver: %s: HTTP %d, answer not JSON: %w", path, resp.StatusCode, err)
	}
	if err := a.Err(); err != nil {
		var re *RefusedError
		if errors.As(err, &re) {
			re.Code, re.Refusal = resp.StatusCode, resp.Header.Get(HeaderRefusal)
			if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
				re.RetryAfter = time.Duration(min(secs, 1<<20)) * time.Second
			}
			re.HolderRequests, _ = strconv.ParseUint(resp.Header.Get(HeaderHolderRequests), 10, 64)
			w.answered(re)
		}
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("workerserver: %s: HTTP %d", path, resp.StatusCode)
	}
	w.answered(nil)
	if out != nil && len(a.Data) > 0 {
		return json.Unmarshal(a.Data, out)
	}
	return nil
}

// codes lists the kinds of job the worker can run: CodeDir's executables.
func (w *Worker) codes() []WorkerCode {
	entries, _ := os.ReadDir(w.CodeDir)
	codes := []WorkerCode{}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0 {
			codes = append(codes, WorkerCode{Code: e.Name(), Version: Version(w.Version)})
		}
	}
	return codes
}

// masterAPI is the master as the link sees it.
type masterAPI struct{ w *Worker }

func (m *masterAPI) status(ctx context.Context, status string, data any) error {
	p := m.w.process
	p.Instance = "" // a field of its own, in every request
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	form := url.Values{FieldStatus: {status}, FieldProcess: {string(b)}}
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return err
		}
		form.Set(FieldData, string(b))
	}
	return m.w.post(ctx, m.w.Paths.Status+url.PathEscape(m.w.ServerID), form, nil)
}

func (m *masterAPI) Hello(ctx context.Context, reconnect bool) error {
	if reconnect {
		return m.status(ctx, ServerReconnecting, nil)
	}
	return m.status(ctx, ServerConnecting, nil)
}

func (m *masterAPI) Online(ctx context.Context) error {
	return m.status(ctx, ServerOnline, Startup{Startup: true, Version: Version(m.w.Version), Workers: m.w.codes()})
}

func (m *masterAPI) Send(ctx context.Context, msg link.Message) error {
	var body struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(msg.Body, &body); err != nil {
		return fmt.Errorf("workerserver: a cached message is not {status, data}: %w", err)
	}
	form := url.Values{FieldStatus: {body.Status}}
	if len(body.Data) > 0 && string(body.Data) != "null" {
		form.Set(FieldData, string(body.Data))
	}
	// A job's end asks for the next jobs, for the slots free then (the
	// one it frees among them): one request instead of two, the end and
	// a ping. A master that brings none (it has none, or does not know
	// FieldSlots) gets a ping for them, which it may hold.
	// A Processing asks for the jobs to cancel: a worker whose every slot
	// is busy pings no more, and hears of them so.
	var n int
	var answer PingData
	switch {
	case Final(body.Status):
		if n = m.w.claim(); n > 0 {
			form.Set(FieldSlots, strconv.Itoa(n))
			defer func() {
				if m.w.take(n, answer) < n {
					m.w.pinger.JobDone()
				}
			}()
		}
	case body.Status == JobProcessing && !m.w.isStopping():
		form.Set(FieldCancels, "1")
		defer func() { m.w.take(0, answer) }()
	}
	err := m.w.post(ctx, m.w.Paths.Job+url.PathEscape(msg.Key), form, &answer)
	var re *RefusedError
	if errors.As(err, &re) && re.Code == http.StatusRequestEntityTooLarge && body.Status != JobFailed {
		// Too large for the master (a big result): the job must not stay
		// Processing for ever. It fails, saying why, in a status that fits.
		why := ErrorData{Error: ErrorDetail{Name: "ResultTooLarge", Message: fmt.Sprintf(
			"the %s status of %d bytes (%d form-encoded) is over the master's limit on a request (HTTP 413): the job's result is lost",
			body.Status, len(body.Data), len(form.Encode()))}}
		m.w.Logger.Warn("the master refused a job status as too large: the job fails", zap.String("job", msg.Key),
			zap.String("status", body.Status), zap.Int("bytes", len(body.Data)))
		b, _ := json.Marshal(why)
		form.Set(FieldStatus, JobFailed)
		form.Set(FieldData, string(b))
		err = m.w.post(ctx, m.w.Paths.Job+url.PathEscape(msg.Key), form, &answer)
	}
	if errors.As(err, &re) && re.Permanent() {
		// Sending it again would be refused again (and would hold back
		// the cache): it is dropped, and said so.
		m.w.Logger.Warn("the master refused a job status for good; dropped", zap.String("job", msg.Key),
			zap.String("status", body.Status), zap.Error(err))
		return nil
	}
	return err
}

func (m *masterAPI) Goodbye(ctx context.Context) error {
	return errors.Join(m.status(ctx, ServerStopping, nil), m.status(ctx, ServerOffline, nil))
}
