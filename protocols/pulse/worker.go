package pulse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/pulse/pulsepb"
	"go.uber.org/zap"
)

// Defaults of Worker.
const (
	// DefaultDir is the controller's socket directory.
	DefaultDir = "/run/controller"
	// DefaultNextPulse is the next_pulse a worker announces, as the
	// reference does (it pulses every 30 to 45 s).
	DefaultNextPulse = 60 * time.Second
)

const (
	workerTimeout  = 10 * time.Second // Worker.Timeout's default
	workerRetry    = time.Second      // Worker.Retry's default
	workerMaxRetry = 30 * time.Second // the longest wait between attempts
)

// ErrRestarted is returned by Worker.Run when the controller sent RESTART.
var ErrRestarted = errors.New("pulse: the controller sent RESTART")

// errForgotten ends a registration: the controller answered UNKNOWN_ID.
var errForgotten = errors.New("pulse: the controller does not know this worker")

// Worker is the worker side of the protocol. It registers with the
// controller on <Dir>/main.sock, listens on <Dir>/<worker_id>.sock for the
// controller's messages, and pulses the controller (one connection per
// pulse) at once after registering and then every 1/2 to 3/4 of NextPulse,
// picked at random each time, as the reference does.
//
// A task (SET_TASK) runs Command through a local laboro.Executor: the
// task's bytes, kept in an unlinked temporary file rather than in memory,
// are its standard input; its standard output, kept in a file in
// OutputDir, is the result; the tail of its standard error explains a
// failure. The worker takes one task at a time: it is busy (BUSY to a
// SET_TASK) from the moment it accepts a task until the controller has
// fetched its outcome. When the task ends the worker pulses FETCH_ME at
// once, and every later pulse is a FETCH_ME too until the outcome is
// fetched, so that a FETCH_ME that was lost (the controller unreachable,
// or a new registration) is sent again. A FETCH gets the result (OK and
// the output's bytes, streamed from the file) or TASK_FAILED and the
// error text. The worker is free from the moment it begins that answer (a
// controller that has read it must not find the worker still busy); once
// the answer is written in full the outcome's file is removed, and should
// the answer fail, the outcome is offered again.
//
// The task_id of a pulse or of a GET_STATUS answer is the task accepted
// (running, or ended and not yet fetched); it is 0 while the worker is
// free, and while a SET_TASK is still being received.
//
// A pulse answered UNKNOWN_ID means the controller forgot the worker: it
// stops listening on its old socket (the file is removed) and registers
// again, with the running task left running and its outcome offered
// under the new id. A pulse answered UNKNOWN_TYPE or FAILED is logged and
// the worker goes on. A pulse that fails (no connection, no answer) is
// logged and sent again after Retry, doubling with every further failure
// up to 30 s, but never later than the regular pulse would be; an attempt
// to register that fails is repeated the same way. These follow the
// reconnect policy of the reference's scheduling notes: one attempt at a
// time, a wait that grows between failed attempts, a pulse at once after
// (re)connecting, and messages held back while disconnected sent then.
//
// RESTART is answered OK; then the running task is killed and Run
// returns ErrRestarted without sending anything more. When Run's context
// ends, the task is killed, the worker sends SHUTDOWN (best effort, within
// Timeout) and returns ctx.Err(). Either way, Run returns once every
// goroutine it started has ended, its socket file and every file it
// created are removed.
//
// Set the fields before Run; a Worker runs one session at a time.
type Worker struct {
	// Dir is the controller's directory: main.sock is there, and the
	// worker listens on <Dir>/<worker_id>.sock. "" means DefaultDir.
	Dir string
	// Command is the program that solves a task, with its arguments: it
	// gets the task's bytes on standard input; its standard output is the
	// result. Required.
	Command []string
	// NextPulse is announced in every pulse, in whole seconds (at least
	// 1); 0 means DefaultNextPulse. The worker pulses again after 1/2 to
	// 3/4 of it (of the announced value, if that is shorter).
	NextPulse time.Duration
	// Codec is the numbering and limits spoken.
	Codec Codec
	// Timeout bounds each exchange: dialing, and each read or write; 0
	// means 10 s.
	Timeout time.Duration
	// Retry is the first wait before another attempt after a failure; it
	// doubles with each failure in a row, up to 30 s. 0 means 1 s.
	Retry time.Duration
	// OutputDir is where the tasks' outputs (<pid>.output) and inputs are
	// kept; it is created if needed. "" means a temporary directory,
	// removed when Run returns.
	OutputDir string
	// Logger receives the worker's log; nil means none.
	Logger *zap.Logger

	id atomic.Uint64
}

