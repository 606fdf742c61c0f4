package runexp

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/laboro-go/laboro"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultHoldWait is how long a runner waits after ATENDI before it asks
// again: the spec's 10 seconds.
const DefaultHoldWait = 10 * time.Second

// DefaultInterpreters maps the job types the reference runner knows
// without configuration to the program that runs them: a ".sh" job is
// run as "bash <script>". It is read, never written, by this package;
// do not modify it.
var DefaultInterpreters = map[string][]string{".sh": {"bash"}}

// waitedAnswer is how long an ATENDI must have taken to be taken for a
// manager that held the PETO while it waited for work (a Manager does, up
// to its IdleWait), rather than for a hold: the worker then asks again at
// once instead of waiting HoldWait, so that an idle runner takes a new job
// as soon as it comes.
const waitedAnswer = 250 * time.Millisecond

// busyHold bounds the hold after an ATENDI that came at once while other
// workers of the runner had jobs out: the manager's line was empty for a
// moment (a Manager holds such a PETO only briefly, since it keeps the
// others from reporting), and a job that comes next should not wait
// HoldWait for a worker that is free.
const busyHold = time.Second

// Errors of a runner's session.
var (
	// ErrBanned is matched by Run's error when the manager answered
	// ELIRI: it will send this runner no more jobs.
	ErrBanned = errors.New("runexp: banned by the manager (ELIRI)")
	// ErrGroupMismatch is matched by Run's error when the manager
	// announced a group other than the runner's.
	ErrGroupMismatch = errors.New("runexp: group mismatch")
	// ErrVersionMismatch is matched by Run's error when the manager
	// speaks a protocol version other than Version.
	ErrVersionMismatch = errors.New("runexp: protocol version mismatch")
)

// Runner is the runner side (runexp-runner): it connects to a manager and
// runs the jobs it hands out in Workers parallel workers that share the
// one connection.
//
// Its zero value is not usable: set Addr and Workers; every other field
// has a default. Run reads the fields and never changes them, so they
// must not change while Run runs, and one Runner may run several
// sessions, one after the other or at once.
type Runner struct {
	// Addr is the manager's host:port; required.
	Addr string
	// Name is the host name sent in the hail; it must match
	// [-_a-zA-Z0-9]+. "" means the short host name: os.Hostname up to
	// the first dot, with every other character replaced by '-'.
	Name string
	// Group is the runner's group; a manager announcing another one is
	// refused. "" means DefaultGroup.
	Group string
	// Workers is the number of jobs run at once, the N of "runexp N";
	// it must be >= 1.
	Workers int
	// Interpreters maps a job type (its extension, like ".sh") to the
	// argv prefix that runs a script of that type; the script's path is
	// appended. A job of a type not in the map fails without running.
	// nil means DefaultInterpreters.
	Interpreters map[string][]string
	// UseExitStatus decides a job's success by its exit status (0 is a
	// success) instead of the reference's rule: a job fails if and only
	// if its output has a line starting with "RES:failed".
	UseExitStatus bool
	// HoldWait is how long a worker waits after ATENDI before asking
	// again, unless another worker of this runner receives or reports a
	// job first; 0 means DefaultHoldWait. An ATENDI that came after the
	// manager held the PETO for a while (a Manager waiting for work) is
	// followed by another PETO at once; one that came at once while other
	// workers of the runner have jobs out, after a second at most.
	HoldWait time.Duration
	// Timeout bounds every exchange (connecting, each handshake step,
	// the answers to PETO and REZULTO, each chunk of a payload);
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxSize is the largest job accepted, in bytes; a larger LABORO
	// breaks the session before anything is allocated for it.
	// 0 means DefaultMaxSize.
	MaxSize int64
	// Pause keeps a message that gets no answer (JES, or PRETA for an
	// empty job) apart from the next one: the next waits until the
	// manager's host has acknowledged the first, and Pause more, so that
	// a manager reading each message with one recv (the reference) does
	// not read the two together. 0 means DefaultPause; negative, no wait.
	Pause time.Duration
	// Dir, which must exist, receives the job scripts and outputs while
	// they are needed. "" means a temporary directory removed when Run
	// returns.
	Dir string
	// Logger receives the session's events; nil means none.
	Logger *zap.Logger
}

