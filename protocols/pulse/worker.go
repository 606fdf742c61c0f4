package pulse

import (
	"bytes"
	"cmp"
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
	"github.com/laboro-go/laboro/internal/lograte"
	"github.com/laboro-go/laboro/protocols/pulse/pulsepb"
	"github.com/laboro-go/laboro/transport"
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

// Why a registration ends, short of Run's end.
var (
	// errForgotten: the controller answered UNKNOWN_ID.
	errForgotten = errors.New("pulse: the controller does not know this worker")
	// errRestart: the controller sent RESTART.
	errRestart = errors.New("pulse: the controller sent RESTART")
	// errIDInUse: another process listens on the socket of the id the
	// controller gave (a worker of an earlier controller, which numbered
	// its workers the same way).
	errIDInUse = errors.New("pulse: another worker listens on this id's socket")
)

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
// under the new id. A worker given an id whose socket another process
// listens on (a worker of a controller that was restarted and numbers its
// workers from the same start) leaves that socket alone and registers
// again; a socket file of its id that no one listens on it replaces. A pulse answered UNKNOWN_TYPE or FAILED is logged and
// the worker goes on. An answer that makes sense only if the controller
// speaks the other numbering (see the package documentation) is logged
// too, once until the worker registers, with a hint. A pulse that fails (no connection, no answer) is
// logged and sent again after Retry, doubling with every further failure
// up to 30 s, but never later than the regular pulse would be; an attempt
// to register that fails is repeated the same way. These follow the
// reconnect policy of the reference's scheduling notes: one attempt at a
// time, a wait that grows between failed attempts, a pulse at once after
// (re)connecting, and messages held back while disconnected sent then.
//
// RESTART is answered OK; then the worker ends its work, as the spec
// demands: it stops listening on its socket (the file is removed), kills
// the task it runs (its whole process group, through the Executor's
// Cancel) or forgets the outcome it holds, and registers again, free,
// under a new id. When Run's context ends, the task is killed, the worker
// sends SHUTDOWN (best effort, within Timeout) and returns ctx.Err(). Run
// returns once every goroutine it started has ended, its socket file and
// every file it created are removed.
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
	// means 10 s. A pulse, with its answer, must be done within it.
	Timeout time.Duration
	// ExchangeTimeout bounds a whole exchange on the worker's socket, from
	// the connection to the last byte of the answer: a peer that sends the
	// message (a task's bytes) or reads the answer a byte now and then is
	// cut (ErrTooSlow), logged at most once a second. 0 means 6 × Timeout
	// (a minute).
	ExchangeTimeout time.Duration
	// Retry is the first wait before another attempt after a failure; it
	// doubles with each failure in a row, up to 30 s. 0 means 1 s.
	Retry time.Duration
	// OutputDir is where the tasks' outputs (<pid>.output) and inputs are
	// kept; it is created if needed. "" means a temporary directory,
	// removed when Run returns.
	OutputDir string
	// MaxConns bounds the connections the worker's socket serves at once;
	// one more is closed at once, unanswered. 0 means DefaultMaxConns.
	MaxConns int
	// Logger receives the worker's log; nil means none.
	Logger *zap.Logger

	id atomic.Uint64
	// crash, set by tests before Run, has Run end as a crash would: no
	// SHUTDOWN.
	crash bool
}

// ID returns the worker_id given by the controller's last REGISTER (0
// before the first).
func (w *Worker) ID() uint64 { return w.id.Load() }

