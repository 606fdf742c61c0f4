package fuq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport"
	"go.uber.org/zap"
)

// DefaultReconnect is the first wait before a worker connects again; it
// doubles up to MaxReconnect.
const (
	DefaultReconnect = 500 * time.Millisecond
	MaxReconnect     = 30 * time.Second
)

// ErrStopped is returned by Worker.Run when the foreman stopped the worker:
// STOP(immediate), or a STOP that left it no processors once its tasks
// were done.
var ErrStopped = errors.New("fuq: worker stopped by the foreman")

// Worker is the worker side: it connects to a foreman, announces its
// processors, and runs the tasks it is pushed through a local Executor,
// one processor each, as the reference does: Command <task number> in the
// job's WorkingDir, standard output and error to
// LoggingDir/<Name>_<Task>.log (<Name>_<Task>-<i>.log when that exists),
// created with mode 0666 less the umask, as the reference creates it.
// While a task runs, its output is in a directory of the worker's own in
// LoggingDir (.fuq-running-<random>), removed with the worker, even one
// killed with SIGKILL; the directories of dead workers are removed by the
// next worker that runs a task there (see outputdir.go).
//
// A CANCEL kills the named tasks' process groups (a negative Task names
// every task of the job, as the reference foreman sends it); each cancelled
// task is reported by an UPDATE (Success false), since the reference
// foreman frees a processor only on UPDATE, and leaves no log.
//
// When the connection drops, the tasks run on; the worker connects again,
// announces them in HELLO, and then sends the UPDATEs of the tasks that
// ended meanwhile. An UPDATE that cannot be delivered at once (the worker
// is not connected, or the connection drops before the foreman's OK) is
// written to SpoolDir and removed once acknowledged, so that none is lost,
// even if the worker is stopped and started again on the same SpoolDir.
// (Writing every UPDATE to disk first would cost a sync per task; a worker
// killed while connected loses only UPDATEs not yet acknowledged, and the
// foreman runs those tasks again once its grace period is over.)
//
// Set the fields before Run; a Worker runs one session at a time.
type Worker struct {
	// Addr is the foreman's host:port, for the plain TCP conversation of
	// the spec; exactly one of Addr and Web is set.
	Addr string
	// Web joins a foreman over HTTPS and a websocket, as the reference's
	// workers do (a real fuqsrv foreman, or Foreman.ServeWeb).
	Web *WebDialer
	// Secret is the shared secret proven to a foreman over Addr whose
	// Foreman.Secret is set (see auth.go), which proves in turn that it
	// holds it; empty for one that has none. A foreman that refuses it ends
	// Run with an error matching ErrAuth, one that does not prove it holds
	// it with one matching ErrForemanUnproven.
	Secret []byte
	// Procs is the number of processors offered; 0 means runtime.NumCPU.
	Procs int
	// SpoolDir keeps the UPDATEs that wait for a connection; required. It
	// is created if needed.
	SpoolDir string
	// Reconnect is the first wait before connecting again; 0 means
	// DefaultReconnect. It doubles after each failure, up to MaxReconnect.
	Reconnect time.Duration
	// Timeout bounds connecting and each write; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxBody bounds a message body; 0 means DefaultMaxBody.
	MaxBody int
	// Seq configures the sequence numbering (tests lower MaxSeq).
	Seq SeqConfig
	// Logger; nil means none.
	Logger *zap.Logger
}

// workerState is what the worker's loop goroutine owns.
type workerState struct {
	w        *Worker
	log      *zap.Logger
	ex       *laboro.Executor
	running  map[TaskPair]Task
	maxProcs int         // lowered by STOP
	logMode  os.FileMode // of the task logs: 0666 less the umask
	spooled  []spooled
	web      *webClient // when the foreman is reached through Web
	done     chan finished
	tasks    sync.WaitGroup
	handle   func(Action) ([]Action, error) // the current session's
}

// finished is a task's end, reported by its goroutine.
type finished struct {
	pair   TaskPair
	update StatusUpdate
}

// taskID is the id of a task's job in the worker's Executor, by which a
// CANCEL finds it.
func taskID(p TaskPair) string { return strconv.FormatUint(p.JobId, 10) + "/" + strconv.Itoa(p.Task) }

// spooled is an UPDATE waiting for the foreman's OK.
type spooled struct {
	update StatusUpdate
	file   string // its copy in SpoolDir; "" while it is only in memory
	sent   bool   // requested on the current connection
}

