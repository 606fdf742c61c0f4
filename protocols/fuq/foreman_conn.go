package fuq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"
)

// fworker is one connected worker, seen by the Foreman. Its fields other
// than l, greeted and inflight are guarded by the Foreman's mutex; l and
// the rest belong to the connection's goroutine.
type fworker struct {
	f       *Foreman
	id      int
	addr    string
	name    string
	log     *zap.Logger
	procs   int // its processors: free + running, as it last said
	running map[TaskPair]*ftask
	outbox  []Message // CANCEL and STOP requests to send
	kick    chan struct{}

	l        *link
	greeted  bool
	inflight *Message // the request of ours awaiting its reply
	offered  []*ftask // the tasks of an unanswered JOB
}

// free is how many processors the worker has free, as the foreman sees it:
// its processors less the tasks the foreman knows it runs. (Counting from
// the OK replies alone would count twice a task whose UPDATE waits behind
// a JOB's reply.) f.mu is held.
func (w *fworker) free() int {
	return max(0, w.procs-len(w.running))
}

// wake asks the worker's goroutine to look for work to send.
func (w *fworker) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (f *Foreman) serveConn(ctx context.Context, conn net.Conn) {
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	f.mu.Lock()
	f.nextWorker++
	w := &fworker{f: f, id: f.nextWorker, addr: conn.RemoteAddr().String(), running: map[TaskPair]*ftask{}, kick: make(chan struct{}, 1)}
	w.name = fmt.Sprintf("worker-%d", w.id)
	w.log = f.Logger.With(zap.String("worker", w.name), zap.String("addr", w.addr))
	f.workers[w] = true
	f.mu.Unlock()
	w.l = newLink(conn, RoleForeman, f.Seq, f.MaxBody, timeout, w.log)
	defer w.l.close()
	defer f.drop(w)

	hello := time.NewTimer(timeout)
	defer hello.Stop()
	for {
		var err error
		select {
		case r := <-w.l.in:
			err = w.l.receive(r, w.handle)
		case <-w.kick:
		case <-hello.C:
			if !w.greeted {
				err = errors.New("no HELLO in time")
			}
		case <-ctx.Done():
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
// CANCEL or STOP first, else a JOB of as many pending tasks as the worker
// has free processors.
func (w *fworker) dispatch() error {
	if !w.greeted || w.inflight != nil {
		return nil
	}
	f := w.f
	f.mu.Lock()
	var m Message
	switch {
	case len(w.outbox) > 0:
		m = w.outbox[0]
		w.outbox = w.outbox[1:]
	case w.free() > 0 && len(f.pending) > 0:
		n := min(w.free(), len(f.pending))
		tasks := make([]Task, 0, n)
		w.offered = append(w.offered[:0], f.pending[:n]...)
		f.pending = append(f.pending[:0:0], f.pending[n:]...)
		for _, t := range w.offered {
			t.state, t.worker = TaskRunning, w
			t.attempts++
			w.running[t.pair()] = t
			tasks = append(tasks, t.wire())
		}
		m = Message{Header: Header{Type: TypeJob}, Tasks: tasks}
	default:
		f.mu.Unlock()
		return nil
	}
	f.mu.Unlock()
	w.inflight = &m
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
	f := w.f
	switch m.Type {
	case TypeHello:
		if m.Hello == nil {
			return nil, &ProtocolError{Msg: "HELLO without its body"}
		}
		f.mu.Lock()
		w.procs = m.Hello.NumProcs + len(m.Hello.Running)
		for _, t := range m.Hello.Running {
			f.reattach(w, t)
		}
		free, nrun := w.free(), len(w.running)
		f.mu.Unlock()
		w.greeted = true
		w.log.Info("worker joined", zap.Int("free", free), zap.Int("running", nrun))
		return w.l.reply(m.Header, ok(free, nrun))
	case TypeUpdate:
		if m.Update == nil {
			return nil, &ProtocolError{Msg: "UPDATE without its body"}
		}
		f.mu.Lock()
		f.record(w, *m.Update)
		free, nrun := w.free(), len(w.running)
		f.mu.Unlock()
		return w.l.reply(m.Header, ok(free, nrun))
	}
	return nil, unexpected(m)
}

// replied handles the worker's reply to our request.
func (w *fworker) replied(a Action) error {
	f := w.f
	if a.Msg.Type == TypeError && a.Msg.Code == CodeOverflow {
		return nil // the Seq sends the request again
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case a.Msg.Type == TypeOK && a.Req.Type == TypeStop:
		// The worker lowered its processors as the spec says. Its OK
		// counts the tasks it still runs, whose processors are not free
		// again when they end: its count is not taken.
		if n := int(a.Req.Arg0); n == 0 || n >= w.procs {
			w.procs = 0
		} else {
			w.procs -= n
		}
		w.log.Info("worker's processors lowered by STOP", zap.Int("procs", w.procs))
	case a.Msg.Type == TypeOK:
		nproc, nrun := UnpackOK(a.Msg.Arg0)
		w.procs = int(nproc) + int(nrun)
	case a.Req.Type == TypeJob && a.Msg.Code == CodeNoProcs:
		// The worker has fewer processors than it said: the tasks go
		// back, first in line.
		var back []*ftask
		for _, t := range w.offered {
			if t.state == TaskRunning && t.worker == w {
				delete(w.running, t.pair())
				t.state, t.worker = TaskPending, nil
				back = append(back, t)
			}
		}
		f.pending = append(back, f.pending...)
		w.procs = len(w.running) // until its next OK says more
		w.log.Info("no processors for a JOB; its tasks go back in line", zap.Int("tasks", len(back)))
	default:
		w.log.Warn("request refused", zap.Stringer("request", a.Req.Type), zap.Stringer("code", a.Msg.Code))
	}
	w.inflight, w.offered = nil, w.offered[:0]
	return nil
}

// reattach takes back a task that a worker announces it still runs, after
// its connection dropped. f.mu is held.
func (f *Foreman) reattach(w *fworker, task Task) {
	j := f.jobs[task.JobDescription.JobId]
	if j == nil || task.Task < 1 || task.Task > len(j.tasks) {
		w.log.Warn("the worker runs a task of no known job", zap.Uint64("job", task.JobDescription.JobId), zap.Int("task", task.Task))
		return
	}
	t := j.tasks[task.Task-1]
	if t.state.final() {
		return
	}
	if t.orphaned != nil {
		t.orphaned.Stop()
		t.orphaned = nil
	}
	if t.state == TaskPending {
		f.unqueue(t)
	}
	if t.worker != nil && t.worker != w {
		delete(t.worker.running, t.pair()) // it may run there too: the first outcome counts
	}
	t.state, t.worker = TaskRunning, w
	w.running[t.pair()] = t
	w.log.Info("task taken back from the worker", zap.Uint64("job", j.desc.JobId), zap.Int("task", t.n))
}

// record takes a task's outcome; only the first is kept. f.mu is held.
func (f *Foreman) record(w *fworker, u StatusUpdate) {
	pair := TaskPair{JobId: u.JobId, Task: u.Task}
	j := f.jobs[u.JobId]
	if j == nil || u.Task < 1 || u.Task > len(j.tasks) {
		w.log.Warn("UPDATE for no known task", zap.Uint64("job", u.JobId), zap.Int("task", u.Task))
		return
	}
	t := j.tasks[u.Task-1]
	if w.running[pair] == t {
		delete(w.running, pair)
	}
	if t.state.final() {
		w.log.Info("second outcome of a task ignored", zap.Uint64("job", u.JobId), zap.Int("task", u.Task), zap.Stringer("recorded", t.state))
		return
	}
	if t.worker != nil && t.worker != w {
		delete(t.worker.running, pair)
	}
	t.worker = w
	state := TaskFailed
	if u.Success {
		state = TaskDone
	}
	f.settle(t, state, u.Status)
}

// drop forgets a worker whose connection ended; its tasks wait Grace for
// it to come back, then go to others.
func (f *Foreman) drop(w *fworker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.workers, w)
	held := 0
	for _, t := range w.running {
		if t.state == TaskRunning && t.worker == w {
			f.orphan(t)
			held++
		}
	}
	w.running = map[TaskPair]*ftask{}
	if held > 0 {
		w.log.Warn("worker gone; its tasks wait for it", zap.Int("tasks", held), zap.Duration("grace", f.grace()))
	}
}

func (f *Foreman) grace() time.Duration {
	switch {
	case f.Grace < 0:
		return 0
	case f.Grace == 0:
		return DefaultGrace
	}
	return f.Grace
}

// orphan holds a task of a vanished worker for the grace period. f.mu is
// held.
func (f *Foreman) orphan(t *ftask) {
	requeue := func() {
		t.orphaned = nil
		t.state, t.worker = TaskPending, nil
		f.pending = append([]*ftask{t}, f.pending...)
		for w := range f.workers {
			w.wake()
		}
	}
	if f.grace() == 0 {
		requeue()
		return
	}
	var timer *time.Timer
	timer = time.AfterFunc(f.grace(), func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if t.orphaned == timer { // not taken back or settled meanwhile
			f.Logger.Info("task given to another worker", zap.Uint64("job", t.job.desc.JobId), zap.Int("task", t.n))
			requeue()
		}
	})
	t.orphaned = timer
}
