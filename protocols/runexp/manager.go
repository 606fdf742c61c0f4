package runexp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport"
	"go.uber.org/zap"
)

// DefaultIdleWait is how long a PETO waits for a job when none is pending
// but more may come, before the runner is told ATENDI.
const DefaultIdleWait = time.Second

// busyWait replaces IdleWait for a runner that has other jobs out.
// It only covers the moment an Executor takes to hand over its next job.
const busyWait = 5 * time.Millisecond

// ErrUnknownJob is the cause of a runner being dropped for a REZULTO about a
// job that the manager did not send it.
var ErrUnknownJob = errors.New("runexp: result for a job this runner was not sent")

// JobType is a job's type, its file extension with the dot (".sh"), carried
// in laboro.Job.Meta; see NewJob.
type JobType string

// NewJob returns the laboro.Job for a runexp job: its name is the job's ID
// (the path of its file under runs/, without extension), its contents the
// script, its type the file's extension with the dot.
func NewJob(name string, typ JobType, contents string) laboro.Job {
	return laboro.Job{ID: name, Script: contents, Meta: typ}
}

// Manager is the manager side of runexp: a laboro.Runner that hands each job
// given to Run to a runner that asks for one (PETO), and returns the result
// that runner sends back (REZULTO). Use it as an Executor's runner, and
// serve runners with Serve; the Executor's buffer, Stop, Queued and
// concurrency then apply to runexp jobs: a job reaches runners only once the
// Executor runs it, so the concurrency level is the number of jobs out at
// runners (or waiting for one) at a time.
//
// A job whose runner disconnects or breaks the protocol before its result
// arrives goes back to the front of the line for the next runner that asks
// (at least once). Set the fields before first use; a Manager is safe for
// concurrent use and must not be copied.
type Manager struct {
	// Group is the group name announced to runners; "" means DefaultGroup.
	Group string
	// Policy judges a runner at each PETO; nil means every runner may
	// always run jobs. BanPolicy is the reference manager's --ban.
	Policy Policy
	// Timeout bounds each exchange; 0 means DefaultTimeout.
	Timeout time.Duration
	// IdleWait is how long a PETO waits for a job to become available
	// before the runner is told ATENDI; 0 means DefaultIdleWait. A runner
	// that has other jobs out waits 5 ms at most, since its other workers
	// cannot report while its PETO waits.
	IdleWait time.Duration
	// MaxSize bounds an output's SIZE; 0 means DefaultMaxSize.
	MaxSize int64
	// Dir receives the outputs as files, handed over in Result.Output; ""
	// means os.TempDir.
	Dir string
	// Logger; nil means none.
	Logger *zap.Logger

	once    sync.Once
	mu      sync.Mutex
	wake    chan struct{}      // closed and replaced when waiting PETOs should look again
	pending []*assignment      // jobs waiting for a runner, the next first
	runners map[*remote]bool   // connected runners
	records map[string]*record // per host name, kept across reconnects
	inRun   int                // Run calls in progress
	source  *laboro.Executor   // set by Finish: no more jobs will be submitted to it
	idle    chan struct{}      // closed when no runner is connected; nil while some are
	done    int                // results received
	failed  int                // of which failures
}

// assignment is one job inside the Manager: waiting for a runner, or out at one.
type assignment struct {
	job     laboro.Job
	typ     JobType
	result  chan laboro.Result // buffered: the one result
	owner   *remote            // the runner it is out at; nil while pending
	sent    time.Time
	dropped bool // Run returned early: a result is discarded
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

// broadcast wakes every PETO waiting for a job. m.mu is held.
func (m *Manager) broadcast() {
	close(m.wake)
	m.wake = make(chan struct{})
}

// Validate refuses a job that cannot be sent: its ID is the job's name and
// must be a non-empty line; its type (Meta, a JobType; ".sh" when absent)
// must be a dot and at least one character, without spaces.
func (m *Manager) Validate(job laboro.Job) error {
	if job.ID == "" || strings.ContainsAny(job.ID, "\r\n") || strings.HasSuffix(job.ID, " ") {
		return fmt.Errorf("runexp: job name %q: a job needs its name as ID, one line", job.ID)
	}
	if job.Func != nil || job.Command != "" || len(job.Args) > 0 {
		return errors.New("runexp: a job is a script (Job.Script), see NewJob")
	}
	if typ := jobType(job); !validType(string(typ)) {
		return fmt.Errorf("runexp: job type %q is not an extension like .sh", typ)
	}
	return nil
}

func jobType(job laboro.Job) JobType {
	if t, ok := job.Meta.(JobType); ok {
		return t
	}
	return ".sh"
}

// Run hands the job to the next runner that asks and waits for its result.
// The job succeeds or fails as the runner reports; its output (what the
// runner sent) is in Result.Output. When ctx ends first, Run returns at
// once: a result that arrives later is discarded.
func (m *Manager) Run(ctx context.Context, job laboro.Job) laboro.Result {
	m.init()
	if job.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, job.Timeout, laboro.ErrTimeout)
		defer cancel()
	}
	t := &assignment{job: job, typ: jobType(job), result: make(chan laboro.Result, 1)}
	m.mu.Lock()
	m.inRun++
	m.pending = append(m.pending, t)
	m.broadcast()
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.inRun--
		m.broadcast() // the end of Run may let runners finish
		m.mu.Unlock()
	}()

	select {
	case res := <-t.result:
		return res
	case <-ctx.Done():
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case res := <-t.result: // it arrived meanwhile
		return res
	default:
	}
	t.dropped = true
	m.removePending(t)
	res := laboro.Result{ExitCode: -1}
	res.Status, res.Err = laboro.Interruption(ctx)
	return res
}

