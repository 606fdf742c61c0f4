package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// fetchWait bounds each pull request, and so how long a stopping worker
// waits for the ones it has out.
const fetchWait = 500 * time.Millisecond

// publishTimeout bounds the publication of a finished job's result and its
// acknowledgement once the worker stops, and the acknowledgement of a job
// whose Run ended. A variable for the tests.
var publishTimeout = 30 * time.Second

// refusedDelay is how long a job a worker does not run (not signed with
// its key, see Config.JobKey, or unreadable) waits before it is delivered
// again.
const refusedDelay = time.Second

// Worker pulls jobs with the workers' durable consumer, runs each through a
// local laboro.Executor as a process (its output in <pid>.output), sends
// in-progress acknowledgements every AckWait/3 while it runs, publishes the
// result (the output in chunks of at most ChunkSize) and only then
// acknowledges the job. A result that cannot go (the server out of reach,
// or not proved) waits as long as Run runs, the job kept in progress; the
// server's copies of it delivered meanwhile are not run. With
// Config.ProveServer it takes no job from a server that has not proved
// itself, so that no more results wait than it has slots. A job whose Run
// ended (see Manager) is cancelled in that Executor, which kills its
// process group, and acknowledged without a result; a job received after
// its Run ended, or past its deadline, is not run, and one that reaches its
// deadline is killed. Set the fields, then call Run once.
type Worker struct {
	// Conn is the connection to NATS; it stays the caller's.
	Conn *nats.Conn
	// Config must agree with the Manager's on Stream; AckWait and
	// MaxDeliver left at 0 keep the consumer's settings.
	Config Config
	// Concurrency is how many jobs run at once; 0 means 1.
	Concurrency int
	// OutputDir receives the jobs' <pid>.output files; "" means a
	// directory of the Executor's own.
	OutputDir string
	// Logger; nil means Config.Logger.
	Logger *zap.Logger
	// Name is how the service's console and status name this worker; ""
	// means the host's name and the process id. Give each worker its own:
	// the Service tells each Run from another under the same name (the
	// jobs of one that stopped are handed back), but lists only one of
	// those that run at once, and warns of such a name.
	Name string

	drainOnce sync.Once
	draining  chan struct{} // closed by Drain
	drained   sync.Once
}

// Drain asks Run to take no new job, let the running ones finish and
// deliver their results, and then return. It may be called at any time,
// from any goroutine, more than once; an end of Run's context still kills
// what runs.
func (w *Worker) Drain() {
	ch := w.drain()
	w.drained.Do(func() { close(ch) })
}

func (w *Worker) drain() chan struct{} {
	w.drainOnce.Do(func() { w.draining = make(chan struct{}) })
	return w.draining
}