// Run connects to the foreman and serves it until it stops the worker
// (ErrStopped) or ctx ends (ctx.Err(); the running tasks are then killed,
// and their UPDATEs are not sent). A dropped connection is not an error:
// the worker connects again.
func (w *Worker) Run(ctx context.Context) error {
	if (w.Addr == "") == (w.Web == nil) || w.SpoolDir == "" {
		return errors.New("fuq: Worker needs SpoolDir, and one of Addr and Web")
	}
	procs := w.Procs
	if procs <= 0 {
		procs = runtime.NumCPU()
	}
	log := w.Logger
	if log == nil {
		log = zap.NewNop()
	}
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	var web *webClient
	if w.Web != nil {
		var err error
		if web, err = newWebClient(w.Web, procs, timeout, log); err != nil {
			return err
		}
		log = log.With(zap.String("foreman", w.Web.URL))
	} else {
		log = log.With(zap.String("foreman", w.Addr))
	}
	if err := os.MkdirAll(w.SpoolDir, 0o700); err != nil {
		return err
	}
	logMode, err := fileMode(w.SpoolDir)
	if err != nil {
		return err
	}
	// The worker never has more than procs tasks submitted and not yet
	// reported, so that Submit never waits for room.
	outputs := &outputDirs{log: log}
	ex, err := laboro.New(laboro.WithRunner(taskRunner{outputs}), laboro.WithPoolSize(procs),
		laboro.WithConcurrency(procs), laboro.WithBufferSize(procs), laboro.WithLogger(log))
	if err != nil {
		return err
	}
	s := &workerState{
		w: w, log: log, ex: ex, running: map[TaskPair]Task{}, maxProcs: procs, logMode: logMode,
		web: web, done: make(chan finished, procs),
	}
	defer func() {
		ex.Close() // kills what still runs
		for len(s.running) > 0 {
			f := <-s.done
			delete(s.running, f.pair)
		}
		s.tasks.Wait()
		outputs.close() // every output is closed: the tasks have ended
	}()
	if err := s.loadSpool(); err != nil {
		return err
	}
	backoff := transport.Backoff{Min: w.Reconnect, Max: MaxReconnect}
	if backoff.Min <= 0 {
		backoff.Min = DefaultReconnect
	}
	for {
		err := s.session(ctx)
		s.persistAll()
		switch {
		case errors.Is(err, ErrStopped), errors.Is(err, errStoppedNow):
			log.Info("stopped by the foreman", zap.Error(err))
			return ErrStopped
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrAuth), errors.Is(err, ErrForemanUnproven):
			return err
		case errors.Is(err, errSessionWorked):
			backoff.Reset()
		}
		wait := backoff.Next()
		log.Warn("not connected to the foreman", zap.Error(err), zap.Duration("retry in", wait))
		if err := s.pause(ctx, wait); err != nil {
			return err
		}
	}
}

// fileMode returns the mode a file created with mode 0666 gets in dir: 0666
// less the umask, found by creating one (reading the umask would change it
// for every thread of the process for a moment).
func fileMode(dir string) (os.FileMode, error) {
	name := filepath.Join(dir, fmt.Sprintf(".mode-%d", os.Getpid()))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if errors.Is(err, os.ErrExist) {
		os.Remove(name) // left by a process of the same pid
		f, err = os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	}
	if err != nil {
		return 0, err
	}
	defer os.Remove(name)
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return 0, err
	}
	return fi.Mode().Perm(), nil
}

// errSessionWorked wraps the end of a session that got past HELLO, so
// that the next attempt starts with the shortest wait.
var errSessionWorked = errors.New("connection lost")

// pause waits d while tasks that end are spooled.
func (s *workerState) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case f := <-s.done:
			s.finish(f, false)
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *workerState) free() int {
	return max(0, s.maxProcs-len(s.running))
}

