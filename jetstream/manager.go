package jetstream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Manager is the manager side: a laboro.Runner whose Run publishes a job to
// the JOBS stream and waits for its result on the RESULTS stream. A
// Manager restarted on the same streams returns a finished job's stored
// result at once, without running it again, and does not publish twice a
// job re-submitted (same id) within DuplicateWindow. A job is known by its
// id: a Run of an id that the streams hold for another job (another
// command, script, directory or environment: an Executor's job_1 when the
// program runs again on the same streams) fails at once with an error
// matching laboro.ErrDuplicateID, rather than get the other's outcome;
// give each job an id of its own.
//
// A Run whose context ends first (Executor.Cancel, Job.Timeout, the
// Executor's Close) returns at once with the status laboro.Interruption
// gives, and the job is ended in the streams: its worker kills it, a worker
// that has not taken it never runs it, and the end is the job's stored
// outcome (a Run of the same id returns it at once).
//
// A Manager is safe for concurrent use. Close leaves the jobs of the Runs
// in progress in the streams, for the next Manager: those Runs end
// StatusKilled at once, but their jobs go on. So a program that stops
// without ending its jobs closes its Manager before its Executor, and one
// that kills them closes its Executor first. After Close, Run returns a
// failed result matching laboro.ErrClosed.
type Manager struct {
	nc      *nats.Conn
	js      natsjs.JetStream
	cfg     Config
	log     *zap.Logger
	jobs    natsjs.Stream
	results natsjs.Stream

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	sub    *nats.Subscription
	delSub *nats.Subscription // deletions of the streams and consumer
	adv    chan *nats.Msg
	done   chan struct{} // closed when the advisory goroutine has returned
	// The workers' refusals (see Config.refusedSubject), on a channel of
	// their own (a flood of them drops refusals, never an advisory), and
	// the last heard for each job, kept by the advisory goroutine.
	refSub  *nats.Subscription
	refused chan *nats.Msg
	lastRef map[string]string
	// proveSub answers the workers' challenges (Config.ProveServer), with
	// a JobKey.
	proveSub *nats.Subscription
	once     sync.Once

	// ending publishes the ends of interrupted Runs (see record); Close
	// waits for it for a while, then ends endCtx.
	ending  sync.WaitGroup
	endCtx  context.Context
	endStop context.CancelFunc

	// One ordered consumer reads every new result and record of an end,
	// and hands it to the Run waiting for it. feed is nil while the
	// RESULTS stream is being made again (see deleted); newFeed wakes
	// dispatch when it is set.
	feed     natsjs.MessagesContext
	newFeed  chan struct{}
	feedDone chan struct{} // closed when dispatch has returned
	mu       sync.Mutex
	waiting  map[string]*waiter // by job id
	closed   bool               // Close began: Runs that end leave their jobs
	// lost is closed when a stream or the workers' consumer was deleted
	// (by hand: laboro's own tokens may not), and replaced: the Runs
	// waiting then publish their jobs again.
	lost     chan struct{}
	problems []string // what went wrong that a user should hear of, last first
	// made is when the streams that the advisory goroutine made again
	// were made, by the server's clock, by name.
	made map[string]time.Time
	// stale is the first sequence of the JOBS stream when the last check
	// found it acknowledged (see sweep), or 0.
	stale uint64
	// lapsedFrom is where the last check saw jobs past their delivery
	// limit whose advisory nobody heard (see lapsed), or 0.
	lapsedFrom uint64
}

// maxProblems bounds the problems a Manager remembers.
const maxProblems = 16

// waiter is a Run waiting for its result.
type waiter struct {
	asm      *assembler
	result   chan laboro.Result // buffered: the first complete result
	finished bool               // a result was sent
}

var (
	_ laboro.Runner    = (*Manager)(nil)
	_ laboro.Validator = (*Manager)(nil)
)

// NewManager creates or updates the streams and the workers' durable
// consumer on nc's server, listens for max-deliveries advisories, and
// returns a Manager. Call Close to release it; nc stays the caller's. A
// request the server does not answer in time is made again until ctx
// ends; any other failure is returned at once.
func NewManager(ctx context.Context, nc *nats.Conn, cfg Config) (*Manager, error) {
	cfg = cfg.withDefaults()
	var err error
	if cfg.Dir, err = outputsIn(cfg.Dir); err != nil {
		return nil, err
	}
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	var jobs, results natsjs.Stream
	err = retryUnanswered(ctx, nc, func(ctx context.Context) (err error) {
		jobs, results, _, err = ensure(ctx, js, cfg, true)
		return err
	})
	if err != nil {
		return nil, err
	}
	m := &Manager{nc: nc, js: js, cfg: cfg, log: cfg.Logger, jobs: jobs, results: results,
		adv: make(chan *nats.Msg, 64), done: make(chan struct{}),
		refused: make(chan *nats.Msg, 64), lastRef: map[string]string{}}
	m.sub, err = nc.ChanSubscribe(cfg.advisorySubject(), m.adv)
	if err == nil {
		m.delSub, err = nc.ChanSubscribe(cfg.deletedSubject(), m.adv)
	}
	if err == nil {
		m.refSub, err = nc.ChanSubscribe(cfg.refusedSubject("*"), m.refused)
	}
	if err == nil && len(cfg.JobKey) > 0 {
		m.proveSub, err = nc.Subscribe(cfg.proveSubject(RoleWorker), m.answerChallenge)
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: advisories: %w", err)
	}
	// Be subscribed before the first job goes out. FlushWithContext
	// requires a deadline.
	flushCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(flushCtx); err != nil {
		m.unsubscribe()
		return nil, fmt.Errorf("jetstream: advisories: %w", err)
	}
	// Read what comes after the messages stored now.
	if m.feed, err = m.readResults(ctx, results.CachedInfo().State.LastSeq+1); err != nil {
		m.unsubscribe()
		return nil, fmt.Errorf("jetstream: results: %w", err)
	}
	m.waiting = map[string]*waiter{}
	m.lost = make(chan struct{})
	m.feedDone = make(chan struct{})
	m.newFeed = make(chan struct{}, 1)
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.endCtx, m.endStop = context.WithCancel(context.Background())
	go m.advisories()
	go m.dispatch()
	return m, nil
}