// untilDrain returns a context that ends with ctx, or once Drain is
// called.
func (w *Worker) untilDrain(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-w.drain():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Run pulls and runs jobs until ctx ends, or until Drain was called and the
// jobs it had have ended and been delivered. Jobs still running when ctx
// ends are killed and not acknowledged, so that they are redelivered. It
// returns nil then, or an error if it could not start.
func (w *Worker) Run(ctx context.Context) error {
	cfg := w.Config.withDefaults()
	log := w.Logger
	if log == nil {
		log = cfg.Logger
	}
	if max := int(w.Conn.MaxPayload()) - 16<<10; max > 0 && cfg.ChunkSize > max {
		cfg.ChunkSize = max
	}
	n := max(w.Concurrency, 1)
	js, err := natsjs.New(w.Conn)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	// Wait for the server, however long it takes to come up, or until
	// Drain: a worker that has no job yet has none to finish.
	var jobs, results natsjs.Stream
	var cons natsjs.Consumer
	waiting := false
	waitCtx, stopWaiting := w.untilDrain(ctx)
	err = retry(waitCtx, w.Conn, func(ctx context.Context) (err error) {
		jobs, results, cons, err = ensure(ctx, js, cfg, false)
		if err != nil && !waiting && transient(w.Conn, err) {
			log.Info("waiting for the NATS server", notConnected(w.Conn, err))
			waiting = true
		}
		return err
	})
	stopWaiting()
	if err != nil {
		if waitCtx.Err() != nil {
			return nil
		}
		return err
	}
	cfg.AckWait = cons.CachedInfo().Config.AckWait // the setting in force
	opts := []laboro.Option{laboro.WithPoolSize(n), laboro.WithConcurrency(n),
		laboro.WithBufferSize(n), laboro.WithLogger(log)}
	if w.OutputDir != "" {
		opts = append(opts, laboro.WithOutputDir(w.OutputDir))
	}
	// What it runs changed: say so (beat), soon.
	changed := make(chan struct{}, 1)
	opts = append(opts, laboro.WithObserver(func(ev laboro.Event) {
		if ev.Kind == laboro.EventStarted || ev.Kind == laboro.EventFinished {
			nudge(changed)
		}
	}))
	ex, err := laboro.New(opts...)
	if err != nil {
		return err
	}
	name := w.Name
	if name == "" {
		name = defaultWorkerName()
	}
	r := &workerRun{js: js, cfg: cfg, log: log, ex: ex, cons: cons, results: results, draining: w.drain(),
		name: name, taken: map[string]*taken{}, recent: map[string]time.Time{}, reprove: make(chan struct{}, 1),
		changed: changed, took: make(chan struct{}, 1), check: serverCheck{key: cfg.JobKey, subject: cfg.proveSubject(RoleWorker)}}
	// Hear of the Runs that end before taking any job: the server handles
	// a connection's messages in order, so this subscription is in place
	// before the first job is delivered.
	sub, err := w.Conn.Subscribe(cfg.cancelSubject("*"), func(msg *nats.Msg) {
		r.end(strings.TrimPrefix(msg.Subject, cfg.cancelSubject("")))
	})
	if err != nil {
		ex.Close()
		return fmt.Errorf("jetstream: listen for ended jobs: %w", err)
	}
	defer sub.Unsubscribe()
	live, err := w.Conn.Subscribe(cfg.liveSubject("*"), r.answerLive)
	if err != nil {
		ex.Close()
		return fmt.Errorf("jetstream: answer for live output: %w", err)
	}
	defer live.Unsubscribe()
	roll, err := w.Conn.Subscribe(cfg.rollSubject(), func(*nats.Msg) { nudge(changed) })
	if err != nil {
		ex.Close()
		return fmt.Errorf("jetstream: hear the roll call: %w", err)
	}
	defer roll.Unsubscribe()
	// The run's id tells this run of the worker from another under its
	// name (WorkerInfo.Run): logged, it tells the service's warning of two
	// live workers under one name which machines they are.
	run := rand.Text()
	log.Info("worker taking jobs", zap.String("name", name), zap.String("run", run), zap.Int("slots", n))
	beatCtx, stopBeat := context.WithCancel(context.Background())
	beaten := make(chan struct{})
	go func() { defer close(beaten); r.beat(beatCtx, w.Conn, name, run, n) }()
	defer func() { stopBeat(); <-beaten }()
	// The jobs published from now on have their ends heard of by sub, as
	// long as the connection holds: for them, no lookup is needed.
	if err := w.Conn.Flush(); err == nil {
		ictx, cancel := context.WithTimeout(ctx, attemptTimeout) // else looked up as needed
		info, err := jobs.Info(ictx)
		cancel()
		if err == nil {
			r.heard, r.heardFrom, r.reconnects = true, info.State.LastSeq, w.Conn.Stats().Reconnects
		}
	}
	// Have the server prove itself whenever a request for live output or
	// a heartbeat finds it unproven (the loops have it prove itself before
	// they take a job).
	proverCtx, stopProver := context.WithCancel(ctx)
	prover := make(chan struct{})
	go func() { defer close(prover); r.prover(proverCtx) }()
	defer func() { stopProver(); <-prover }()
	takeCtx, stopTaking := w.untilDrain(ctx)
	defer stopTaking()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { r.loop(ctx, takeCtx) })
	}
	loops := make(chan struct{})
	go func() { wg.Wait(); close(loops) }()
	select {
	case <-ctx.Done():
	case <-loops: // drained
	}
	ex.Close() // kills the jobs still running
	<-loops
	r.finishing.Wait()
	return nil
}