// Run registers with the controller and serves it until ctx ends, then
// returns ctx.Err(). Failures to reach the controller are not errors: the
// worker tries again. Other errors (a missing Command, an output directory
// or socket that cannot be created, a socket that fails to accept) end Run
// at once.
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

	ctx, cancel := context.WithCancel(ctx)
	err = r.serve(ctx)
	cancel()     // the socket is closed, and every connection on it
	r.ex.Close() // kills the running task
	if r.registered && !r.w.crash {
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
	whole    time.Duration // Worker.ExchangeTimeout
	retry    time.Duration
	announce uint64        // next_pulse, in seconds
	period   time.Duration // the pulses come every 1/2 to 3/4 of it
	outDir   string
	ex       *laboro.Executor

	// registered is true while the controller knows this worker's id;
	// hinted, once an answer that makes sense only in the other numbering
	// has been logged, until the next registration. Only Run's goroutine
	// uses them.
	registered bool
	hinted     bool

	wg       sync.WaitGroup  // the socket's accept loop and connections, task waiters
	conns    atomic.Int64    // the socket's connections being served
	refusals lograte.Limited // what a peer causes at will (refusals, bad messages), logged at most once a second
	kick     chan struct{}   // a task ended: pulse FETCH_ME now

	mu   sync.Mutex
	task workerTask
	gen  uint64 // counts the tasks accepted and dropped: a task's own is its gen
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
	gen     uint64         // workerRun.gen when it was accepted
	h       *laboro.Handle // while it runs
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
	r.whole = w.ExchangeTimeout
	if r.whole <= 0 {
		r.whole = exchangeTimeouts * r.timeout
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
// controller forgets the worker or sends RESTART. Connections on a socket
// live until ctx ends, past the registration they came in.
func (r *workerRun) serve(ctx context.Context) error {
	for {
		// Before a word goes to whatever answers there: in a directory
		// others may enter, it may not be the controller. (A directory
		// not made yet is the controller's to make: register waits.)
		if err := checkDir(r.dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		id, err := r.register(ctx)
		if err != nil {
			return err
		}
		err = r.session(ctx, id)
		switch {
		case errors.Is(err, errForgotten):
		case errors.Is(err, errRestart):
			r.dropTask()
		case errors.Is(err, errIDInUse):
			// The controller gave the id of a live worker of an earlier
			// controller: this one takes another, and leaves that
			// socket to its owner.
			r.log.Warn("the controller gave an id whose socket another worker listens on (a worker of a controller that was restarted?): registering again",
				zap.Uint64("worker", id))
		default:
			return err
		}
		r.registered = false
	}
}

// session listens on <dir>/<id>.sock, replacing a stale socket of that
// name (errIDInUse if another process listens on it), and pulses as
// worker id until the registration ends; the socket file is removed then.
func (r *workerRun) session(ctx context.Context, id uint64) error {
	if err := checkDir(r.dir); err != nil {
		return err
	}
	path := filepath.Join(r.dir, strconv.FormatUint(id, 10)+".sock")
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == fs.ModeSocket {
		if conn, err := net.DialTimeout("unix", path, r.timeout); err == nil {
			conn.Close()
			return errIDInUse
		}
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
	r.log.Info("listening", zap.String("socket", path))

	lctx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		ln.Close() // now, not when Serve gets to it: the file goes at once
	}()
	restart := make(chan struct{}, 1)
	served := make(chan error, 1)
	r.wg.Go(func() {
		// The connections live on Run's context: a registration that
		// ends does not cut an answer short.
		served <- transport.Serve(lctx, ln, func(_ context.Context, c net.Conn) { r.serveConn(ctx, c, restart) })
	})
	return r.pulses(ctx, id, restart, served)
}

// register sends REGISTER until the controller gives the worker an id.
func (r *workerRun) register(ctx context.Context) (uint64, error) {
	backoff := transport.Backoff{Min: r.retry, Max: workerMaxRetry}
	for {
		resp, err := r.exchange(ctx, &pulsepb.WorkerPulse{
			Type: pulsepb.PulseType_PULSE_REGISTER, NextPulse: r.announce,
		})
		r.checkNumbering(pulsepb.PulseType_PULSE_REGISTER, resp, err)
		if err == nil {
			switch id := resp.GetWorkerId(); {
			case resp.GetError() != pulsepb.ControllerError_CTRL_ERR_OK:
				err = fmt.Errorf("pulse: REGISTER answered %v", resp.GetError())
			case id == 0:
				err = errors.New("pulse: REGISTER answered OK without a worker_id")
			default:
				r.w.id.Store(id)
				r.registered, r.hinted = true, false
				r.log.Info("registered", zap.Uint64("worker", id))
				return id, nil
			}
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		wait := backoff.Next()
		r.log.Warn("could not register", zap.Error(err), zap.Duration("retry in", wait))
		if err := r.sleep(ctx, wait); err != nil {
			return 0, err
		}
	}
}

// sleep waits d, unless ctx ends.
func (r *workerRun) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pulses pulses the controller as worker id: at once, then every
// interval, and at once when a task ends. It returns errForgotten when
// the controller answers UNKNOWN_ID, errRestart when restart receives
// (RESTART on this registration's socket), and the error of the socket's
// accept loop should it end.
func (r *workerRun) pulses(ctx context.Context, id uint64, restart <-chan struct{}, served <-chan error) error {
	select {
	case <-r.kick: // the first pulse reports it
	default:
	}
	t := time.NewTimer(0)
	defer t.Stop()
	backoff, failures := transport.Backoff{Min: r.retry, Max: workerMaxRetry}, 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-restart:
			return errRestart
		case err := <-served:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("pulse: worker %d's socket: %w", id, err)
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
		r.checkNumbering(typ, resp, err)
		next := r.interval()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failures++
			next = min(next, backoff.Next())
			r.log.Warn("pulse failed", zap.Stringer("type", typ), zap.Error(err),
				zap.Int("failures", failures), zap.Duration("retry in", next))
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
		backoff.Reset()
		failures = 0
		t.Reset(next)
	}
}

// checkNumbering logs, once until the next registration, an answer to a
// pulse of type sent that makes sense only if the controller speaks the
// other numbering: one whose error is unknown in the worker's (a spec
// CTRL_ERR_OK, 0, is INVALID in the later numbering), UNKNOWN_TYPE to a
// pulse of a type both numberings have (the spec's UNKNOWN_ID is the
// later UNKNOWN_TYPE), or UNKNOWN_ID to a REGISTER, which names no id (a
// spec controller reads a later REGISTER as a FETCH_ME from worker 0; a
// later one answers the spec's REGISTER, INVALID to it, UNKNOWN_TYPE,
// which is the spec's UNKNOWN_ID).
func (r *workerRun) checkNumbering(sent pulsepb.PulseType, resp *pulsepb.PulseResponse, err error) {
	n := r.codec.Numbering
	var answer string
	var ee *EnumError
	switch {
	case errors.As(err, &ee):
		if !knownIn(controllerErrorNames, n.other(), ee.Value) {
			return
		}
		answer = fmt.Sprintf("error %d, %s in the %v numbering", ee.Value,
			wireName(controllerErrorNames, n.other(), ee.Value), n.other())
	case err != nil:
		return
	case resp.GetError() == pulsepb.ControllerError_CTRL_ERR_UNKNOWN_TYPE,
		resp.GetError() == pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID && sent == pulsepb.PulseType_PULSE_REGISTER:
		wire, _ := r.codec.toWire(int32(resp.GetError()), controllerErrors, false)
		answer = fmt.Sprintf("%s (error %d: %s in the %v numbering)", wireName(controllerErrorNames, n, wire), wire,
			wireName(controllerErrorNames, n.other(), wire), n.other())
	default:
		return
	}
	if r.hinted {
		return
	}
	r.hinted = true
	r.log.Warn("an answer that makes sense only in the other numbering",
		zap.String("pulse", wireName(pulseTypeNames, SpecNumbering, int32(sent))), zap.String("answer", answer),
		zap.String("hint", numberingHint(n, "controller")))
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
	raw, err := d.DialContext(ctx, "unix", filepath.Join(r.dir, "main.sock"))
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	conn, stop := transport.Interruptible(ctx, raw)
	defer stop()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	if err := r.codec.WriteMessage(conn, p); err != nil {
		return nil, fmt.Errorf("send %v: %w", p.GetType(), err)
	}
	br := newReader(conn)
	defer freeReader(br)
	resp, err := r.codec.ReadPulseResponse(br)
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

// serveConn answers one ControlMsg, unless ctx ends first. RESTART is
// told to restart. Each read and write has Timeout, and the whole
// exchange ExchangeTimeout.
func (r *workerRun) serveConn(ctx context.Context, c net.Conn, restart chan<- struct{}) {
	begun := time.Now()
	defer c.Close()
	defer r.conns.Add(-1)
	if r.conns.Add(1) > int64(cmp.Or(r.w.MaxConns, DefaultMaxConns)) {
		r.refusals.Of(r.log).Warn("connection refused: too many connections (Worker.MaxConns; at most one such line a second)")
		return
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	conn := newExchangeConn(c, r.timeout, r.whole, begun)
	in := newReader(conn) // the ControlMsg, then its extra bytes
	defer freeReader(in)
	msg, err := r.codec.ReadControl(in)
	switch {
	case errors.Is(err, io.EOF):
		return
	case timedOut(err):
		r.cut(err)
		return
	case err != nil:
		r.log.Warn("bad control message", zap.Error(err))
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_FAILED, 0, []byte(err.Error()))
		return
	}
	r.log.Debug("control message", zap.Stringer("type", msg.GetType()),
		zap.Uint64("task", msg.GetTaskId()), zap.Uint64("extra", msg.GetExtraSize()))
	if msg.GetType() == pulsepb.ControlType_CTRL_SET_TASK {
		r.setTask(in, conn, msg)
		return
	}
	if err := r.codec.ReadExtra(in, io.Discard, msg.GetExtraSize()); err != nil {
		if !r.cut(err) {
			r.log.Warn("control message cut short", zap.Stringer("type", msg.GetType()), zap.Error(err))
		}
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
		r.log.Info("RESTART received", zap.Uint64("task", task))
		select {
		case restart <- struct{}{}:
		default: // one is on its way
		}
	default:
		text := fmt.Sprintf("unknown control type %d", int32(msg.GetType()))
		r.log.Warn(text)
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_FAILED, 0, []byte(text))
	}
}

// cut logs, at most once a second, an exchange on the worker's socket
// that ended because a deadline passed (a peer silent, or a byte now and
// then: ErrTooSlow), and reports whether err was that.
func (r *workerRun) cut(err error) bool {
	if !timedOut(err) {
		return false
	}
	r.refusals.Of(r.log).Warn("connection closed: the controller's side was silent or too slow "+
		"(Worker.Timeout for each read or write, Worker.ExchangeTimeout for it all; at most one such line a second)",
		zap.Error(err))
	return true
}

// reply sends a WorkerResponse and its extra bytes.
func (r *workerRun) reply(w io.Writer, code pulsepb.WorkerError, task uint64, extra []byte) error {
	err := r.codec.writeWithExtra(w, &pulsepb.WorkerResponse{
		Error: code, TaskId: task, ExtraSize: uint64(len(extra)),
	}, bytes.NewReader(extra), int64(len(extra)))
	if err != nil && !r.cut(err) {
		r.log.Warn("could not answer", zap.Stringer("answer", code), zap.Error(err))
	}
	return err
}

// setTask answers SET_TASK: it starts the task unless the worker is busy.
func (r *workerRun) setTask(in io.Reader, conn net.Conn, msg *pulsepb.ControlMsg) {
	id, size := msg.GetTaskId(), msg.GetExtraSize()
	r.mu.Lock()
	state, current := r.task.state, r.task.current()
	var gen uint64
	if state == taskIdle && id != 0 {
		r.gen++
		gen = r.gen
		r.task = workerTask{state: taskStarting, id: id, gen: gen}
	}
	r.mu.Unlock()
	if state != taskIdle || id == 0 {
		if err := r.codec.ReadExtra(in, io.Discard, size); err != nil {
			r.cut(err)
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

	stdin, err := r.receiveTask(in, size)
	var h *laboro.Handle
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		h, err = r.ex.Submit(ctx, laboro.Job{ID: fmt.Sprintf("task-%d-%d", id, gen), Args: r.w.Command, Stdin: stdin})
		cancel()
		if err != nil {
			stdin.Close()
		}
	}
	r.mu.Lock()
	kept := r.task.gen == gen // not dropped by a RESTART meanwhile
	switch {
	case kept && err != nil:
		r.task = workerTask{}
	case kept:
		r.task.state, r.task.h = taskRunning, h
	}
	r.mu.Unlock()
	if h != nil {
		r.wg.Go(func() { r.await(h, id, gen, stdin) })
	}
	switch {
	case timedOut(err):
		// Its bytes did not come in time: no answer would be read.
		r.cut(err)
	case err != nil:
		r.log.Warn("task not started", zap.Uint64("task", id), zap.Error(err))
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_FAILED, id, []byte(err.Error()))
	case !kept:
		r.ex.Cancel(h.ID())
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_FAILED, id, []byte("the controller sent RESTART"))
	default:
		r.log.Info("task started", zap.Uint64("task", id), zap.Uint64("size", size))
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_OK, id, nil)
	}
}

// smallTask is the largest task a worker keeps in memory rather than in
// a file of its directory (where the system allows: see taskFile).
const smallTask = 64 << 10

// receiveTask reads a task's n bytes into a file with no name (see
// taskFile) and returns it rewound.
func (r *workerRun) receiveTask(conn io.Reader, n uint64) (*os.File, error) {
	f, err := taskFile(r.outDir, n)
	if err != nil {
		r.codec.ReadExtra(conn, io.Discard, n)
		return nil, fmt.Errorf("pulse: keep the task: %w", err)
	}
	if err = r.codec.ReadExtra(conn, f, n); err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pulse: receive the task: %w", err)
	}
	return f, nil
}