// Close ends the Runs in progress (StatusKilled) and leaves their jobs in
// the streams, where a new Manager finds them and their results. It waits
// up to 5 s for the ends of the Runs interrupted before it to be recorded.
// It is safe to call more than once; it returns nil.
func (m *Manager) Close() error {
	m.once.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		m.cancel()
		m.unsubscribe()
		<-m.done // no new feed after this (see deleted)
		m.mu.Lock()
		feed := m.feed
		m.mu.Unlock()
		if feed != nil {
			feed.Stop()
		}
		<-m.feedDone // dispatch without a feed ends with m.ctx
		recorded := make(chan struct{})
		go func() { m.ending.Wait(); close(recorded) }()
		grace := time.NewTimer(closeGrace)
		defer grace.Stop()
		select {
		case <-recorded:
		case <-grace.C:
			m.log.Warn("closing before the ends of interrupted jobs are recorded")
			m.endStop()
			<-recorded
		}
		m.endStop()
	})
	return nil
}

// unsubscribe ends the subscriptions to advisories.
func (m *Manager) unsubscribe() {
	for _, sub := range []*nats.Subscription{m.sub, m.delSub, m.refSub, m.proveSub} {
		if sub != nil {
			sub.Unsubscribe()
		}
	}
}

// Problems returns what went wrong in the streams that a user should hear
// of (a stream deleted by hand, and what the Manager did about it), last
// first.
func (m *Manager) Problems() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.problems)
}

// Validate refuses a job that cannot travel: its ID, when set (Submit
// assigns one otherwise), must be usable as a subject token, and it needs a
// Command, Args or Script (no Func, no Stdin).
func (m *Manager) Validate(job laboro.Job) error { return checkJob(job) }

// Run publishes job, unless its outcome is already stored or it is still
// in the JOBS stream, and waits for its first complete result. The job
// travels with the deadline of ctx, if any (a Job.Timeout that the
// Executor applied): a worker does not start it past that deadline, and
// kills it there. A JobOptions in job.Payload travels with it too. When ctx ends first, Run returns at once with the status
// laboro.Interruption gives, and the job is ended in the streams (see
// Manager); when Close ends it, its job stays in the streams.
//
// The result's Started and Ended are its worker's; a result no worker
// timed (a Run that ctx ended first, a job refused or failed here, a
// stored end) is timed by Run itself: from its call, when the Executor
// started the job, to its return.
func (m *Manager) Run(ctx context.Context, job laboro.Job) laboro.Result {
	started := time.Now()
	res := m.run(ctx, job)
	// The job reached its runner: its result says when, as a process's
	// does, also when it was cancelled before a worker said how it ran.
	if res.Started.IsZero() {
		res.Started = started
	}
	if res.Ended.IsZero() {
		res.Ended = time.Now()
	}
	return res
}

