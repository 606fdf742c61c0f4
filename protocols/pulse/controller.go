package pulse

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/lograte"
	"github.com/laboro-go/laboro/protocols/pulse/pulsepb"
	"github.com/laboro-go/laboro/transport"
	"go.uber.org/zap"
)

// DefaultAttempts is how many times a task is given to a worker before it
// fails.
const DefaultAttempts = 3

// DefaultMaxConns bounds the connections a Controller (on main.sock) or a
// Worker (on its own socket) serves at once unless its MaxConns says
// otherwise.
const DefaultMaxConns = 1024

// DefaultMaxWorkers bounds the workers registered with a Controller at
// once unless its MaxWorkers says otherwise.
const DefaultMaxWorkers = 1024

// DefaultGrace is how long the task of a worker the controller lost waits
// for it to come back, unless the Controller's Grace says otherwise.
const DefaultGrace = 10 * time.Second

// exchangeTimeouts is how many Timeouts a whole exchange may take unless
// ExchangeTimeout says otherwise: a minute with the default Timeout, time
// enough to move the largest extra bytes (Limits.MaxExtra) many times
// over on a Unix socket.
const exchangeTimeouts = 6

// ErrTaskFailed is matched by the error of a task that failed
// (TASK_FAILED) on its last attempt; the last worker's words follow it.
var ErrTaskFailed = errors.New("pulse: task failed")

// ErrBusy is matched by the error of a task whose last attempt a worker
// answered BUSY: the workers it was given to stayed busy.
var ErrBusy = errors.New("pulse: the workers stayed busy")

// Task is the contents of a pulse task, carried in laboro.Job.Payload;
// see NewTask and NewTaskFile. Its zero value is an empty task.
type Task struct {
	data []byte
	path string
}

// String says which task this is: its file, or its size.
func (t Task) String() string {
	if t.path != "" {
		return "task " + t.path
	}
	return fmt.Sprintf("task of %d bytes", len(t.data))
}

// NewTask returns the job of a task whose bytes are data. Set the job's
// ID, Timeout and Meta as for any job.
func NewTask(data []byte) laboro.Job { return laboro.Job{Payload: Task{data: data}} }

// NewTaskFile returns the job of a task whose bytes are the file at path,
// read each time the task is given to a worker, never held in memory.
func NewTaskFile(path string) laboro.Job { return laboro.Job{Payload: Task{path: path}} }

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
// NewTaskFile), handed to workers through a transport.Dispatcher. Each
// live worker that is free takes the task at the front of the line and
// gets it with SET_TASK over its own socket (BUSY: the task goes back to
// the front, for another worker); when the worker asks to be fetched
// (FETCH_ME), FETCH brings the result, which becomes the job's output. A
// worker that fails (FAILED, or an exchange that fails), leaves
// (SHUTDOWN) or falls silent past its next_pulse is removed, and its task
// goes back to the front of the line: at once, or, for a worker removed
// without a word from it (silent, or an exchange that failed), once it
// has not come back within Grace. A task that a worker could not
// complete (TASK_FAILED) or would not take (BUSY) goes back too; a task
// given out Attempts times without a result fails. A pulse whose task_id
// disagrees with the task given to that worker, confirmed with
// GET_STATUS, gets the worker a RESTART, and the worker is removed.
//
// A pulse that makes sense only in the numbering the Controller does not
// speak (a REGISTER of the other numbering, read as a pulse from worker
// 0, …) is logged once per peer process with a hint, as is a pulse from a
// worker id the Controller never gave.
//
// A worker removed without a word from it may still run its task, or
// hold its outcome: as when the controller itself stalled past the
// worker's next_pulse. Its next pulse is answered UNKNOWN_ID (the spec
// says so of a removed worker), it registers again, and its first pulse
// under the new id names the task: the controller takes the task back for
// it (transport.Worker.Reclaim) and fetches the outcome when it is
// offered, so the task does not run again, as long as the task has not
// ended. Should another worker have been given the task meanwhile, it
// gets RESTART, unless it offered the task's outcome first: a task has
// one result, the first fetched. Only the process that held the task can
// take it back this way (it named the task under the id it was removed
// with, and, on Linux, it is the same process, by SO_PEERCRED).
//
// The ids it gives start above those of the worker sockets in Dir when it
// begins to listen: workers of a controller that was killed still listen
// there and pulse with their ids, which this one answers UNKNOWN_ID, so
// that they register again; a new worker is never given the id of one of
// them. What they ran is not taken back: the task ids of an earlier
// controller name other tasks.
//
// When a job ends while a worker runs its task (Executor.Cancel, the
// job's Timeout, which the Executor applies, or Executor.Close), the
// controller sends that worker RESTART and removes it; a result of that
// task fetched later is discarded.
//
// Set the fields before the first Serve or Run; a Controller is safe for
// concurrent use. Jobs may be run before Serve: they wait for workers.
type Controller struct {
	// Dir holds main.sock and the workers' sockets; "" means DefaultDir.
	// It is created with mode 0700 if missing.
	Dir string
	// Codec is the numbering and limits spoken.
	Codec Codec
	// Timeout bounds each exchange's dialing, and each of its reads and
	// writes, and a whole pulse on main.sock; 0 means 10 s.
	Timeout time.Duration
	// ExchangeTimeout bounds a whole exchange with a worker, from the
	// dial to the last byte of the answer's extra bytes: a worker that
	// sends its answer, or reads the task, a byte now and then is cut
	// (ErrTooSlow) and removed. 0 means 6 × Timeout (a minute).
	ExchangeTimeout time.Duration
	// Grace is how long the task of a worker removed without a word from
	// it (no pulse within its next_pulse, or an exchange that failed)
	// waits for that worker to register again and name it, before it goes
	// to another worker; 0 means DefaultGrace, a negative value no wait.
	Grace time.Duration
	// Attempts is how many times a task may be given to a worker without
	// a result (TASK_FAILED, BUSY, or the worker lost) before it fails; 0
	// means DefaultAttempts.
	Attempts int
	// OutputDir receives the results as files; "" means os.TempDir.
	OutputDir string
	// MaxConns bounds the connections main.sock serves at once (each a
	// pulse); one more is closed at once, unanswered. 0 means
	// DefaultMaxConns.
	MaxConns int
	// MaxWorkers bounds the workers registered at once (each costs a
	// goroutine and a timer until it shuts down or falls silent); a
	// REGISTER beyond it is answered FAILED. 0 means DefaultMaxWorkers.
	MaxWorkers int
	// Logger; nil means none.
	Logger *zap.Logger

	once     sync.Once
	conns    atomic.Int64    // main.sock's connections being served
	refusals lograte.Limited // what a peer causes at will (refusals, bad messages), logged at most once a second
	log      *zap.Logger
	d        *transport.Dispatcher[uint64, Task] // keyed by task_id
	tasks    atomic.Uint64                       // the last task_id given
	logged   onceSet                             // what was logged once per peer

	mu      sync.Mutex
	nextID  uint64
	earlier uint64              // the highest id of a worker socket in Dir when Listen began
	stale   []uint64            // the ids of those sockets, for ServeListener to RESTART
	workers map[uint64]*cworker // the live workers
	bg      sync.WaitGroup      // the workers' goroutines (drive)
	// lost is the task each worker removed without a word from it held,
	// by the worker's id; once that worker names it in a pulse answered
	// UNKNOWN_ID, it moves to returning, with the pid of the worker's
	// process (0 where the system does not tell), until a worker of that
	// process, registered again, takes it back. Both forget everything
	// once they hold maxAway entries.
	lost      map[uint64]uint64
	returning map[uint64]int
}

