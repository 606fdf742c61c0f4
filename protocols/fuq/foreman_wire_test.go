package fuq

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeWorker is a worker played by the test, over TCP, against a real
// Foreman: it numbers its requests as the spec says, and reads and writes
// messages one at a time.
type fakeWorker struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
	hi   int64 // the largest sequence number seen or sent
}

func dialFake(t *testing.T, addr string) *fakeWorker {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	return &fakeWorker{t: t, conn: conn, r: bufio.NewReader(conn), hi: -1}
}

func (w *fakeWorker) read() Message {
	w.t.Helper()
	m, err := ReadMessage(w.r, 0)
	require.NoError(w.t, err)
	w.hi = max(w.hi, int64(m.Seq))
	return m
}

// readType reads the next message, which must be of type typ.
func (w *fakeWorker) readType(typ Type) Message {
	w.t.Helper()
	m := w.read()
	require.Equal(w.t, typ, m.Type, "%+v", m.Header)
	return m
}

func (w *fakeWorker) write(m Message) {
	w.t.Helper()
	b, err := m.AppendBinary(nil)
	require.NoError(w.t, err)
	_, err = w.conn.Write(b)
	require.NoError(w.t, err)
}

// request sends a request of the worker's, numbered with the next even
// number, and returns the foreman's reply.
func (w *fakeWorker) request(m Message) Message {
	w.t.Helper()
	m.Seq = uint32((w.hi + 2) &^ 1)
	w.hi = int64(m.Seq)
	w.write(m)
	reply := w.read()
	require.Equal(w.t, m.Seq, reply.Seq, "the reply to %v", m.Type)
	return reply
}

// reply answers the foreman's request req.
func (w *fakeWorker) reply(req Message, m Message) {
	w.t.Helper()
	m.Seq = req.Seq
	w.write(m)
}

func (w *fakeWorker) hello(procs int, running ...Task) Message {
	w.t.Helper()
	if running == nil {
		running = []Task{}
	}
	return w.request(Message{Header: Header{Type: TypeHello}, Hello: &Hello{NumProcs: procs, Running: running}})
}

func (w *fakeWorker) update(t Task, success bool, status string) Message {
	w.t.Helper()
	return w.request(Message{Header: Header{Type: TypeUpdate}, Update: &StatusUpdate{JobId: t.JobDescription.JobId, Task: t.Task, Success: success, Status: status}})
}

func pairs(tasks []Task) []TaskPair {
	var ps []TaskPair
	for _, t := range tasks {
		ps = append(ps, TaskPair{JobId: t.JobDescription.JobId, Task: t.Task})
	}
	return ps
}

// A worker that answers a JOB with ERROR(no procs) gets its tasks offered
// again (after a while, or once it reports a task's end): the foreman does
// not take its word for having no processors for ever. The refused offer
// is no attempt.
func TestForemanOffersAgainAfterNoProcs(t *testing.T) {
	s := startSystem(t, &Foreman{})
	fw := dialFake(t, s.addr)
	assert.Equal(t, PackOK(2, 0), fw.hello(2).Arg0)
	h, _ := s.submit("np", "/bin/true", 2)

	job := fw.readType(TypeJob)
	require.Len(t, job.Tasks, 2)
	fw.reply(job, errorReply(CodeNoProcs))
	again := fw.readType(TypeJob) // no UPDATE came: after the backoff
	assert.Equal(t, pairs(job.Tasks), pairs(again.Tasks))
	fw.reply(again, Message{Header: Header{Type: TypeOK, Arg0: PackOK(0, 2)}})
	assert.Equal(t, PackOK(1, 1), fw.update(again.Tasks[0], true, "done").Arg0)
	assert.Equal(t, PackOK(2, 0), fw.update(again.Tasks[1], true, "done").Arg0)
	res := wait(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	info, _ := s.f.JobByRef(h.ID())
	for _, ti := range info.Tasks {
		assert.Equal(t, 1, ti.Attempts)
		assert.Equal(t, "worker-1", ti.Worker)
	}

	// Refused while a task runs: its end brings the offer again.
	h, _ = s.submit("np2", "/bin/true", 2)
	job = fw.readType(TypeJob)
	require.Len(t, job.Tasks, 2)
	fw.reply(job, Message{Header: Header{Type: TypeOK, Arg0: PackOK(0, 2)}})
	fw.update(job.Tasks[0], true, "done")
	h3, _ := s.submit("np3", "/bin/true", 1)
	offer := fw.readType(TypeJob)
	require.Len(t, offer.Tasks, 1)
	fw.reply(offer, errorReply(CodeNoProcs))
	fw.update(job.Tasks[1], true, "done")
	offer = fw.readType(TypeJob)
	fw.reply(offer, Message{Header: Header{Type: TypeOK, Arg0: PackOK(1, 1)}})
	fw.update(offer.Tasks[0], true, "done")
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h3).Status)
}