// removePending takes t out of the line, if it is there. m.mu is held.
func (m *Manager) removePending(t *assignment) {
	for i, p := range m.pending {
		if p == t {
			m.pending = append(m.pending[:i], m.pending[i+1:]...)
			return
		}
	}
}

// Finish tells the Manager that no more jobs will be submitted to ex, the
// Executor it serves. From then on, once ex has handed every job it holds
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
	if m.source == nil || len(m.pending) > 0 {
		return false
	}
	// Jobs between the Executor's queue and Run count as Running there
	// but not yet in inRun.
	if st := m.source.Stats(); st.Queued > 0 || st.Blocked > 0 || st.Running > m.inRun {
		return false
	}
	for other := range m.runners {
		if other != s && other.live() > 0 {
			return false
		}
	}
	return true
}

// Stats are a Manager's counters, for progress displays.
type Stats struct {
	Runners int // connected runners
	Pending int // jobs waiting for a runner
	Out     int // jobs out at runners
	Done    int // results received
	Failed  int // of which failures
}

// Stats returns the Manager's counters, read together.
func (m *Manager) Stats() Stats {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Stats{Runners: len(m.runners), Pending: len(m.pending), Done: m.done, Failed: m.failed}
	for s := range m.runners {
		st.Out += len(s.out)
	}
	return st
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

// remote is one connected runner, seen by the manager.
type remote struct {
	c      *conn
	raw    net.Conn
	host   string
	log    *zap.Logger
	out    map[string]*assignment // jobs sent to it, by name
	banned bool
	ended  bool // told FINO
}

// live counts the jobs out at s whose results are still awaited. m.mu is
// held.
func (s *remote) live() int {
	n := 0
	for _, t := range s.out {
		if !t.dropped {
			n++
		}
	}
	return n
}

func (m *Manager) serveConn(ctx context.Context, raw net.Conn) {
	defer raw.Close()
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Now()) })
	defer stop()
	s := &remote{
		c:   &conn{rw: raw, maxSize: m.MaxSize, timeout: m.timeout()},
		raw: raw,
		log: m.Logger.With(zap.Stringer("peer", raw.RemoteAddr())),
		out: map[string]*assignment{},
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
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.runners) == 0 {
		m.idle = make(chan struct{})
	}
	m.runners[s] = true
	if m.records[s.host] == nil {
		m.records[s.host] = &record{}
	}
}