type workerRun struct {
	js      natsjs.JetStream
	cfg     Config
	log     *zap.Logger
	name    string // Worker.Name, or its default
	ex      *laboro.Executor
	results natsjs.Stream
	// cons is the JOBS stream's consumer, replaced (under consMu) when the
	// stream or the consumer was deleted.
	consMu sync.Mutex
	cons   natsjs.Consumer
	// finishing counts the finished jobs whose result is being published.
	finishing sync.WaitGroup
	draining  <-chan struct{} // closed when no new job is to be taken

	// heardFrom is the last job of the JOBS stream before the cancel
	// subscription was in place (0: the stream was empty), with the
	// connection's reconnections then: the end of a later job is heard of
	// while the connection holds (see over). heard is false when they are
	// unknown: every job is then looked up.
	heard                 bool
	heardFrom, reconnects uint64

	mu        sync.Mutex
	taken     map[string]*taken    // the jobs being handled, by id
	recent    map[string]time.Time // ends heard of for jobs not taken, and when
	heardEnds []heardEnd           // recent's entries in the order heard (some taken since)

	// With Config.ProveServer, check has the server prove itself (see
	// prove); reprove asks the prover goroutine for a proof, without
	// waiting; unproven, under check.mu, is set when a proof failed, and
	// was said so, since the last one.
	check    serverCheck
	reprove  chan struct{}
	unproven bool
	// changed asks for a heartbeat soon: what the worker runs changed,
	// the service asked, or the server proved itself.
	changed chan struct{}
	// took asks for a heartbeat at once: the worker took a job.
	took chan struct{}
}

// taken is a job this worker handles.
type taken struct {
	ended  bool   // its Run ended: it must not run, or go on running
	queued bool   // it is in the Executor
	ack    string // its delivery's acknowledgement subject, said in heartbeats
}

// leases returns the deliveries this worker holds, for a heartbeat: the
// service hands them back if the worker falls silent (see fleet).
func (r *workerRun) leases() []lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	list := make([]lease, 0, len(r.taken))
	for id, t := range r.taken {
		if t.ack != "" {
			list = append(list, lease{Job: id, Ack: t.ack})
		}
	}
	return list
}

// loop pulls one job at a time and runs it, until ctx ends or the worker
// drains (takeCtx ends with either). It takes no job from a server that
// has not proved itself (Config.ProveServer): its result could not go.
func (r *workerRun) loop(ctx, takeCtx context.Context) {
	pause := pauses(r.js.Conn())
	for ctx.Err() == nil {
		select {
		case <-r.draining:
			return
		default:
		}
		if !r.proven() && r.prove(takeCtx) != nil {
			continue // stopped, or drained
		}
		r.consMu.Lock()
		cons := r.cons
		r.consMu.Unlock()
		batch, err := cons.Fetch(1, natsjs.FetchMaxWait(fetchWait))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			switch {
			case deleted(err):
				r.recreate(ctx, cons, err)
			case !r.js.Conn().IsConnected():
				r.log.Debug("fetching a job", zap.Error(err)) // said on the disconnection
			default:
				r.log.Warn("fetching a job", zap.Error(err))
			}
			pause.Wait(ctx)
			continue
		}
		pause.Reset()
		for msg := range batch.Messages() {
			r.handle(ctx, msg)
		}
		if err := batch.Error(); err != nil && deleted(err) && ctx.Err() == nil {
			r.recreate(ctx, cons, err)
			pause.Wait(ctx)
		}
	}
}

// deleted reports whether err says that the JOBS stream or its consumer
// is gone.
func deleted(err error) bool {
	return errors.Is(err, natsjs.ErrConsumerDeleted) || errors.Is(err, natsjs.ErrConsumerNotFound) ||
		errors.Is(err, natsjs.ErrStreamNotFound) || errors.Is(err, natsjs.ErrNoStreamResponse)
}

