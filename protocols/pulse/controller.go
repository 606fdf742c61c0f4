package pulse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/pulse/pulsepb"
	"go.uber.org/zap"
)

// DefaultAttempts is how many workers a task is given to before it fails.
const DefaultAttempts = 3

// ErrTaskFailed is the error of a task that failed on as many workers as
// Controller.Attempts allows; the last worker's words follow it.
var ErrTaskFailed = errors.New("pulse: task failed")

// Task is the contents of a pulse task, carried in laboro.Job.Meta; see
// NewTask and NewTaskFile.
type Task struct {
	data []byte
	path string
}

// NewTask returns the job of a task whose bytes are data.
func NewTask(data []byte) laboro.Job { return laboro.Job{Meta: Task{data: data}} }

// NewTaskFile returns the job of a task whose bytes are the file at path,
// read each time the task is given to a worker, never held in memory.
func NewTaskFile(path string) laboro.Job { return laboro.Job{Meta: Task{path: path}} }

// open returns the task's bytes and their number.
func (t Task) open() (io.ReadCloser, int64, error) {
	if t.path == "" {
		return io.NopCloser(bytes.NewReader(t.data)), int64(len(t.data)), nil
	}
	f, err := os.Open(t.path)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// Controller is the controller side: it listens on <Dir>/main.sock for
// workers' pulses and is a laboro.Runner whose jobs are tasks (NewTask,
// NewTaskFile): Run gives the task to a free live worker (SET_TASK over
// the worker's own socket; BUSY → another worker), fetches the result when
// the worker asks to be fetched (FETCH_ME → FETCH), and returns it as the
// job's output. A worker that fails (FAILED), leaves (SHUTDOWN) or falls
// silent past its next_pulse is removed, and its task goes to another; a
// task that a worker could not complete (TASK_FAILED) goes to another,
// up to Attempts workers. A pulse whose task_id disagrees with the task
// given to that worker, confirmed with GET_STATUS, gets the worker a
// RESTART.
//
// Set the fields before Serve; a Controller is safe for concurrent use.
type Controller struct {
	// Dir holds main.sock and the workers' sockets; "" means DefaultDir.
	// It is created with mode 0700 if missing.
	Dir string
	// Codec is the numbering and limits spoken.
	Codec Codec
	// Timeout bounds each exchange; 0 means 10 s.
	Timeout time.Duration
	// Attempts is how many workers a task may fail on; 0 means
	// DefaultAttempts.
	Attempts int
	// OutputDir receives the results as files; "" means os.TempDir.
	OutputDir string
	// Logger; nil means none.
	Logger *zap.Logger

	once    sync.Once
	mu      sync.Mutex
	nextID  uint64
	nextTsk uint64
	workers map[uint64]*cworker
	pending []*ctask
	bg      sync.WaitGroup // exchanges with workers
	ctx     context.Context
}

// cworker is a live worker, seen by the controller. Guarded by mu.
type cworker struct {
	id       uint64
	ready    bool   // it has pulsed OK since REGISTER: its socket exists
	task     *ctask // given to it
	prev     uint64 // the task it finished last; a pulse may still name it
	busy     bool   // an exchange with it is under way
	fetchMe  bool   // it asked to be fetched
	deadline *time.Timer
}

// ctask is a task inside the controller. Guarded by mu.
type ctask struct {
	id       uint64
	src      Task
	result   chan laboro.Result // buffered: the one result
	worker   *cworker
	attempts int
	lastErr  string
	done     bool
}

var (
	_ laboro.Runner    = (*Controller)(nil)
	_ laboro.Validator = (*Controller)(nil)
)

func (c *Controller) init() {
	c.once.Do(func() {
		if c.Logger == nil {
			c.Logger = zap.NewNop()
		}
		c.workers = map[uint64]*cworker{}
		c.ctx = context.Background()
	})
}

func (c *Controller) dir() string {
	if c.Dir == "" {
		return DefaultDir
	}
	return c.Dir
}

func (c *Controller) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 10 * time.Second
	}
	return c.Timeout
}