// maxAway bounds Controller.lost and Controller.returning: workers that
// never come back must not make them grow without end.
const maxAway = 4096

// cworker is a live worker, seen by the controller. Its goroutine (drive)
// has every exchange with it, one at a time.
type cworker struct {
	id   uint64
	pid  int // of its process, from its REGISTER; 0 where the system does not tell
	dw   *transport.Worker[uint64, Task]
	poke chan struct{} // something changed: drive looks again

	// Guarded by the Controller's mu.
	ready    bool                            // it has pulsed OK since REGISTER: its socket exists
	task     *transport.Ticket[uint64, Task] // the task given to it
	prev     uint64                          // the task it finished last; a pulse may still name it
	busy     bool                            // an exchange with it is under way
	fetchMe  bool                            // it asked to be fetched
	confirm  bool                            // its pulse disagreed: ask it with GET_STATUS
	gone     bool                            // removed
	deadline *time.Timer                     // its next pulse is due
}

// wake has w's goroutine look at w again.
func (w *cworker) wake() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

var (
	_ laboro.Runner    = (*Controller)(nil)
	_ laboro.Validator = (*Controller)(nil)
)

func (c *Controller) init() {
	c.once.Do(func() {
		c.log = c.Logger
		if c.log == nil {
			c.log = zap.NewNop()
		}
		c.workers = map[uint64]*cworker{}
		c.lost, c.returning = map[uint64]uint64{}, map[uint64]int{}
		c.d = transport.NewDispatcher[uint64, Task](transport.Config{MaxAttempts: c.attempts(), Grace: c.grace(), Logger: c.log})
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

// exchangeTimeout is the deadline of a whole exchange with a worker.
func (c *Controller) exchangeTimeout() time.Duration {
	if c.ExchangeTimeout <= 0 {
		return exchangeTimeouts * c.timeout()
	}
	return c.ExchangeTimeout
}

func (c *Controller) grace() time.Duration {
	switch {
	case c.Grace < 0:
		return 0
	case c.Grace == 0:
		return DefaultGrace
	}
	return c.Grace
}

func (c *Controller) attempts() int {
	if c.Attempts <= 0 {
		return DefaultAttempts
	}
	return c.Attempts
}

// Validate refuses a job that is not a task.
func (c *Controller) Validate(job laboro.Job) error {
	if _, ok := job.Payload.(Task); !ok {
		return errors.New("pulse: a job's Payload is its Task; see NewTask")
	}
	return nil
}

// Run gives the task to a worker and waits for its result. When ctx ends
// first, the job ends at once; a worker that runs its task gets RESTART.
func (c *Controller) Run(ctx context.Context, job laboro.Job) laboro.Result {
	c.init()
	src, ok := job.Payload.(Task)
	if !ok {
		now := time.Now()
		return laboro.Result{ID: job.ID, Status: laboro.StatusFailed, ExitCode: -1, Err: c.Validate(job), Started: now, Ended: now}
	}
	res := c.d.Run(ctx, c.tasks.Add(1), src)
	res.ID = job.ID
	var tf *taskFailure
	if res.Status == laboro.StatusFailed && errors.As(res.Err, &tf) {
		res.ExitCode, res.Stderr = tf.exitStatus()
	}
	return res
}

// taskFailure is a worker's TASK_FAILED: its words, which our Worker
// writes as "exit status N: <the tail of standard error>" (failureText);
// another worker's are kept as they come.
type taskFailure struct {
	worker uint64
	text   []byte
}

func (f *taskFailure) Error() string {
	return fmt.Sprintf("%v on worker %d: %s", ErrTaskFailed, f.worker, bytes.TrimRight(f.text, " \n\r\t"))
}

func (f *taskFailure) Unwrap() error { return ErrTaskFailed }

// exitStatus reads the exit status and standard error's tail from the
// worker's words, for the job's Result; -1 and nil when they do not give
// them.
func (f *taskFailure) exitStatus() (int, []byte) {
	rest, ok := bytes.CutPrefix(f.text, []byte("exit status "))
	n := 0
	for n < len(rest) && n < 4 && '0' <= rest[n] && rest[n] <= '9' {
		n++
	}
	code, err := strconv.Atoi(string(rest[:n]))
	if !ok || err != nil || n < len(rest) && rest[n] != ':' {
		return -1, nil
	}
	stderr, _ := bytes.CutPrefix(rest[n:], []byte(": "))
	return code, stderr
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

// Stats are a Controller's counters, for progress displays.
type Stats struct {
	Workers int // live workers
	Pending int // tasks waiting for a worker
	Out     int // tasks given to workers, their results awaited
}

// Stats returns the Controller's counters.
func (c *Controller) Stats() Stats {
	c.init()
	d := c.d.Stats()
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Workers: len(c.workers), Pending: d.Waiting, Out: d.Held}
}

// Serve is Listen, then ServeListener: it serves on <Dir>/main.sock until
// ctx ends. It returns at once with Listen's error when it cannot listen.
func (c *Controller) Serve(ctx context.Context) error {
	ln, err := c.Listen()
	if err != nil {
		return err
	}
	return c.ServeListener(ctx, ln)
}

// ServeListener answers the workers' pulses on ln, a listener from Listen,
// until ctx ends; then it closes ln and every connection on it (a peer
// that says nothing does not hold it up), waits for every exchange it
// started, and forgets every worker: they are told nothing (the spec has
// no word for it), their tasks go back in line, for the next Serve, and
// they register again with the next controller on Dir. It returns
// ctx.Err(), or the error that ended listening.
func (c *Controller) ServeListener(ctx context.Context, ln net.Listener) error {
	c.init()
	c.log.Info("serving", zap.Stringer("socket", ln.Addr()), zap.Stringer("numbering", c.Codec.Numbering))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	stale := c.stale
	c.stale = nil
	c.mu.Unlock()
	for _, id := range stale {
		c.bg.Go(func() { c.restartEarlier(ctx, id) })
	}
	err := transport.Serve(ctx, ln, c.servePulse)
	cancel() // the workers' goroutines end
	c.mu.Lock()
	n := len(c.workers)
	for _, w := range c.workers {
		c.remove(w, errStopped)
	}
	c.mu.Unlock()
	c.bg.Wait()
	c.log.Info("stopped serving; the workers still running register again with the next controller on this directory",
		zap.Int("workers", n))
	return err
}

// errStopped is why every worker is forgotten when Serve ends: not their
// fault, and they are not told.
var errStopped = errors.New("the controller stopped")

// restartEarlier sends RESTART to the worker of an earlier controller
// that listens on <id>.sock, if one does: it registers again at once,
// rather than when its next pulse is answered UNKNOWN_ID (up to its
// next_pulse later, a minute by default), and drops the task it may run,
// which no controller would fetch. A socket nobody listens on is left
// alone.
func (c *Controller) restartEarlier(ctx context.Context, id uint64) {
	_, err := c.exchange(ctx, &cworker{id: id}, &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_RESTART}, nil, nil)
	if err == nil {
		c.log.Info("a worker of an earlier controller was told to register again (RESTART)", zap.Uint64("worker", id))
	}
}

// ErrInUse is matched by Listen's error when a controller already
// answers on main.sock.
var ErrInUse = errors.New("pulse: a controller already answers on this socket")

// maxSocketPath is the longest path a Unix socket may have (sun_path
// holds 108 bytes with the NUL on Linux, 104 elsewhere; the shorter is
// checked).
const maxSocketPath = 103

// Listen creates Dir (mode 0700) if it is missing and listens on
// <Dir>/main.sock, for ServeListener. It fails at once when the
// controller cannot serve there: the directory cannot be created, other
// users could enter or change it (ErrUnsafeDir: it must be this user's,
// mode 0700), a
// socket path in it would be too long, the socket cannot be bound, or a
// controller already answers on main.sock (ErrInUse). main.sock appears
// only once it accepts connections (a worker that sees the file can
// connect), with mode 0600; one left by a controller that died is
// replaced. Closing the listener removes main.sock.
func (c *Controller) Listen() (net.Listener, error) {
	dir := c.dir()
	path := filepath.Join(dir, "main.sock")
	// It listens on a temporary name, then renames it main.sock.
	tmp := filepath.Join(dir, ".main-"+strconv.Itoa(os.Getpid())+".sock")
	if len(tmp) > maxSocketPath {
		return nil, fmt.Errorf("pulse: the directory %s is too long for Unix sockets (%s would be %d bytes, at most %d)", dir, tmp, len(tmp), maxSocketPath)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pulse: create the socket directory: %w", err)
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return nil, fmt.Errorf("%w: %s", ErrInUse, path)
	}
	c.skipEarlierIDs(dir)
	os.Remove(tmp) // left by a controller of this pid that died
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("pulse: listen in %s: %w", dir, err)
	}
	ln.SetUnlinkOnClose(false) // the file is renamed; Close removes it
	err = os.Chmod(tmp, 0o600)
	if err == nil {
		err = os.Rename(tmp, path) // replaces a stale main.sock
	}
	if err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("pulse: listen on %s: %w", path, err)
	}
	return &mainListener{UnixListener: ln, path: path}, nil
}