// ID returns the worker_id given by the controller's last REGISTER (0
// before the first).
func (w *Worker) ID() uint64 { return w.id.Load() }

// Run registers with the controller and serves it until the controller
// sends RESTART (ErrRestarted) or ctx ends (ctx.Err()). Failures to reach
// the controller are not errors: the worker tries again. Other errors
// (a missing Command, an output directory or socket that cannot be
// created) end Run at once.
func (w *Worker) Run(ctx context.Context) (err error) {
	if len(w.Command) == 0 || w.Command[0] == "" {
		return errors.New("pulse: Worker.Command is required")
	}
	r := w.newRun()
	outDir := w.OutputDir
	if outDir == "" {
		if outDir, err = os.MkdirTemp("", "pulse-worker-"); err != nil {
			return fmt.Errorf("pulse: create output directory: %w", err)
		}
		defer os.RemoveAll(outDir)
	} else if err := os.MkdirAll(outDir, 0o700); err != nil {
		return fmt.Errorf("pulse: create output directory: %w", err)
	}
	r.outDir = outDir
	runner := &laboro.ProcessRunner{Dir: outDir, Stderr: laboro.StderrTail, Logger: r.log}
	r.ex, err = laboro.New(laboro.WithRunner(runner), laboro.WithPoolSize(1),
		laboro.WithConcurrency(1), laboro.WithBufferSize(1), laboro.WithLogger(r.log))
	if err != nil {
		return err
	}

	err = r.serve(ctx)

	r.stopListening()
	r.closeConns()
	r.ex.Close() // kills the running task
	if r.registered && !errors.Is(err, ErrRestarted) {
		r.shutdown()
	}
	r.wg.Wait()
	r.task.output.Close() // an outcome that was not fetched
	r.log.Info("worker stopped", zap.Error(err))
	return err
}

// workerRun is the state of one Run.
type workerRun struct {
	w        *Worker
	log      *zap.Logger
	codec    Codec
	dir      string
	timeout  time.Duration
	retry    time.Duration
	announce uint64        // next_pulse, in seconds
	period   time.Duration // the pulses come every 1/2 to 3/4 of it
	outDir   string
	ex       *laboro.Executor

	// registered is true while the controller knows this worker's id.
	// Only Run's goroutine uses it.
	registered bool

	wg      sync.WaitGroup // accept loops, connections, task waiters
	kick    chan struct{}  // a task ended: pulse FETCH_ME now
	restart chan struct{}  // closed on RESTART
	once    sync.Once      // closes restart

	mu      sync.Mutex
	ln      *net.UnixListener // nil while not listening
	conns   map[net.Conn]struct{}
	closing bool // Run is ending: no more connections
	task    workerTask
}

// taskState is where the worker's one task is.
type taskState uint8

const (
	taskIdle     taskState = iota // free
	taskStarting                  // a SET_TASK is being received
	taskRunning                   // the command runs
	taskDone                      // ended; its outcome waits for FETCH
)

// workerTask is the worker's task.
type workerTask struct {
	state   taskState
	id      uint64
	output  *laboro.Output // a successful task's result
	failed  bool
	failure []byte // a failed task's explanation
}

// current returns the task_id to report: the task accepted, 0 when none.
func (t *workerTask) current() uint64 {
	if t.state == taskIdle || t.state == taskStarting {
		return 0
	}
	return t.id
}

