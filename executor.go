package laboro

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Executor runs jobs under flow control: a bounded buffer of waiting jobs, a
// fixed pool of worker goroutines, and a concurrency level, changeable at any
// time, that caps how many of them run jobs at once.
//
// All methods are safe for concurrent use. After Shutdown or Close has
// begun, Submit and SetConcurrency return ErrClosed, Stop finds nothing and
// Queued is empty; Handles stay valid.
type Executor struct {
	runner    Runner
	ownRunner bool       // runner is the default one (no WithRunner)
	fn        FuncRunner // its function jobs' runner
	validator Validator
	log       *zap.Logger
	events    *eventQueue // nil without an observer
	poolSize  int
	capacity  int
	runDir    *runDir // our own output directory; nil with the caller's

	mu      sync.Mutex
	work    sync.Cond // workers wait here for a job they may start
	state   execState
	queue   Queue
	waiters waitList
	// live indexes by id the jobs, waiting, queued or running, that a new
	// id could collide with: every job whose id its caller chose and, once
	// a caller chose an id of the "job_N" form (ownIDs), every job. Until
	// then, jobs with an assigned id stay out of it, which spares two map
	// operations per job; Stop finds them in the queue.
	live        map[string]*Handle
	ownIDs      bool
	ids         idSource
	current     []*Handle    // the job each worker runs, nil while idle
	contexts    []jobContext // the context each worker runs its jobs with
	concurrency int
	running     int
	workers     int           // worker goroutines still alive
	done        chan struct{} // closed when workers and observer have returned

	// What Stats adds to the state above; see there.
	epoch    time.Time // queue times are read against it: the monotonic clock only
	started  int64
	ended    [StatusCancelled + 1]int64
	outBytes int64
	waits    Histogram
	runs     Histogram
	changes  uint64
	history  history
}

type execState uint8

const (
	stateOpen     execState = iota
	stateDraining           // Shutdown: no new jobs, running ones finish
	stateClosed             // Close: running jobs are killed
)

var waiterPool = sync.Pool{New: func() any { return &waiter{ready: make(chan struct{}, 1)} }}

// New returns a started Executor. Its worker goroutines run until Shutdown
// or Close, one of which must be called to release them.
func New(opts ...Option) (*Executor, error) {
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Executor{
		runner:      cfg.runner,
		log:         cfg.logger,
		poolSize:    cfg.poolSize,
		capacity:    cfg.bufferSize,
		queue:       cfg.queue,
		concurrency: cfg.concurrency,
		live:        make(map[string]*Handle),
		current:     make([]*Handle, cfg.poolSize),
		contexts:    make([]jobContext, cfg.poolSize),
		done:        make(chan struct{}),
		epoch:       time.Now(),
		history:     history{ring: make([]*Handle, cfg.history)},
	}
	if e.log == nil {
		e.log = zap.NewNop()
	}
	if e.queue == nil {
		e.queue = new(FIFO)
	}
	if e.runner == nil {
		proc := &ProcessRunner{Dir: cfg.outputDir, Logger: e.log}
		if proc.Dir == "" {
			dir, err := os.MkdirTemp("", "laboro-run-")
			if err != nil {
				return nil, fmt.Errorf("laboro: create run directory: %w", err)
			}
			e.runDir = &runDir{path: dir}
			proc.Dir, proc.held = dir, e.runDir
		}
		e.fn = FuncRunner{Logger: e.log}
		e.runner = mixedRunner{proc: proc, fn: e.fn}
		e.ownRunner = true
	}
	e.validator, _ = e.runner.(Validator)
	e.work.L = &e.mu
	if cfg.observer != nil {
		e.events = newEventQueue(cfg.observer, &e.mu)
		go e.events.run()
	}
	e.workers = e.poolSize
	for i := range e.poolSize {
		e.contexts[i] = jobContext{e: e, worker: i}
		go e.worker(i)
	}
	e.log.Debug("executor started", zap.Int("pool", e.poolSize), zap.Int("buffer", e.capacity),
		zap.Int("concurrency", e.concurrency))
	return e, nil
}

