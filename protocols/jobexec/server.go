package jobexec

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/lograte"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/transport"
	"go.uber.org/zap"
)

// The console texts of the specification, kept to the letter.
const (
	msgTerminated       = "SERVER TERMINATED"
	msgTerminatedBefore = "SERVER TERMINATED BEFORE EXECUTION"
)

// DefaultRequestTimeout is how long a commander has to send its command.
const DefaultRequestTimeout = 10 * time.Second

// DefaultWriteTimeout bounds each write to a commander unless configured.
const DefaultWriteTimeout = 30 * time.Second

// DefaultMaxRequest bounds a request (a command line and its arguments)
// unless Server.MaxFrame says otherwise: 64 KiB.
const DefaultMaxRequest = 64 << 10

// DefaultMaxConns is how many connections a Server serves at once unless
// told otherwise.
const DefaultMaxConns = 256

// ErrServerTerminated is returned by Serve after an exit command has been
// carried out: the exit commander was answered and every job was drained.
var ErrServerTerminated = errors.New("jobexec: server terminated")

// Server serves commanders over TCP, running their jobs with an Executor.
// Set its fields before Serve; it must not be copied after use.
type Server struct {
	// Executor runs the jobs; required. The exit command shuts it down.
	Executor *laboro.Executor
	// Token, if not empty, must be proven by every commander (version 5:
	// the server proves it holds it too, and neither sends it) or sent by
	// one of an earlier version; it is checked in a time that tells
	// nothing of it (not even its length) before anything else is done.
	Token string
	// MaxConns bounds the connections served at once (a commander of
	// issueJob holds its connection until its job ends); one over it is
	// refused with "too many connections" and closed. 0 means
	// DefaultMaxConns.
	MaxConns int
	// Logger; nil means none.
	Logger *zap.Logger
	// MaxFrame bounds a request's size; 0 means DefaultMaxRequest. With
	// MaxConns, it bounds the memory that commanders can make the server
	// hold: 256 × 64 KiB by default.
	MaxFrame int
	// RequestTimeout bounds how long a commander may take to send its
	// command; 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// WriteTimeout bounds each write to a commander: one that reads nothing
	// for that long is taken as gone (its job's output is discarded); 0
	// means DefaultWriteTimeout.
	WriteTimeout time.Duration

	conns    atomic.Int64    // connections being served
	refusals lograte.Limited // what a peer causes at will (refusals, bad messages), logged at most once a second
	mu       sync.Mutex
	draining bool
	jobs     sync.WaitGroup // issueJob exchanges still delivering
	exit     chan struct{}  // closed once an exit command has been answered
	once     sync.Once
}

func (s *Server) init() {
	s.once.Do(func() {
		s.exit = make(chan struct{})
		if s.Logger == nil {
			s.Logger = zap.NewNop()
		}
	})
}

// Serve accepts commanders on ln until ctx ends or an exit command has
// been carried out, then closes ln and waits for every connection it
// started: when ctx ends while jobs run, close the Executor to end them.
// After an exit command it goes on accepting, refusing every command, until
// the drain is done. It returns ErrServerTerminated after an exit command,
// ctx.Err() when ctx ended, or the listener's error. Serve is called once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.init()
	if s.Executor == nil {
		return errors.New("jobexec: Server.Executor is nil")
	}
	// Accepting ends once an exit has been drained, or when ctx ends; the
	// connections live on ctx, so that those waiting for their jobs get
	// them during the drain.
	accepting, stopAccepting := context.WithCancel(ctx)
	defer stopAccepting()
	drained := make(chan struct{})
	var drainer sync.WaitGroup
	drainer.Go(func() {
		select {
		case <-s.exit:
		case <-accepting.Done():
			return
		}
		// The exit commander has its answer and the queued jobs are
		// terminated; running jobs finish and reach their commanders.
		if err := s.Executor.Shutdown(ctx); err != nil {
			return // ctx ended: Serve returns ctx.Err()
		}
		s.jobs.Wait()
		close(drained)
		stopAccepting()
	})
	err := transport.Serve(accepting, ln, func(_ context.Context, conn net.Conn) { s.serveConn(ctx, conn) })
	stopAccepting()
	drainer.Wait()
	select {
	case <-drained:
		s.Logger.Info("drained")
		return ErrServerTerminated
	default:
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// exchange is one commander's connection, seen by the server.
type exchange struct {
	conn    net.Conn
	w       *bufio.Writer
	timeout time.Duration // for each write
	log     *zap.Logger
	err     error  // the first write error: the commander is gone
	buf     []byte // scratch for the line being built
	stderr  bool   // the commander takes FrameStderr (version 3 and later)
	why     bool   // the commander takes FrameWhy (version 4 and later)
}

// watch returns a context that ends when the commander goes away (it sends
// nothing after its request, so any read that returns means it closed the
// connection or broke the protocol), and a function that stops watching.
func (x *exchange) watch(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		_, err := x.conn.Read(b[:])
		if err == nil {
			err = protocolErrorf("commander sent bytes after its request")
		}
		cancel(fmt.Errorf("%w: %w", errCommanderGone, err))
	}()
	return ctx, func() {
		x.conn.SetReadDeadline(time.Now())
		<-done
		cancel(nil)
		x.conn.SetReadDeadline(time.Time{})
	}
}