// session is one connection: HELLO, then the loop of the spec's worker.
func (s *workerState) session(ctx context.Context) error {
	timeout := s.w.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	conn, err := s.dial(ctx, timeout)
	if err != nil {
		return err
	}
	l := newLink(conn, RoleWorker, s.w.Seq, s.w.MaxBody, s.log)
	defer l.close()
	stop := context.AfterFunc(ctx, func() { conn.close() })
	defer stop()
	for i := range s.spooled {
		s.spooled[i].sent = false
	}
	greeted := false
	handle := func(a Action) ([]Action, error) {
		switch a.Kind {
		case ActRequest:
			return s.answer(l, a.Msg)
		case ActReply:
			if a.Req.Type == TypeHello && a.Msg.Type == TypeOK && !greeted {
				greeted = true
				s.log.Info("connected", zap.Int("procs", s.free()), zap.Int("running", len(s.running)), zap.Int("updates to send", len(s.spooled)))
				return nil, s.sendSpooled(l)
			}
			return nil, s.replied(a)
		case ActRestart:
			return nil, s.hello(l)
		}
		return nil, nil
	}
	s.handle = handle
	if err := s.hello(l); err != nil {
		return err
	}
	for {
		if s.maxProcs == 0 && len(s.running) == 0 && len(s.spooled) == 0 && !l.seq.Outstanding() {
			return ErrStopped
		}
		select {
		case r := <-l.in:
			if err := l.receive(r, handle); err != nil {
				if greeted {
					return fmt.Errorf("%w: %w", errSessionWorked, err)
				}
				return err
			}
		case f := <-s.done:
			if sp := s.finish(f, greeted); sp != nil {
				if err := s.sendUpdate(l, sp); err != nil {
					return fmt.Errorf("%w: %w", errSessionWorked, err)
				}
			}
		}
	}
}