// Run connects to the manager, says hello (SALUTON, KOMPRENAS, JES) and
// runs jobs in Workers workers until the manager has none left (FINO),
// bans the runner (ELIRI) or ctx ends; then no worker asks for another
// job (MASTERSTOP), the running jobs finish and their results are sent,
// and the last worker says goodbye (FINO ANKAU) and closes the connection.
//
// The spec raises MASTERSTOP on ELIRI only; Run raises it on FINO too,
// because the reference manager, once it has said FINO, accepts nothing
// but REZULTO and FINO ANKAU on that connection.
//
// When ctx ends, the running jobs are not killed: Run returns ctx.Err()
// once they have been reported, unless FINO or ELIRI came first.
// Cancelling ctx during the handshake closes the connection at once. To
// be able to stop at once as well, use RunDrain.
//
// Run returns nil after FINO, an error matching ErrBanned after ELIRI,
// ErrVersionMismatch or ErrGroupMismatch when the handshake fails on
// them, and otherwise an error wrapping what broke the session: a
// network error, a *ProtocolError, ErrSizeTooLarge, ErrMessageTooLong,
// io.ErrUnexpectedEOF for a payload cut short... A broken session kills
// the jobs still running (their whole process groups), as their results
// could not be sent; a manager that goes away while every worker runs a
// job is seen at once, not when a job ends. When Run returns, no job it
// started still runs, every goroutine it started has returned and every
// file it wrote is removed.
func (r *Runner) Run(ctx context.Context) error {
	return r.RunDrain(context.WithoutCancel(ctx), ctx)
}

// RunDrain is Run with two ways to stop. When drain ends, the runner
// stops as Run does when its ctx ends: no worker asks for another job, the
// running jobs finish and are reported, and the last worker says FINO
// ANKAU. When ctx ends, it stops at once: the connection is closed without
// a goodbye (the manager hands the jobs to other runners), the running
// jobs are killed with their whole process groups, and RunDrain returns an
// error matching ctx.Err() once they are gone. Either, during the
// handshake, closes the connection at once. RunDrain returns otherwise as
// Run does.
func (r *Runner) RunDrain(ctx, drain context.Context) error {
	cfg, err := r.withDefaults()
	if err != nil {
		return err
	}
	s, err := newRunnerSession(drain, cfg)
	if err != nil {
		return err
	}
	defer s.release()
	if err := s.connect(ctx); err != nil {
		return err
	}
	defer s.nc.Close()
	stop := runnerOnDone(ctx, func() { s.kill(ctx.Err()) })
	s.runWorkers()
	stop()
	return s.result()
}

// withDefaults returns a copy of r with its zero fields set to their
// defaults, or an error for a field that cannot work.
func (r *Runner) withDefaults() (Runner, error) {
	c := *r
	if c.Name == "" {
		c.Name = shortHostname()
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Interpreters == nil {
		c.Interpreters = DefaultInterpreters
	}
	if c.HoldWait == 0 {
		c.HoldWait = DefaultHoldWait
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxSize == 0 {
		c.MaxSize = DefaultMaxSize
	}
	if c.Pause == 0 {
		c.Pause = DefaultPause
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	switch {
	case c.Addr == "":
		return c, errors.New("runexp: Runner.Addr is empty")
	case c.Workers < 1:
		return c, fmt.Errorf("runexp: Runner.Workers must be >= 1, got %d", c.Workers)
	case !validHost(c.Name):
		return c, fmt.Errorf("runexp: host name %q is not [-_a-zA-Z0-9]+", c.Name)
	case c.HoldWait < 0 || c.Timeout < 0 || c.MaxSize < 0:
		return c, errors.New("runexp: Runner.HoldWait, Timeout and MaxSize must not be negative")
	}
	for typ, argv := range c.Interpreters {
		if len(argv) == 0 || argv[0] == "" {
			return c, fmt.Errorf("runexp: the interpreter of type %q is empty", typ)
		}
	}
	return c, nil
}

// shortHostname is the host name the reference runner sends by default.
func shortHostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	h, _, _ = strings.Cut(h, ".")
	b := []byte(h)
	for i, c := range b {
		if !hostByte(c) {
			b[i] = '-'
		}
	}
	if len(b) == 0 {
		return "localhost"
	}
	return string(b)
}

// hostByte reports whether c may be part of a host name.
func hostByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// runnerOnDone calls f, in a goroutine of its own, once ctx ends. The returned
// stop cancels that or, when f has started, waits for it to return, so
// that no goroutine outlives the caller; it reports whether f ran.
func runnerOnDone(ctx context.Context, f func()) (stop func() bool) {
	ran := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		defer close(ran)
		f()
	})
	return func() bool {
		if cancel() {
			return false
		}
		<-ran
		return true
	}
}

