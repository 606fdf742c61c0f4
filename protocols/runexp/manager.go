package runexp

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/lograte"
	"github.com/laboro-go/laboro/transport"
	"go.uber.org/zap"
)

// DefaultMaxConns bounds the connections a Manager serves at once unless
// Manager.MaxConns says otherwise.
const DefaultMaxConns = 1024

// DefaultMaxAttempts is how many runners a job may be handed to without a
// result unless Manager.MaxAttempts says otherwise.
const DefaultMaxAttempts = 5

// DefaultIdleWait is how long a PETO waits for a job when none is pending
// but more may come, before the runner is told ATENDI.
const DefaultIdleWait = time.Second

// busyWait replaces IdleWait for a runner that has other jobs out.
// It only covers the moment an Executor takes to hand over its next job.
const busyWait = 5 * time.Millisecond

// ErrUnknownJob is the cause of a runner being dropped for a REZULTO about a
// job that the manager did not send it.
var ErrUnknownJob = errors.New("runexp: result for a job this runner was not sent")

// JobType is a job's type, its file extension with the dot (".sh"). It
// travels in laboro.Job.Payload; see NewJob.
type JobType string

// NewJob returns the laboro.Job for a runexp job: its name is the job's ID
// (the path of its file under runs/, without extension), its contents the
// script, and its Payload its type, the file's extension with the dot.
// Job.Meta is left to the caller.
func NewJob(name string, typ JobType, contents string) laboro.Job {
	return laboro.Job{ID: name, Script: contents, Payload: typ}
}

// Manager is the manager side of runexp: a laboro.Runner that hands each job
// given to Run to a runner that asks for one (PETO), and returns the result
// that runner sends back (REZULTO). Use it as an Executor's runner, and
// serve runners with Serve; the Executor's buffer, Stop, Cancel, Job.Timeout,
// Queued and concurrency then apply to runexp jobs: a job reaches runners
// only once the Executor runs it, so the concurrency level is the number of
// jobs out at runners (or waiting for one) at a time.
//
// Its jobs go through a transport.Dispatcher: they wait in its line, first
// come first served, until a runner asks; a job whose runner disconnects or
// breaks the protocol before its result arrives goes back to the front of
// the line for the next runner that asks (at least once). A job whose Run
// ends first (Executor.Cancel, Job.Timeout, Close) ends at once; runexp
// cannot tell a runner to stop a job, so the runner runs it to its end,
// and its REZULTO is then read and dropped, its output removed, without
// disconnecting the runner.
//
// Set the fields before first use; a Manager is safe for concurrent use and
// must not be copied.
type Manager struct {
	// Group is the group name announced to runners; "" means DefaultGroup.
	Group string
	// Policy judges a runner at each PETO; nil means every runner may
	// always run jobs. BanPolicy is the reference manager's --ban.
	Policy Policy
	// Timeout bounds each exchange of the wire (not a job: the Executor
	// applies Job.Timeout); 0 means DefaultTimeout.
	Timeout time.Duration
	// IdleWait is how long a PETO waits for a job to become available
	// before the runner is told ATENDI; 0 means DefaultIdleWait. A runner
	// that has other jobs out waits 5 ms at most, since its other workers
	// cannot report while its PETO waits.
	IdleWait time.Duration
	// MaxSize bounds the output kept of a job; 0 means DefaultMaxSize. A
	// runner's REZULTO announcing more is still taken (the bytes beyond
	// MaxSize are read and dropped, so that the runner goes on), and the
	// job fails with an error matching ErrSizeTooLarge, its output cut to
	// MaxSize bytes.
	MaxSize int64
	// MaxConns bounds the connections served at once; one more is closed
	// before a word is said, with a log line. 0 means DefaultMaxConns.
	MaxConns int
	// MaxAttempts is how many runners a job may be handed to without a
	// result (each lost its connection while it had the job) before the
	// job fails with an error matching transport.ErrAttempts: a job that
	// kills its runners does not go round them forever. 0 means
	// DefaultMaxAttempts; negative, no limit.
	MaxAttempts int
	// Allow, when not nil, lists the addresses runners may connect from
	// (add 127.0.0.0/8 and ::1/128 for local runners): the wire has no room for
	// a secret, so this is how a Manager that listens beyond its machine
	// knows its runners. A connection from elsewhere is closed before a
	// word is said, with a log line naming its address. nil allows every
	// address.
	Allow []netip.Prefix
	// Pause keeps a PRETA before an empty output apart from the RICEVIS
	// that follows it, as Runner.Pause does for the runner's messages.
	// 0 means DefaultPause; negative, no wait.
	Pause time.Duration
	// Dir receives the outputs as files, handed over in Result.Output; ""
	// means os.TempDir.
	Dir string
	// Logger; nil means none.
	Logger *zap.Logger

	once     sync.Once
	conns    atomic.Int64                              // connections being served
	refusals lograte.Limited                           // what a peer causes at will (refusals, bad messages), logged at most once a second
	d        *transport.Dispatcher[string, laboro.Job] // the jobs, by name
	mu       sync.Mutex
	wake     chan struct{}      // closed and replaced when waiting PETOs should look again
	runners  map[*remote]bool   // connected runners
	records  map[string]*record // per host name, kept across reconnects
	runs     int64              // Run calls begun
	source   *laboro.Executor   // set by Finish: no more jobs will be submitted to it
	idle     chan struct{}      // closed when no runner is connected; nil while some are
	done     int                // results received
	failed   int                // of which failures
}