// lingerClose ends a connection whose request was not read: it closes the
// writing side and reads (for a second, 64 KiB at most) what the peer
// still sends, since closing a socket with unread bytes resets the
// connection, and the peer might lose the answer already sent.
func lingerClose(conn net.Conn) {
	if tc, ok := conn.(interface{ CloseWrite() error }); ok {
		tc.CloseWrite()
	}
	conn.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, io.LimitReader(conn, 64<<10))
}

// errCommanderGone is the cause of an exchange's context when its
// commander went away.
var errCommanderGone = errors.New("commander gone")

func (x *exchange) send(t FrameType, payload []byte) {
	if x.err == nil {
		// The buffer may flush inside WriteFrame, so the deadline is set
		// for every frame.
		x.conn.SetWriteDeadline(time.Now().Add(x.timeout))
		x.err = WriteFrame(x.w, t, payload)
	}
}

// flush sends what is buffered.
func (x *exchange) flush() {
	if x.err == nil {
		x.conn.SetWriteDeadline(time.Now().Add(x.timeout))
		x.err = x.w.Flush()
	}
}

func (x *exchange) line(format string, args ...any) {
	x.buf = fmt.Appendf(x.buf[:0], format, args...)
	x.send(FrameLine, x.buf)
}

func (x *exchange) exit(code int) {
	x.send(FrameExit, ExitPayload(code))
	x.flush()
	if x.err != nil {
		x.log.Info("commander gone before the end of the exchange", zap.Error(x.err))
	}
}

func (x *exchange) refuse(format string, args ...any) {
	x.send(FrameRefusal, fmt.Appendf(nil, format, args...))
	x.exit(1)
}

func (s *Server) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	x := &exchange{conn: conn, w: bufio.NewWriter(conn), timeout: s.WriteTimeout,
		log: s.Logger.With(zap.Stringer("peer", conn.RemoteAddr()))}
	if x.timeout <= 0 {
		x.timeout = DefaultWriteTimeout
	}
	defer s.conns.Add(-1)
	if n := s.conns.Add(1); n > int64(cmp.Or(s.MaxConns, DefaultMaxConns)) {
		s.refusals.Of(s.Logger).Warn("connection refused: too many connections (at most one such line a second)",
			zap.Stringer("peer", conn.RemoteAddr()), zap.Int64("connections", n-1))
		x.timeout = min(x.timeout, time.Second) // a refusal waits on no one
		x.refuse("too many connections")
		lingerClose(conn)
		return
	}
	timeout := s.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	conn.SetReadDeadline(time.Now().Add(timeout)) // for the hello and the request
	r, limit := bufio.NewReader(conn), cmp.Or(s.MaxFrame, DefaultMaxRequest)
	f, err := ReadFrame(r, limit)
	var nonce, ours []byte // the commander's and the server's, after a hello
	if err == nil && f.Type == FrameHello {
		if _, nonce, err = ParseHello(f.Payload); err == nil {
			ours = make([]byte, NonceSize)
			rand.Read(ours) // never fails
			x.send(FrameChallenge, ChallengePayload(ours, ServerProof(s.Token, nonce, ours)))
			x.flush()
			err = x.err
		}
		if err == nil {
			f, err = ReadFrame(r, limit)
		}
		if err == nil && f.Type == FrameRequest && !versionOf(f.Payload, Version) {
			err = protocolErrorf("a hello is followed by a request of version %d", Version)
		}
	}
	if err == nil && f.Type != FrameRequest {
		err = protocolErrorf("expected a request frame, got %v", f.Type)
	}
	if err == nil && nonce == nil && versionOf(f.Payload, Version) {
		err = protocolErrorf("a request of version %d comes after a hello", Version)
	}
	if err == nil {
		x.stderr = wantsStderr(f.Payload)
		x.why = wantsWhy(f.Payload)
	}
	if err == nil && wantsAck(f.Payload) {
		// At once, before anything that may wait (an issueJob on a full
		// buffer): the commander learns that a jobExecutorServer has its
		// request, and times out only on this.
		x.send(FrameAck, nil)
		x.flush()
	}
	var q Request
	if err == nil {
		q, err = ParseRequest(f.Payload)
	}
	if err != nil {
		if ours != nil && errors.Is(err, io.EOF) {
			// What a Client does when the proof is not for its token.
			x.log.Warn("commander left after the server's proof: it holds another token, or took this server for another")
			return
		}
		x.log.Warn("bad request", zap.Error(err))
		if !errors.Is(err, io.EOF) {
			x.refuse("bad request: %v", err)
			lingerClose(conn)
		}
		return
	}
	conn.SetReadDeadline(time.Time{})
	if s.Token != "" && !s.proven(q, nonce, ours) {
		x.log.Warn("request with a wrong token")
		x.refuse("wrong token")
		return
	}
	s.mu.Lock()
	draining := s.draining
	if !draining && q.Command == "issueJob" {
		s.jobs.Add(1) // under mu, so that exit waits for this exchange
		defer s.jobs.Done()
	}
	if !draining && q.Command == "exit" && len(q.Args) == 0 {
		s.draining = true
	}
	s.mu.Unlock()
	if draining {
		x.refuse("server is terminating; command %q not taken", q.Command)
		return
	}
	x.log.Debug("command", zap.String("command", q.Command), zap.Strings("args", q.Args))
	switch q.Command {
	case "issueJob":
		s.issueJob(ctx, x, q.Args)
	case "setConcurrency":
		s.setConcurrency(x, q.Args)
	case "stop":
		s.stop(x, q.Args)
	case "poll":
		s.poll(x, q.Args)
	case "exit":
		if len(q.Args) != 0 {
			// A typo must not shut the server down.
			x.refuse("exit takes no arguments")
			return
		}
		s.terminate(x)
	default:
		x.refuse("unknown command %q", q.Command)
	}
}