// runnerSession is one connection to a manager and the workers sharing it.
type runnerSession struct {
	ctx    context.Context // ends to drain (MASTERSTOP)
	cfg    Runner          // with the defaults filled in
	log    *zap.Logger
	exec   *laboro.Executor
	dir    string
	tmpDir bool // dir is ours, removed at the end

	nc net.Conn
	c  *conn

	// mu is the communication lock: the conversation is lock-step, so a
	// worker holds it from its request to the last answer. Take it with
	// lock and release it with unlock.
	mu      sync.Mutex
	active  int // workers not yet in WaitClose; guarded by mu
	running int // jobs received and not yet reported; guarded by mu

	// resume is closed, and replaced, when the manager may have a job for
	// a worker holding after ATENDI: another worker received one (jobs
	// flow again), or reported a result (the manager's verdict on this
	// runner, and its line, may have changed). Guarded by mu.
	resume chan struct{}

	// While jobs run and no worker talks, the watcher reads the
	// connection: the manager says nothing then, so what it reads is the
	// connection's end, and the jobs are killed rather than left running
	// for nobody until one of them ends.
	watching bool          // the watcher reads; guarded by mu
	watch    chan struct{} // tells the watcher to read
	watched  chan error    // the end of its read: nil when a worker stopped it

	stop      chan struct{} // MASTERSTOP: closed once no worker may ask for a job
	stopOnce  sync.Once
	stopCause error // why: nil after FINO, ErrBanned, or ctx.Err()

	broken   chan struct{} // closed once the connection is unusable
	failOnce sync.Once
	err      error // why it broke
	killed   bool  // by RunDrain's ctx, not by a fault
}

// newRunnerSession prepares the directory and the executor before anything is
// said to the manager, so that a local failure does not cost it a
// runner half-way through the handshake.
func newRunnerSession(ctx context.Context, cfg Runner) (*runnerSession, error) {
	s := &runnerSession{
		ctx:     ctx,
		cfg:     cfg,
		log:     cfg.Logger.With(zap.String("manager", cfg.Addr)),
		dir:     cfg.Dir,
		stop:    make(chan struct{}),
		broken:  make(chan struct{}),
		resume:  make(chan struct{}),
		watch:   make(chan struct{}, 1),
		watched: make(chan error, 1),
	}
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "runexp-runner-")
		if err != nil {
			return nil, fmt.Errorf("runexp: create the work directory: %w", err)
		}
		s.dir, s.tmpDir = dir, true
	} else if fi, err := os.Stat(s.dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("runexp: Runner.Dir %q is not a directory", s.dir)
	}
	n := cfg.Workers
	exec, err := laboro.New(
		laboro.WithRunner(&laboro.ProcessRunner{Dir: s.dir, Stderr: laboro.StderrToOutput, Logger: s.log}),
		laboro.WithPoolSize(n), laboro.WithConcurrency(n), laboro.WithBufferSize(n),
		// The job's verdict is runexp's (its output's RES: lines, or its
		// exit status with UseExitStatus), which judge logs, failures
		// with why: the Executor's own line of a job that exited non-zero
		// would contradict a job the rules say succeeded.
		laboro.WithLogger(s.log.WithOptions(zap.IncreaseLevel(zapcore.ErrorLevel))))
	if err != nil {
		s.removeDir()
		return nil, err
	}
	s.exec = exec
	return s, nil
}

// release stops the executor (its jobs have all ended by now, unless the
// session broke) and removes the temporary directory.
func (s *runnerSession) release() {
	s.exec.Close()
	s.removeDir()
}

func (s *runnerSession) removeDir() {
	if s.tmpDir {
		os.RemoveAll(s.dir)
	}
}