func (w *Worker) newRun() *workerRun {
	r := &workerRun{
		w:       w,
		log:     w.Logger,
		codec:   w.Codec,
		dir:     w.Dir,
		timeout: w.Timeout,
		retry:   w.Retry,
		kick:    make(chan struct{}, 1),
		restart: make(chan struct{}),
		conns:   make(map[net.Conn]struct{}),
	}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	if r.dir == "" {
		r.dir = DefaultDir
	}
	if r.timeout <= 0 {
		r.timeout = workerTimeout
	}
	if r.retry <= 0 {
		r.retry = workerRetry
	}
	next := w.NextPulse
	if next <= 0 {
		next = DefaultNextPulse
	}
	r.announce = max(uint64(next/time.Second), 1)
	r.period = min(next, time.Duration(r.announce)*time.Second)
	return r
}

// serve registers, listens and pulses, registering again whenever the
// controller forgets the worker.
func (r *workerRun) serve(ctx context.Context) error {
	for {
		id, err := r.register(ctx)
		if err != nil {
			return err
		}
		if err := r.listen(id); err != nil {
			return err
		}
		err = r.pulses(ctx, id)
		if !errors.Is(err, errForgotten) {
			return err
		}
		r.registered = false
		r.stopListening()
	}
}

// register sends REGISTER until the controller gives the worker an id.
func (r *workerRun) register(ctx context.Context) (uint64, error) {
	wait := r.retry
	for {
		resp, err := r.exchange(ctx, &pulsepb.WorkerPulse{
			Type: pulsepb.PulseType_PULSE_REGISTER, NextPulse: r.announce,
		})
		if err == nil {
			switch id := resp.GetWorkerId(); {
			case resp.GetError() != pulsepb.ControllerError_CTRL_ERR_OK:
				err = fmt.Errorf("pulse: REGISTER answered %v", resp.GetError())
			case id == 0:
				err = errors.New("pulse: REGISTER answered OK without a worker_id")
			default:
				r.w.id.Store(id)
				r.registered = true
				r.log.Info("registered", zap.Uint64("worker", id))
				return id, nil
			}
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		r.log.Warn("could not register", zap.Error(err), zap.Duration("retry in", wait))
		if err := r.sleep(ctx, wait); err != nil {
			return 0, err
		}
		wait = min(2*wait, workerMaxRetry)
	}
}

// sleep waits d, unless ctx ends or the controller sends RESTART.
func (r *workerRun) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-r.restart:
		return ErrRestarted
	}
}

// pulses pulses the controller as worker id: at once, then every
// interval, and at once when a task ends. It returns errForgotten when
// the controller answers UNKNOWN_ID.
func (r *workerRun) pulses(ctx context.Context, id uint64) error {
	select {
	case <-r.kick: // the first pulse reports it
	default:
	}
	t := time.NewTimer(0)
	defer t.Stop()
	wait, failures := r.retry, 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.restart:
			return ErrRestarted
		case <-t.C:
		case <-r.kick:
		}
		select {
		case <-r.kick: // this pulse reports it
		default:
		}
		r.mu.Lock()
		typ, task := pulsepb.PulseType_PULSE_OK, r.task.current()
		if r.task.state == taskDone {
			typ = pulsepb.PulseType_PULSE_FETCH_ME
		}
		r.mu.Unlock()
		resp, err := r.exchange(ctx, &pulsepb.WorkerPulse{
			Type: typ, WorkerId: id, TaskId: task, NextPulse: r.announce,
		})
		next := r.interval()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failures++
			next = min(next, wait)
			r.log.Warn("pulse failed", zap.Stringer("type", typ), zap.Error(err),
				zap.Int("failures", failures), zap.Duration("retry in", next))
			wait = min(2*wait, workerMaxRetry)
			t.Reset(next)
			continue
		case resp.GetError() == pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID:
			r.log.Warn("the controller forgot this worker: registering again", zap.Uint64("worker", id))
			return errForgotten
		case resp.GetError() != pulsepb.ControllerError_CTRL_ERR_OK:
			r.log.Warn("pulse refused", zap.Stringer("type", typ), zap.Stringer("error", resp.GetError()))
		default:
			if failures > 0 {
				r.log.Info("the controller answers again", zap.Int("failures", failures))
			}
			r.log.Debug("pulse", zap.Stringer("type", typ), zap.Uint64("task", task))
		}
		wait, failures = r.retry, 0
		t.Reset(next)
	}
}