var (
	_ laboro.Runner    = (*Manager)(nil)
	_ laboro.Validator = (*Manager)(nil)
)

func (m *Manager) init() {
	m.once.Do(func() {
		if m.Logger == nil {
			m.Logger = zap.NewNop()
		}
		// No grace: a runner that comes back is a new session, and the
		// runner kills its jobs when it loses one. No attempt limit, as
		// the reference manager.
		attempts := cmp.Or(m.MaxAttempts, DefaultMaxAttempts)
		if attempts < 0 {
			attempts = 0 // no limit
		}
		m.d = transport.NewDispatcher[string, laboro.Job](transport.Config{MaxAttempts: attempts, Logger: m.Logger})
		m.wake = make(chan struct{})
		m.runners = map[*remote]bool{}
		m.records = map[string]*record{}
		m.idle = closedChan()
	})
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (m *Manager) group() string {
	if m.Group == "" {
		return DefaultGroup
	}
	return m.Group
}

func (m *Manager) timeout() time.Duration {
	if m.Timeout <= 0 {
		return DefaultTimeout
	}
	return m.Timeout
}

// broadcast wakes every PETO waiting for a job or for the end: the line
// or what canEnd looks at may have changed. m.mu is held.
func (m *Manager) broadcast() {
	close(m.wake)
	m.wake = make(chan struct{})
}

// Validate refuses a job that cannot be sent: its ID is the job's name and
// must be a non-empty line; its type (Payload, a JobType or a FolderJob's
// Type; ".sh" when nil) must be a dot and at least one character, without
// spaces.
func (m *Manager) Validate(job laboro.Job) error {
	if job.ID == "" || strings.ContainsAny(job.ID, "\r\n") || strings.HasSuffix(job.ID, " ") {
		return fmt.Errorf("runexp: job name %q: a job needs its name as ID, one line", job.ID)
	}
	if job.Func != nil || job.Command != "" || len(job.Args) > 0 {
		return errors.New("runexp: a job is a script (Job.Script), see NewJob")
	}
	typ, ok := jobType(job)
	if !ok {
		return fmt.Errorf("runexp: Job.Payload holds a %T: a runexp job's Payload is its JobType or its FolderJob, see NewJob", job.Payload)
	}
	if !validType(string(typ)) {
		return fmt.Errorf("runexp: job type %q is not an extension like .sh", typ)
	}
	return nil
}

// jobType is the job's type: its Payload, a FolderJob's Type, or ".sh"
// without one; false when the Payload is of another type.
func jobType(job laboro.Job) (JobType, bool) {
	switch p := job.Payload.(type) {
	case nil:
		return ".sh", true
	case JobType:
		return p, true
	case FolderJob:
		return p.Type, true
	}
	return "", false
}

// Run puts the job in line for the next runner that asks and waits for its
// result. The job succeeds or fails as the runner reports; its output (what
// the runner sent) is in Result.Output. When ctx ends first, Run returns at
// once with the status ctx's cause gives (laboro.Interruption): the job
// leaves the line, or, if a runner has it, its result is dropped when it
// comes. Run fails at once for a job whose name another Run has now
// (transport.ErrDuplicate): runexp names jobs by name only.
func (m *Manager) Run(ctx context.Context, job laboro.Job) laboro.Result {
	m.init()
	// runs and the line change together, for canEnd.
	m.mu.Lock()
	m.runs++
	t, err := m.d.Add(ctx, job.ID, job)
	m.broadcast()
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.broadcast() // the end of Run may let runners finish
		m.mu.Unlock()
	}()
	if err != nil {
		now := time.Now()
		return laboro.Result{ID: job.ID, Status: laboro.StatusFailed, ExitCode: -1, Err: err, Started: now, Ended: now}
	}
	return m.d.Wait(ctx, t)
}