// skipEarlierIDs makes the ids this controller gives start above those
// of the worker sockets in dir. A worker of an earlier controller (one
// that was killed) still listens on <id>.sock and pulses with its id: had
// a new worker been given the same id, the controller would take the one
// for the other (the new worker took over the socket file, while the
// pulses of the old one named tasks the controller never gave). Kept
// apart, the old worker's pulses are answered UNKNOWN_ID, and it registers
// again.
func (c *Controller) skipEarlierIDs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // Listen fails on the directory anyway
	}
	var highest uint64
	var ids []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sock")
		if id, err := strconv.ParseUint(name, 10, 64); ok && err == nil && e.Type() == fs.ModeSocket {
			highest = max(highest, id)
			ids = append(ids, id)
		}
	}
	c.mu.Lock()
	c.earlier = max(c.earlier, highest)
	c.nextID = max(c.nextID, highest)
	c.stale = ids
	c.mu.Unlock()
}

// mainListener listens on main.sock, and removes it when closed.
type mainListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *mainListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *mainListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { os.Remove(l.path) })
	return err
}

// servePulse is one connection on main.sock: a WorkerPulse, a
// PulseResponse, both within Timeout. The connection closes when ctx
// (Serve's) ends, whatever it is doing: a peer that says nothing must not
// delay the controller's end.
func (c *Controller) servePulse(ctx context.Context, raw net.Conn) {
	defer raw.Close()
	defer c.conns.Add(-1)
	if c.conns.Add(1) > int64(cmp.Or(c.MaxConns, DefaultMaxConns)) {
		c.refusals.Of(c.log).Warn("connection refused: too many connections (Controller.MaxConns; at most one such line a second)")
		return
	}
	conn, stop := transport.Interruptible(ctx, raw)
	defer stop()
	conn.SetDeadline(time.Now().Add(c.timeout())) // the whole exchange
	br := newReader(conn)
	p, err := c.Codec.ReadPulse(br)
	freeReader(br)
	var resp pulsepb.PulseResponse
	var ee *EnumError
	switch {
	case err == nil:
		if what := c.foreignPulse(p); what != "" {
			c.mismatch(raw, what)
		}
		resp = c.pulse(ctx, p, raw)
	case errors.As(err, &ee):
		if what := c.foreignType(ee.Value); what != "" {
			c.mismatch(raw, what)
		} else {
			c.log.Warn("pulse of an unknown type", zap.Error(err))
		}
		resp.Error = pulsepb.ControllerError_CTRL_ERR_UNKNOWN_TYPE
	case timedOut(err):
		// Silent, or too slow (a byte now and then): the deadline has
		// passed, so no answer could be written either. At shutdown the
		// connection was closed on purpose.
		if ctx.Err() == nil {
			c.refusals.Of(c.log).Warn("connection closed: no whole pulse within the controller's Timeout "+
				"(a peer silent, or sending a byte now and then; at most one such line a second)",
				zap.Duration("timeout", c.timeout()))
		}
		return
	default:
		c.refusals.Of(c.log).Warn("bad pulse (at most one such line a second)", zap.Error(err))
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return
		}
		resp.Error = pulsepb.ControllerError_CTRL_ERR_FAILED
	}
	if err := c.Codec.WriteMessage(conn, &resp); err != nil {
		c.refusals.Of(c.log).Info("cannot answer a pulse (at most one such line a second)", zap.Error(err))
	}
}