// recreate makes the streams and the consumer again after someone deleted
// them, saying so loudly: the jobs they held are lost, and their Runs
// learn of it only by their timeouts. old is the consumer the caller
// fetched from; another loop may have replaced it already.
func (r *workerRun) recreate(ctx context.Context, old natsjs.Consumer, cause error) {
	r.consMu.Lock()
	defer r.consMu.Unlock()
	if r.cons != old {
		return
	}
	r.log.Error("the JOBS stream or its consumer was deleted: the jobs it held are lost; making them again",
		zap.String("stream", r.cfg.jobsStream()), zap.Error(cause))
	if afterDeletion(ctx) != nil {
		return
	}
	// The RESULTS stream is looked up by its name: r.results serves on.
	var cons natsjs.Consumer
	err := retry(ctx, r.js.Conn(), func(ctx context.Context) (err error) {
		_, _, cons, err = ensure(ctx, r.js, r.cfg, false)
		return err
	})
	if err != nil {
		r.log.Error("making the streams again", zap.Error(err))
		return
	}
	r.cons = cons
}

// take marks job id, delivered with the acknowledgement subject ack, as
// handled here. It returns nil when it is already (a redelivery of a job
// that outlived its AckWait here).
func (r *workerRun) take(id, ack string) *taken {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.taken[id] != nil {
		return nil
	}
	t := &taken{ack: ack}
	if _, ok := r.recent[id]; ok {
		delete(r.recent, id)
		t.ended = true
	}
	r.taken[id] = t
	return t
}

func (r *workerRun) release(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.taken, id)
}

// heardEnd is the end of a Run a worker heard of, for a job it did not run.
type heardEnd struct {
	id string
	at time.Time
}

// end learns that job id's Run ended: the job is cancelled if it is in the
// Executor, not run if it is about to be, and otherwise remembered for
// recentCancels, should it come just after.
func (r *workerRun) end(id string) { r.endAt(id, time.Now()) }

// endAt is end, heard of at now. Forgetting the ends heard of before
// recentCancels costs each end a constant time, however many come (a
// batch of waiting jobs cancelled).
func (r *workerRun) endAt(id string, now time.Time) {
	r.mu.Lock()
	t := r.taken[id]
	if t == nil {
		old := 0
		for ; old < len(r.heardEnds) && now.Sub(r.heardEnds[old].at) > recentCancels; old++ {
			if e := r.heardEnds[old]; r.recent[e.id].Equal(e.at) {
				delete(r.recent, e.id)
			}
		}
		r.heardEnds = append(r.heardEnds[old:], heardEnd{id, now})
		r.recent[id] = now
		r.mu.Unlock()
		return
	}
	t.ended = true
	queued := t.queued
	r.mu.Unlock()
	if queued {
		r.ex.Cancel(id) // ErrNotFound: it has just ended
	}
}

// queued notes that t is in the Executor, and reports whether its Run is
// still going (else the caller cancels it).
func (r *workerRun) queued(t *taken) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.queued = true
	return !t.ended
}

func (r *workerRun) ended(t *taken) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return t.ended
}

// over tells whether job id's Run is over before the job runs: its end was
// heard of or is recorded, or, for a job delivered again, a result is
// stored. It gives up after half the AckWait, leaving the job to be run.
// A job delivered the first time that was published after the cancel
// subscription was in place, on a connection that has not dropped since,
// needs no lookup: its end, published after it, would have been heard of.
func (r *workerRun) over(ctx context.Context, t *taken, id string, seq uint64, again bool) (bool, error) {
	if r.ended(t) {
		return true, nil
	}
	if !again && r.heard && seq > r.heardFrom && r.js.Conn().Stats().Reconnects == r.reconnects {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AckWait/2)
	defer cancel()
	if !again {
		msg, err := lookup(ctx, r.js.Conn(), r.results, r.cfg.cancelSubject(id))
		return msg != nil, err
	}
	return jobEnded(ctx, r.js.Conn(), r.results, r.cfg, id)
}