// connect is state 1 up to the start of the workers: it dials and shakes
// hands. The end of ctx or of the session's context closes the connection
// at once.
func (s *runnerSession) connect(ctx context.Context) error {
	either, cancel := context.WithCancel(s.ctx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	d := net.Dialer{Timeout: s.cfg.Timeout}
	nc, err := d.DialContext(either, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("runexp: connect to %s: %w", s.cfg.Addr, err)
	}
	s.nc = nc
	s.c = &conn{rw: nc, maxSize: s.cfg.MaxSize, timeout: s.cfg.Timeout, pause: s.cfg.Pause}
	stop := runnerOnDone(either, func() { nc.Close() })
	err = s.handshake()
	if stop() {
		err = cmp.Or(ctx.Err(), s.ctx.Err())
	}
	if err != nil {
		nc.Close()
		s.log.Error("handshake failed", zap.Error(err))
		return fmt.Errorf("runexp: handshake with %s: %w", s.cfg.Addr, err)
	}
	s.log.Info("connected", zap.String("host", s.cfg.Name), zap.String("group", s.cfg.Group),
		zap.Int("workers", s.cfg.Workers))
	return nil
}

// handshake is SALUTON → VERSIO → KOMPRENAS → ALIGI → JES.
func (s *runnerSession) handshake() error {
	c := s.c
	if err := c.write(Message{Kind: KindSaluton, Host: s.cfg.Name}); err != nil {
		return err
	}
	m, err := c.expect(KindVersio)
	if err != nil {
		return err
	}
	if m.Version != Version {
		return fmt.Errorf("%w: the manager speaks %s, this runner %s", ErrVersionMismatch, m.Version, Version)
	}
	if err := c.write(Message{Kind: KindKomprenas}); err != nil {
		return err
	}
	if m, err = c.expect(KindAligi); err != nil {
		return err
	}
	if m.Group != s.cfg.Group {
		return fmt.Errorf("%w: the manager serves %q, this runner %q", ErrGroupMismatch, m.Group, s.cfg.Group)
	}
	return c.write(Message{Kind: KindJes})
}

// runWorkers starts the workers and the watcher, and waits for all of
// them.
func (s *runnerSession) runWorkers() {
	watcher := make(chan struct{})
	go func() {
		defer close(watcher)
		s.watcher()
	}()
	var wg sync.WaitGroup
	s.active = s.cfg.Workers
	for range s.cfg.Workers {
		wg.Go(s.work)
	}
	wg.Wait()
	close(s.watch) // every worker ended in waitClose, which stopped it
	<-watcher
}

// result is Run's error once every worker has ended.
func (s *runnerSession) result() error {
	switch {
	case s.killed:
		return fmt.Errorf("runexp: runner stopped, its jobs killed: %w", s.err)
	case s.err != nil:
		return fmt.Errorf("runexp: session with %s broken: %w", s.cfg.Addr, s.err)
	case errors.Is(s.stopCause, ErrBanned):
		return fmt.Errorf("%w: manager %s", ErrBanned, s.cfg.Addr)
	}
	return s.stopCause
}

// raise raises MASTERSTOP; the first cause is kept.
func (s *runnerSession) raise(cause error) {
	s.stopOnce.Do(func() {
		s.stopCause = cause
		close(s.stop)
	})
}

// fail records why the connection broke, closes it, and kills the running
// jobs: their results could not be sent.
func (s *runnerSession) fail(err error) {
	s.failOnce.Do(func() {
		s.err = err
		s.log.Error("session broken", zap.Error(err))
		close(s.broken)
		s.nc.Close()
		s.exec.Close()
	})
}

// kill stops the session at once (RunDrain's ctx ended): the connection
// is closed without a goodbye, and the running jobs are killed.
func (s *runnerSession) kill(cause error) {
	s.failOnce.Do(func() {
		s.err, s.killed = cause, true
		s.log.Warn("stopped at once: the running jobs are killed", zap.Error(cause))
		close(s.broken)
		s.nc.Close()
		s.exec.Close()
	})
}

// lock takes the communication lock, and stops the watcher.
func (s *runnerSession) lock() {
	s.mu.Lock()
	if s.watching {
		s.watching = false
		s.nc.SetReadDeadline(time.Unix(1, 0)) // its read ends at once
		<-s.watched                           // an error there failed the session
	}
}

// unlock releases the communication lock, and starts the watcher while
// jobs run.
func (s *runnerSession) unlock() {
	if s.running > 0 && !s.isBroken() {
		s.nc.SetReadDeadline(time.Time{})
		s.watching = true
		s.watch <- struct{}{} // never blocks: the watcher's last read was waited for
	}
	s.mu.Unlock()
}

// watcher reads the connection while jobs run and no worker talks. The
// manager speaks only when asked, so its read ends in one of two ways: a
// worker takes the lock (the deadline lock sets), or the connection ended
// (the manager went away, or spoke out of turn), which breaks the session.
func (s *runnerSession) watcher() {
	var b [1]byte
	for range s.watch {
		_, err := s.nc.Read(b[:])
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			err = nil
		case err == nil:
			err = protocolErrorf("the manager spoke while no worker had asked")
		}
		if err != nil {
			s.fail(fmt.Errorf("connection lost while jobs ran: %w", err))
		}
		s.watched <- err
	}
}