// pulse handles one WorkerPulse, which came on conn, and returns the
// answer. ctx is Serve's: a registered worker's goroutine lives until it
// ends.
func (c *Controller) pulse(ctx context.Context, p *pulsepb.WorkerPulse, conn net.Conn) pulsepb.PulseResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.Type == pulsepb.PulseType_PULSE_REGISTER {
		if max := cmp.Or(c.MaxWorkers, DefaultMaxWorkers); len(c.workers) >= max {
			c.log.Warn("worker refused: too many workers registered (Controller.MaxWorkers)", zap.Int("workers", len(c.workers)))
			return pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_FAILED}
		}
		c.nextID++
		w := &cworker{id: c.nextID, poke: make(chan struct{}, 1)}
		w.pid, _ = peerPID(conn)
		w.dw = c.d.Join(strconv.FormatUint(w.id, 10), func([]uint64) { w.wake() })
		c.workers[w.id] = w
		w.deadline = time.AfterFunc(nextPulse(p), func() { c.dead(w) })
		c.bg.Go(func() { c.drive(ctx, w) })
		c.log.Info("worker registered", zap.Uint64("worker", w.id), zap.Uint64("next_pulse", p.NextPulse))
		id := w.id
		return pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_OK, WorkerId: &id}
	}
	w := c.workers[p.WorkerId]
	if w == nil {
		c.unknownWorker(p)
		if task, ok := c.lost[p.WorkerId]; ok && task == p.TaskId && p.Type != pulsepb.PulseType_PULSE_SHUTDOWN {
			// A worker removed without a word runs its task still, or
			// holds its outcome: it may take it back once registered
			// again.
			delete(c.lost, p.WorkerId)
			if len(c.returning) >= maxAway {
				clear(c.returning)
			}
			c.returning[task], _ = peerPID(conn)
		}
		return pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID}
	}
	switch p.Type {
	case pulsepb.PulseType_PULSE_SHUTDOWN:
		c.remove(w, errShutdown)
		return pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_OK}
	case pulsepb.PulseType_PULSE_OK, pulsepb.PulseType_PULSE_FETCH_ME:
	default:
		return pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_UNKNOWN_TYPE}
	}
	w.deadline.Reset(nextPulse(p))
	w.dw.Renew()
	if w.task == nil && !w.busy && p.TaskId != 0 && p.TaskId != w.prev {
		// Before it may be given a task: it may be a worker that was
		// removed, registered again, and runs the task it had.
		c.reclaim(w, p.TaskId)
	}
	w.ready = true
	if p.Type == pulsepb.PulseType_PULSE_FETCH_ME {
		w.fetchMe = true
	}
	// A pulse that crosses an exchange may name what the exchange is
	// changing; one that a FETCH will settle is not checked either.
	if !w.busy && !w.fetchMe && !c.agrees(w, p.TaskId) {
		w.confirm = true
	}
	w.wake()
	return pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_OK}
}