// A HELLO that names a task nobody waits for (its job unknown, cancelled
// or done) gets a CANCEL for it; the UPDATE the worker then sends for it
// is dropped, and the worker goes on getting work.
func TestForemanHelloCancelsStaleTasks(t *testing.T) {
	s := startSystem(t, &Foreman{})
	fw := dialFake(t, s.addr)
	stale := Task{Task: 3, JobDescription: JobDescription{JobId: 42, Name: "gone", NumTasks: 3, Command: "/bin/true"}}
	// The answer repeats the worker's counts, as the reference foreman's
	// does: the reference worker quits on any other (node.checkOK).
	assert.Equal(t, PackOK(1, 1), fw.hello(1, stale).Arg0)
	cancel := fw.readType(TypeCancel)
	assert.Equal(t, []TaskPair{{JobId: 42, Task: 3}}, cancel.Cancel)
	fw.reply(cancel, Message{Header: Header{Type: TypeOK, Arg0: PackOK(1, 1)}})
	fw.update(stale, false, "error encountered: laboro: job cancelled")

	h, _ := s.submit("after", "/bin/true", 1)
	job := fw.readType(TypeJob)
	fw.reply(job, Message{Header: Header{Type: TypeOK, Arg0: PackOK(1, 1)}})
	fw.update(job.Tasks[0], true, "done")
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
	assert.Positive(t, s.logs.FilterMessage("the worker runs tasks nobody waits for; cancelling them").Len())
}

// A worker that comes back after its grace names a task that went to
// another worker meanwhile: it takes the task back, the other worker is
// told to cancel it, and the UPDATE of the cancelled run is not taken as
// the task's outcome.
func TestForemanReclaimFromAnotherWorker(t *testing.T) {
	s := startSystem(t, &Foreman{Grace: -1})
	a := dialFake(t, s.addr)
	a.hello(1)
	h, _ := s.submit("r", "/bin/true", 1)
	job := a.readType(TypeJob)
	a.reply(job, Message{Header: Header{Type: TypeOK, Arg0: PackOK(0, 1)}})
	task := job.Tasks[0]
	a.conn.Close() // its task goes to others at once (no grace)

	b := dialFake(t, s.addr)
	b.hello(1)
	again := b.readType(TypeJob)
	assert.Equal(t, pairs(job.Tasks), pairs(again.Tasks))
	b.reply(again, Message{Header: Header{Type: TypeOK, Arg0: PackOK(0, 1)}})

	back := dialFake(t, s.addr)
	assert.Equal(t, PackOK(0, 1), back.hello(0, task).Arg0, "the task is its own again")
	cancel := b.readType(TypeCancel)
	assert.Equal(t, pairs(job.Tasks), cancel.Cancel)
	b.reply(cancel, Message{Header: Header{Type: TypeOK, Arg0: PackOK(0, 1)}})
	b.update(task, false, "error encountered: laboro: job cancelled")
	select {
	case <-h.Done():
		t.Fatal("the cancelled run's UPDATE ended the job")
	case <-time.After(50 * time.Millisecond): // the UPDATE was answered: it has been handled
	}
	back.update(task, true, "done")
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
	info, _ := s.f.JobByRef(h.ID())
	assert.Equal(t, "worker-3", info.Tasks[0].Worker)
	assert.Equal(t, "done", info.Tasks[0].Status)
	assert.Equal(t, 2, info.Tasks[0].Attempts)
}

// The reference worker answers a CANCEL with OK(ncancelled|0), the number
// of tasks it cancelled, not its processors (node.Dispatch.onCancel): the
// foreman takes no count from it. (It took the answer for the worker's
// processors: a worker that had nothing left to cancel was offered no
// task again.)
func TestForemanTakesNoCountFromCancelReply(t *testing.T) {
	s := startSystem(t, &Foreman{})
	fw := dialFake(t, s.addr)
	fw.conn.SetDeadline(time.Now().Add(5 * time.Second))
	fw.hello(2)
	h, _ := s.submit("cancelled", "/bin/true", 1)
	job := fw.readType(TypeJob)
	fw.reply(job, Message{Header: Header{Type: TypeOK, Arg0: PackOK(1, 1)}})
	info, _ := s.f.JobByRef(h.ID())
	require.NoError(t, s.f.Cancel(info.JobId))
	cancel := fw.readType(TypeCancel)
	// The task had ended already: nothing cancelled, as the reference
	// worker says it.
	fw.reply(cancel, Message{Header: Header{Type: TypeOK, Arg0: PackOK(0, 0)}})
	assert.Equal(t, laboro.StatusKilled, wait(t, h).Status)

	h, _ = s.submit("after", "/bin/true", 2)
	job = fw.readType(TypeJob)
	require.Len(t, job.Tasks, 2, "both processors are free")
	fw.reply(job, Message{Header: Header{Type: TypeOK, Arg0: PackOK(0, 2)}})
	fw.update(job.Tasks[0], true, "done")
	fw.update(job.Tasks[1], true, "done")
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
}