// proving reports whether this worker asks its server to prove itself
// before it takes a job from it or gives it results or outputs
// (Config.ProveServer).
func (r *workerRun) proving() bool { return r.cfg.ProveServer && len(r.cfg.JobKey) > 0 }

// proven reports whether the server of the connection in use proved that
// a Manager with this worker's key is on it, or no proof is asked for.
func (r *workerRun) proven() bool {
	return !r.proving() || r.check.proven(r.js.Conn())
}

// prove has the server prove itself (see proven), asking again while it
// cannot, until ctx ends.
func (r *workerRun) prove(ctx context.Context) error {
	if r.proven() {
		return nil
	}
	r.check.mu.Lock()
	defer r.check.mu.Unlock()
	pause := pauses(r.js.Conn())
	first := time.Now()
	for {
		if r.proven() {
			return nil
		}
		err := r.challenge(ctx)
		if err == nil {
			return nil
		}
		// Said at once for an answer with another key; for no answer, once
		// it lasts while connected (a server restarting, or starting its
		// service, is silent for a moment).
		lasting := r.js.Conn().IsConnected() && time.Since(first) >= proofPatience
		switch {
		case r.unproven:
		case errors.Is(err, ErrServerUnproven):
			r.log.Warn("the NATS server does not prove that laboro's service is on it: this worker takes no job from it, and gives it no result or output, until it does (is another program on its address?)",
				zap.Error(err))
			r.unproven = true
		case lasting:
			r.log.Warn("laboro's service does not answer on the NATS server: this worker takes no job from it, and gives it no result or output, until it proves itself (is `laboro serve` running?)",
				zap.Error(err))
			r.unproven = true
		}
		if pause.Wait(ctx) != nil {
			return fmt.Errorf("the NATS server does not prove that laboro's service is on it: %w", err)
		}
	}
}

// proofPatience is how long a worker's server may leave its challenges
// unanswered, while connected, before the worker says so. A variable for
// the tests.
var proofPatience = 5 * time.Second

// prover asks for a proof each time reprove says, until ctx ends; one
// attempt each, quietly: a result's publication insists, and says why.
func (r *workerRun) prover(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.reprove:
		}
		if r.proving() && !r.proven() && r.check.mu.TryLock() {
			if err := r.challenge(ctx); err != nil {
				r.log.Debug("the NATS server does not prove that laboro's service is on it (yet)", zap.Error(err))
			}
			r.check.mu.Unlock()
		}
	}
}

// challenge has the server prove itself once, and says so if it did
// after failing. r.check.mu is held.
func (r *workerRun) challenge(ctx context.Context) error {
	if err := r.check.challenge(ctx, r.js.Conn()); err != nil {
		return err
	}
	if r.unproven {
		r.log.Info("the NATS server proved that laboro's service is on it: this worker takes jobs from it and gives it results again")
		r.unproven = false
	}
	nudge(r.changed) // a heartbeat saying the jobs it runs
	return nil
}

// askProof asks the prover goroutine for a proof, without waiting.
func (r *workerRun) askProof() { nudge(r.reprove) }

// nudge sends on ch, a channel of one, unless it is full.
func nudge(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// refuse hands a job back without running it, after telling the Managers
// why (see Config.refusedSubject): delivered until its limit, it then
// fails with the reason.
func (r *workerRun) refuse(msg natsjs.Msg, reason string) {
	if id := msg.Headers().Get(hdrJob); validID(id) == nil {
		note := nats.NewMsg(r.cfg.refusedSubject(id))
		note.Header.Set(hdrReason, reason)
		note.Header.Set(hdrWorker, headerText(r.name))
		if err := r.js.Conn().PublishMsg(note); err != nil {
			r.log.Debug("say why a job is not run", zap.Error(err))
		}
	}
	_ = msg.NakWithDelay(refusedDelay)
}

// recheck looks for the record of the end of job id, which this worker
// may have missed (it was reconnecting), and ends the job if it is there.
func (r *workerRun) recheck(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, firstAttempt)
	defer cancel()
	if _, err := r.results.GetLastMsgForSubject(ctx, r.cfg.cancelSubject(id)); err == nil {
		r.end(id)
	}
}