// foreignPulse returns what a pulse read is in the numbering the
// controller does not speak, when it makes sense only there; "" when it
// makes sense in the controller's.
func (c *Controller) foreignPulse(p *pulsepb.WorkerPulse) string {
	n := c.Codec.Numbering
	wire, ok := c.Codec.toWire(int32(p.Type), pulseTypes, true)
	if !ok {
		return ""
	}
	here, there := wireName(pulseTypeNames, n, wire), wireName(pulseTypeNames, n.other(), wire)
	switch {
	case p.Type != pulsepb.PulseType_PULSE_REGISTER && p.WorkerId == 0:
		// No worker is given 0: it is what a REGISTER carries.
		return fmt.Sprintf("%s from worker 0, an id no worker is given (type %d: %s in the %v numbering)", here, wire, there, n.other())
	case p.Type == pulsepb.PulseType_PULSE_REGISTER && (p.WorkerId != 0 || p.TaskId != 0):
		// A worker registers without an id or a task.
		return fmt.Sprintf("%s of worker %d running task %d (type %d: %s in the %v numbering)", here, p.WorkerId, p.TaskId, wire, there, n.other())
	}
	return ""
}

// foreignType returns what a pulse of the wire type v, unknown in the
// controller's numbering, is in the other numbering; "" when it is
// unknown there too.
func (c *Controller) foreignType(v int32) string {
	n := c.Codec.Numbering
	if !knownIn(pulseTypeNames, n.other(), v) {
		return ""
	}
	return fmt.Sprintf("a pulse of type %d, %s in the %v numbering (%s in the %v numbering)",
		v, wireName(pulseTypeNames, n, v), n, wireName(pulseTypeNames, n.other(), v), n.other())
}

// mismatch logs, once per peer process, a pulse that makes sense only in
// the other numbering.
func (c *Controller) mismatch(conn net.Conn, what string) {
	peer := peerKey(conn)
	if !c.logged.first("numbering " + peer) {
		c.log.Debug("a pulse that makes sense only in the other numbering", zap.String("pulse", what), zap.String("peer", peer))
		return
	}
	c.log.Warn("a pulse that makes sense only in the other numbering", zap.String("pulse", what),
		zap.String("peer", peer), zap.String("hint", numberingHint(c.Codec.Numbering, "worker")))
}

// unknownWorker logs, once per worker id, a pulse from a worker the
// controller does not know, which it answers UNKNOWN_ID. c.mu is held.
func (c *Controller) unknownWorker(p *pulsepb.WorkerPulse) {
	id := p.WorkerId
	if id == 0 || !c.logged.first("worker "+strconv.FormatUint(id, 10)) {
		return // worker 0: foreignPulse has told
	}
	if id <= c.earlier {
		c.log.Info("pulse from a worker of an earlier controller; answered UNKNOWN_ID: it should register again",
			zap.Uint64("worker", id), zap.Stringer("type", p.Type))
		return
	}
	if id <= c.nextID {
		c.log.Info("pulse from a worker removed; answered UNKNOWN_ID: it should register again",
			zap.Uint64("worker", id), zap.Stringer("type", p.Type))
		return
	}
	c.log.Warn("pulse from a worker this controller never registered; answered UNKNOWN_ID", zap.Uint64("worker", id),
		zap.Stringer("type", p.Type), zap.String("hint", "a worker of an earlier controller registers again; if it does not, "+
			numberingHint(c.Codec.Numbering, "worker")))
}