// proven reports whether q's commander holds the server's token: it
// proved it (version 5, after a hello whose nonce was c, answered with the
// server's nonce ours), or sent it (versions 1 to 4).
func (s *Server) proven(q Request, c, ours []byte) bool {
	if q.Version == Version {
		return q.Proven(s.Token, c, ours)
	}
	return secret.Equal(q.Token, s.Token)
}

func (s *Server) issueJob(ctx context.Context, x *exchange, args []string) {
	if len(args) == 0 || args[0] == "" {
		x.refuse("issueJob needs a job")
		return
	}
	// A commander may leave (Ctrl-C) while its job waits for a place in
	// the buffer, or while it waits and runs: before it is queued the job
	// is dropped; after, it runs on and its output is discarded.
	watched, unwatch := x.watch(ctx)
	defer unwatch()
	job := laboro.Job{Args: args}
	h, err := s.Executor.Submit(watched, job)
	switch {
	case errors.Is(err, laboro.ErrTerminated):
		x.line(msgTerminatedBefore)
		x.exit(1)
		return
	case errors.Is(err, laboro.ErrNotQueued) && ctx.Err() == nil:
		x.log.Info("commander gone before its job was queued; job dropped",
			zap.Stringer("job", job), zap.Error(context.Cause(watched)))
		return
	case err != nil:
		x.refuse("%v", err)
		return
	}
	x.line("JOB <%s, %s> SUBMITTED", h.ID(), job)
	x.flush() // the commander reads SUBMITTED while its job waits and runs
	select {
	case <-h.Done():
	case <-watched.Done():
		if ctx.Err() == nil {
			x.log.Info("commander gone; its job runs on and its output will be discarded",
				zap.String("job", h.ID()), zap.Error(context.Cause(watched)))
			x.err = context.Cause(watched)
		}
	}
	res, err := h.Wait(context.WithoutCancel(ctx))
	if err != nil { // cannot happen without a deadline; kept for safety
		x.refuse("%v", err)
		return
	}
	defer res.Output.Close()
	if x.err != nil {
		res.Output.Close() // gone before it is said to be
		x.log.Info("job ended; output discarded", zap.String("job", h.ID()),
			zap.Stringer("status", res.Status), zap.Int("exit", res.ExitCode))
		return
	}
	switch res.Status {
	case laboro.StatusTerminated:
		x.line(msgTerminatedBefore)
		x.exit(1)
		return
	case laboro.StatusStopped:
		x.line("JOB <%s> REMOVED", h.ID())
		x.exit(1)
		return
	}
	x.line("-----%s output start-----", h.ID())
	if res.Output != nil {
		s.sendOutput(x, res.Output)
	}
	x.line("-----%s output end-----", h.ID())
	if x.stderr && res.Status != laboro.StatusSucceeded && len(res.Stderr) > 0 {
		x.send(FrameStderr, res.Stderr)
	}
	if x.why && res.ExitCode < 0 {
		// It did not exit by itself (killed, timed out, never started):
		// no exit status says so.
		why := res.Status.String()
		// Not "killed: laboro: job killed": the cause alone, when there
		// is more to it than the status.
		if res.Err != nil && res.Err != laboro.ErrKilled && res.Err != laboro.ErrTimeout && res.Err != laboro.ErrCancelled {
			why += ": " + res.Err.Error()
		}
		x.send(FrameWhy, []byte(why))
	}
	// The file goes before the commander is let go, so that a commander
	// that has ended never sees it.
	if err := res.Output.Close(); err != nil {
		x.log.Warn("cannot remove a job's output", zap.Error(err))
	}
	code := res.ExitCode
	if code < 0 {
		code = 1
		if res.Status == laboro.StatusCancelled {
			// The Executor logs the other ends that are not exits (failed
			// to start, killed by a signal, timed out, killed by Close).
			x.log.Info("job stopped", zap.String("job", h.ID()), zap.Error(res.Err))
		}
	}
	x.exit(code)
}