func (m *Manager) run(ctx context.Context, job laboro.Job) laboro.Result {
	fail := func(err error) laboro.Result {
		return laboro.Result{ID: job.ID, Status: laboro.StatusFailed, ExitCode: -1, Err: err}
	}
	if err := errors.Join(validID(job.ID), m.Validate(job)); err != nil {
		return fail(fmt.Errorf("%w: %w", laboro.ErrInvalidJob, err))
	}
	if m.ctx.Err() != nil {
		return fail(laboro.ErrClosed)
	}
	sum := jobSum(job)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(m.ctx, func() { cancel(laboro.ErrKilled) })
	defer stop()

	w := &waiter{asm: &assembler{dir: m.cfg.Dir}, result: make(chan laboro.Result, 1)}
	m.mu.Lock()
	if m.waiting[job.ID] != nil {
		m.mu.Unlock()
		return fail(fmt.Errorf("%w: %q is already running", laboro.ErrDuplicateID, job.ID))
	}
	m.waiting[job.ID] = w
	lost := m.lost
	m.mu.Unlock()
	defer m.forget(job.ID, w)

	// From here on dispatch hands over any new result. An outcome stored
	// before is read from the stream instead, and a job published before
	// (by a Manager that was stopped) and still waiting for, or running on,
	// a worker is waited for: neither is published again. The record of
	// an end is looked for first, then the JOBS stream: a worker stores a
	// result before it acknowledges the job, so a job missing there has its
	// result stored by then, or was never published.
	// (The record of an end is looked for at the same time as the rest:
	// one exchange's wait instead of two.)
	type found struct {
		msg *natsjs.RawStreamMsg
		err error
	}
	endLookup := make(chan found, 1)
	go func() {
		msg, err := lookup(ctx, m.nc, m.results, m.cfg.cancelSubject(job.ID))
		endLookup <- found{msg, err}
	}()
	queued, err := lookup(ctx, m.nc, m.jobs, m.cfg.jobsSubject(job.ID))
	var stored *natsjs.RawStreamMsg
	if err == nil {
		stored, err = lookup(ctx, m.nc, m.results, m.cfg.resultsSubject(job.ID))
		if err != nil {
			err = fmt.Errorf("jetstream: results of %s: %w", job.ID, err)
		}
	} else {
		err = fmt.Errorf("jetstream: job %s in the stream: %w", job.ID, err)
	}
	ended := <-endLookup
	// What the streams hold under this id must be this job's: an id that
	// comes again with another job (an Executor's job_1 after the
	// program's restart) is refused, not given the other's outcome.
	for _, found := range []*natsjs.RawStreamMsg{ended.msg, queued, stored} {
		if found != nil && !sameJob(found.Header, sum) {
			return fail(fmt.Errorf("%w: %q was used by another job, whose run the streams keep: give each job an id of its own",
				laboro.ErrDuplicateID, job.ID))
		}
	}
	switch {
	case ended.err != nil:
		return m.interrupted(ctx, job, fmt.Errorf("jetstream: job %s in the stream: %w", job.ID, ended.err))
	case ended.msg != nil:
		res := decodeResult(ended.msg.Header, nil)
		res.ID = job.ID
		return res
	}
	switch {
	case err != nil:
		return m.interrupted(ctx, job, err)
	case stored != nil:
		m.forget(job.ID, w)
		return m.stored(ctx, job)
	case queued != nil:
		m.log.Debug("job already in the stream", zap.String("job", job.ID))
	default:
		if err := m.publish(ctx, job, sum); err != nil {
			return m.interrupted(ctx, job, err)
		}
	}
	for {
		select {
		case res := <-w.result:
			res.ID = job.ID
			return res
		case <-ctx.Done():
			return m.interrupted(ctx, job, nil)
		case <-lost:
			// The job may have gone with a deleted stream: published again,
			// it runs (once: a copy still in the stream is the same
			// message), or its result, if stored meanwhile, ends the wait.
			m.mu.Lock()
			lost = m.lost
			m.mu.Unlock()
			if err := m.publish(ctx, job, sum); err != nil {
				return m.interrupted(ctx, job, err)
			}
		}
	}
}

// forget takes w out of the waiting Runs and drops what it holds: partial
// attempts, and a result that came too late.
func (m *Manager) forget(id string, w *waiter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.waiting[id] == w {
		delete(m.waiting, id)
	}
	w.asm.discard()
	select {
	case res := <-w.result:
		res.Output.Close()
	default:
	}
	w.finished = true
}

// dispatch hands each new result message, and each record of an end, to
// the Run waiting for it.
func (m *Manager) dispatch() {
	defer close(m.feedDone)
	pause := pauses(m.nc)
	for {
		m.mu.Lock()
		feed := m.feed
		m.mu.Unlock()
		if feed == nil { // the RESULTS stream is being made again
			select {
			case <-m.newFeed:
				continue
			case <-m.ctx.Done():
				return
			}
		}
		msg, err := feed.Next()
		if err != nil {
			m.mu.Lock()
			replaced := m.feed != feed
			m.mu.Unlock()
			if replaced { // the RESULTS stream was made again
				continue
			}
			if errors.Is(err, natsjs.ErrMsgIteratorClosed) || m.nc.IsClosed() {
				return
			}
			m.log.Warn("reading results", zap.Error(err))
			if pause.Wait(m.ctx) != nil { // do not spin on a lasting error
				return
			}
			continue
		}
		pause.Reset()
		id := msg.Headers().Get(hdrJob)
		m.mu.Lock()
		if w := m.waiting[id]; w != nil && !w.finished {
			if msg.Subject() == m.cfg.cancelSubject(id) {
				// Ended by someone else (the Service, at a user's request).
				w.asm.discard()
				w.finished = true
				w.result <- decodeResult(msg.Headers(), nil)
			} else {
				res, ok, err := w.asm.add(msg.Headers(), msg.Data())
				switch {
				case err != nil:
					m.log.Warn("bad result message dropped", zap.String("job", id), zap.Error(err))
				case ok:
					w.finished = true
					w.result <- res
				}
			}
		}
		m.mu.Unlock()
	}
}

// stored reads the job's result that is already in the RESULTS stream.
func (m *Manager) stored(ctx context.Context, job laboro.Job) laboro.Result {
	res, err := readResult(ctx, m.js, m.results, m.cfg, job.ID)
	if err != nil {
		return m.interrupted(ctx, job, err)
	}
	return res
}

