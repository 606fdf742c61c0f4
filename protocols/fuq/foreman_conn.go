package fuq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport"
	"go.uber.org/zap"
)

// The waits before a worker that answered a JOB with ERROR(no procs) is
// offered tasks again, unless it reports a task's end first. The first is
// short: the reference's worker refuses the JOB that follows the OK to an
// UPDATE whenever that OK has not yet been handled on its side, which
// takes it a moment.
const (
	refusedMin = 20 * time.Millisecond
	refusedMax = 10 * time.Second
)

// fworker is one connected worker, seen by the Foreman: its connection's
// goroutine moves tasks from the Dispatcher (dw) to the wire in JOBs, and
// outcomes from UPDATEs to the Dispatcher.
type fworker struct {
	f    *Foreman
	id   int
	addr string
	name string
	node string // the name its /hello got, over a websocket
	// single: one task to a JOB. The reference's worker (which joins
	// over a websocket) takes a JOB's tasks one by one, runs those it
	// took, and answers ERROR(no procs) at the first it has no processor
	// for, without saying how many it took; it often has one processor
	// fewer than its last OK said, for a moment after each UPDATE. A JOB
	// of one task is taken whole or not at all.
	single bool
	log    *zap.Logger
	dw     *transport.Worker[TaskPair, Task]

	// procs is its processors, free and busy, as it last said. Written by
	// the connection's goroutine with the Foreman's mutex held.
	procs int

	mu     sync.Mutex
	outbox []Message // CANCEL and STOP requests to send
	kick   chan struct{}

	// The rest belongs to the connection's goroutine.
	l         *link
	greeted   bool
	inflight  *Message    // the request of ours awaiting its reply
	replyBy   *time.Timer // runs while inflight: a worker that stalls is dropped
	replyC    <-chan time.Time
	offered   []*transport.Ticket[TaskPair, Task] // the tasks of an unanswered JOB
	refused   bool                                // it answered ERROR(no procs): no JOB until it reports an end, or retry fires
	retry     *time.Timer
	retryC    <-chan time.Time
	backoff   transport.Backoff
	cancelled map[TaskPair]bool // told to cancel: their UPDATE is not an outcome
}