// interval returns the time until the next regular pulse: 1/2 to 3/4 of
// the period, at random.
func (r *workerRun) interval() time.Duration {
	return r.period/2 + rand.N(r.period/4+1)
}

// exchange sends p to the controller on its own connection and reads the
// answer, within the timeout; it gives up when ctx ends.
func (r *workerRun) exchange(ctx context.Context, p *pulsepb.WorkerPulse) (*pulsepb.PulseResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", filepath.Join(r.dir, "main.sock"))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := r.codec.WriteMessage(conn, p); err != nil {
		return nil, fmt.Errorf("send %v: %w", p.GetType(), err)
	}
	resp, err := r.codec.ReadPulseResponse(conn)
	if err != nil {
		return nil, fmt.Errorf("answer to %v: %w", p.GetType(), err)
	}
	return resp, nil
}

// shutdown tells the controller the worker leaves, best effort.
func (r *workerRun) shutdown() {
	id := r.w.ID()
	resp, err := r.exchange(context.Background(), &pulsepb.WorkerPulse{
		Type: pulsepb.PulseType_PULSE_SHUTDOWN, WorkerId: id,
	})
	switch {
	case err != nil:
		r.log.Warn("could not send SHUTDOWN", zap.Error(err))
	case resp.GetError() != pulsepb.ControllerError_CTRL_ERR_OK:
		r.log.Warn("SHUTDOWN refused", zap.Stringer("error", resp.GetError()))
	default:
		r.log.Info("shut down", zap.Uint64("worker", id))
	}
}

// listen creates <dir>/<id>.sock, replacing a stale socket of that name,
// and serves it.
func (r *workerRun) listen(id uint64) error {
	path := filepath.Join(r.dir, strconv.FormatUint(id, 10)+".sock")
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == fs.ModeSocket {
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("pulse: remove stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("pulse: listen: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("pulse: listen: %w", err)
	}
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	r.wg.Add(1)
	go r.accept(ln)
	r.log.Info("listening", zap.String("socket", path))
	return nil
}

// stopListening closes the listener, which removes its socket file.
// Connections already accepted go on.
func (r *workerRun) stopListening() {
	r.mu.Lock()
	ln := r.ln
	r.ln = nil
	r.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
}

// closeConns ends every connection and refuses new ones.
func (r *workerRun) closeConns() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closing = true
	for c := range r.conns {
		c.Close()
	}
}

// accept serves ln's connections, each on a goroutine of its own.
func (r *workerRun) accept(ln *net.UnixListener) {
	defer r.wg.Done()
	var pause time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, for example: wait a little, as net/http does.
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			r.log.Warn("accept failed", zap.Error(err), zap.Duration("retry in", pause))
			time.Sleep(pause)
			continue
		}
		pause = 0
		r.mu.Lock()
		if r.closing {
			r.mu.Unlock()
			conn.Close()
			continue
		}
		r.conns[conn] = struct{}{}
		r.wg.Add(1)
		r.mu.Unlock()
		go r.serveConn(conn)
	}
}

// workerConn sets a deadline before every read and write.
type workerConn struct {
	net.Conn
	timeout time.Duration
}

func (c workerConn) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
	return c.Conn.Read(p)
}

func (c workerConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(p)
}