// Submit puts job in the buffer and returns a Handle to its result as soon
// as it is there. A job without an ID gets the next of "job_1", "job_2", …
//
// While the buffer is full, Submit blocks; blocked submitters enter the
// buffer in the order they arrived. If ctx ends first, the job is not queued
// and the error matches ErrNotQueued and ctx.Err(). If Shutdown or Close
// begins first, the error matches ErrTerminated and ErrClosed. Other errors:
// ErrClosed, ErrDuplicateID, ErrInvalidJob.
func (e *Executor) Submit(ctx context.Context, job Job) (*Handle, error) {
	// The default runner finds nothing wrong with a function job: the
	// call, and the copy of job it takes, are spared.
	if e.validator != nil && !(e.ownRunner && job.Func != nil) {
		if err := e.validator.Validate(job); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	// The clock is read before the lock, which is held short; only the
	// monotonic one (half the cost of time.Now).
	h := &Handle{j: storeJob(job), queued: time.Since(e.epoch)}
	e.mu.Lock()
	if e.state != stateOpen {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	if job.ID != "" {
		if !e.ownIDs && strings.HasPrefix(job.ID, idPrefix) {
			e.indexAll()
		}
		if _, dup := e.live[job.ID]; dup {
			e.mu.Unlock()
			return nil, fmt.Errorf("%w: %q", ErrDuplicateID, job.ID)
		}
	}
	if e.waiters.len() == 0 && e.queue.Len() < e.capacity {
		e.enqueue(h)
		e.mu.Unlock()
		return h, nil
	}

	// The buffer is full: wait in line for a place.
	if job.ID != "" {
		e.index(h) // reserve the id
	}
	w := waiterPool.Get().(*waiter)
	w.h, w.outcome = h, waitPending
	e.waiters.push(w)
	e.changes++
	e.mu.Unlock()

	signalled := false
	select {
	case <-w.ready:
		signalled = true
	case <-ctx.Done():
	}

	e.mu.Lock()
	outcome := w.outcome
	if outcome == waitPending {
		e.waiters.remove(w)
		e.unindex(h)
		e.changes++
	}
	e.mu.Unlock()
	if outcome != waitPending && !signalled {
		<-w.ready // the signal raced with ctx; take it so the waiter is clean
	}
	w.h = nil
	waiterPool.Put(w)

	switch outcome {
	case waitQueued:
		return h, nil
	case waitTerminated:
		return nil, fmt.Errorf("%w: %w", ErrTerminated, ErrClosed)
	default:
		return nil, fmt.Errorf("%w: buffer full: %w", ErrNotQueued, ctx.Err())
	}
}

// enqueue gives h its id and puts it in the buffer. e.mu is held.
func (e *Executor) enqueue(h *Handle) {
	if h.j.ID == "" {
		h.j.ID = e.nextID()
		if e.ownIDs {
			e.index(h)
		}
	} else {
		e.index(h)
	}
	h.state = stateQueued
	e.queue.Push(h)
	e.changes++
	if e.events != nil {
		e.events.push(eventRecord{kind: EventQueued, h: h, time: e.epoch.Add(h.queued)})
	}
	if e.running < e.parallelism() {
		e.work.Signal()
	}
}

// index puts h in e.live. e.mu is held.
func (e *Executor) index(h *Handle) {
	e.live[h.j.ID] = h
	h.indexed = true
}

// unindex takes h out of e.live, if it is there. e.mu is held.
func (e *Executor) unindex(h *Handle) {
	if h.indexed {
		delete(e.live, h.j.ID)
		h.indexed = false
	}
}

// indexAll puts every queued and running job in e.live, and every job from
// now on: a caller chose an id that an assigned one may equal. e.mu is held.
func (e *Executor) indexAll() {
	e.ownIDs = true
	for _, h := range e.queue.Snapshot() {
		e.index(h)
	}
	for _, h := range e.current {
		if h != nil {
			e.index(h)
		}
	}
}

// nextID returns the next free "job_N". e.mu is held.
func (e *Executor) nextID() string {
	for {
		id := e.ids.next()
		if !e.ownIDs {
			return id // only a caller's id could be taken, and none looks like ours
		}
		if _, taken := e.live[id]; !taken {
			return id
		}
	}
}

const (
	idPrefix = "job_"
	idBatch  = 64
)

// idSource hands out "job_1", "job_2", … cut from one string holding a
// batch of them, so that an id costs no allocation of its own. An id kept
// by a caller keeps its batch (at most about 1.5 KiB) alive. Its zero value
// starts at "job_1". It is not safe for concurrent use.
type idSource struct {
	text string          // the current batch of ids, back to back
	ends [idBatch]uint16 // where each id of the batch ends in text
	i    int             // the next id's index in the batch
	last uint64          // the number of the batch's last id
}

func (s *idSource) next() string {
	if s.text == "" || s.i == idBatch {
		s.fill()
	}
	start := 0
	if s.i > 0 {
		start = int(s.ends[s.i-1])
	}
	id := s.text[start:s.ends[s.i]]
	s.i++
	return id
}

func (s *idSource) fill() {
	var b strings.Builder
	b.Grow(idBatch * (len(idPrefix) + 8))
	var num [20]byte
	for i := range s.ends {
		s.last++
		b.WriteString(idPrefix)
		b.Write(strconv.AppendUint(num[:0], s.last, 10))
		s.ends[i] = uint16(b.Len())
	}
	s.text, s.i = b.String(), 0
}

// admit moves blocked submitters into the buffer while it has room, oldest
// first. now, if set, is the time it is: a clock read spared. e.mu is held.
func (e *Executor) admit(now time.Time) {
	for e.waiters.len() > 0 && e.queue.Len() < e.capacity {
		w := e.waiters.pop()
		if now.IsZero() {
			now = time.Now()
		}
		w.h.queued = now.Sub(e.epoch) // it enters the buffer now
		e.enqueue(w.h)
		w.outcome = waitQueued
		w.ready <- struct{}{}
	}
}

// SetConcurrency sets the concurrency level: at most min(n, pool size) jobs
// run at once from now on. Raising it starts waiting jobs at once; lowering
// it stops no running job, but no job starts until fewer than n run. 0
// pauses: no new job starts (submitting, stopping and polling go on) until
// the level is raised again. A negative n is refused with ErrInvalidConfig;
// after Shutdown or Close began, ErrClosed.
func (e *Executor) SetConcurrency(n int) error {
	if n < 0 {
		return configErrorf("concurrency must be >= 0, got %d", n)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != stateOpen {
		return ErrClosed
	}
	e.concurrency = n
	e.changes++
	if e.events != nil {
		e.events.push(eventRecord{kind: EventConcurrency, time: time.Now(), n: n, p: e.parallelism()})
	}
	e.work.Broadcast()
	return nil
}

// Concurrency returns the concurrency level.
func (e *Executor) Concurrency() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.concurrency
}

// Parallelism returns the effective parallelism: min(concurrency level,
// pool size), the most jobs that may run at once right now.
func (e *Executor) Parallelism() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.parallelism()
}

func (e *Executor) parallelism() int { return min(e.concurrency, e.poolSize) }

// Stats returns the Executor's counters, read together.
func (e *Executor) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{
		Concurrency: e.concurrency,
		PoolSize:    e.poolSize,
		Parallelism: e.parallelism(),
		Running:     e.running,
		Queued:      e.queue.Len(),
		Blocked:     e.waiters.len(),
		BufferSize:  e.capacity,
		Started:     e.started,
		Ended:       e.ended,
		OutputBytes: e.outBytes,
		Waits:       e.waits,
		Runs:        e.runs,
		Changes:     e.changes,
	}
}