// readResult reads job id's outcome from the RESULTS stream, waiting for
// one to be stored: the record of its Run's end if there is one (see
// record), else its first complete result. Its Output, if any, is the
// caller's.
func readResult(ctx context.Context, js natsjs.JetStream, results natsjs.Stream, cfg Config, id string) (laboro.Result, error) {
	fail := func(err error) (laboro.Result, error) {
		return laboro.Result{}, fmt.Errorf("jetstream: results of %s: %w", id, err)
	}
	// ended returns the record of the end, if there is one.
	ended := func() (laboro.Result, bool, error) {
		msg, err := lookup(ctx, js.Conn(), results, cfg.cancelSubject(id))
		if msg == nil || err != nil {
			return laboro.Result{}, false, err
		}
		res := decodeResult(msg.Header, nil)
		res.ID = id
		return res, true, nil
	}
	if res, ok, err := ended(); ok || err != nil {
		if err != nil {
			return fail(err)
		}
		return res, nil
	}
	var cons natsjs.Consumer
	err := retry(ctx, js.Conn(), func(ctx context.Context) (err error) {
		cons, err = js.OrderedConsumer(ctx, cfg.resultsStream(), natsjs.OrderedConsumerConfig{
			FilterSubjects: []string{cfg.resultsSubject(id), cfg.cancelSubject(id)},
			DeliverPolicy:  natsjs.DeliverAllPolicy,
		})
		return err
	})
	if err != nil {
		return fail(err)
	}
	it, err := cons.Messages(natsjs.PullHeartbeat(feedHeartbeat))
	if err != nil {
		return fail(err)
	}
	defer it.Stop()
	asm := &assembler{dir: cfg.Dir}
	defer asm.discard()
	pause := pauses(js.Conn())
	for {
		msg, err := it.Next(natsjs.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, natsjs.ErrMsgIteratorClosed) || js.Conn().IsClosed() {
				return fail(err)
			}
			cfg.Logger.Warn("reading results", zap.String("job", id), zap.Error(err))
			pause.Wait(ctx) // do not spin on a lasting error
			continue
		}
		pause.Reset()
		if msg.Subject() == cfg.cancelSubject(id) {
			res := decodeResult(msg.Headers(), nil)
			res.ID = id
			return res, nil
		}
		res, ok, err := asm.add(msg.Headers(), msg.Data())
		if err != nil {
			cfg.Logger.Warn("bad result message dropped", zap.String("job", id), zap.Error(err))
			continue
		}
		if !ok {
			continue
		}
		// A record stored after this result still wins: the Run ended
		// before it received the result.
		if rec, ok, err := ended(); ok || err != nil {
			res.Output.Close()
			if err != nil {
				return fail(err)
			}
			return rec, nil
		}
		res.ID = id
		return res, nil
	}
}

// interrupted is Run's result when ctx ended, or else a failure with err.
// A Run whose ctx ended, but not by Close, has its job ended in the
// streams, in the background: Run returns at once.
func (m *Manager) interrupted(ctx context.Context, job laboro.Job, err error) laboro.Result {
	if ctx.Err() == nil {
		m.log.Warn("job failed in the manager", zap.String("job", job.ID), zap.Error(err))
		return laboro.Result{ID: job.ID, Status: laboro.StatusFailed, ExitCode: -1, Err: err}
	}
	st, cause := laboro.Interruption(ctx)
	m.mu.Lock()
	closing := m.closed
	if !closing {
		m.ending.Add(1)
	}
	m.mu.Unlock()
	if closing {
		m.log.Debug("job left in the streams for the next manager", zap.String("job", job.ID))
	} else {
		go func() {
			defer m.ending.Done()
			m.end(job.ID, jobSum(job), st)
		}()
	}
	return laboro.Result{ID: job.ID, Status: st, ExitCode: -1, Err: cause}
}

// end records the end of job id's Run with status st (see record); sum is
// what the job runs.
func (m *Manager) end(id, sum string, st laboro.Status) {
	ctx, cancel := context.WithTimeout(m.endCtx, endTimeout)
	defer cancel()
	if err := record(ctx, m.js, m.jobs, m.cfg, id, sum, st); err != nil {
		m.log.Warn("the job's worker may go on running it", zap.String("job", id), zap.Error(err))
		return
	}
	m.log.Debug("job ended", zap.String("job", id), zap.Stringer("status", st))
}

func (m *Manager) publish(ctx context.Context, job laboro.Job, sum string) error {
	wj := toWire(job)
	// The Executor applies Job.Timeout on this side, as ctx's deadline: the
	// worker gets that deadline, not the timeout again, and as a timeout of
	// its own the RunTimeout, if any.
	wj.TimeoutNS = 0
	if o, ok := job.Payload.(JobOptions); ok {
		wj.TimeoutNS = int64(max(o.RunTimeout, 0))
	}
	if d, ok := ctx.Deadline(); ok {
		wj.DeadlineNS = d.UnixNano()
	}
	data, err := json.Marshal(wj)
	if err != nil {
		return fmt.Errorf("jetstream: encode job %s: %w", job.ID, err)
	}
	msg := nats.NewMsg(m.cfg.jobsSubject(job.ID))
	msg.Header.Set(hdrJob, job.ID)
	msg.Header.Set(hdrSum, sum)
	if len(m.cfg.JobKey) > 0 {
		msg.Header.Set(hdrSigned, jobMAC(m.cfg.JobKey, msg.Subject, data))
	}
	msg.Data = data
	ack, err := publish(ctx, m.js, msg, job.ID)
	if err != nil {
		return fmt.Errorf("jetstream: publish job %s: %w", job.ID, err)
	}
	m.log.Debug("job published", zap.String("job", job.ID), zap.Uint64("seq", ack.Sequence),
		zap.Bool("duplicate", ack.Duplicate))
	return nil
}