var (
	errShutdown = errors.New("it shut down")
	errSilent   = errors.New("no pulse in time")
)

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
		return taskID == w.task.Key || taskID == 0 || taskID == w.prev
	default:
		return taskID == 0 || taskID == w.prev
	}
}

// dead removes a worker that fell silent.
func (c *Controller) dead(w *cworker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(w, errSilent)
}

// exchangeError is an exchange with a worker that failed (no connection,
// no answer in time, a broken message): the worker may not know of it,
// and may still run its task.
type exchangeError struct {
	msg string // FETCH, SET_TASK, GET_STATUS
	err error
}

func (e *exchangeError) Error() string { return e.msg + " failed: " + e.err.Error() }
func (e *exchangeError) Unwrap() error { return e.err }

// unaware reports whether a worker removed for why may not know it was:
// it fell silent, or an exchange with it failed. Its task waits Grace for
// it, and it may take the task back once registered again.
func unaware(why error) bool {
	var ee *exchangeError
	return errors.Is(why, errSilent) || errors.As(why, &ee)
}

// remove forgets a worker: it leaves the Dispatcher. Its task, if it
// still holds one, goes back to the front of the line: at once, or, when
// the worker may not know it was removed (unaware), after Grace, unless
// the worker takes it back first. c.mu is held.
func (c *Controller) remove(w *cworker, why error) {
	if c.workers[w.id] != w {
		return
	}
	delete(c.workers, w.id)
	w.gone = true
	w.deadline.Stop()
	t := w.task
	w.task = nil
	held := t != nil && t.Holder() == w.dw.Name() // not ended, nor taken back by another
	fields := []zap.Field{zap.Uint64("worker", w.id), zap.String("why", why.Error())}
	switch {
	case errors.Is(why, errStopped):
		// Not the worker's doing: it runs on, and registers again with
		// the next controller. ServeListener says so once for all.
		if held {
			w.dw.Retry(t, why)
			fields = append(fields, zap.Uint64("task", t.Key))
		}
		c.log.Debug("worker forgotten as the controller stops", fields...)
	case held && unaware(why):
		// It may run the task still: it may take it back (reclaim) once
		// registered again, even after another worker was given it.
		if len(c.lost) >= maxAway {
			clear(c.lost)
		}
		c.lost[w.id] = t.Key
		fields = append(fields, zap.Uint64("task", t.Key))
		if c.grace() > 0 {
			c.log.Warn("worker removed; its task waits for it to register again, then goes to another",
				append(fields, zap.Duration("grace", c.grace()))...)
		} else {
			c.log.Warn("worker removed; its task goes to another", fields...)
		}
	case held:
		w.dw.Retry(t, why) // back in line now, not after Grace
		c.log.Warn("worker removed; its task goes to another", append(fields, zap.Uint64("task", t.Key))...)
	default:
		c.log.Info("worker removed", fields...)
	}
	w.dw.Leave(why)
	w.wake()
}

// reclaim takes task id back for w, a worker that names it in a pulse or
// a FETCH's answer though it was not given it: a worker removed while it
// held the task (see unaware), registered again, that runs it still or
// holds its outcome. It returns the task, which w holds from now on, or
// nil when w may not take it: it was never lost by w's process, or it
// has ended. A worker that was given the task meanwhile is told to cancel
// it (drive sends it RESTART). c.mu is held.
func (c *Controller) reclaim(w *cworker, id uint64) *transport.Ticket[uint64, Task] {
	pid, ok := c.returning[id]
	if !ok || pid != 0 && w.pid != 0 && pid != w.pid {
		return nil
	}
	delete(c.returning, id)
	t, ok := w.dw.Reclaim(id)
	if !ok {
		c.log.Info("a worker registered again with a task that has ended: what it did is dropped",
			zap.Uint64("worker", w.id), zap.Uint64("task", id))
		return nil
	}
	w.task = t
	c.log.Info("task taken back by its worker, registered again: it is not given again",
		zap.Uint64("worker", w.id), zap.Uint64("task", id))
	return t
}

func settled(t *transport.Ticket[uint64, Task]) bool {
	_, done := t.Result()
	return done
}

// drive has every exchange with worker w, one at a time, until w is
// removed or ctx (Serve's) ends: FETCH when it asked to be fetched,
// RESTART when the job of its task ended without it, GET_STATUS when a
// pulse disagreed, and SET_TASK with the task at the front of the line
// when it is free.
func (c *Controller) drive(ctx context.Context, w *cworker) {
	for {
		for {
			act := c.next(w)
			if act == nil {
				break
			}
			if !act(ctx) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.poke:
		case <-w.dw.Wake():
		}
	}
}