// Stop removes a queued job from the buffer; its Handle's result has
// StatusStopped. It returns ErrNotFound for an id that is not queued:
// unknown, running or finished. A Submit blocked on a full buffer takes the
// place that frees.
func (e *Executor) Stop(id string) error {
	e.mu.Lock()
	var h *Handle
	switch x := e.live[id]; {
	case x != nil:
		if x.state == stateQueued {
			h = e.queue.Remove(id)
		}
	case !e.ownIDs && strings.HasPrefix(id, idPrefix):
		// Jobs with assigned ids are not indexed yet: look in the buffer.
		h = e.queue.Remove(id)
	}
	if h == nil {
		e.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	res := Result{ID: id, Status: StatusStopped, ExitCode: -1, Err: ErrStopped}
	e.retire(h, &res)
	e.admit(time.Time{})
	e.mu.Unlock()
	h.complete()
	return nil
}

// Cancel ends a job whatever its state. A queued job is removed as by
// Stop: its result has StatusStopped. A running job's context ends with
// cause ErrCancelled: the process runner kills its whole process group, a
// remote Runner tells its worker to kill it, and its result has
// StatusCancelled (or StatusSucceeded, should it succeed first). Cancel
// does not wait for the job to end; its Handle tells when it has. An id
// that is neither queued nor running (unknown, finished, or still blocked
// in Submit) is ErrNotFound.
func (e *Executor) Cancel(id string) error {
	e.mu.Lock()
	h := e.live[id]
	if h == nil && !e.ownIDs && strings.HasPrefix(id, idPrefix) {
		// Jobs with assigned ids are not indexed: look in the buffer,
		// then among the running ones.
		if h = e.queue.Remove(id); h == nil {
			for _, r := range e.current {
				if r != nil && r.j.ID == id {
					h = r
					break
				}
			}
		}
	} else if h != nil && h.state == stateQueued {
		h = e.queue.Remove(id)
	}
	switch {
	case h == nil || h.state == stateWaiting || h.state == stateDone:
		e.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	case h.state == stateRunning:
		e.interrupt(h, ErrCancelled)
		e.mu.Unlock()
		e.log.Debug("job cancelled", zap.String("job", id))
		return nil
	}
	res := Result{ID: id, Status: StatusStopped, ExitCode: -1, Err: ErrStopped}
	e.retire(h, &res)
	e.admit(time.Time{})
	e.mu.Unlock()
	h.complete()
	return nil
}

// interrupt ends running job h's context with cause; the first cause
// wins. e.mu is held.
func (e *Executor) interrupt(h *Handle, cause error) {
	for i, r := range e.current {
		if r == h {
			e.contexts[i].stop(cause)
			return
		}
	}
}

// retire takes a job that will not run (again) off the books, keeps res
// as its result and reports it to the observer; h.complete, after the lock,
// hands the result to whoever waits. e.mu is held.
func (e *Executor) retire(h *Handle, res *Result) {
	e.unindex(h)
	h.state = stateDone
	h.keepResult(res) // read by others only once h.finished is set (complete), or under e.mu (Recent)
	e.changes++
	if int(res.Status) < len(e.ended) {
		e.ended[res.Status]++
	}
	if res.Output != nil {
		e.outBytes += res.Output.Size()
	}
	if !res.Started.IsZero() {
		e.waits.add(res.Started.Sub(e.epoch) - h.queued)
		if !res.Ended.IsZero() {
			e.runs.add(res.Ended.Sub(res.Started))
		}
	}
	if len(e.history.ring) > 0 {
		e.history.add(h)
	}
	if e.events != nil {
		// The run's end is the event's time when the runner said it: one
		// clock read fewer per job.
		t := res.Ended
		if t.IsZero() {
			t = time.Now()
		}
		e.events.push(eventRecord{kind: EventFinished, h: h, time: t})
	}
}

// Running is a job that runs now, as Executor.Running reports it.
type Running struct {
	// Job is the job, with its id.
	Job Job
	// Started is when a worker took it from the buffer, when the
	// Executor has an observer (WithObserver); without one, when its
	// Runner reported its process (zero until then, and for a job that is
	// no process): the Executor reads the clock per job only for those.
	Started time.Time
	// PID and Output are its process and the file its standard output is
	// being written to, once its Runner reported them (ReportProcess;
	// ProcessRunner does): 0 and "" before that, and for a job that is no
	// process. The file grows while the job runs: reading it follows the
	// job's output live.
	PID    int
	Output string
}

// Running returns the jobs that run now, in the order of the pool's
// workers.
func (e *Executor) Running() []Running {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Running, 0, e.running)
	for _, h := range e.current {
		if h == nil {
			continue
		}
		r := Running{Job: h.j.job()}
		if ri := h.run; ri != nil {
			r.Started = ri.started
			if p := ri.proc; p != nil {
				r.PID, r.Output = p.pid, p.output
				if r.Started.IsZero() {
					r.Started = p.at
				}
			}
		}
		out = append(out, r)
	}
	return out
}