func (s *runnerSession) isBroken() bool {
	select {
	case <-s.broken:
		return true
	default:
		return false
	}
}

// stopping reports whether a worker must go to WaitClose rather than ask
// for a job. The end of ctx raises MASTERSTOP here, where it matters: a
// worker running a job does not need to know before it asks again.
func (s *runnerSession) stopping() bool {
	if err := s.ctx.Err(); err != nil {
		s.raise(err)
	}
	select {
	case <-s.stop:
		return true
	case <-s.broken:
		return true
	default:
		return false
	}
}

// work is one worker, from state 2 to state 5.
func (s *runnerSession) work() {
	for {
		t, more := s.ask()
		if !more {
			break
		}
		if t != nil {
			s.report(s.run(t))
		}
	}
	s.waitClose()
}

// runnerJob is a job received from the manager.
type runnerJob struct {
	name   string // as the manager named it; never used as a path
	typ    string
	script string // the file holding its contents
	body   []byte // its contents, until written to script
}

// ask is state 3 up to running the job, and state 6. It returns the job
// received, or nil after ATENDI once HoldWait has passed; more is false
// when the worker must go to WaitClose.
func (s *runnerSession) ask() (t *runnerJob, more bool) {
	s.lock()
	if s.stopping() {
		s.unlock()
		return nil, false
	}
	asked := time.Now()
	m, err := s.peto()
	waited := time.Since(asked) >= waitedAnswer
	if err == nil && m.Kind == KindLaboro {
		t, err = s.receive(m)
	}
	if t != nil {
		s.running++ // until report
		s.wakeHeld()
	}
	resume, busy := s.resume, s.running > 0
	s.unlock()
	if err == nil && t != nil && t.script == "" {
		err = s.writeScript(t) // after the unlock: the others may talk meanwhile
	}
	if err != nil {
		s.fail(err)
		if t != nil {
			s.lock()
			s.running--
			s.unlock()
		}
		return nil, false
	}
	switch m.Kind {
	case KindLaboro:
		return t, true
	case KindAtendi:
		if waited {
			s.log.Debug("no job yet (ATENDI after a wait): asking again")
			return nil, true
		}
		// With other jobs out, an ATENDI is routine: the manager's line
		// was empty for a moment.
		log, wait := s.log.Info, s.cfg.HoldWait
		if busy {
			log, wait = s.log.Debug, min(wait, busyHold)
		}
		log("on hold (ATENDI)", zap.Duration("wait", wait))
		s.hold(wait, resume)
		return nil, true
	case KindEliri:
		s.log.Warn("banned (ELIRI): no more jobs for this runner")
	default:
		s.log.Info("no more jobs (FINO)")
	}
	return nil, false
}

// peto sends PETO and reads the answer; s.mu is held. FINO and ELIRI raise
// MASTERSTOP before the lock is released: the manager answers nothing but
// REZULTO and FINO ANKAU after them, so no other worker may ask again.
// (The spec raises MASTERSTOP for ELIRI only, but a PETO after FINO would
// break the reference manager's WaitClose state.)
func (s *runnerSession) peto() (Message, error) {
	if err := s.c.write(Message{Kind: KindPeto}); err != nil {
		return Message{}, err
	}
	m, err := s.c.read(false)
	if err != nil {
		return m, err
	}
	switch m.Kind {
	case KindFino:
		s.raise(nil)
	case KindEliri:
		s.raise(ErrBanned)
	case KindAtendi, KindLaboro:
	default:
		return m, protocolErrorf("expected an answer to PETO, got %v", m.Kind)
	}
	return m, nil
}