// next returns what w's goroutine does next; nil when nothing is to be
// done now. The action returns false when the goroutine must end.
func (c *Controller) next(w *cworker) func(context.Context) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch t := w.task; {
	case w.gone:
		return func(context.Context) bool { return false }
	case w.fetchMe:
		// First, also for a task whose job has ended: its worker is free
		// once its outcome is fetched.
		w.fetchMe, w.busy = false, true
		return func(ctx context.Context) bool { c.fetch(ctx, w, t); return true }
	case t != nil && settled(t):
		// Its job ended (cancelled, timed out, closed) while it runs.
		w.busy = true
		return func(ctx context.Context) bool {
			c.restart(ctx, w, fmt.Errorf("the job of task %d ended", t.Key))
			return false
		}
	case t != nil && t.Holder() != w.dw.Name():
		// The worker that ran it first took it back (reclaim): one copy
		// runs, not two.
		w.busy = true
		return func(ctx context.Context) bool {
			c.restart(ctx, w, fmt.Errorf("task %d was taken back by the worker that ran it first", t.Key))
			return false
		}
	case w.confirm:
		w.confirm, w.busy = false, true
		return func(ctx context.Context) bool { return c.confirmTask(ctx, w) }
	case w.ready && t == nil:
		ts := w.dw.Take(1, nil)
		if len(ts) == 0 {
			return nil // Wake tells when a task comes
		}
		w.task, w.busy = ts[0], true
		return func(ctx context.Context) bool { c.setTask(ctx, w, ts[0]); return true }
	}
	return nil
}

// exchange sends one ControlMsg (and extra bytes) to worker w and reads
// its WorkerResponse; with the response's extra bytes given to extra.
func (c *Controller) exchange(ctx context.Context, w *cworker, msg *pulsepb.ControlMsg, body io.Reader, extra func(*pulsepb.WorkerResponse, io.Reader) error) (*pulsepb.WorkerResponse, error) {
	path := filepath.Join(c.dir(), strconv.FormatUint(w.id, 10)+".sock")
	begun := time.Now()
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, c.timeout())
	raw, err := d.DialContext(dctx, "unix", path)
	cancel()
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	ic, stop := transport.Interruptible(ctx, raw)
	defer stop()
	conn := newExchangeConn(ic, c.timeout(), c.exchangeTimeout(), begun)
	if err := c.Codec.writeWithExtra(conn, msg, body, int64(msg.ExtraSize)); err != nil {
		return nil, err
	}
	br := newReader(conn)
	defer freeReader(br)
	resp, err := c.Codec.ReadWorkerResponse(br)
	if err != nil {
		return nil, err
	}
	if extra != nil {
		return resp, extra(resp, io.LimitReader(br, int64(resp.ExtraSize)))
	}
	return resp, c.Codec.ReadExtra(br, io.Discard, resp.ExtraSize)
}

// setTask gives task t to worker w (SET_TASK).
func (c *Controller) setTask(ctx context.Context, w *cworker, t *transport.Ticket[uint64, Task]) {
	body, size, err := t.Value.open()
	if err != nil {
		c.mu.Lock()
		w.busy, w.task = false, nil
		c.mu.Unlock()
		w.dw.Complete(t.Key, laboro.Result{Status: laboro.StatusFailed, ExitCode: -1, Err: fmt.Errorf("pulse: task %d: %w", t.Key, err)})
		return
	}
	defer body.Close()
	id := t.Key
	resp, err := c.exchange(ctx, w, &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_SET_TASK, ExtraSize: uint64(size), TaskId: &id}, body, nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	w.busy = false
	switch {
	case err != nil || resp.Error == pulsepb.WorkerError_WORKER_ERR_FAILED:
		c.remove(w, failed("SET_TASK", err, resp, nil))
	case resp.Error == pulsepb.WorkerError_WORKER_ERR_BUSY:
		// Busy with something we do not know of: the task goes back for
		// another worker, and this one is asked what it runs. The
		// hand-out counts as an attempt: a worker may stay busy for good
		// (the reference worker of the spec's numbering never leaves
		// PROCESSING after its first task), and the task must not be
		// offered to it forever. No task is offered to it again before its
		// next pulse: it would otherwise be asked in a tight loop.
		w.task = nil
		if w.dw.Retry(t, fmt.Errorf("%w: worker %d answered BUSY to task %d", ErrBusy, w.id, t.Key)) {
			if settled(t) {
				c.log.Warn("worker busy; the task was given out too many times: it fails", zap.Uint64("worker", w.id), zap.Uint64("task", t.Key))
			} else {
				c.log.Info("worker busy; the task goes to another", zap.Uint64("worker", w.id), zap.Uint64("task", t.Key))
			}
		}
		w.ready, w.confirm = false, true
	case resp.Error != pulsepb.WorkerError_WORKER_ERR_OK:
		c.remove(w, fmt.Errorf("SET_TASK answered %v", resp.Error))
	default:
		c.log.Debug("task given", zap.Uint64("worker", w.id), zap.Uint64("task", t.Key), zap.Int64("size", size))
	}
}

// failed is why a worker is removed when msg's exchange failed (err), or
// the worker answered FAILED, with words when it gave them.
func failed(msg string, err error, resp *pulsepb.WorkerResponse, words []byte) error {
	if err != nil {
		return &exchangeError{msg: msg, err: err}
	}
	if words = bytes.TrimSpace(words); len(words) > 0 {
		return fmt.Errorf("%s failed: %v: %s", msg, resp.Error, words)
	}
	return fmt.Errorf("%s failed: %v", msg, resp.Error)
}