// dial connects to the foreman, over TCP or through its login and a
// websocket.
func (s *workerState) dial(ctx context.Context, timeout time.Duration) (msgConn, error) {
	if s.web != nil {
		return s.web.dial(ctx)
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", s.w.Addr)
	if err != nil {
		return nil, err
	}
	if len(s.w.Secret) > 0 {
		if err := authForemanConn(conn, s.w.Secret, timeout); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return newStreamConn(conn, timeout), nil
}

// hello announces the free processors and the running tasks; it is the
// first request of every connection, and of every restart after RESET.
func (s *workerState) hello(l *link) error {
	h := &Hello{NumProcs: s.free(), Running: []Task{}}
	for _, t := range s.running {
		h.Running = append(h.Running, t)
	}
	sort.Slice(h.Running, func(i, j int) bool { return taskLess(h.Running[i], h.Running[j]) })
	return l.request(Message{Header: Header{Type: TypeHello}, Hello: h}, s.handle)
}

func taskLess(a, b Task) bool {
	if a.JobDescription.JobId != b.JobDescription.JobId {
		return a.JobDescription.JobId < b.JobDescription.JobId
	}
	return a.Task < b.Task
}

// answer handles a request of the foreman and returns the reply's actions.
func (s *workerState) answer(l *link, m Message) ([]Action, error) {
	switch m.Type {
	case TypeJob:
		if len(m.Tasks) > s.free() {
			s.log.Info("no processors for a JOB", zap.Int("tasks", len(m.Tasks)), zap.Int("free", s.free()))
			return l.reply(m.Header, errorReply(CodeNoProcs))
		}
		for _, t := range m.Tasks {
			s.start(t)
		}
	case TypeCancel:
		for _, p := range m.Cancel {
			if p.Task >= 0 {
				s.cancel(p)
				continue
			}
			for running := range s.running { // every task of the job
				if running.JobId == p.JobId {
					s.cancel(running)
				}
			}
		}
	case TypeStop:
		if m.Arg0 == StopImmediate {
			return nil, errStoppedNow
		}
		if m.Arg0 == 0 || int64(m.Arg0) >= int64(s.maxProcs) {
			s.maxProcs = 0
		} else {
			s.maxProcs -= int(m.Arg0)
		}
		s.log.Info("processors lowered by STOP", zap.Uint32("stop", m.Arg0), zap.Int("max", s.maxProcs))
	default:
		return nil, unexpected(m)
	}
	return l.reply(m.Header, ok(s.free(), len(s.running)))
}

// replied handles the foreman's reply to one of our UPDATEs.
func (s *workerState) replied(a Action) error {
	if a.Req.Type != TypeUpdate || a.Req.Update == nil {
		return nil
	}
	if a.Msg.Type == TypeError && a.Msg.Code == CodeOverflow {
		return nil // the Seq sends it again
	}
	if a.Msg.Type != TypeOK {
		s.log.Warn("the foreman refused an UPDATE", zap.Uint64("job", a.Req.Update.JobId), zap.Int("task", a.Req.Update.Task), zap.Stringer("code", a.Msg.Code))
	}
	for i, sp := range s.spooled {
		if sp.update.JobId == a.Req.Update.JobId && sp.update.Task == a.Req.Update.Task {
			if sp.file != "" {
				os.Remove(sp.file)
			}
			s.spooled = append(s.spooled[:i], s.spooled[i+1:]...)
			break
		}
	}
	return nil
}

// sendSpooled sends every UPDATE not yet sent on this connection.
func (s *workerState) sendSpooled(l *link) error {
	for i := range s.spooled {
		if err := s.sendUpdate(l, &s.spooled[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *workerState) sendUpdate(l *link, sp *spooled) error {
	if sp.sent {
		return nil
	}
	sp.sent = true
	u := sp.update
	return l.request(Message{Header: Header{Type: TypeUpdate}, Update: &u}, s.handle)
}

// start submits a task to the Executor, under an id made of its pair (see
// cancel), and waits for it in a goroutine of its own.
func (s *workerState) start(t Task) {
	pair := TaskPair{JobId: t.JobDescription.JobId, Task: t.Task}
	if _, ok := s.running[pair]; ok {
		return // announced twice: it runs already
	}
	s.running[pair] = t
	job := laboro.Job{
		ID:      taskID(pair),
		Args:    []string{t.JobDescription.Command, strconv.Itoa(t.Task)},
		Dir:     t.JobDescription.WorkingDir,
		Payload: t,
	}
	// Submit does not wait: the Executor has room for every task the
	// worker has accepted (see Run).
	h, err := s.ex.Submit(context.Background(), job)
	s.log.Debug("task started", zap.Uint64("job", pair.JobId), zap.Int("task", pair.Task), zap.Error(err))
	s.tasks.Go(func() {
		s.done <- finished{pair: pair, update: s.outcome(t, h, err)}
	})
}

// cancel kills a running task's process group (or takes it out of the
// Executor's queue). Its goroutine then reports it as failed.
func (s *workerState) cancel(p TaskPair) {
	if _, ok := s.running[p]; !ok {
		return
	}
	s.log.Info("cancelling", zap.Uint64("job", p.JobId), zap.Int("task", p.Task))
	if err := s.ex.Cancel(taskID(p)); err != nil {
		s.log.Debug("nothing to cancel: the task has just ended", zap.Uint64("job", p.JobId), zap.Int("task", p.Task), zap.Error(err))
	}
}

// outcome waits for a task's end and returns its UPDATE: done once it has
// succeeded and its log is kept; else its error. A task cancelled by the
// foreman leaves no log.
func (s *workerState) outcome(t Task, h *laboro.Handle, err error) StatusUpdate {
	u := StatusUpdate{JobId: t.JobDescription.JobId, Task: t.Task}
	if err != nil {
		u.Status = "error encountered: " + err.Error()
		return u
	}
	res, _ := h.Wait(context.Background())
	defer res.Output.Close()
	var logErr error
	switch res.Status {
	case laboro.StatusCancelled, laboro.StatusStopped, laboro.StatusKilled:
	default:
		logErr = keepLog(res.Output, t, s.logMode)
	}
	switch {
	case res.Status == laboro.StatusSucceeded && logErr == nil:
		u.Success, u.Status = true, "done"
	case res.Err != nil:
		u.Status = "error encountered: " + res.Err.Error()
	default:
		u.Status = "error encountered: " + logErr.Error()
	}
	return u
}

// keepLog moves a task's output to LoggingDir/<Name>_<Task>.log, or
// <Name>_<Task>-<i>.log when that exists, never replacing a file, and
// gives it mode.
func keepLog(out *laboro.Output, t Task, mode os.FileMode) error {
	if err := checkName(t.JobDescription.Name); err != nil { // from a foreman not ours
		return err
	}
	if out == nil {
		return errors.New("no output")
	}
	base := filepath.Join(t.JobDescription.LoggingDir, fmt.Sprintf("%s_%d", t.JobDescription.Name, t.Task))
	name := base + ".log"
	for i := 1; ; i++ {
		err := os.Link(out.Path(), name)
		if err == nil {
			if err := os.Chmod(name, mode); err != nil {
				return fmt.Errorf("keeping the log: %w", err)
			}
			return nil
		}
		if !errors.Is(err, os.ErrExist) || i > 1000 {
			return fmt.Errorf("keeping the log: %w", err)
		}
		name = fmt.Sprintf("%s-%d.log", base, i)
	}
}

// finish records a task's end and returns its UPDATE to send. While
// connected, the UPDATE is sent from memory; it goes to disk only if the
// connection drops before the foreman's OK (see persist).
func (s *workerState) finish(f finished, connected bool) *spooled {
	delete(s.running, f.pair)
	s.spooled = append(s.spooled, spooled{update: f.update})
	sp := &s.spooled[len(s.spooled)-1]
	if !connected {
		s.persist(sp)
	}
	return sp
}

// persistAll writes to SpoolDir the UPDATEs kept only in memory: the
// worker is not connected, and they must survive the worker's own end.
func (s *workerState) persistAll() {
	for i := range s.spooled {
		s.persist(&s.spooled[i])
	}
}

// persist writes one UPDATE to SpoolDir, unless it is there already.
func (s *workerState) persist(sp *spooled) {
	if sp.file != "" {
		return
	}
	file, err := s.spool(sp.update)
	if err != nil {
		s.log.Error("cannot keep an UPDATE on disk; it waits in memory", zap.Error(err))
		return
	}
	sp.file = file
}

// spool writes an UPDATE to SpoolDir atomically (write, sync, rename) and
// returns the file's name.
func (s *workerState) spool(u StatusUpdate) (string, error) {
	b, err := Message{Header: Header{Type: TypeUpdate}, Update: &u}.AppendBinary(nil)
	if err != nil {
		return "", err
	}
	// Named by time, so that a restarted worker sends them in order.
	name := filepath.Join(s.w.SpoolDir, fmt.Sprintf("%020d-%d-%d.update", time.Now().UnixNano(), u.JobId, u.Task))
	tmp, err := os.CreateTemp(s.w.SpoolDir, ".update-*")
	if err != nil {
		return "", err
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return name, nil
}

// loadSpool reads the UPDATEs a previous run left unacknowledged, oldest
// first.
func (s *workerState) loadSpool() error {
	entries, err := os.ReadDir(s.w.SpoolDir)
	if err != nil {
		return err
	}
	for _, e := range entries { // ReadDir sorts by name: by time
		if !strings.HasSuffix(e.Name(), ".update") {
			continue
		}
		path := filepath.Join(s.w.SpoolDir, e.Name())
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		// Its length is checked against MaxBody before its body is read.
		m, err := ReadMessage(bufio.NewReader(f), s.w.MaxBody)
		f.Close()
		if err != nil || m.Type != TypeUpdate || m.Update == nil {
			s.log.Warn("unreadable spooled UPDATE set aside", zap.String("file", path), zap.Error(err))
			os.Rename(path, path+".bad")
			continue
		}
		s.spooled = append(s.spooled, spooled{update: *m.Update, file: path})
	}
	if len(s.spooled) > 0 {
		s.log.Info("UPDATEs from an earlier run to deliver", zap.Int("count", len(s.spooled)))
	}
	return nil
}

// taskRunner runs a task's process (its Job.Payload is its Task) with its
// output in the worker's own directory inside the job's LoggingDir (made
// if missing; see outputdir.go), so that the log is made by a link in one
// file system and nothing is left in LoggingDir should the worker die. A
// CANCEL ends it through Executor.Cancel, which kills its process group.
type taskRunner struct{ outputs *outputDirs }

func (r taskRunner) Run(ctx context.Context, job laboro.Job) laboro.Result {
	t, ok := job.Payload.(Task)
	if !ok {
		return laboro.Result{ID: job.ID, Status: laboro.StatusFailed, ExitCode: -1,
			Err: fmt.Errorf("%w: a task's Payload is its Task", laboro.ErrInvalidJob)}
	}
	// The logging directory is made if it is not there yet, as a user who
	// names a new one on submit expects.
	dir := t.JobDescription.LoggingDir
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return laboro.Result{ID: job.ID, Status: laboro.StatusFailed, ExitCode: -1,
				Err: fmt.Errorf("the job's logging directory: %w", err)}
		}
		var err error
		if dir, err = r.outputs.dir(dir); err != nil {
			return laboro.Result{ID: job.ID, Status: laboro.StatusFailed, ExitCode: -1,
				Err: fmt.Errorf("the worker's directory in the job's logging directory: %w", err)}
		}
	}
	pr := &laboro.ProcessRunner{Dir: dir, Stderr: laboro.StderrToOutput}
	return pr.Run(ctx, job)
}