// send queues a CANCEL or STOP for the worker; it never waits.
func (w *fworker) send(m Message) {
	w.mu.Lock()
	w.outbox = append(w.outbox, m)
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// cancelTasks is the Dispatcher's word that tasks this worker holds have
// ended without it (their job was cancelled, or another worker's outcome
// came first): a CANCEL tells the worker to kill them.
func (w *fworker) cancelTasks(pairs []TaskPair) {
	w.log.Info("cancelling tasks on the worker", zap.Int("tasks", len(pairs)))
	w.send(Message{Header: Header{Type: TypeCancel}, Cancel: pairs})
}

// held is how many tasks the worker holds.
func (w *fworker) held() int { return len(w.dw.Held()) }

// free is how many processors the worker has free, as the foreman sees it:
// its processors less the tasks it holds. (Counting from the OK replies
// alone would count twice a task whose UPDATE waits behind a JOB's reply.)
func (w *fworker) free() int { return max(0, w.procs-w.held()) }

// timeout is the Foreman's Timeout or its default.
func (f *Foreman) timeout() time.Duration {
	if f.Timeout <= 0 {
		return DefaultTimeout
	}
	return f.Timeout
}

// admit counts a new connection, and reports whether it is within
// MaxConns; the caller calls f.conns.Add(-1) when it ends, if admitted.
func (f *Foreman) admit() bool {
	if f.conns.Add(1) > int64(cmp.Or(f.MaxConns, DefaultMaxConns)) {
		f.conns.Add(-1)
		return false
	}
	return true
}

// serveConn serves a worker on a plain TCP connection.
func (f *Foreman) serveConn(ctx context.Context, conn net.Conn) {
	if !f.admit() {
		f.refusals.Of(f.Logger).Warn("connection refused: too many connections, the foreman serves no more workers' connections at once (at most one such line a second)",
			zap.String("addr", conn.RemoteAddr().String()), zap.Int("at most", cmp.Or(f.MaxConns, DefaultMaxConns)))
		conn.Close()
		return
	}
	defer f.conns.Add(-1)
	if len(f.Secret) > 0 {
		release, ok := f.unproven.Acquire(conn.RemoteAddr())
		if !ok {
			f.refusals.Of(f.Logger).Warn("connection refused: too many connections from its address still to prove the secret, the most one address may hold (at most one such line a second)",
				zap.String("addr", conn.RemoteAddr().String()), zap.Int("at most", cmp.Or(f.MaxUnproven, DefaultMaxUnproven)))
			conn.Close()
			return
		}
		err := authWorkerConn(conn, f.Secret, f.timeout())
		release()
		if err != nil {
			f.Logger.Warn("worker refused: it did not prove it holds the shared secret",
				zap.String("addr", conn.RemoteAddr().String()), zap.Error(err))
			conn.Close()
			return
		}
	}
	f.serveMsgConn(ctx, newStreamConn(conn, f.timeout()), conn.RemoteAddr().String(), "", false)
}

// serveMsgConn serves a worker on conn, of either transport, until the
// connection ends or ctx does; it closes conn. node is the worker's name
// from its login, if it logged in; single is set for a websocket, over
// which the reference's workers come (see fworker.single).
func (f *Foreman) serveMsgConn(ctx context.Context, conn msgConn, addr, node string, single bool) {
	timeout := f.timeout()
	f.mu.Lock()
	f.nextWorker++
	w := &fworker{
		f: f, id: f.nextWorker, addr: addr, node: node, single: single, kick: make(chan struct{}, 1),
		backoff: transport.Backoff{Min: refusedMin, Max: refusedMax}, cancelled: map[TaskPair]bool{},
	}
	w.name = fmt.Sprintf("worker-%d", w.id)
	w.log = f.Logger.With(zap.String("worker", w.name), zap.String("addr", w.addr))
	if node != "" {
		w.log = w.log.With(zap.String("node", node))
	}
	w.dw = f.d.Join(w.name, w.cancelTasks)
	f.workers[w] = true
	f.mu.Unlock()
	w.l = newLink(conn, RoleForeman, f.Seq, f.MaxBody, w.log)
	defer w.l.close()
	defer func() {
		if w.replyBy != nil {
			w.replyBy.Stop()
		}
	}()
	var err error
	defer func() { f.drop(w, err) }()

	hello := time.NewTimer(timeout)
	defer hello.Stop()
	for {
		select {
		case r := <-w.l.in:
			err = w.l.receive(r, w.handle)
		case <-w.kick:
		case <-w.dw.Wake():
		case <-w.retryC:
			w.refused, w.retryC = false, nil
		case <-hello.C:
			if !w.greeted {
				err = errors.New("no HELLO in time")
			}
		case <-w.replyC:
			// A worker stopped (SIGSTOP) or wedged would hold the tasks
			// of its JOB for ever: dropped, they wait Grace for it.
			err = fmt.Errorf("no reply to our %s within %s", w.inflight.Type, timeout)
		case <-ctx.Done():
			err = ctx.Err()
			return
		}
		if err == nil {
			err = w.dispatch()
		}
		if err != nil {
			w.log.Warn("worker connection ended", zap.Error(err))
			return
		}
	}
}

// dispatch sends the next request, if none is awaiting its reply: a
// CANCEL or STOP first, else a JOB of as many tasks as the worker has free
// processors, taken from the Dispatcher.
func (w *fworker) dispatch() error {
	if !w.greeted || w.inflight != nil {
		return nil
	}
	var m Message
	w.mu.Lock()
	if len(w.outbox) > 0 {
		m = w.outbox[0]
		w.outbox = w.outbox[1:]
	}
	w.mu.Unlock()
	switch {
	case m.Type == TypeCancel:
		for _, p := range m.Cancel {
			w.cancelled[p] = true
		}
	case m.Type != 0:
	case w.refused:
		return nil
	default:
		free := w.free()
		if free == 0 {
			return nil // it reports each end: then
		}
		if w.single {
			free = 1 // the next JOB follows this one's reply
		}
		// Taken with f.mu held, as the tasks of a job are added: a JOB
		// carries as many of a new job's tasks as fit, not the first one
		// alone.
		f := w.f
		f.mu.Lock()
		w.offered = w.dw.Take(free, nil)
		if len(w.offered) == 0 {
			f.mu.Unlock()
			return nil // the Dispatcher wakes us when tasks come
		}
		m = Message{Header: Header{Type: TypeJob}, Tasks: make([]Task, 0, len(w.offered))}
		for _, t := range w.offered {
			delete(w.cancelled, t.Key)
			m.Tasks = append(m.Tasks, t.Value)
			if j := f.jobs[t.Key.JobId]; j != nil {
				j.tasks[t.Key.Task-1].worker = w.name
			}
			if t.Attempts() > 1 {
				w.log.Info("task given to another worker", zap.Uint64("job", t.Key.JobId), zap.Int("task", t.Key.Task), zap.Int("attempt", t.Attempts()))
			}
		}
		f.mu.Unlock()
	}
	w.inflight = &m
	if w.replyBy == nil {
		w.replyBy = time.NewTimer(w.f.timeout())
	} else {
		w.replyBy.Reset(w.f.timeout())
	}
	w.replyC = w.replyBy.C
	return w.l.request(m, w.handle)
}

// handle carries out what the Seq delivers.
func (w *fworker) handle(a Action) ([]Action, error) {
	switch a.Kind {
	case ActRequest:
		return w.answer(a.Msg)
	case ActReply:
		return nil, w.replied(a)
	case ActRestart:
		w.greeted = false // until the worker's HELLO
	}
	return nil, nil
}

// answer handles a worker's request: HELLO or UPDATE.
func (w *fworker) answer(m Message) ([]Action, error) {
	switch m.Type {
	case TypeHello:
		if m.Hello == nil {
			return nil, &ProtocolError{Msg: "HELLO without its body"}
		}
		w.hello(*m.Hello)
		// The worker's own counts, as the reference foreman answers: the
		// reference worker quits on any other answer. (Its tasks that
		// nobody waits for get a CANCEL, and then an UPDATE.)
		return w.l.reply(m.Header, ok(m.Hello.NumProcs, len(m.Hello.Running)))
	case TypeUpdate:
		if m.Update == nil {
			return nil, &ProtocolError{Msg: "UPDATE without its body"}
		}
		w.complete(*m.Update)
		w.stopRefusing() // a processor is free again
		if !w.greeted {
			// A reference worker that has just connected again may send
			// an UPDATE before its HELLO; this answer, the reference
			// foreman's, asks it for the HELLO.
			return w.l.reply(m.Header, Message{Header: Header{Type: TypeOK, Arg0: PackOK(0xFFFF, 0xFFFF)}})
		}
	default:
		return nil, unexpected(m)
	}
	return w.l.reply(m.Header, ok(w.free(), w.held()))
}

// hello takes the worker's word on its processors, and takes back the
// tasks it still runs (it ran them on a connection that dropped, or
// before a RESET); those that nobody waits for any more get a CANCEL.
func (w *fworker) hello(h Hello) {
	w.f.mu.Lock()
	w.procs = h.NumProcs + len(h.Running)
	w.f.mu.Unlock()
	var stale []TaskPair
	mine := map[TaskPair]bool{} // after a RESET, the tasks it runs are its already
	for _, p := range w.dw.Held() {
		mine[p] = true
	}
	for _, t := range h.Running {
		pair := TaskPair{JobId: t.JobDescription.JobId, Task: t.Task}
		if _, ok := w.dw.Reclaim(pair); !ok {
			stale = append(stale, pair)
			continue
		}
		if !mine[pair] {
			delete(w.cancelled, pair)
			w.log.Info("task taken back from the worker", zap.Uint64("job", pair.JobId), zap.Int("task", pair.Task))
		}
	}
	if len(stale) > 0 {
		w.log.Info("the worker runs tasks nobody waits for; cancelling them", zap.Int("tasks", len(stale)))
		w.send(Message{Header: Header{Type: TypeCancel}, Cancel: stale})
	}
	w.greeted = true
	w.stopRefusing()
	w.log.Info("worker joined", zap.Int("free", w.free()), zap.Int("running", w.held()))
}

// complete takes a task's outcome from its UPDATE. The first outcome of a
// task is recorded; a later one, or that of a task this worker was told to
// cancel, is dropped.
func (w *fworker) complete(u StatusUpdate) {
	pair := TaskPair{JobId: u.JobId, Task: u.Task}
	if w.cancelled[pair] {
		delete(w.cancelled, pair)
		w.log.Debug("UPDATE of a cancelled task dropped", zap.Uint64("job", u.JobId), zap.Int("task", u.Task))
		return
	}
	res := laboro.Result{Status: laboro.StatusSucceeded, ExitCode: 0}
	state := TaskDone
	if !u.Success {
		res = laboro.Result{Status: laboro.StatusFailed, ExitCode: 1, Err: errors.New(u.Status)}
		state = TaskFailed
	}
	err := w.dw.Complete(pair, res)
	if errors.Is(err, transport.ErrNotHeld) {
		// The worker ran it while on an earlier connection, and kept its
		// UPDATE until now.
		if _, ok := w.dw.Reclaim(pair); ok {
			err = w.dw.Complete(pair, res)
		}
	}
	if err != nil {
		w.log.Info("outcome of a task ignored", zap.Uint64("job", u.JobId), zap.Int("task", u.Task), zap.Error(err))
		return
	}
	f := w.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if j := f.jobs[u.JobId]; j != nil {
		f.ended(j, u.Task, state, u.Status, w.name)
	}
}

// replied handles the worker's reply to our request.
func (w *fworker) replied(a Action) error {
	if a.Msg.Type == TypeError && a.Msg.Code == CodeOverflow {
		return nil // the Seq sends the request again
	}
	f := w.f
	switch {
	case a.Msg.Type == TypeOK && a.Req.Type == TypeStop:
		// The worker lowered its processors as the spec says. Its OK
		// counts the tasks it still runs, whose processors are not free
		// again when they end: its count is not taken.
		f.mu.Lock()
		if n := int(a.Req.Arg0); n == 0 || n >= w.procs {
			w.procs = 0
		} else {
			w.procs -= n
		}
		f.mu.Unlock()
		w.log.Info("worker's processors lowered by STOP", zap.Int("procs", w.procs))
	case a.Msg.Type == TypeOK && a.Req.Type == TypeCancel:
		// The reference worker's OK to a CANCEL counts the tasks it
		// cancelled (ncancelled|0), not its processors: nothing to take.
	case a.Msg.Type == TypeOK:
		nproc, nrun := UnpackOK(a.Msg.Arg0)
		f.mu.Lock()
		w.procs = int(nproc) + int(nrun)
		f.mu.Unlock()
		if a.Req.Type == TypeJob {
			w.backoff.Reset()
		}
	case a.Req.Type == TypeJob:
		// The tasks were not taken: back to the front of the line, for
		// any worker. A worker with fewer processors free than we
		// thought (a task we cancelled is still being killed, say) is
		// offered no more until it reports a task's end, or for a
		// while, so that it gets work again whatever it does.
		for i := len(w.offered) - 1; i >= 0; i-- { // each goes to the front
			w.dw.Release(w.offered[i])
		}
		if a.Msg.Code == CodeNoProcs {
			w.refused = true
			wait := w.backoff.Next()
			if w.retry == nil {
				w.retry = time.NewTimer(wait)
			} else {
				w.retry.Reset(wait)
			}
			w.retryC = w.retry.C
		}
		w.log.Info("JOB refused; its tasks go back in line", zap.Int("tasks", len(w.offered)), zap.Stringer("code", a.Msg.Code))
	default:
		w.log.Warn("request refused", zap.Stringer("request", a.Req.Type), zap.Stringer("code", a.Msg.Code))
	}
	w.inflight, w.offered, w.replyC = nil, nil, nil
	w.replyBy.Stop()
	return nil
}

// stopRefusing lets the worker be offered tasks again.
func (w *fworker) stopRefusing() {
	w.refused, w.retryC = false, nil
	if w.retry != nil {
		w.retry.Stop()
	}
}

// drop forgets a worker whose connection ended; its tasks wait Grace for
// it to come back, then go to others.
func (f *Foreman) drop(w *fworker, err error) {
	f.mu.Lock()
	delete(f.workers, w)
	f.mu.Unlock()
	w.stopRefusing()
	if held := w.held(); held > 0 {
		w.log.Warn("worker gone; its tasks wait for it", zap.Int("tasks", held), zap.Duration("grace", f.grace()))
	}
	w.dw.Leave(err)
}