// receive acknowledges a LABORO and writes the job's contents to a file of
// its own; s.mu is held. A file that cannot be written ends the session:
// failing every job at once would waste the manager's whole queue.
func (s *runnerSession) receive(m Message) (*runnerJob, error) {
	if m.Size <= smallPayload {
		// Kept in memory and written once the lock is released.
		if err := s.c.write(Message{Kind: KindPreta}); err != nil {
			return nil, err
		}
		body := bytes.NewBuffer(make([]byte, 0, m.Size))
		if err := s.c.readPayload(body, m.Size); err != nil {
			return nil, fmt.Errorf("receiving job %q: %w", m.Name, err)
		}
		return &runnerJob{name: m.Name, typ: m.Type, body: body.Bytes()}, nil
	}
	f, err := os.CreateTemp(s.dir, scriptPattern(m.Name, m.Type))
	if err != nil {
		return nil, fmt.Errorf("runexp: create the script file: %w", err)
	}
	err = s.c.write(Message{Kind: KindPreta})
	if err == nil {
		err = s.c.readPayload(f, m.Size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("receiving job %q: %w", m.Name, err)
	}
	s.log.Debug("job received", zap.String("job", m.Name), zap.String("type", m.Type), zap.Int64("size", m.Size))
	return &runnerJob{name: m.Name, typ: m.Type, script: f.Name()}, nil
}

// writeScript writes a job received in memory to its script file.
func (s *runnerSession) writeScript(t *runnerJob) error {
	f, err := os.CreateTemp(s.dir, scriptPattern(t.name, t.typ))
	if err != nil {
		return fmt.Errorf("runexp: create the script file: %w", err)
	}
	_, err = f.Write(t.body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("runexp: write the script file: %w", err)
	}
	t.script, t.body = f.Name(), nil
	return nil
}

// scriptPattern is the os.CreateTemp pattern of a job's script file: the
// last element of the job's name and its type, reduced to characters
// that are safe in a file name, so that a name like "../x" cannot place
// the file outside the directory; CreateTemp makes it unique.
func scriptPattern(name, typ string) string {
	base := name[strings.LastIndexByte(name, '/')+1:]
	return "job-" + safeName(base, 64) + "-*" + safeName(typ, 16)
}

func safeName(s string, max int) string {
	b := []byte(s[:min(len(s), max)])
	for i, c := range b {
		if c != '.' && !hostByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

// wakeHeld ends the holds of the workers told ATENDI; s.mu is held.
func (s *runnerSession) wakeHeld() {
	close(s.resume)
	s.resume = make(chan struct{})
}

// hold waits d after ATENDI, or less: until another worker of this runner
// received a job or reported one (resume), or the session stops. Without
// the first, a runner whose workers were told ATENDI while the manager's
// line was empty would run one job at a time, for up to HoldWait, once
// jobs came again.
func (s *runnerSession) hold(d time.Duration, resume <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-resume:
	case <-s.stop:
	case <-s.broken:
	case <-s.ctx.Done():
	}
}

// waitClose is state 5: the last worker to reach it says FINO ANKAU.
func (s *runnerSession) waitClose() {
	s.lock()
	s.active--
	var err error
	if s.active == 0 && !s.isBroken() {
		err = s.c.write(Message{Kind: KindFinoAnkau})
		s.log.Info("session ended (FINO ANKAU)", zap.Error(err))
	}
	s.unlock()
	if err != nil {
		s.fail(err)
	}
}

// runnerOutcome is a finished job, ready to be sent: its header, then either
// the program's output, streamed from its file, or a note saying why the
// program did not run.
type runnerOutcome struct {
	name   string
	status Status
	header []byte
	out    *laboro.Output // nil when nothing ran
	file   *os.File       // out, opened; nil when it could not be
	note   string         // sent instead of file when file is nil
}

// run is states 3.9 and 4.1–4.2: it runs the job and judges it.
func (s *runnerSession) run(t *runnerJob) *runnerOutcome {
	defer os.Remove(t.script)
	interp, ok := s.cfg.Interpreters[t.typ]
	if !ok {
		now := time.Now()
		res := laboro.Result{Status: laboro.StatusFailed, ExitCode: -1, Started: now, Ended: now,
			Err: fmt.Errorf("no interpreter for type %s", t.typ)}
		return s.judge(t.name, nil, res)
	}
	argv := append(slices.Clip(interp), t.script)
	return s.judge(t.name, argv, s.execute(t.name, argv))
}

// execute runs argv through the executor and waits for it. Only the
// session's failure, which closes the executor, can cut it short. The job
// runs under its name, so that the log lines name it as the manager does;
// under an id of its own should that name run here already.
func (s *runnerSession) execute(name string, argv []string) laboro.Result {
	job := laboro.Job{ID: name, Args: argv}
	h, err := s.exec.Submit(context.Background(), job)
	if errors.Is(err, laboro.ErrDuplicateID) {
		job.ID = ""
		h, err = s.exec.Submit(context.Background(), job)
	}
	if err != nil {
		now := time.Now()
		return laboro.Result{Status: laboro.StatusFailed, ExitCode: -1, Started: now, Ended: now, Err: err}
	}
	res, _ := h.Wait(context.Background())
	return res
}

// judge decides the job's status and builds its header.
func (s *runnerSession) judge(name string, argv []string, res laboro.Result) *runnerOutcome {
	o := &runnerOutcome{name: name, out: res.Output}
	if res.Output != nil {
		f, err := res.Output.Open()
		if err != nil {
			res.Err = fmt.Errorf("output lost: %w", err)
		}
		o.file = f
	}
	why := res.Err // of a failure, for the log
	switch {
	case o.file == nil:
		o.status, o.note = Failure, fmt.Sprintf("runexp: %v\n", res.Err)
	case res.Status == laboro.StatusKilled || res.Status == laboro.StatusTimedOut || res.Status == laboro.StatusCancelled:
		// It did not run to its end: whatever its output says so far, it
		// failed.
		o.status = Failure
	case s.cfg.UseExitStatus:
		o.status = Status(res.Status == laboro.StatusSucceeded)
	default:
		failed, err := reportsFailure(io.LimitReader(o.file, o.out.Size()))
		if err == nil {
			_, err = o.file.Seek(0, io.SeekStart)
		}
		if err != nil {
			o.file.Close()
			o.file, o.status, o.note = nil, Failure, fmt.Sprintf("runexp: output lost: %v\n", err)
		} else {
			o.status = Status(!failed)
			if failed {
				why = errors.New("its output reports a failure (RES:failed)")
			}
		}
	}
	o.header = appendHeader(nil, o.status, argv, res)
	fields := []zap.Field{zap.String("job", name), zap.Stringer("status", o.status),
		zap.Stringer("ended", res.Status), zap.Int("exit", res.ExitCode), zap.Duration("took", res.Duration())}
	if o.status == Failure {
		// Once per job, with why, as the Executor's line would say it;
		// the end of its output (standard error goes there too) when it
		// exited 0.
		tail := res.Stderr
		if len(tail) == 0 && o.file != nil {
			tail = fileEnd(o.file, o.out.Size(), 512)
		}
		fields = append(fields, zap.Strings("command", shownCommand(name, argv)), zap.Error(why), zap.ByteString("stderr", tailOf(tail, 512)))
		if o.note != "" {
			fields = append(fields, zap.String("note", strings.TrimSpace(o.note)))
		}
		s.log.Warn("job failed", fields...)
		return o
	}
	s.log.Info("job finished", fields...)
	return o
}

// body returns what follows REZULTO, and its size.
func (o *runnerOutcome) body() (io.Reader, int64) {
	head := bytes.NewReader(o.header)
	if o.file == nil {
		return io.MultiReader(head, strings.NewReader(o.note)), int64(len(o.header) + len(o.note))
	}
	return io.MultiReader(head, o.file), int64(len(o.header)) + o.out.Size()
}

// close removes the output's file.
func (o *runnerOutcome) close() {
	if o.file != nil {
		o.file.Close()
	}
	o.out.Close()
}

// appendHeader appends the reference's header: the summary line, a blank
// line, the times, the command, the exit status, the signal that ended the
// process when one did ("signal: 9 (killed)"), and another blank line.
func appendHeader(b []byte, st Status, argv []string, res laboro.Result) []byte {
	b = append(b, "runexp summary: "...)
	b = append(b, st.String()...)
	b = append(b, "\n\nstart: "...)
	b = res.Started.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, "\nend: "...)
	b = res.Ended.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, "\ncommand: "...)
	b, _ = laboro.Job{Args: argv}.AppendText(b)
	b = append(b, "\nexit status: "...)
	b = strconv.AppendInt(b, int64(res.ExitCode), 10)
	if sig, ok := signalOf(res.Err); ok {
		b = append(b, "\nsignal: "...)
		b = strconv.AppendInt(b, int64(sig), 10)
		b = append(b, " ("...)
		b = append(b, sig.String()...)
		b = append(b, ')')
	}
	return append(b, "\n\n"...)
}