// advisories turns each max-deliveries advisory into a failed result.
func (m *Manager) advisories() {
	defer close(m.done)
	check := time.NewTicker(streamCheck)
	defer check.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-check.C:
			m.checkStreams()
		case msg := <-m.refused:
			m.heardRefusal(msg)
		case msg := <-m.adv:
			if msg.Sub == m.delSub {
				if m.cfg.deletedOurs(msg.Subject) {
					m.deleted(msg)
				}
			} else {
				m.maxDelivered(msg)
			}
		}
	}
}

// streamCheck is how often the Manager looks whether its streams are
// there: the server's advisory of a deletion is what it acts on, and this
// is in case it did not come (it is sent once, to whoever listens then).
const streamCheck = 5 * time.Second

// checkStreams handles a stream found missing as its deletion's advisory.
func (m *Manager) checkStreams() {
	for _, name := range []string{m.cfg.jobsStream(), m.cfg.resultsStream()} {
		ctx, cancel := context.WithTimeout(m.ctx, attemptTimeout)
		s, err := m.js.Stream(ctx, name)
		cancel()
		if err == nil && name == m.cfg.jobsStream() {
			m.sweep(s)
		}
		if !errors.Is(err, natsjs.ErrStreamNotFound) {
			continue
		}
		m.log.Warn("stream missing, and no advisory of its deletion heard", zap.String("stream", name))
		data, _ := json.Marshal(map[string]any{"timestamp": time.Now(), "stream": name})
		m.deleted(&nats.Msg{Data: data})
	}
}

// sweep removes from the JOBS stream the jobs that the workers' consumer
// has acknowledged, which a work queue removes at once: after a restart,
// the server was seen to keep one whose acknowledgement it had kept, and it
// stayed forever, never delivered again, counted as queued. A worker
// acknowledges a job after its result or the record of its end is stored,
// so no job is lost.
func (m *Manager) sweep(jobs natsjs.Stream) {
	st := jobs.CachedInfo().State
	if st.Msgs == 0 {
		m.stale, m.lapsedFrom = 0, 0
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, attemptTimeout)
	defer cancel()
	cons, err := jobs.Consumer(ctx, consumerName)
	if err != nil {
		return // made again by the workers when missing
	}
	m.lapsed(jobs, cons)
	floor := cons.CachedInfo().AckFloor.Stream
	if st.FirstSeq > floor {
		m.stale = 0
		return
	}
	if m.stale != st.FirstSeq {
		// Seen once: it may be on its way out. Seen at the next check
		// still, it stays.
		m.stale = st.FirstSeq
		return
	}
	m.stale = 0
	if err := jobs.Purge(ctx, natsjs.WithPurgeSequence(floor+1)); err != nil {
		m.log.Warn("removing acknowledged jobs from the work queue", zap.Error(err))
		return
	}
	m.log.Warn("removed from the work queue the jobs the server kept after their acknowledgement",
		zap.String("stream", jobs.CachedInfo().Config.Name), zap.Uint64("from", st.FirstSeq), zap.Uint64("to", floor))
}