// serveConn answers one ControlMsg.
func (r *workerRun) serveConn(c net.Conn) {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
		c.Close()
	}()
	c.SetDeadline(time.Now().Add(r.timeout)) // the whole ControlMsg
	msg, err := r.codec.ReadControl(c)
	conn := workerConn{Conn: c, timeout: r.timeout}
	if err != nil {
		if !errors.Is(err, io.EOF) {
			r.log.Warn("bad control message", zap.Error(err))
			r.reply(conn, pulsepb.WorkerError_WORKER_ERR_FAILED, 0, []byte(err.Error()))
		}
		return
	}
	r.log.Debug("control message", zap.Stringer("type", msg.GetType()),
		zap.Uint64("task", msg.GetTaskId()), zap.Uint64("extra", msg.GetExtraSize()))
	if msg.GetType() == pulsepb.ControlType_CTRL_SET_TASK {
		r.setTask(conn, msg)
		return
	}
	if err := r.codec.ReadExtra(conn, io.Discard, msg.GetExtraSize()); err != nil {
		r.log.Warn("control message cut short", zap.Stringer("type", msg.GetType()), zap.Error(err))
		return
	}
	switch msg.GetType() {
	case pulsepb.ControlType_CTRL_FETCH:
		r.fetch(conn)
	case pulsepb.ControlType_CTRL_GET_STATUS:
		r.mu.Lock()
		task := r.task.current()
		r.mu.Unlock()
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_OK, task, nil)
	case pulsepb.ControlType_CTRL_RESTART:
		r.mu.Lock()
		task := r.task.current()
		r.mu.Unlock()
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_OK, task, nil)
		r.log.Info("RESTART received")
		r.once.Do(func() { close(r.restart) })
	default:
		text := fmt.Sprintf("unknown control type %d", int32(msg.GetType()))
		r.log.Warn(text)
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_FAILED, 0, []byte(text))
	}
}

// reply sends a WorkerResponse and its extra bytes.
func (r *workerRun) reply(w io.Writer, code pulsepb.WorkerError, task uint64, extra []byte) error {
	err := r.codec.WriteMessage(w, &pulsepb.WorkerResponse{
		Error: code, TaskId: task, ExtraSize: uint64(len(extra)),
	})
	if err == nil && len(extra) > 0 {
		_, err = w.Write(extra)
	}
	if err != nil {
		r.log.Warn("could not answer", zap.Stringer("answer", code), zap.Error(err))
	}
	return err
}

// setTask answers SET_TASK: it starts the task unless the worker is busy.
func (r *workerRun) setTask(conn workerConn, msg *pulsepb.ControlMsg) {
	id, size := msg.GetTaskId(), msg.GetExtraSize()
	r.mu.Lock()
	state, current := r.task.state, r.task.current()
	if state == taskIdle && id != 0 {
		r.task = workerTask{state: taskStarting, id: id}
	}
	r.mu.Unlock()
	if state != taskIdle || id == 0 {
		if err := r.codec.ReadExtra(conn, io.Discard, size); err != nil {
			return
		}
		if id == 0 {
			r.reply(conn, pulsepb.WorkerError_WORKER_ERR_FAILED, 0, []byte("SET_TASK without a task_id"))
			return
		}
		r.log.Info("busy: task refused", zap.Uint64("task", id), zap.Uint64("current", current))
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_BUSY, current, nil)
		return
	}

	stdin, err := r.receiveTask(conn, size)
	var h *laboro.Handle
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		h, err = r.ex.Submit(ctx, laboro.Job{ID: "task-" + strconv.FormatUint(id, 10), Args: r.w.Command, Stdin: stdin})
		cancel()
		if err != nil {
			stdin.Close()
		}
	}
	if err != nil {
		r.mu.Lock()
		r.task = workerTask{}
		r.mu.Unlock()
		r.log.Warn("task not started", zap.Uint64("task", id), zap.Error(err))
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_FAILED, id, []byte(err.Error()))
		return
	}
	r.mu.Lock()
	r.task.state = taskRunning
	r.mu.Unlock()
	r.wg.Add(1)
	go r.await(h, id, stdin)
	r.log.Info("task started", zap.Uint64("task", id), zap.Uint64("size", size))
	r.reply(conn, pulsepb.WorkerError_WORKER_ERR_OK, id, nil)
}