// signalOf returns the signal that ended a process, when err says one did.
func signalOf(err error) (syscall.Signal, bool) {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}

// failedMark starts a line in the output of a job that failed, by the
// reference's rule.
const failedMark = "RES:failed"

// reportsFailure reports whether r holds a line that starts with
// failedMark. It reads r in chunks: an output of any size is scanned in
// constant memory.
func reportsFailure(r io.Reader) (bool, error) {
	buf := scanBuffers.Get().(*[32 << 10]byte)
	defer scanBuffers.Put(buf)
	matched := 0
	for {
		n, err := r.Read(buf[:])
		var found bool
		if matched, found = scanFailed(buf[:n], matched); found {
			return true, nil
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// scanBuffers hold reportsFailure's buffers: one on its stack escapes to
// the heap (it is handed to an io.Reader), 32 KiB made and cleared a job.
var scanBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// scanFailed goes on looking for failedMark at a line's start in b.
// matched is how many bytes of it the current line started with so far,
// or -1 once the line cannot match; the new count is returned.
func scanFailed(b []byte, matched int) (int, bool) {
	for len(b) > 0 {
		if matched < 0 {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				return -1, false
			}
			b, matched = b[i+1:], 0
			continue
		}
		switch c := b[0]; {
		case c == failedMark[matched]:
			if matched++; matched == len(failedMark) {
				return matched, true
			}
		case c == '\n':
			matched = 0
		default:
			matched = -1
		}
		b = b[1:]
	}
	return matched, false
}

// report is states 4.3–4.12: it sends the outcome and removes its files.
func (s *runnerSession) report(o *runnerOutcome) {
	defer o.close()
	s.lock()
	s.running--
	if s.isBroken() {
		s.unlock()
		return
	}
	err := s.sendResult(o)
	if err == nil {
		s.wakeHeld()
	}
	s.unlock()
	if err != nil {
		s.fail(fmt.Errorf("sending the result of %q: %w", o.name, err))
	}
}

// sendResult is REZULTO → PRETA → output → RICEVIS; s.mu is held.
func (s *runnerSession) sendResult(o *runnerOutcome) error {
	body, size := o.body()
	if err := s.c.write(Message{Kind: KindRezulto, Name: o.name, Status: o.status, Size: size}); err != nil {
		return err
	}
	if _, err := s.c.expect(KindPreta); err != nil {
		return err
	}
	if err := s.c.writePayload(body, size); err != nil {
		return err
	}
	_, err := s.c.expect(KindRicevis)
	return err
}

// tailOf returns the last n bytes of b at most.
func tailOf(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// fileEnd returns the last n bytes at most of f, of size bytes, without
// moving its offset.
func fileEnd(f io.ReaderAt, size int64, n int64) []byte {
	off := max(size-n, 0)
	b := make([]byte, size-off)
	k, _ := f.ReadAt(b, off)
	return b[:k]
}

// shownCommand is argv, the interpreter and the job's script, as a log
// line shows it: the script by the job's name and type (batch-0/job-000.sh,
// its file at the manager), not by the temporary file it was written to
// here, which is gone once the job ends.
func shownCommand(name string, argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	last := len(argv) - 1
	return append(slices.Clip(argv[:last]), name+filepath.Ext(argv[last]))
}