// deleted handles the deletion of a stream or of the workers' consumer,
// which laboro's tokens do not allow but a NATS user of the account may
// do: it says so loudly, makes them again, reads the results from the new
// RESULTS stream, and has the Runs in progress publish their jobs again,
// which may have been lost.
func (m *Manager) deleted(msg *nats.Msg) {
	var adv struct {
		Time     time.Time `json:"timestamp"`
		Stream   string    `json:"stream"`
		Consumer string    `json:"consumer"`
	}
	if err := json.Unmarshal(msg.Data, &adv); err != nil {
		m.log.Warn("bad advisory", zap.Error(err))
		return
	}
	if adv.Consumer != "" {
		// The jobs stay in the stream; the workers make their consumer
		// again when they miss it (and so does this Manager, below, when
		// the stream itself went).
		m.log.Error("the workers' consumer was deleted by hand; the workers make it again", zap.String("stream", adv.Stream))
		m.problem(fmt.Sprintf("%s: the workers' consumer of %s deleted by hand; the workers make it again",
			adv.Time.UTC().Format(time.RFC3339), adv.Stream))
		return
	}
	if made, ok := m.made[adv.Stream]; ok && adv.Time.Before(made) {
		return // made again since, and the jobs in flight published again
	}
	m.mu.Lock()
	inFlight := len(m.waiting)
	m.mu.Unlock()
	m.log.Error("stream deleted by hand: making it again, and publishing again the jobs in flight",
		zap.String("stream", adv.Stream), zap.Int("jobs", inFlight))
	results := adv.Stream == m.cfg.resultsStream()
	if results {
		// The feed reads a stream that is gone, and its consumer tries to
		// make itself again there, from where it was, which would skip the
		// new stream's first results: stop it now. Stop waits for the
		// consumer's attempt in progress (its first retry comes after a
		// second, as the remaking below) and dispatch waits for the new
		// feed.
		m.mu.Lock()
		old := m.feed
		m.feed = nil
		m.mu.Unlock()
		if old != nil {
			old.Stop()
		}
	}
	if afterDeletion(m.ctx) != nil {
		return
	}
	pause := pauses(m.nc)
	for {
		var jobs, results natsjs.Stream
		err := retry(m.ctx, m.nc, func(ctx context.Context) (err error) {
			jobs, results, _, err = ensure(ctx, m.js, m.cfg, true)
			return err
		})
		if err == nil {
			m.made = map[string]time.Time{
				m.cfg.jobsStream():    jobs.CachedInfo().Created,
				m.cfg.resultsStream(): results.CachedInfo().Created,
			}
			break
		}
		m.log.Warn("making the streams again", zap.Error(err))
		if pause.Wait(m.ctx) != nil {
			return
		}
	}
	m.log.Info("streams made again", zap.String("stream", adv.Stream))
	if results {
		// Read the new RESULTS stream from its start.
		pause.Reset()
		for {
			feed, err := m.readResults(m.ctx, 0)
			if err == nil {
				m.mu.Lock()
				m.feed = feed
				m.mu.Unlock()
				m.newFeed <- struct{}{} // dispatch waits for it: room for one
				break
			}
			m.log.Warn("reading the new RESULTS stream", zap.Error(err))
			if pause.Wait(m.ctx) != nil {
				return
			}
		}
	}
	m.mu.Lock()
	close(m.lost)
	m.lost = make(chan struct{})
	n := len(m.waiting)
	m.mu.Unlock()
	flight := fmt.Sprintf("%d jobs in flight were", n)
	if n == 1 {
		flight = "1 job in flight was"
	}
	m.problem(fmt.Sprintf("%s: stream %s deleted by hand, made again; %s published again (a job may run twice)",
		adv.Time.UTC().Format(time.RFC3339), adv.Stream, flight))
}

// Tail returns the output that job id, running now on a worker, has
// written from offset on: at most 64 KiB, and none when it has written
// nothing more yet. Its error matches ErrNotRunning when no worker runs the
// job. It waits a second at most for an answer, unless ctx ends sooner.
func (m *Manager) Tail(ctx context.Context, id string, offset int64) ([]byte, error) {
	return tail(ctx, m.nc, m.cfg, id, offset)
}

// readResults reads the results and records of ends in the RESULTS
// stream from sequence from on, or from its start when from is 0. It
// starts by sequence rather than with DeliverNewPolicy: an ordered consumer
// reset before its first message would start at "new" again and skip what
// came in between.
func (m *Manager) readResults(ctx context.Context, from uint64) (natsjs.MessagesContext, error) {
	cfg := natsjs.OrderedConsumerConfig{
		FilterSubjects: []string{m.cfg.resultsSubject("*"), m.cfg.cancelSubject("*")},
	}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = natsjs.DeliverByStartSequencePolicy, from
	}
	var cons natsjs.Consumer
	err := retryUnanswered(ctx, m.nc, func(ctx context.Context) (err error) {
		cons, err = m.js.OrderedConsumer(ctx, m.cfg.resultsStream(), cfg)
		return err
	})
	if err != nil {
		return nil, err
	}
	return cons.Messages(natsjs.PullHeartbeat(feedHeartbeat))
}

// problem records a problem for Problems, last first.
func (m *Manager) problem(p string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.problems = append([]string{p}, m.problems[:min(len(m.problems), maxProblems-1)]...)
}

// answerChallenge proves to a worker that this Manager holds its JobKey
// (see Config.ProveServer).
func (m *Manager) answerChallenge(msg *nats.Msg) {
	if err := answerChallenge(msg, m.cfg.JobKey); err != nil {
		m.log.Debug("answer a worker's challenge", zap.Error(err))
	}
}

// maxRefusals bounds the refusals a Manager remembers, and maxWorkerName
// the length of a refusing worker's name it keeps.
const (
	maxRefusals   = 256
	maxWorkerName = 128
)

// heardRefusal remembers why a worker did not run a job, for the job's
// failure should it reach its delivery limit.
func (m *Manager) heardRefusal(msg *nats.Msg) {
	id := strings.TrimPrefix(msg.Subject, m.cfg.refusedSubject(""))
	why, ok := refusals[msg.Header.Get(hdrReason)]
	if !ok || validID(id) != nil {
		return
	}
	worker := msg.Header.Get(hdrWorker)
	if len(worker) > maxWorkerName {
		worker = strings.ToValidUTF8(worker[:maxWorkerName], "") + "…"
	}
	if _, ok := m.lastRef[id]; !ok && len(m.lastRef) >= maxRefusals {
		for old := range m.lastRef { // any one: jobs that ran are never asked for
			delete(m.lastRef, old)
			break
		}
	}
	m.lastRef[id] = fmt.Sprintf("worker %q did not run it: %s", worker, why)
}