// Validate refuses a job that is not a task.
func (c *Controller) Validate(job laboro.Job) error {
	if _, ok := job.Meta.(Task); !ok {
		return errors.New("pulse: a job's Meta is its Task; see NewTask")
	}
	return nil
}

// Run gives the task to a worker and waits for its result.
func (c *Controller) Run(ctx context.Context, job laboro.Job) laboro.Result {
	c.init()
	res := laboro.Result{ID: job.ID, ExitCode: -1, Started: time.Now()}
	src, ok := job.Meta.(Task)
	if !ok {
		res.Status, res.Err, res.Ended = laboro.StatusFailed, c.Validate(job), time.Now()
		return res
	}
	c.mu.Lock()
	c.nextTsk++
	t := &ctask{id: c.nextTsk, src: src, result: make(chan laboro.Result, 1)}
	c.pending = append(c.pending, t)
	c.dispatch()
	c.mu.Unlock()

	select {
	case r := <-t.result:
		r.ID, r.Started = job.ID, res.Started
		return r
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case r := <-t.result:
		r.ID, r.Started = job.ID, res.Started
		return r
	default:
	}
	t.done = true
	c.unqueue(t)
	if w := t.worker; w != nil {
		// The worker goes on with it; its result will be thrown away.
		w.task = nil
	}
	res.Status, res.Err = laboro.Interruption(ctx)
	res.Ended = time.Now()
	return res
}

func (c *Controller) unqueue(t *ctask) {
	for i, p := range c.pending {
		if p == t {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			return
		}
	}
}

// finish delivers a task's result. c.mu is held.
func (c *Controller) finish(t *ctask, r laboro.Result) {
	if t.done {
		if r.Output != nil {
			r.Output.Close()
		}
		return
	}
	t.done = true
	t.result <- r
}

// Workers returns the ids of the live workers.
func (c *Controller) Workers() []uint64 {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]uint64, 0, len(c.workers))
	for id := range c.workers {
		ids = append(ids, id)
	}
	return ids
}

// Serve listens on <Dir>/main.sock until ctx ends, then closes it and
// waits for every exchange it started. A socket file left by a controller
// that died is replaced; one that answers is not.
func (c *Controller) Serve(ctx context.Context) error {
	c.init()
	ln, err := c.listen()
	if err != nil {
		return err
	}
	path := ln.Addr().String()
	c.Logger.Info("serving", zap.String("socket", path), zap.Stringer("numbering", c.Codec.Numbering))
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var conns sync.WaitGroup
	for {
		conn, err2 := ln.Accept()
		if err2 != nil {
			err = err2
			break
		}
		conns.Go(func() { c.servePulse(conn) })
	}
	conns.Wait()
	c.mu.Lock()
	for _, w := range c.workers {
		w.deadline.Stop()
	}
	c.mu.Unlock()
	c.bg.Wait()
	os.Remove(path)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (c *Controller) listen() (net.Listener, error) {
	if err := os.MkdirAll(c.dir(), 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(c.dir(), "main.sock")
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return nil, fmt.Errorf("pulse: a controller already answers on %s", path)
	}
	os.Remove(path) // left by a controller that died
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The directory (0700) keeps others out meanwhile.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// servePulse is one connection on main.sock: a WorkerPulse, a
// PulseResponse.
func (c *Controller) servePulse(conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(c.timeout()))
	p, err := c.Codec.ReadPulse(conn)
	var resp pulsepb.PulseResponse
	switch {
	case err == nil:
		resp = c.pulse(p)
	case isUnknownEnum(err):
		c.Logger.Warn("pulse of an unknown type", zap.Error(err))
		resp.Error = pulsepb.ControllerError_CTRL_ERR_UNKNOWN_TYPE
	default:
		c.Logger.Warn("bad pulse", zap.Error(err))
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return
		}
		resp.Error = pulsepb.ControllerError_CTRL_ERR_FAILED
	}
	if err := c.Codec.WriteMessage(conn, &resp); err != nil {
		c.Logger.Info("cannot answer a pulse", zap.Error(err))
	}
}