// Finish tells the Manager that no more jobs will be submitted to ex, the
// Executor it serves (every call of Run comes from ex). From then on, once ex has handed every job it holds
// to Run, a runner that asks while no job is pending and no other runner
// has one out is told FINO; until then it is told ATENDI, so that a job
// coming back from a runner that died still finds runners.
func (m *Manager) Finish(ex *laboro.Executor) {
	m.init()
	m.mu.Lock()
	m.source = ex
	m.broadcast()
	m.mu.Unlock()
}

// canEnd reports whether runner s may be told FINO. m.mu is held.
func (m *Manager) canEnd(s *remote) bool {
	if m.source == nil {
		return false
	}
	// A job the Executor has taken from its queue but not yet given to
	// Run is one the Executor has Started and no Run has begun with (its
	// Running also counts jobs whose Run has returned, for a moment). Read
	// before the Dispatcher: a Run that adds a job does so under m.mu.
	if st := m.source.Stats(); st.Queued > 0 || st.Blocked > 0 || st.Started > m.runs {
		return false
	}
	// No job in line, and none out at another runner (one that could
	// come back).
	st := m.d.Stats()
	return st.Waiting == 0 && st.Held == s.live()
}

// Stats are a Manager's counters, for progress displays.
type Stats struct {
	Runners int // connected runners
	Pending int // jobs waiting for a runner
	Out     int // jobs out at runners, their results awaited
	Done    int // results received
	Failed  int // of which failures
}

// Stats returns the Manager's counters, read together.
func (m *Manager) Stats() Stats {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.d.Stats()
	return Stats{Runners: len(m.runners), Pending: d.Waiting, Out: d.Held, Done: m.done, Failed: m.failed}
}

// Idle returns a channel that is closed while no runner is connected.
func (m *Manager) Idle() <-chan struct{} {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.idle
}

// Serve accepts runners on ln until ctx ends, then closes ln and every
// runner's connection (their jobs go back to the line) and waits for the
// goroutines it started. It returns ctx.Err(), or the listener's error.
func (m *Manager) Serve(ctx context.Context, ln net.Listener) error {
	m.init()
	return transport.Serve(ctx, ln, m.serveConn)
}

// remote is one connected runner, seen by the manager. Only its
// connection's goroutine uses it, except w.
type remote struct {
	c    *conn
	host string
	log  *zap.Logger
	w    *transport.Worker[string, laboro.Job]
	// sent holds the names of the jobs sent to this runner whose REZULTO
	// has not come: those the Dispatcher holds for it, and those that
	// ended without it (their REZULTO is read and dropped).
	sent   map[string]struct{}
	banned bool
	ended  bool // told FINO
}

// live counts the jobs out at s whose results are still awaited.
func (s *remote) live() int { return len(s.w.Held()) }

// accept refuses a job whose name s still runs (one that ended without it
// and was submitted again): the runner's REZULTO could not tell the two
// apart.
func (s *remote) accept(job laboro.Job) bool {
	_, running := s.sent[job.ID]
	return !running
}