// refusal returns the last refusal heard for job id, and forgets it. The
// refusals a worker sent before the advisory at hand came before it on the
// connection, so they are on m.refused by now.
func (m *Manager) refusal(id string) string {
	for drained := false; !drained; {
		select {
		case msg := <-m.refused:
			m.heardRefusal(msg)
		default:
			drained = true
		}
	}
	why := m.lastRef[id]
	delete(m.lastRef, id)
	return why
}

func (m *Manager) maxDelivered(msg *nats.Msg) {
	var adv struct {
		StreamSeq  uint64 `json:"stream_seq"`
		Deliveries uint64 `json:"deliveries"`
	}
	if err := json.Unmarshal(msg.Data, &adv); err != nil {
		m.log.Warn("bad advisory", zap.Error(err))
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	raw, err := m.jobs.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		m.log.Warn("job of a max-deliveries advisory", zap.Uint64("seq", adv.StreamSeq), zap.Error(err))
		return
	}
	m.failDelivered(ctx, raw, adv.Deliveries, "")
}

// failDelivered publishes the failure of raw, a job delivered deliveries
// times without a result, and removes it from the work queue; note, if
// set, is added to its error.
func (m *Manager) failDelivered(ctx context.Context, raw *natsjs.RawStreamMsg, deliveries uint64, note string) {
	id := raw.Header.Get(hdrJob)
	if validID(id) != nil {
		// Not a Manager's (no Run waits for it): off the work queue.
		m.log.Warn("a message that names no job reached its delivery limit: deleted", zap.Uint64("seq", raw.Sequence),
			zap.String("subject", raw.Subject))
		if err := m.jobs.DeleteMsg(ctx, raw.Sequence); err != nil {
			m.log.Warn("delete a message past its delivery limit", zap.Uint64("seq", raw.Sequence), zap.Error(err))
		}
		return
	}
	res := nats.NewMsg(m.cfg.resultsSubject(id))
	res.Header.Set(hdrJob, id)
	res.Header.Set(hdrAttempt, strconv.FormatUint(deliveries, 10))
	res.Header.Set(hdrStatus, strconv.Itoa(int(laboro.StatusFailed)))
	res.Header.Set(hdrExit, "-1")
	res.Header.Set(hdrReason, reasonMaxDeliver)
	if sum := raw.Header.Get(hdrSum); sum != "" {
		res.Header.Set(hdrSum, sum)
	}
	text := fmt.Sprintf("delivered %d times", deliveries)
	if why := m.refusal(id); why != "" {
		text += "; " + why
	}
	res.Header.Set(hdrError, headerText(text+note))
	res.Header.Set(hdrChunk, "0")
	res.Header.Set(hdrChunks, "0")
	if _, err := publish(ctx, m.js, res, id+".max-deliver"); err != nil {
		m.log.Warn("publish the failure of a job past its delivery limit", zap.String("job", id), zap.Error(err))
		return
	}
	if err := m.jobs.DeleteMsg(ctx, raw.Sequence); err != nil {
		m.log.Warn("delete a job past its delivery limit", zap.String("job", id), zap.Error(err))
	}
	m.log.Info("job failed after its delivery limit", zap.String("job", id), zap.Uint64("deliveries", deliveries))
}

// maxLapsed bounds the jobs one check fails for a missed advisory.
const maxLapsed = 256

// lapsed fails the jobs that reached their delivery limit while no
// Manager listened for the advisory (it is sent once, to whoever listens
// then), which would otherwise stay in the work queue, never delivered
// again, and their Runs wait. When the workers' consumer has nothing left
// to deliver and nothing delivered that waits for its acknowledgement, a
// job it delivered that is still in the stream above its acknowledgement
// floor is such a job (or one acknowledged that the server kept, see
// sweep: its result is stored, and it is only removed). Seen so at two
// checks in a row, each fails as the advisory would have had it.
func (m *Manager) lapsed(jobs natsjs.Stream, cons natsjs.Consumer) {
	st, ci := jobs.CachedInfo().State, cons.CachedInfo()
	from := max(st.FirstSeq, ci.AckFloor.Stream+1)
	if st.Msgs == 0 || ci.NumAckPending > 0 || ci.NumPending > 0 || from > ci.Delivered.Stream {
		m.lapsedFrom = 0
		return
	}
	if m.lapsedFrom != from {
		m.lapsedFrom = from // seen once: it may be on its way
		return
	}
	m.lapsedFrom = 0
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	deliveries := uint64(max(ci.Config.MaxDeliver, 1))
	for seq, n := from, 0; seq <= ci.Delivered.Stream && n < maxLapsed; n++ {
		raw, err := jobs.GetMsg(ctx, seq, natsjs.WithGetMsgSubject(m.cfg.jobsSubject(">")))
		if err != nil || raw.Sequence > ci.Delivered.Stream {
			if err != nil && !errors.Is(err, natsjs.ErrMsgNotFound) {
				m.log.Warn("looking for jobs past their delivery limit", zap.Error(err))
			}
			return
		}
		seq = raw.Sequence + 1
		if id := raw.Header.Get(hdrJob); validID(id) == nil {
			ended, err := jobEnded(ctx, m.nc, m.results, m.cfg, id)
			if err != nil {
				continue
			}
			if ended {
				if err := jobs.DeleteMsg(ctx, raw.Sequence); err == nil {
					m.log.Warn("removed from the work queue a job the server kept after its end", zap.String("job", id))
				}
				continue
			}
		}
		m.log.Warn("a job reached its delivery limit while no Manager listened: failed now", zap.String("job", raw.Header.Get(hdrJob)))
		m.failDelivered(ctx, raw, deliveries, " (its limit was reached while no Manager listened)")
	}
}