func (r *workerRun) handle(ctx context.Context, msg natsjs.Msg) {
	attempt, seq := uint64(1), uint64(0)
	if md, err := msg.Metadata(); err == nil {
		attempt, seq = md.NumDelivered, md.Sequence.Stream
	}
	if len(r.cfg.JobKey) > 0 && !signedBy(r.cfg.JobKey, msg.Subject(), msg.Headers(), msg.Data()) {
		// Not the Manager's: a program posing as the server, or a Manager
		// without this worker's key. Handed back, it fails at the
		// delivery limit; run here, it would run anyone's command.
		r.log.Error("job not run: it is not signed with this worker's key (is the server laboro's, and this worker's token from it?)",
			zap.String("subject", msg.Subject()), zap.Uint64("attempt", attempt))
		r.refuse(msg, reasonUnsigned)
		return
	}
	var wj wireJob
	if err := json.Unmarshal(msg.Data(), &wj); err != nil || validID(wj.ID) != nil {
		if id := msg.Headers().Get(hdrJob); validID(id) == nil {
			// A job a Manager waits for: it fails at its delivery limit,
			// saying why, rather than wait forever.
			r.log.Error("job not run: this worker cannot read it", zap.Error(err), zap.String("job", id))
			r.refuse(msg, reasonUndecodable)
			return
		}
		r.log.Error("undecodable message in the jobs stream dropped: it names no job", zap.Error(err),
			zap.String("subject", msg.Subject()))
		msg.Term()
		return
	}
	log := r.log.With(zap.String("job", wj.ID), zap.Uint64("attempt", attempt))
	t := r.take(wj.ID, msg.Reply())
	if t == nil {
		log.Debug("job not run: this worker has it already (running, or its result on the way)")
		return
	}
	nudge(r.took) // a heartbeat saying the delivery
	// The job stays this worker's (delivered again meanwhile, it is not
	// run again here) until its end is delivered.
	delivering := false
	defer func() {
		if !delivering {
			r.release(wj.ID)
		}
	}()
	deliver := func(f func()) {
		delivering = true
		r.finishing.Go(func() {
			defer r.release(wj.ID)
			f()
		})
	}
	over, err := r.over(ctx, t, wj.ID, seq, attempt > 1)
	switch {
	case ctx.Err() != nil:
		r.handBack(msg, log)
		return
	case err != nil:
		log.Warn("could not tell whether the job ended; running it", zap.Error(err))
	case over:
		log.Debug("job not run: its run ended")
		deliver(func() { r.settle(ctx, msg, log) })
		return
	}
	job := wj.job() // its Timeout is the RunTimeout
	if d, ok := wj.deadline(); ok {
		left := time.Until(d)
		if job.Timeout <= 0 || left < job.Timeout {
			job.Timeout = left
		}
		if left <= 0 {
			log.Info("job not run: past its deadline")
			res := laboro.Result{ID: wj.ID, Status: laboro.StatusTimedOut, ExitCode: -1, Err: laboro.ErrTimeout}
			deliver(func() { r.finish(ctx, msg, log, wj.ID, attempt, res) })
			return
		}
	}
	h, err := r.ex.Submit(ctx, job)
	if errors.Is(err, laboro.ErrInvalidJob) {
		// From a Manager that does not check it (an older one): run
		// again, elsewhere, it would fail the same way.
		log.Error("job not run: it cannot run", zap.Error(err))
		res := laboro.Result{ID: wj.ID, Status: laboro.StatusFailed, ExitCode: -1, Err: err}
		deliver(func() { r.finish(ctx, msg, log, wj.ID, attempt, res) })
		return
	}
	if err != nil {
		log.Debug("job not run", zap.Error(err)) // the worker stops
		r.handBack(msg, log)
		return
	}
	if !r.queued(t) {
		r.ex.Cancel(wj.ID)
	}
	tick := time.NewTicker(r.cfg.AckWait / 3)
	defer tick.Stop()
wait:
	for {
		select {
		case <-h.Done():
			break wait
		case <-tick.C:
			if err := msg.InProgress(); err != nil && r.js.Conn().IsConnected() {
				log.Warn("in-progress acknowledgement", zap.Error(err))
			}
			r.recheck(ctx, wj.ID)
		}
	}
	res, _ := h.Result()
	if ctx.Err() != nil {
		res.Output.Close()
		log.Info("job handed back for another worker: this one stops", zap.Stringer("status", res.Status))
		r.handBack(msg, log)
		return
	}
	if r.ended(t) {
		res.Output.Close()
		log.Info("job cancelled: its run ended", zap.Stringer("status", res.Status))
		deliver(func() { r.settle(ctx, msg, log) })
		return
	}
	// The job finished: its result is published and the job acknowledged
	// while this loop fetches the next one, even if the worker is told to
	// stop meanwhile (Run waits for it).
	deliver(func() {
		defer res.Output.Close()
		r.finish(ctx, msg, log, wj.ID, attempt, res)
	})
}