// pulse handles one WorkerPulse and returns the answer.
func (c *Controller) pulse(p *pulsepb.WorkerPulse) pulsepb.PulseResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.Type == pulsepb.PulseType_PULSE_REGISTER {
		c.nextID++
		w := &cworker{id: c.nextID}
		c.workers[w.id] = w
		w.deadline = time.AfterFunc(nextPulse(p), func() { c.dead(w, "no pulse in time") })
		c.Logger.Info("worker registered", zap.Uint64("worker", w.id), zap.Uint64("next_pulse", p.NextPulse))
		id := w.id
		return pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_OK, WorkerId: &id}
	}
	w := c.workers[p.WorkerId]
	if w == nil {
		return pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID}
	}
	switch p.Type {
	case pulsepb.PulseType_PULSE_SHUTDOWN:
		c.remove(w, "it shut down")
		return pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_OK}
	case pulsepb.PulseType_PULSE_OK, pulsepb.PulseType_PULSE_FETCH_ME:
	default:
		return pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_UNKNOWN_TYPE}
	}
	w.deadline.Reset(nextPulse(p))
	w.ready = true
	if p.Type == pulsepb.PulseType_PULSE_FETCH_ME {
		w.fetchMe = true
	}
	if !w.busy && !w.fetchMe && !c.agrees(w, p.TaskId) {
		w.busy = true
		c.bg.Go(func() { c.confirm(w) })
	}
	c.next(w)
	return pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_OK}
}

// next starts the exchange that w waits for, if none is under way: FETCH
// when it asked to be fetched (also for a task whose job gave up waiting,
// so that the worker is free again), else a task. c.mu is held.
func (c *Controller) next(w *cworker) {
	if w.busy || c.workers[w.id] != w {
		return
	}
	if w.fetchMe {
		w.fetchMe, w.busy = false, true
		t := w.task
		c.bg.Go(func() { c.fetch(w, t) })
		return
	}
	c.dispatch()
}

// nextPulse is how long the controller waits for a worker's next pulse.
func nextPulse(p *pulsepb.WorkerPulse) time.Duration {
	if p.NextPulse == 0 {
		return DefaultNextPulse
	}
	return time.Duration(min(p.NextPulse, 1<<20)) * time.Second
}

// agrees reports whether a pulse's task_id fits what w was given: its
// task, the one it just finished, or none while nothing is given. c.mu is
// held.
func (c *Controller) agrees(w *cworker, taskID uint64) bool {
	switch {
	case w.task != nil:
		return taskID == w.task.id || taskID == 0 || taskID == w.prev
	default:
		return taskID == 0 || taskID == w.prev
	}
}

// dead removes a worker that fell silent.
func (c *Controller) dead(w *cworker, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(w, why)
}

// remove forgets a worker and gives its task to another. c.mu is held.
func (c *Controller) remove(w *cworker, why string) {
	if c.workers[w.id] != w {
		return
	}
	delete(c.workers, w.id)
	w.deadline.Stop()
	if t := w.task; t != nil && !t.done {
		t.worker = nil
		c.pending = append([]*ctask{t}, c.pending...)
		c.Logger.Warn("worker removed; its task goes to another", zap.Uint64("worker", w.id), zap.String("why", why), zap.Uint64("task", t.id))
	} else {
		c.Logger.Info("worker removed", zap.Uint64("worker", w.id), zap.String("why", why))
	}
	w.task = nil
	c.dispatch()
}

// dispatch gives pending tasks to free ready workers. c.mu is held.
func (c *Controller) dispatch() {
	for _, w := range c.workers {
		if len(c.pending) == 0 {
			return
		}
		if !w.ready || w.busy || w.task != nil {
			continue
		}
		t := c.pending[0]
		c.pending = c.pending[1:]
		t.worker, w.task, w.busy = w, t, true
		t.attempts++
		c.bg.Go(func() { c.setTask(w, t) })
	}
}