// unlinkedFile returns a new file in dir, unlinked at once.
func unlinkedFile(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, ".task-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return f, nil
}

// await keeps the outcome of task id, of generation gen, once it ends,
// and has the controller told; the outcome of a task dropped meanwhile
// (RESTART) is thrown away.
func (r *workerRun) await(h *laboro.Handle, id, gen uint64, stdin *os.File) {
	<-h.Done()
	res, _ := h.Result()
	stdin.Close()
	t := workerTask{state: taskDone, id: id, gen: gen}
	if res.Status == laboro.StatusSucceeded {
		t.output = res.Output
	} else {
		res.Output.Close()
		t.failed, t.failure = true, failureText(res)
	}
	r.mu.Lock()
	kept := r.task.gen == gen
	if kept {
		r.task = t
	}
	r.mu.Unlock()
	switch {
	case !kept:
		t.output.Close()
		r.log.Info("task ended after RESTART; its outcome is dropped", zap.Uint64("task", id),
			zap.Stringer("status", res.Status))
		return
	case t.failed:
		r.log.Info("task failed", zap.Uint64("task", id), zap.Stringer("status", res.Status),
			zap.Error(res.Err))
	default:
		r.log.Info("task done", zap.Uint64("task", id), zap.Int64("size", res.Output.Size()),
			zap.Duration("took", res.Duration()))
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// dropTask ends the worker's work after RESTART: it kills the task that
// runs (its process group, through the Executor) and waits for it to end,
// or forgets the outcome that waits for FETCH. The worker is free after.
func (r *workerRun) dropTask() {
	r.mu.Lock()
	t := r.task
	r.task = workerTask{}
	r.gen++
	r.mu.Unlock()
	switch t.state {
	case taskRunning:
		if err := r.ex.Cancel(t.h.ID()); err == nil {
			r.log.Info("RESTART: task killed", zap.Uint64("task", t.id))
		}
		<-t.h.Done()
	case taskDone:
		t.output.Close()
		r.log.Info("RESTART: task outcome dropped", zap.Uint64("task", t.id))
	}
}

// failureText explains a failed task: its exit status (or, if it did not
// exit by itself, its error), then the tail of its standard error.
func failureText(res laboro.Result) []byte {
	var b []byte
	switch {
	case res.ExitCode >= 0:
		b = fmt.Appendf(nil, "exit status %d", res.ExitCode)
	case res.Err != nil:
		b = []byte(res.Err.Error())
	default:
		b = []byte(res.Status.String())
	}
	if len(res.Stderr) > 0 {
		b = append(append(b, ": "...), res.Stderr...)
	}
	return b
}

// fetch answers FETCH with the outcome of the task, if it has ended. The
// worker is free from the moment it starts answering, so that a
// controller that has read the answer finds it free; should the answer
// not be written in full, the outcome is offered again (unless, against
// the protocol, the worker was given a new task meanwhile, or RESTART).
func (r *workerRun) fetch(conn net.Conn) {
	r.mu.Lock()
	t := r.task
	if t.state != taskDone {
		r.mu.Unlock()
		r.reply(conn, pulsepb.WorkerError_WORKER_ERR_NO_FETCH, t.current(), nil)
		return
	}
	r.task = workerTask{}
	gen := r.gen
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
	kept := r.task.state == taskIdle && r.gen == gen
	if kept {
		r.task = t
	}
	r.mu.Unlock()
	if !kept {
		t.output.Close()
		r.log.Error("task outcome lost: a new task or a RESTART came before it was fetched", zap.Uint64("task", t.id))
	}
}

// sendOutput sends OK and a task's output, streamed from its file.
func (r *workerRun) sendOutput(conn net.Conn, id uint64, out *laboro.Output) error {
	f, err := out.Open()
	if err != nil {
		return r.reply(conn, pulsepb.WorkerError_WORKER_ERR_TASK_FAILED, id,
			[]byte("the result is lost: "+err.Error()))
	}
	defer f.Close()
	size := out.Size()
	if err := r.codec.writeWithExtra(conn, &pulsepb.WorkerResponse{
		Error: pulsepb.WorkerError_WORKER_ERR_OK, TaskId: id, ExtraSize: uint64(size),
	}, f, size); err != nil {
		if !r.cut(err) {
			r.log.Warn("could not send the result", zap.Uint64("task", id), zap.Error(err))
		}
		return err
	}
	return nil
}