// sendOutput streams the output file in chunks; a trailing newline is
// added when the output lacks one, so that the end marker has its own line.
func (s *Server) sendOutput(x *exchange, out *laboro.Output) {
	f, err := out.Open()
	if err != nil {
		x.log.Error("cannot read job output", zap.Error(err))
		return
	}
	defer f.Close()
	buf := make([]byte, OutputChunk)
	var last byte = '\n'
	for x.err == nil {
		n, err := f.Read(buf)
		if n > 0 {
			x.send(FrameOutput, buf[:n])
			last = buf[n-1]
		}
		if err != nil {
			break
		}
	}
	if last != '\n' {
		x.send(FrameOutput, []byte{'\n'})
	}
}

func (s *Server) setConcurrency(x *exchange, args []string) {
	if len(args) != 1 {
		x.refuse("setConcurrency needs one number")
		return
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		err = errors.New("not a whole number")
	} else {
		err = s.Executor.SetConcurrency(n)
	}
	if err != nil {
		x.refuse("setConcurrency %s: %v", args[0], err)
		return
	}
	x.line("CONCURRENCY SET AT %d", n)
	x.exit(0)
}

func (s *Server) stop(x *exchange, args []string) {
	if len(args) != 1 {
		x.refuse("stop needs one job id")
		return
	}
	if err := s.Executor.Stop(args[0]); err != nil {
		// Not in the buffer (running, ended, unknown): a script's
		// `jobCommander … stop ID && …` tells it from a job removed.
		x.line("JOB <%s> NOTFOUND", args[0])
		x.exit(1)
		return
	}
	x.line("JOB <%s> REMOVED", args[0])
	x.exit(0)
}

// queuedPool holds slices for poll, so that listing a long queue does not
// allocate a copy of it each time.
var queuedPool = sync.Pool{New: func() any { return new([]laboro.Job) }}

func (s *Server) poll(x *exchange, args []string) {
	if len(args) != 0 {
		x.refuse("poll takes no arguments")
		return
	}
	jobs := queuedPool.Get().(*[]laboro.Job)
	defer func() {
		clear(*jobs) // drop the references to the jobs' strings
		*jobs = (*jobs)[:0]
		queuedPool.Put(jobs)
	}()
	*jobs = s.Executor.AppendQueued(*jobs)
	for _, job := range *jobs {
		b := append(append(append(x.buf[:0], '<'), job.ID...), ", "...)
		b, _ = job.AppendText(b)
		x.buf = append(b, '>')
		x.send(FrameLine, x.buf)
	}
	x.exit(0)
}

// terminate carries out exit: queued and blocked jobs end as terminated
// before execution, this commander is answered at once, and Serve drains
// the running jobs (their outputs reach their commanders), then returns.
func (s *Server) terminate(x *exchange) {
	s.startDrain()
	x.line(msgTerminated)
	x.exit(0)
	x.log.Info("exit command answered; draining")
	close(s.exit)
}

// startDrain ends the queued and blocked jobs as terminated before
// execution, and lets the running ones finish.
func (s *Server) startDrain() {
	// An ended context makes Shutdown start the drain without waiting for
	// it, so that no queued job starts after this.
	started, cancel := context.WithCancel(context.Background())
	cancel()
	s.Executor.Shutdown(started)
}

// Terminate does what an exit command does, for the program that runs
// the server (on a first Ctrl-C or SIGTERM, say): from now on every command
// is refused, the commanders of queued jobs are told SERVER TERMINATED
// BEFORE EXECUTION, the running jobs finish and their outputs reach their
// commanders, and Serve then returns ErrServerTerminated. After an exit
// command, or called again, it does nothing.
func (s *Server) Terminate() {
	s.init()
	s.mu.Lock()
	first := !s.draining
	s.draining = true
	s.mu.Unlock()
	if !first {
		return
	}
	s.startDrain()
	s.Logger.Info("told to terminate; draining")
	close(s.exit)
}