// exchange sends one ControlMsg (and extra bytes) to worker w and reads
// its WorkerResponse; with the response's extra bytes given to extra.
func (c *Controller) exchange(w *cworker, msg *pulsepb.ControlMsg, body io.Reader, extra func(*pulsepb.WorkerResponse, io.Reader) error) (*pulsepb.WorkerResponse, error) {
	path := filepath.Join(c.dir(), strconv.FormatUint(w.id, 10)+".sock")
	conn, err := net.DialTimeout("unix", path, c.timeout())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(c.ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	conn.SetDeadline(time.Now().Add(c.timeout()))
	if err := c.Codec.WriteMessage(conn, msg); err != nil {
		return nil, err
	}
	if body != nil {
		if _, err := io.CopyN(deadlined{conn, c.timeout()}, body, int64(msg.ExtraSize)); err != nil {
			return nil, err
		}
	}
	conn.SetDeadline(time.Now().Add(c.timeout()))
	resp, err := c.Codec.ReadWorkerResponse(conn)
	if err != nil {
		return nil, err
	}
	r := io.Reader(deadlined{conn, c.timeout()})
	if extra != nil {
		return resp, extra(resp, io.LimitReader(r, int64(resp.ExtraSize)))
	}
	return resp, c.Codec.ReadExtra(r, io.Discard, resp.ExtraSize)
}

// deadlined renews a connection's deadline at every read and write, so
// that a large transfer is bounded per chunk, not in total.
type deadlined struct {
	net.Conn
	d time.Duration
}

func (c deadlined) Read(p []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.d))
	return c.Conn.Read(p)
}

func (c deadlined) Write(p []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.d))
	return c.Conn.Write(p)
}

// setTask gives task t to worker w.
func (c *Controller) setTask(w *cworker, t *ctask) {
	body, size, err := t.src.open()
	if err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		w.busy, w.task, t.worker = false, nil, nil
		c.finish(t, laboro.Result{Status: laboro.StatusFailed, ExitCode: -1, Err: fmt.Errorf("pulse: task %d: %w", t.id, err), Ended: time.Now()})
		c.dispatch()
		return
	}
	defer body.Close()
	id := t.id
	resp, err := c.exchange(w, &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_SET_TASK, ExtraSize: uint64(size), TaskId: &id}, body, nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	w.busy = false
	switch {
	case err != nil || resp.Error == pulsepb.WorkerError_WORKER_ERR_FAILED:
		c.remove(w, fmt.Sprintf("SET_TASK failed: %v", errOr(err, resp)))
	case resp.Error == pulsepb.WorkerError_WORKER_ERR_BUSY:
		// Busy with something we do not know of: the task goes to
		// another worker, and this one is asked what it runs.
		w.task, t.worker = nil, nil
		t.attempts--
		c.pending = append([]*ctask{t}, c.pending...)
		c.Logger.Info("worker busy; the task goes to another", zap.Uint64("worker", w.id), zap.Uint64("task", t.id))
		// No task is offered to it again before its next pulse: a worker
		// that stays busy would otherwise be asked in a tight loop.
		w.ready = false
		w.busy = true
		c.bg.Go(func() { c.confirm(w) })
	case resp.Error != pulsepb.WorkerError_WORKER_ERR_OK:
		c.remove(w, fmt.Sprintf("SET_TASK answered %v", resp.Error))
	default:
		c.Logger.Debug("task given", zap.Uint64("worker", w.id), zap.Uint64("task", t.id), zap.Int64("size", size))
	}
	c.next(w)
	c.dispatch()
}

func errOr(err error, resp *pulsepb.WorkerResponse) any {
	if err != nil {
		return err
	}
	return resp.Error
}