// Queued returns the jobs waiting in the buffer, with their ids, in the
// order they will start.
func (e *Executor) Queued() []Job {
	return e.AppendQueued(nil)
}

// Peek returns the first n jobs waiting in the buffer, with their ids, in
// the order they will start: what a display lists, at a cost that does
// not grow with the buffer (with the default FIFO). Stats().Queued counts
// them all.
func (e *Executor) Peek(n int) []Job {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.appendQueued(nil, n)
}

// AppendQueued appends the jobs waiting in the buffer to dst, in the order
// they will start, and returns the extended slice. A caller that polls
// often can reuse one slice: with the default FIFO, a slice with room
// takes a long queue without any allocation.
func (e *Executor) AppendQueued(dst []Job) []Job {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.appendQueued(dst, e.queue.Len())
}

// appendQueued appends the first n jobs of the buffer to dst. e.mu is held.
func (e *Executor) appendQueued(dst []Job, n int) []Job {
	n = max(min(n, e.queue.Len()), 0)
	dst = slices.Grow(dst, n)
	if q, ok := e.queue.(*FIFO); ok {
		for i := range n {
			dst = append(dst, q.ring[(q.head+i)%len(q.ring)].j.job())
		}
		return dst
	}
	for _, h := range e.queue.Snapshot()[:n] {
		dst = append(dst, h.j.job())
	}
	return dst
}