// A reference worker that connects again may send the UPDATE of a task
// before its HELLO (websocket.Autodial sends on the new connection at
// once); the reference foreman records it and answers OK(0xFFFF|0xFFFF),
// which makes the worker send its HELLO (node.Dispatch.sendUpdate). So
// does ours. (It dropped the connection.)
func TestForemanUpdateBeforeHello(t *testing.T) {
	s := startSystem(t, &Foreman{})
	a := dialFake(t, s.addr)
	a.hello(1)
	h, _ := s.submit("early", "/bin/true", 1)
	job := a.readType(TypeJob)
	a.reply(job, Message{Header: Header{Type: TypeOK, Arg0: PackOK(0, 1)}})
	a.conn.Close()

	// Its numbers go on from where they were: the reference keeps its
	// sequencer across connections.
	back := dialFake(t, s.addr)
	back.hi = 38
	reply := back.update(job.Tasks[0], true, "done")
	assert.Equal(t, Header{Type: TypeOK, Seq: 40, Arg0: PackOK(0xFFFF, 0xFFFF)}, reply.Header)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
	assert.Equal(t, Header{Type: TypeOK, Seq: 42, Arg0: PackOK(1, 0)}, back.hello(1).Header)

	h, _ = s.submit("then", "/bin/true", 1)
	job = back.readType(TypeJob)
	assert.Equal(t, uint32(43), job.Seq)
	back.reply(job, Message{Header: Header{Type: TypeOK, Arg0: PackOK(0, 1)}})
	back.update(job.Tasks[0], true, "done")
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
}

// The tasks of a resumed job wait Grace for the workers that ran them
// before the foreman's restart: one that still runs is taken back with
// the worker's HELLO, one that ended meanwhile is recorded from its
// UPDATE, and neither is handed to anyone in the meantime (the worker's
// free processors included). Until then the foreman sends this worker no
// JOB: the replies it reads are its own requests'.
func TestForemanResumedTasksWaitForTheirWorkers(t *testing.T) {
	s := startSystem(t, &Foreman{Grace: time.Hour})
	desc := JobDescription{Name: "r", Command: "/bin/true", NumTasks: 3, WorkingDir: s.dir, LoggingDir: s.dir, JobId: 42}
	h, err := s.ex.Submit(t.Context(), NewResumedJob(JournaledJob{Ref: "job_7", Desc: desc}))
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := s.f.JobByRef("job_7"); return ok }, 10*time.Second, time.Millisecond)

	a := dialFake(t, s.addr)
	running, ended := Task{Task: 1, JobDescription: desc}, Task{Task: 2, JobDescription: desc}
	assert.Equal(t, PackOK(2, 1), a.hello(2, running).Arg0)
	assert.Equal(t, TypeOK, a.update(ended, true, "done").Type, "the reply to the UPDATE, not a JOB")
	info, ok := s.f.JobByRef("job_7")
	require.True(t, ok)
	assert.Equal(t, 1, info.Done)
	assert.Equal(t, 2, info.Running, "the first on the worker, the third where it may be")
	assert.Equal(t, "worker-1", info.Tasks[0].Worker)
	assert.Equal(t, "worker-1", info.Tasks[1].Worker)
	assert.Equal(t, "the foreman before its restart", info.Tasks[2].Worker)
	assert.Equal(t, TypeOK, a.update(running, true, "done").Type)
	info, _ = s.f.JobByRef("job_7")
	assert.Equal(t, 2, info.Done)
	assert.Equal(t, 1, info.Running, "the third waits for its worker")
	select {
	case <-h.Done():
		t.Fatal("the job ended with a task not run")
	default:
	}
}

// A worker that does not answer a JOB (stopped, wedged) is dropped after
// Timeout, and its tasks go to another: they are not held for ever.
func TestForemanDropsAWorkerThatDoesNotAnswer(t *testing.T) {
	s := startSystem(t, &Foreman{Grace: -1, Timeout: 200 * time.Millisecond})
	a := dialFake(t, s.addr)
	a.hello(1)
	h, _ := s.submit("r", "/bin/true", 1)
	job := a.readType(TypeJob)
	_, err := ReadMessage(a.r, 0) // no reply: the foreman hangs up
	require.Error(t, err)

	b := dialFake(t, s.addr)
	b.hello(1)
	again := b.readType(TypeJob)
	assert.Equal(t, pairs(job.Tasks), pairs(again.Tasks))
	b.reply(again, Message{Header: Header{Type: TypeOK, Arg0: PackOK(0, 1)}})
	b.update(again.Tasks[0], true, "done")
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
}