// receiveTask reads a task's n bytes into a temporary file, unlinked at
// once, and returns it rewound.
func (r *workerRun) receiveTask(conn io.Reader, n uint64) (*os.File, error) {
	f, err := os.CreateTemp(r.outDir, ".task-*")
	if err != nil {
		r.codec.ReadExtra(conn, io.Discard, n)
		return nil, fmt.Errorf("pulse: keep the task: %w", err)
	}
	os.Remove(f.Name())
	if err = r.codec.ReadExtra(conn, f, n); err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pulse: receive the task: %w", err)
	}
	return f, nil
}

// await keeps the outcome of task id once it ends, and has the controller
// told.
func (r *workerRun) await(h *laboro.Handle, id uint64, stdin *os.File) {
	defer r.wg.Done()
	<-h.Done()
	res, _ := h.Result()
	stdin.Close()
	t := workerTask{state: taskDone, id: id}
	if res.Status == laboro.StatusSucceeded {
		t.output = res.Output
		r.log.Info("task done", zap.Uint64("task", id), zap.Int64("size", res.Output.Size()),
			zap.Duration("took", res.Duration()))
	} else {
		res.Output.Close()
		t.failed, t.failure = true, failureText(res)
		r.log.Info("task failed", zap.Uint64("task", id), zap.Stringer("status", res.Status),
			zap.Error(res.Err))
	}
	r.mu.Lock()
	r.task = t
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// failureText explains a failed task: the tail of its standard error, or
// else its error.
func failureText(res laboro.Result) []byte {
	if len(res.Stderr) > 0 {
		return res.Stderr
	}
	if res.Err != nil {
		return []byte(res.Err.Error())
	}
	return []byte(res.Status.String())
}

// fetch answers FETCH with the outcome of the task, if it has ended. The
// worker is free from the moment it starts answering, so that a
// controller that has read the answer finds it free; should the answer
// not be written in full, the outcome is offered again (unless, against
// the protocol, the worker was given a new task meanwhile).
func (r *workerRun) fetch(conn workerConn) {
	r.mu.Lock()
	t := r.task
	if t.state != taskDone {
		r.mu.Unlock()
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_NO_FETCH, t.current(), nil)
		return
	}
	r.task = workerTask{}
	r.mu.Unlock()
	var err error
	if t.failed {
		err = r.reply(conn, pulsepb.WorkerError_WORKER_ERR_TASK_FAILED, t.id, t.failure)
	} else {
		err = r.sendOutput(conn, t.id, t.output)
	}
	if err == nil {
		t.output.Close()
		r.log.Info("task fetched", zap.Uint64("task", t.id), zap.Bool("failed", t.failed))
		return
	}
	r.mu.Lock()
	kept := r.task.state == taskIdle
	if kept {
		r.task = t
	}
	r.mu.Unlock()
	if !kept {
		t.output.Close()
		r.log.Error("task outcome lost: a new task came before it was fetched", zap.Uint64("task", t.id))
	}
}

// sendOutput sends OK and a task's output, streamed from its file.
func (r *workerRun) sendOutput(conn workerConn, id uint64, out *laboro.Output) error {
	f, err := out.Open()
	if err != nil {
		return r.reply(conn, pulsepb.WorkerError_WORKER_ERR_TASK_FAILED, id,
			[]byte("the result is lost: "+err.Error()))
	}
	defer f.Close()
	size := out.Size()
	if err := r.codec.WriteMessage(conn, &pulsepb.WorkerResponse{
		Error: pulsepb.WorkerError_WORKER_ERR_OK, TaskId: id, ExtraSize: uint64(size),
	}); err != nil {
		r.log.Warn("could not send the result", zap.Uint64("task", id), zap.Error(err))
		return err
	}
	if _, err := io.CopyN(conn, f, size); err != nil {
		r.log.Warn("could not send the result", zap.Uint64("task", id), zap.Error(err))
		return err
	}
	return nil
}