// fetch fetches the result of task t from worker w (FETCH).
func (c *Controller) fetch(w *cworker, t *ctask) {
	var out *laboro.Output
	var failure []byte
	resp, err := c.exchange(w, &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_FETCH}, nil,
		func(resp *pulsepb.WorkerResponse, r io.Reader) error {
			if resp.Error != pulsepb.WorkerError_WORKER_ERR_OK {
				var b bytes.Buffer
				if err := c.Codec.ReadExtra(r, &b, resp.ExtraSize); err != nil {
					return err
				}
				failure = b.Bytes()
				return nil
			}
			var err error
			out, err = c.keep(r, resp.ExtraSize)
			return err
		})
	c.mu.Lock()
	defer c.mu.Unlock()
	w.busy = false
	switch {
	case err != nil || resp.Error == pulsepb.WorkerError_WORKER_ERR_FAILED:
		if out != nil {
			out.Close()
		}
		c.remove(w, fmt.Sprintf("FETCH failed: %v %s", errOr(err, resp), failure))
	case resp.Error == pulsepb.WorkerError_WORKER_ERR_NO_FETCH:
	case t == nil || resp.TaskId != t.id || w.task != t:
		// A result no job waits for any more (or not the one given).
		w.prev = resp.TaskId
		if out != nil {
			out.Close()
		}
		c.Logger.Info("fetched result discarded: no job waits for it", zap.Uint64("worker", w.id), zap.Uint64("task", resp.TaskId))
	case resp.Error == pulsepb.WorkerError_WORKER_ERR_TASK_FAILED:
		w.task, w.prev, t.worker = nil, t.id, nil
		t.lastErr = string(failure)
		if t.attempts >= c.attempts() {
			c.finish(t, laboro.Result{Status: laboro.StatusFailed, ExitCode: -1, Ended: time.Now(),
				Err: fmt.Errorf("%w on %d workers: %s", ErrTaskFailed, t.attempts, failure)})
		} else if !t.done {
			c.pending = append(c.pending, t)
			c.Logger.Info("task failed on a worker; it goes to another", zap.Uint64("worker", w.id), zap.Uint64("task", t.id), zap.ByteString("error", failure))
		}
	case resp.Error == pulsepb.WorkerError_WORKER_ERR_OK:
		w.task, w.prev, t.worker = nil, t.id, nil
		c.finish(t, laboro.Result{Status: laboro.StatusSucceeded, ExitCode: 0, Ended: time.Now(), Output: out})
	default:
		if out != nil {
			out.Close()
		}
		c.remove(w, fmt.Sprintf("FETCH answered %v", resp.Error))
	}
	c.next(w)
	c.dispatch()
}

func (c *Controller) attempts() int {
	if c.Attempts <= 0 {
		return DefaultAttempts
	}
	return c.Attempts
}

// keep writes a result into a file of its own.
func (c *Controller) keep(r io.Reader, n uint64) (*laboro.Output, error) {
	f, err := os.CreateTemp(c.OutputDir, "pulse-*.result")
	if err != nil {
		return nil, err
	}
	err = c.Codec.ReadExtra(r, f, n)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, err
	}
	return laboro.NewOutput(f.Name(), int64(n)), nil
}

// confirm asks a worker whose pulse disagreed with its task what it runs
// (GET_STATUS), and sends it RESTART if it still disagrees.
func (c *Controller) confirm(w *cworker) {
	resp, err := c.exchange(w, &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_GET_STATUS}, nil, nil)
	c.mu.Lock()
	w.busy = false
	if err != nil || resp.Error != pulsepb.WorkerError_WORKER_ERR_OK {
		c.remove(w, fmt.Sprintf("GET_STATUS failed: %v", errOr(err, resp)))
		c.mu.Unlock()
		return
	}
	if c.agrees(w, resp.TaskId) {
		c.next(w)
		c.mu.Unlock()
		return
	}
	c.remove(w, fmt.Sprintf("it runs task %d, not the one it was given", resp.TaskId))
	c.mu.Unlock()
	c.restart(w)
}

// restart tells a removed worker to end its work (RESTART); errors are
// ignored, as the spec says.
func (c *Controller) restart(w *cworker) {
	if _, err := c.exchange(w, &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_RESTART}, nil, nil); err != nil {
		c.Logger.Info("RESTART not delivered", zap.Uint64("worker", w.id), zap.Error(err))
	}
}

// isUnknownEnum reports whether a decode error is an enum value that the
// numbering does not know.
func isUnknownEnum(err error) bool {
	var pe *ProtocolError
	return errors.As(err, &pe) && bytes.Contains([]byte(pe.Msg), []byte(" unknown in the "))
}