// allowed reports whether a runner may connect from addr.
func (m *Manager) allowed(addr net.Addr) bool {
	if m.Allow == nil {
		return true
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, p := range m.Allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func (m *Manager) serveConn(ctx context.Context, raw net.Conn) {
	defer raw.Close()
	defer m.conns.Add(-1)
	if n := m.conns.Add(1); n > int64(cmp.Or(m.MaxConns, DefaultMaxConns)) {
		m.refusals.Of(m.Logger).Warn("connection refused: too many connections (Manager.MaxConns; at most one such line a second)",
			zap.Stringer("peer", raw.RemoteAddr()))
		return
	}
	if !m.allowed(raw.RemoteAddr()) {
		m.Logger.Warn("connection refused: the address is not allowed (-allow)", zap.Stringer("peer", raw.RemoteAddr()))
		return
	}
	// The end of ctx cuts the session, even as it clears the read
	// deadline to wait for the runner's next message.
	rw, stop := transport.Interruptible(ctx, raw)
	defer stop()
	s := &remote{
		// Any SIZE is read: take keeps MaxSize bytes of an output and
		// drops the rest.
		c:    &conn{rw: rw, maxSize: math.MaxInt64, timeout: m.timeout(), pause: cmp.Or(m.Pause, DefaultPause)},
		log:  m.Logger.With(zap.Stringer("peer", raw.RemoteAddr())),
		sent: map[string]struct{}{},
	}
	if err := m.handshake(s); err != nil {
		s.log.Warn("runner refused at the handshake", zap.Error(err))
		return
	}
	s.log = s.log.With(zap.String("runner", s.host))
	s.log.Info("runner joined")
	m.join(s)
	err := m.converse(ctx, s)
	m.leave(s, err)
}

// handshake is the manager's state 1: SALUTON → VERSIO → KOMPRENAS →
// ALIGI → JES.
func (m *Manager) handshake(s *remote) error {
	hail, err := s.c.expect(KindSaluton)
	if err != nil {
		return fmt.Errorf("hail: %w", err)
	}
	s.host = hail.Host
	if err := s.c.write(Message{Kind: KindVersio, Version: Version}); err != nil {
		return err
	}
	if _, err := s.c.expect(KindKomprenas); err != nil {
		return fmt.Errorf("after VERSIO: %w", err)
	}
	if err := s.c.write(Message{Kind: KindAligi, Group: m.group()}); err != nil {
		return err
	}
	if _, err := s.c.expect(KindJes); err != nil {
		return fmt.Errorf("after ALIGI %s (a runner of another group leaves here): %w", m.group(), err)
	}
	return nil
}

func (m *Manager) join(s *remote) {
	s.w = m.d.Join(s.host, nil) // runexp has no message to cancel a job
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.runners) == 0 {
		m.idle = make(chan struct{})
	}
	m.runners[s] = true
	if m.records[s.host] == nil {
		if len(m.records) >= maxRecords {
			m.forgetAHost()
		}
		m.records[s.host] = &record{}
	}
}

// maxRecords bounds the hosts whose records the Manager keeps: a host
// names itself, and a peer that greets with name after name must not grow
// them without end. (A var for the tests' sake.)
var maxRecords = 4096

// forgetAHost drops the record of a host with no runner connected, to make
// room for a new one (a host that comes back starts afresh; a host names
// itself, so a record was never a hold on it). m.mu is held.
func (m *Manager) forgetAHost() {
	connected := make(map[string]bool, len(m.runners))
	for r := range m.runners {
		connected[r.host] = true
	}
	for host := range m.records {
		if !connected[host] {
			delete(m.records, host)
			return
		}
	}
}

// leave forgets s; the Dispatcher puts the jobs it still had back at the
// front of the line.
func (m *Manager) leave(s *remote, err error) {
	back := s.live()
	s.w.Leave(err)
	m.mu.Lock()
	delete(m.runners, s)
	if len(m.runners) == 0 {
		close(m.idle)
	}
	m.broadcast() // jobs back in line, or one runner fewer to wait for
	m.mu.Unlock()
	switch {
	case err == nil:
		s.log.Info("runner done")
	default:
		s.log.Warn("runner dropped", zap.Error(err), zap.Int("jobs back in line", back))
	}
}

// converse is the manager's states 2 to 5 for one runner. It returns nil
// when the runner said FINO ANKAU, else why the connection ended.
func (m *Manager) converse(ctx context.Context, s *remote) error {
	for {
		// The runner may run jobs for hours between messages: no deadline.
		msg, err := s.c.read(true)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return err
		}
		switch msg.Kind {
		case KindPeto:
			err = m.ask(ctx, s)
		case KindRezulto:
			err = m.receive(s, msg)
		case KindFinoAnkau:
			return nil
		default:
			err = protocolErrorf("unexpected %v from a runner", msg.Kind)
		}
		if err != nil {
			return err
		}
	}
}