// fetch fetches the outcome of task t (nil: none given) from worker w
// (FETCH). An outcome of a task w was not given is taken when w may take
// the task back (reclaim), else discarded.
func (c *Controller) fetch(ctx context.Context, w *cworker, t *transport.Ticket[uint64, Task]) {
	var out *laboro.Output
	var failure []byte
	resp, err := c.exchange(ctx, w, &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_FETCH}, nil,
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
	if t == nil && w.task == nil && err == nil && resp.TaskId != 0 &&
		(resp.Error == pulsepb.WorkerError_WORKER_ERR_OK || resp.Error == pulsepb.WorkerError_WORKER_ERR_TASK_FAILED) {
		t = c.reclaim(w, resp.TaskId)
	}
	switch {
	case errors.Is(err, ErrTooLarge) && t != nil && w.task == t:
		// A result over the limit: the task fails, for it would be as
		// large on any worker. The worker, which still holds the result,
		// is dropped (it registers again, without it).
		w.task, w.prev = nil, t.Key
		w.dw.Complete(t.Key, laboro.Result{Status: laboro.StatusFailed, ExitCode: -1,
			Err: fmt.Errorf("pulse: task %d: its result is too large for this controller (Codec.Limits.MaxExtra): %w", t.Key, err)})
		c.remove(w, fmt.Errorf("FETCH failed: %w", err))
	case err != nil || resp.Error == pulsepb.WorkerError_WORKER_ERR_FAILED:
		out.Close()
		c.remove(w, failed("FETCH", err, resp, failure))
	case resp.Error == pulsepb.WorkerError_WORKER_ERR_NO_FETCH:
	case t == nil:
		w.prev = resp.TaskId
		out.Close()
		c.log.Info("fetched outcome discarded: the worker was given no task, and no task waits for this one",
			zap.Uint64("worker", w.id), zap.Uint64("task", resp.TaskId))
	case resp.TaskId != t.Key:
		w.prev = resp.TaskId
		out.Close()
		c.log.Info("fetched outcome discarded: not the task given", zap.Uint64("worker", w.id), zap.Uint64("task", resp.TaskId))
	case resp.Error == pulsepb.WorkerError_WORKER_ERR_TASK_FAILED:
		if w.task != t {
			break // the worker was removed meanwhile: the task went back already
		}
		w.task, w.prev = nil, t.Key
		if w.dw.Retry(t, &taskFailure{worker: w.id, text: failure}) {
			c.log.Info("task failed on a worker", zap.Uint64("worker", w.id), zap.Uint64("task", t.Key), zap.ByteString("error", failure))
		}
	case resp.Error == pulsepb.WorkerError_WORKER_ERR_OK:
		if w.task == t {
			w.task, w.prev = nil, t.Key
		}
		// Taken even from a worker removed meanwhile, while the job has
		// no result; discarded (ErrLate) once the job has ended.
		if err := w.dw.Complete(t.Key, laboro.Result{Status: laboro.StatusSucceeded, ExitCode: 0, Output: out}); err != nil {
			c.log.Info("fetched result discarded", zap.Uint64("worker", w.id), zap.Uint64("task", t.Key), zap.Error(err))
		}
	default:
		out.Close()
		c.remove(w, fmt.Errorf("FETCH answered %v", resp.Error))
	}
}

// keep writes a result into a file of its own.
func (c *Controller) keep(r io.Reader, n uint64) (*laboro.Output, error) {
	if n > math.MaxInt64 { // (the decoder's limit on extra_size is far lower)
		return nil, fmt.Errorf("pulse: a result of %d bytes", n)
	}
	out, err := transport.SaveOutput(c.OutputDir, "pulse-*.result", io.LimitReader(r, int64(n)))
	if err == nil && out.Size() < int64(n) {
		out.Close()
		return nil, io.ErrUnexpectedEOF
	}
	return out, err
}

// confirmTask asks a worker whose pulse disagreed with its task what it
// runs (GET_STATUS), and restarts it if it still disagrees. It returns
// false when the worker is removed.
func (c *Controller) confirmTask(ctx context.Context, w *cworker) bool {
	resp, err := c.exchange(ctx, w, &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_GET_STATUS}, nil, nil)
	c.mu.Lock()
	w.busy = false
	if err != nil || resp.Error != pulsepb.WorkerError_WORKER_ERR_OK {
		c.remove(w, failed("GET_STATUS", err, resp, nil))
		c.mu.Unlock()
		return false
	}
	agrees := c.agrees(w, resp.TaskId)
	w.busy = !agrees
	c.mu.Unlock()
	if agrees {
		return true
	}
	c.restart(ctx, w, fmt.Errorf("it runs task %d, not the one it was given", resp.TaskId))
	return false
}

// restart tells a worker to end its work (RESTART) and removes it;
// errors are ignored, as the spec says. It is sent before the worker is
// removed, so that a pulse crossing it is not answered UNKNOWN_ID, which
// would have the worker register again without ending its work.
func (c *Controller) restart(ctx context.Context, w *cworker, why error) {
	c.log.Info("sending RESTART", zap.Uint64("worker", w.id), zap.String("why", why.Error()))
	if _, err := c.exchange(ctx, w, &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_RESTART}, nil, nil); err != nil {
		c.log.Info("RESTART not delivered", zap.Uint64("worker", w.id), zap.Error(err))
	}
	c.mu.Lock()
	c.remove(w, fmt.Errorf("RESTART: %w", why))
	c.mu.Unlock()
}