// assembler puts a job's result back together from its chunks, per
// attempt; the first attempt complete wins.
type assembler struct {
	dir      string
	attempts map[string]*partial
}

type partial struct {
	f    *os.File
	next int
	size int64
}

// add takes one result message. It returns the result once an attempt is
// complete; its Output, if any, is the caller's.
func (a *assembler) add(h nats.Header, body []byte) (laboro.Result, bool, error) {
	attempt := h.Get(hdrAttempt)
	chunk, err1 := strconv.Atoi(h.Get(hdrChunk))
	chunks, err2 := strconv.Atoi(h.Get(hdrChunks))
	if err := errors.Join(err1, err2); err != nil || chunks < 0 || chunk < 0 || (chunks > 0 && chunk >= chunks) {
		return laboro.Result{}, false, fmt.Errorf("chunk %q of %q", h.Get(hdrChunk), h.Get(hdrChunks))
	}
	var out *laboro.Output
	if chunks > 0 {
		if a.attempts == nil {
			a.attempts = map[string]*partial{}
		}
		p := a.attempts[attempt]
		if p == nil {
			if chunk != 0 {
				return laboro.Result{}, false, fmt.Errorf("attempt %s starts at chunk %d", attempt, chunk)
			}
			f, err := os.CreateTemp(a.dir, "*.output")
			if errors.Is(err, fs.ErrNotExist) { // removed under us: made again
				if err = os.Mkdir(a.dir, 0o700); err == nil {
					f, err = os.CreateTemp(a.dir, "*.output")
				}
			}
			if err != nil {
				return laboro.Result{}, false, err
			}
			p = &partial{f: f}
			a.attempts[attempt] = p
		}
		if chunk != p.next {
			if chunk < p.next {
				return laboro.Result{}, false, nil // a chunk published again
			}
			a.drop(attempt)
			return laboro.Result{}, false, fmt.Errorf("attempt %s: chunk %d where %d was due", attempt, chunk, p.next)
		}
		if _, err := p.f.Write(body); err != nil {
			a.drop(attempt)
			return laboro.Result{}, false, err
		}
		p.next++
		p.size += int64(len(body))
		if p.next < chunks {
			return laboro.Result{}, false, nil
		}
		delete(a.attempts, attempt)
		if err := p.f.Close(); err != nil {
			os.Remove(p.f.Name())
			return laboro.Result{}, false, err
		}
		out = laboro.NewOutput(p.f.Name(), p.size)
	}
	return decodeResult(h, out), true, nil
}

func (a *assembler) drop(attempt string) {
	if p := a.attempts[attempt]; p != nil {
		p.f.Close()
		os.Remove(p.f.Name())
		delete(a.attempts, attempt)
	}
}

// discard removes the files of incomplete attempts.
func (a *assembler) discard() {
	for k := range a.attempts {
		a.drop(k)
	}
}

func decodeResult(h nats.Header, out *laboro.Output) laboro.Result {
	res := laboro.Result{Output: out, ExitCode: -1}
	st, err := strconv.Atoi(h.Get(hdrStatus))
	if err != nil || st < int(laboro.StatusSucceeded) || st > int(laboro.StatusCancelled) ||
		h.Get(hdrReason) == reasonMaxDeliver {
		st = int(laboro.StatusFailed)
	}
	res.Status = laboro.Status(st)
	if code, err := strconv.Atoi(h.Get(hdrExit)); err == nil {
		res.ExitCode = code
	}
	res.PID, _ = strconv.Atoi(h.Get(hdrPID))
	res.Started, _ = time.Parse(time.RFC3339Nano, h.Get(hdrStarted))
	res.Ended, _ = time.Parse(time.RFC3339Nano, h.Get(hdrEnded))
	if s := h.Get(hdrStderr); s != "" {
		res.Stderr, _ = base64.StdEncoding.DecodeString(s)
	}
	text := h.Get(hdrError)
	switch {
	case h.Get(hdrReason) == reasonMaxDeliver:
		res.Err = fmt.Errorf("%w (%s)", ErrMaxDeliver, text)
	case res.Status == laboro.StatusTimedOut:
		res.Err = laboro.ErrTimeout
	case res.Status == laboro.StatusKilled:
		res.Err = laboro.ErrKilled
	case res.Status == laboro.StatusCancelled:
		res.Err = laboro.ErrCancelled
	case res.Status != laboro.StatusSucceeded:
		if text == "" {
			text = res.Status.String()
		}
		res.Err = &RemoteError{Text: text}
	}
	return res
}

// RemoteError is the Err of a failed result as the worker reported it:
// the text of its error (an exit status, a command not found, …).
type RemoteError struct {
	// Text is the worker's error message.
	Text string
}

// Error implements error.
func (e *RemoteError) Error() string { return "jetstream: on the worker: " + e.Text }