// ask answers a PETO: ELIRI or ATENDI when the policy says so, else the
// next job (state 3), FINO when there will be none (state 5), or ATENDI
// when none comes within IdleWait.
func (m *Manager) ask(ctx context.Context, s *remote) error {
	switch m.judge(s) {
	case Ban:
		if !s.banned {
			s.log.Warn("runner banned (ELIRI)")
		}
		s.banned = true
		return s.c.write(Message{Kind: KindEliri})
	case Hold:
		s.log.Info("runner on hold (ATENDI)")
		return s.c.write(Message{Kind: KindAtendi})
	}
	t, end := m.next(ctx, s)
	switch {
	case end:
		s.ended = true
		return s.c.write(Message{Kind: KindFino})
	case t == nil:
		return s.c.write(Message{Kind: KindAtendi})
	}
	return m.send(s, t)
}

// judge applies the policy to s's host. s.banned sticks.
func (m *Manager) judge(s *remote) Verdict {
	if s.banned {
		return Ban
	}
	if m.Policy == nil {
		return Allow
	}
	out := s.live()
	m.mu.Lock()
	r := m.records[s.host].view(s.host, out)
	m.mu.Unlock()
	return m.Policy.Judge(r)
}

// next takes the job at the front of the Dispatcher's line for s, waiting
// up to IdleWait for one. end is true when s may be told FINO.
func (m *Manager) next(ctx context.Context, s *remote) (t *transport.Ticket[string, laboro.Job], end bool) {
	wait := m.IdleWait
	if wait <= 0 {
		wait = DefaultIdleWait
	}
	if s.live() > 0 {
		// While this PETO waits, the runner's other workers cannot send
		// their results: hold them up only briefly.
		wait = min(wait, busyWait)
	}
	var timer <-chan time.Time
	for {
		// The wake-up is taken before the line is looked at: a job added
		// (and m.wake closed) after Take found none still wakes this
		// PETO. Taken after, it could be the new channel, and the PETO
		// would wait out IdleWait with a job in line.
		m.mu.Lock()
		wake := m.wake
		m.mu.Unlock()
		if ts := s.w.Take(1, s.accept); len(ts) == 1 {
			return ts[0], false
		}
		m.mu.Lock()
		end := m.canEnd(s)
		m.mu.Unlock()
		if end {
			return nil, true
		}
		if timer == nil {
			tm := time.NewTimer(wait)
			defer tm.Stop()
			timer = tm.C
		}
		// m.wake, not the Worker's Wake: it also says when s may end, and
		// is not woken by a job that s.accept refuses.
		select {
		case <-wake:
		case <-timer:
			return nil, false
		case <-ctx.Done():
			return nil, false
		}
	}
}

// send is state 3: LABORO, PRETA, the contents. On an error the job stays
// with s, and goes back in line when s leaves.
func (m *Manager) send(s *remote, t *transport.Ticket[string, laboro.Job]) error {
	job := t.Value
	typ, _ := jobType(job) // Validate checked it
	s.sent[job.ID] = struct{}{}
	msg := Message{Kind: KindLaboro, Name: job.ID, Type: string(typ), Size: int64(len(job.Script))}
	if err := s.c.write(msg); err != nil {
		return err
	}
	if _, err := s.c.expect(KindPreta); err != nil {
		return fmt.Errorf("after LABORO %s: %w", job.ID, err)
	}
	if err := s.c.writePayload(strings.NewReader(job.Script), msg.Size); err != nil {
		return err
	}
	s.log.Debug("job sent", zap.String("job", job.ID))
	return nil
}