// handBack gives a job this worker will not finish back to the server (a
// negative acknowledgement), for another worker to take at once rather
// than after AckWait, and waits (at most attemptTimeout) for the server to
// say it took it. The server keeps a plain negative acknowledgement in
// memory alone, and takes acknowledgements in turn, after the connection
// has read them: a server that stops meanwhile (serve's own, as serve
// stops) would forget it, and after its restart the job would wait
// AckWait. One with a delay (of a nanosecond) is stored with the
// consumer's state, as an expired delivery.
func (r *workerRun) handBack(msg natsjs.Msg, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	if _, err := r.js.Conn().RequestWithContext(ctx, msg.Reply(), nakStored); err != nil {
		log.Debug("handing the job back", zap.Error(err))
	}
}

// nakStored is a negative acknowledgement the server stores (see handBack).
var nakStored = []byte(`-NAK {"delay":1}`)

// settle acknowledges a job whose Run ended, without a result: the
// record of its end is its outcome.
func (r *workerRun) settle(ctx context.Context, msg natsjs.Msg, log *zap.Logger) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := ack(actx, r.js.Conn(), msg); err != nil {
		log.Debug("acknowledging a job that ended", zap.Error(err)) // purged already
	}
}

// finish publishes a finished job's result and then acknowledges the job,
// keeping it ours (in progress) while the server is slow to answer. It
// tries for as long as the worker runs, however long the server is out of
// reach (a job run again would cost its whole run), and for publishTimeout
// more once ctx ends.
func (r *workerRun) finish(ctx context.Context, msg natsjs.Msg, log *zap.Logger, id string, attempt uint64, res laboro.Result) {
	pubCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	grace, ticking := publishTimeout, make(chan struct{})
	defer func() { cancel(); <-ticking }()
	go func() {
		defer close(ticking)
		tick := time.NewTicker(r.cfg.AckWait / 3)
		defer tick.Stop()
		stopping := ctx.Done()
		var late <-chan time.Time
		for {
			select {
			case <-pubCtx.Done():
				return
			case <-stopping:
				stopping, late = nil, time.After(grace)
			case <-late:
				cancel()
				return
			case <-tick.C:
				msg.InProgress()
			}
		}
	}()
	waited := false
	err := r.publish(pubCtx, id, msg.Headers().Get(hdrSum), attempt, res, func() {
		if !waited {
			log.Info("the job's result waits for the server: it goes once the server is back, the job staying this worker's")
			waited = true
		}
	})
	if err != nil {
		log.Warn("publishing the result; the job is handed back, to run again", zap.Error(err))
		r.handBack(msg, log)
		return
	}
	if waited {
		log.Info("the job's result went to the server")
	}
	if err := ack(pubCtx, r.js.Conn(), msg); err != nil {
		log.Warn("acknowledging the job; it may run again", zap.Error(err))
	}
	log.Debug("job done", zap.Stringer("status", res.Status))
}