// Shutdown drains the Executor gracefully: it takes no new jobs; every
// queued job, and every Submit blocked on a full buffer, ends as terminated
// before execution; running jobs finish and their results are delivered.
// It returns when all of that is done, or ctx.Err() if ctx ends first, in
// which case the jobs go on running and Close can kill them. It is safe to
// call more than once, and after Close.
func (e *Executor) Shutdown(ctx context.Context) error {
	e.begin(stateDraining)
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the Executor hard: like Shutdown, it terminates the queued
// jobs and blocked submitters, and it kills every running job's process
// group; those jobs end with StatusKilled. It returns once every worker has
// returned (a Go function job that ignores its context delays it). It is
// safe to call more than once, and during Shutdown. It returns nil.
func (e *Executor) Close() error {
	e.begin(stateClosed)
	<-e.done
	return nil
}

// begin moves the Executor to state s and terminates everything that waits.
func (e *Executor) begin(s execState) {
	e.mu.Lock()
	if s <= e.state {
		e.mu.Unlock()
		return
	}
	first := e.state == stateOpen
	e.state = s
	var terminated []*Handle
	if first {
		for _, w := range e.waiters.items {
			e.unindex(w.h)
			w.outcome = waitTerminated
			w.ready <- struct{}{}
		}
		e.waiters = waitList{}
		for h := e.queue.Pop(); h != nil; h = e.queue.Pop() {
			res := Result{ID: h.j.ID, Status: StatusTerminated, ExitCode: -1, Err: ErrTerminated}
			e.retire(h, &res)
			terminated = append(terminated, h)
		}
		e.log.Debug("executor draining", zap.Int("terminated", len(terminated)), zap.Int("running", e.running))
	}
	if s == stateClosed {
		for i, h := range e.current {
			if h != nil {
				e.contexts[i].stop(ErrKilled)
			}
		}
	}
	e.work.Broadcast()
	e.mu.Unlock()
	for _, h := range terminated {
		h.complete()
	}
}