// leave forgets s and puts the jobs it still had back at the front of the
// line.
func (m *Manager) leave(s *remote, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var back []*assignment
	for _, t := range s.out {
		if !t.dropped {
			t.owner = nil
			back = append(back, t)
		}
	}
	if len(back) > 0 {
		m.pending = append(back, m.pending...)
		m.broadcast()
	}
	delete(m.runners, s)
	if len(m.runners) == 0 {
		close(m.idle)
	}
	switch {
	case err == nil:
		s.log.Info("runner done")
	default:
		s.log.Warn("runner dropped", zap.Error(err), zap.Int("jobs back in line", len(back)))
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
	m.mu.Lock()
	r := m.records[s.host].view(s.host, s.live())
	m.mu.Unlock()
	return m.Policy.Judge(r)
}

// next takes the next pending job for s, waiting up to IdleWait for one.
// end is true when s may be told FINO.
func (m *Manager) next(ctx context.Context, s *remote) (t *assignment, end bool) {
	wait := m.IdleWait
	if wait <= 0 {
		wait = DefaultIdleWait
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.live() > 0 {
		// While this PETO waits, the runner's other workers cannot send
		// their results: hold them up only briefly.
		wait = min(wait, busyWait)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if len(m.pending) > 0 {
			t = m.pending[0]
			m.pending[0] = nil
			m.pending = m.pending[1:]
			t.owner = s
			s.out[t.job.ID] = t
			return t, false
		}
		if m.canEnd(s) {
			return nil, true
		}
		wake := m.wake
		m.mu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
			m.mu.Lock()
			return nil, false
		case <-ctx.Done():
			m.mu.Lock()
			return nil, false
		}
		m.mu.Lock()
	}
}

// send is state 3: LABORO, PRETA, the contents. On an error the job stays
// in s.out, and goes back in line when s leaves.
func (m *Manager) send(s *remote, t *assignment) error {
	msg := Message{Kind: KindLaboro, Name: t.job.ID, Type: string(t.typ), Size: int64(len(t.job.Script))}
	if err := s.c.write(msg); err != nil {
		return err
	}
	if _, err := s.c.expect(KindPreta); err != nil {
		return fmt.Errorf("after LABORO %s: %w", t.job.ID, err)
	}
	if err := s.c.writePayload(strings.NewReader(t.job.Script), msg.Size); err != nil {
		return err
	}
	m.mu.Lock()
	t.sent = time.Now()
	m.mu.Unlock()
	s.log.Debug("job sent", zap.String("job", t.job.ID))
	return nil
}

// receive is state 4: a REZULTO for a job sent to s, PRETA, the output
// into a file, RICEVIS; then the job's Run returns.
func (m *Manager) receive(s *remote, msg Message) (err error) {
	m.mu.Lock()
	t := s.out[msg.Name]
	m.mu.Unlock()
	if t == nil {
		return fmt.Errorf("%w: %q", ErrUnknownJob, msg.Name)
	}
	path, err := m.take(s, msg)
	if err != nil {
		return err
	}

	res := laboro.Result{
		ID: t.job.ID, Status: laboro.StatusSucceeded, Started: t.sent, Ended: time.Now(),
		Output: laboro.NewOutput(path, msg.Size),
	}
	if msg.Status == Failure {
		res.Status, res.ExitCode, res.Err = laboro.StatusFailed, 1, fmt.Errorf("runexp: runner %s reported failure", s.host)
	}
	m.mu.Lock()
	delete(s.out, msg.Name)
	m.records[s.host].add(msg.Status)
	m.done++
	if msg.Status == Failure {
		m.failed++
	}
	dropped := t.dropped
	if !dropped {
		t.result <- res // buffered; under m.mu, so that Run sees it or drops it, not both
	}
	m.broadcast() // one job fewer out: runners waiting to end may
	m.mu.Unlock()
	if dropped {
		res.Output.Close()
		s.log.Info("result of an abandoned job discarded", zap.String("job", t.job.ID))
		return nil
	}
	s.log.Debug("job done", zap.String("job", t.job.ID), zap.Stringer("status", msg.Status))
	return nil
}

// take receives an output (PRETA, the bytes, RICEVIS) into a file of its
// own and returns its path. A small output is kept in memory until RICEVIS
// is sent, and only then written, so that the runner's other workers wait
// for no file system.
func (m *Manager) take(s *remote, msg Message) (path string, err error) {
	var body *bytes.Buffer
	var f *os.File
	if msg.Size <= smallPayload {
		body = bytes.NewBuffer(make([]byte, 0, msg.Size))
	} else if f, err = os.CreateTemp(m.Dir, "runexp-*.res"); err != nil {
		return "", fmt.Errorf("runexp: keeping an output: %w", err)
	}
	defer func() {
		if f != nil && err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := s.c.write(Message{Kind: KindPreta}); err != nil {
		return "", err
	}
	var dst io.Writer = f
	if body != nil {
		dst = body
	}
	if err := s.c.readPayload(dst, msg.Size); err != nil {
		return "", fmt.Errorf("output of %s: %w", msg.Name, err)
	}
	if err := s.c.write(Message{Kind: KindRicevis}); err != nil {
		return "", err
	}
	if body != nil {
		if f, err = os.CreateTemp(m.Dir, "runexp-*.res"); err != nil {
			return "", fmt.Errorf("runexp: keeping an output: %w", err)
		}
		if _, err = f.Write(body.Bytes()); err != nil {
			return "", fmt.Errorf("runexp: keeping an output: %w", err)
		}
	}
	if err = f.Close(); err != nil {
		return "", fmt.Errorf("runexp: keeping an output: %w", err)
	}
	return f.Name(), nil
}