// publish sends res, its output in chunks, to the RESULTS stream; sum is
// what the job runs, as its message says (none from an older Manager). It
// calls again before each attempt at a chunk after its first.
func (r *workerRun) publish(ctx context.Context, id, sum string, attempt uint64, res laboro.Result, again func()) error {
	var src io.Reader
	var size int64
	if res.Output != nil {
		f, err := res.Output.Open()
		if err != nil {
			return err
		}
		defer f.Close()
		src, size = f, res.Output.Size()
		if size > r.cfg.MaxOutput {
			// Only the first MaxOutput bytes are stored, and the result
			// says so: a job's output must not fill the stream.
			src, size = io.LimitReader(f, r.cfg.MaxOutput), r.cfg.MaxOutput
			note := fmt.Errorf("the output of %d bytes is over the limit of %d (Config.MaxOutput): only its first %d bytes are kept",
				res.Output.Size(), r.cfg.MaxOutput, r.cfg.MaxOutput)
			if res.Status == laboro.StatusSucceeded {
				res.Status, res.ExitCode = laboro.StatusFailed, 1
			}
			res.Err = errors.Join(res.Err, note)
		}
	}
	chunks := int((size + int64(r.cfg.ChunkSize) - 1) / int64(r.cfg.ChunkSize))
	if res.Output != nil && chunks == 0 {
		chunks = 1 // an empty output
	}
	buf := make([]byte, min(int64(r.cfg.ChunkSize), max(size, 1)))
	for i := 0; i < max(chunks, 1); i++ {
		msg := nats.NewMsg(r.cfg.resultsSubject(id))
		setResultHeaders(msg.Header, id, attempt, res)
		if sum != "" {
			msg.Header.Set(hdrSum, sum)
		}
		msg.Header.Set(hdrChunk, strconv.Itoa(i))
		msg.Header.Set(hdrChunks, strconv.Itoa(chunks))
		if src != nil {
			n, err := io.ReadFull(src, buf)
			if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				return err
			}
			msg.Data = buf[:n]
		}
		msgID := id + "." + strconv.FormatUint(attempt, 10) + "." + strconv.Itoa(i)
		tries := 0
		prove := func(ctx context.Context) error {
			if tries++; tries > 1 {
				again()
			}
			return r.prove(ctx)
		}
		if _, err := publishProven(ctx, r.js, msg, msgID, prove); err != nil {
			return err
		}
	}
	return nil
}

func setResultHeaders(h nats.Header, id string, attempt uint64, res laboro.Result) {
	h.Set(hdrJob, id)
	h.Set(hdrAttempt, strconv.FormatUint(attempt, 10))
	h.Set(hdrStatus, strconv.Itoa(int(res.Status)))
	h.Set(hdrExit, strconv.Itoa(res.ExitCode))
	if res.Err != nil {
		h.Set(hdrError, headerText(res.Err.Error()))
	}
	if res.PID != 0 {
		h.Set(hdrPID, strconv.Itoa(res.PID))
	}
	if !res.Started.IsZero() {
		h.Set(hdrStarted, res.Started.Format(time.RFC3339Nano))
		h.Set(hdrEnded, res.Ended.Format(time.RFC3339Nano))
	}
	if len(res.Stderr) > 0 {
		h.Set(hdrStderr, base64.StdEncoding.EncodeToString(res.Stderr))
	}
}

// ack acknowledges msg and waits at most attemptTimeout for the server to
// confirm it, once the connection is up. An acknowledgement that is lost
// (the server restarted meanwhile) is not made again: the job is then
// redelivered, and the worker that gets it finds its result stored.
func ack(ctx context.Context, nc *nats.Conn, msg natsjs.Msg) error {
	pause := pauses(nc) // ends as the connection is back
	for nc.IsReconnecting() {
		if err := pause.Wait(ctx); err != nil {
			return err
		}
	}
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	return msg.DoubleAck(actx)
}