// receive is state 4: a REZULTO for a job sent to s, PRETA, the output
// into a file, RICEVIS; then the result goes to the Dispatcher, which
// hands it to the job's Run, or drops it and removes its file when the job
// has ended meanwhile.
func (m *Manager) receive(s *remote, msg Message) error {
	if _, ok := s.sent[msg.Name]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownJob, msg.Name)
	}
	path, kept, err := m.take(s, msg)
	if err != nil {
		return err
	}
	delete(s.sent, msg.Name)

	res := laboro.Result{ID: msg.Name, Status: laboro.StatusSucceeded, Output: laboro.NewOutput(path, kept)}
	switch {
	case kept < msg.Size:
		res.Status, res.ExitCode = laboro.StatusFailed, 1
		res.Err = fmt.Errorf("%w: the output of %d bytes is over the limit of %d; its first %d bytes are kept",
			ErrSizeTooLarge, msg.Size, kept, kept)
		s.log.Warn("output over the limit: the job fails", zap.String("job", msg.Name), zap.Int64("size", msg.Size), zap.Int64("limit", kept))
	case msg.Status == Failure:
		f := failureOf(path)
		res.Status, res.ExitCode, res.Stderr = laboro.StatusFailed, f.exitCode, f.tail
		switch {
		case f.exitCode == 0:
			// It exited with 0, and failed by its output (RES:failed).
			res.Err = fmt.Errorf("runexp: runner %s reported failure: its output says so (a line starting with %s)", s.host, failedMark)
		case f.signal != "":
			// The summary says an exit status; with -1 it says nothing.
			res.Err = fmt.Errorf("runexp: runner %s reported failure: killed by signal %s", s.host, f.signal)
		default:
			res.Err = fmt.Errorf("runexp: runner %s reported failure", s.host)
		}
	}
	m.mu.Lock()
	m.records[s.host].add(msg.Status)
	m.done++
	if msg.Status == Failure {
		m.failed++
	}
	m.mu.Unlock()
	err = s.w.Complete(msg.Name, res)
	m.mu.Lock()
	m.broadcast() // one job fewer out: runners waiting to end may
	m.mu.Unlock()
	if err != nil {
		// ErrLate or ErrNotHeld: the job ended without this result
		// (cancelled, timed out, closed); the output is removed.
		s.log.Info("result of an abandoned job discarded", zap.String("job", msg.Name), zap.Error(err))
		return nil
	}
	s.log.Debug("job done", zap.String("job", msg.Name), zap.Stringer("status", msg.Status))
	return nil
}

// take receives an output (PRETA, the bytes, RICEVIS) into a file of its
// own and returns its path and the bytes kept: MaxSize at most, the rest
// read and dropped. A small output is kept in memory until RICEVIS is
// sent, and only then written, so that the runner's other workers wait for
// no file system.
func (m *Manager) take(s *remote, msg Message) (path string, kept int64, err error) {
	kept = min(msg.Size, cmp.Or(m.MaxSize, DefaultMaxSize))
	var body *bytes.Buffer
	var f *os.File
	if kept <= smallPayload {
		body = bytes.NewBuffer(make([]byte, 0, kept))
	} else if f, err = os.CreateTemp(m.Dir, "runexp-*.res"); err != nil {
		return "", 0, fmt.Errorf("runexp: keeping an output: %w", err)
	}
	defer func() {
		if f != nil && err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := s.c.write(Message{Kind: KindPreta}); err != nil {
		return "", 0, err
	}
	var dst io.Writer = f
	if body != nil {
		dst = body
	}
	if err := s.c.readPayload(&keepFirst{w: dst, n: kept}, msg.Size); err != nil {
		return "", 0, fmt.Errorf("output of %s: %w", msg.Name, err)
	}
	if err := s.c.write(Message{Kind: KindRicevis}); err != nil {
		return "", 0, err
	}
	if body != nil {
		if f, err = os.CreateTemp(m.Dir, "runexp-*.res"); err != nil {
			return "", 0, fmt.Errorf("runexp: keeping an output: %w", err)
		}
		if _, err = f.Write(body.Bytes()); err != nil {
			return "", 0, fmt.Errorf("runexp: keeping an output: %w", err)
		}
	}
	if err = f.Close(); err != nil {
		return "", 0, fmt.Errorf("runexp: keeping an output: %w", err)
	}
	return f.Name(), kept, nil
}

// keepFirst writes the first n bytes written to it to w, and drops the
// rest.
type keepFirst struct {
	w io.Writer
	n int64
}

func (k *keepFirst) Write(p []byte) (int, error) {
	if k.n > 0 {
		q := p[:min(int64(len(p)), k.n)]
		if _, err := k.w.Write(q); err != nil {
			return 0, err
		}
		k.n -= int64(len(q))
	}
	return len(p), nil
}
