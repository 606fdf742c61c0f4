package jetstream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
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
// job re-submitted (same id) within DuplicateWindow.
//
// A Manager is safe for concurrent use. After Close, Run returns a failed
// result matching laboro.ErrClosed; Runs in progress end StatusKilled.
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
	adv    chan *nats.Msg
	done   chan struct{} // closed when the advisory goroutine has returned
	once   sync.Once

	// One ordered consumer reads every new result and hands it to the Run
	// waiting for it.
	feed     natsjs.MessagesContext
	feedDone chan struct{} // closed when dispatch has returned
	mu       sync.Mutex
	waiting  map[string]*waiter // by job id
}

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
// returns a Manager. Call Close to release it; nc stays the caller's.
func NewManager(ctx context.Context, nc *nats.Conn, cfg Config) (*Manager, error) {
	cfg = cfg.withDefaults()
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	jobs, results, _, err := ensure(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	m := &Manager{nc: nc, js: js, cfg: cfg, log: cfg.Logger, jobs: jobs, results: results,
		adv: make(chan *nats.Msg, 64), done: make(chan struct{})}
	m.sub, err = nc.ChanSubscribe(cfg.advisorySubject(), m.adv)
	if err != nil {
		return nil, fmt.Errorf("jetstream: advisories: %w", err)
	}
	// Be subscribed before the first job goes out. FlushWithContext
	// requires a deadline.
	flushCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(flushCtx); err != nil {
		m.sub.Unsubscribe()
		return nil, fmt.Errorf("jetstream: advisories: %w", err)
	}
	// Start after the results stored now, by sequence rather than with
	// DeliverNewPolicy: an ordered consumer reset before its first message
	// would start at "new" again and skip what came in between.
	cons, err := js.OrderedConsumer(ctx, cfg.resultsStream(), natsjs.OrderedConsumerConfig{
		FilterSubjects: []string{cfg.Stream + ".results.>"},
		DeliverPolicy:  natsjs.DeliverByStartSequencePolicy,
		OptStartSeq:    results.CachedInfo().State.LastSeq + 1,
	})
	if err == nil {
		m.feed, err = cons.Messages(natsjs.PullHeartbeat(feedHeartbeat))
	}
	if err != nil {
		m.sub.Unsubscribe()
		return nil, fmt.Errorf("jetstream: results: %w", err)
	}
	m.waiting = map[string]*waiter{}
	m.feedDone = make(chan struct{})
	m.ctx, m.cancel = context.WithCancel(context.Background())
	go m.advisories()
	go m.dispatch()
	return m, nil
}

// Close stops listening for advisories and ends the Runs in progress
// (StatusKilled); their jobs stay in the stream, and a new Manager finds
// their results. It is safe to call more than once; it returns nil.
func (m *Manager) Close() error {
	m.once.Do(func() {
		m.cancel()
		m.sub.Unsubscribe()
		m.feed.Stop()
		<-m.done
		<-m.feedDone
	})
	return nil
}

// Validate refuses a job that cannot travel: its ID, when set (Submit
// assigns one otherwise), must be usable as a subject token, and it needs a
// Command, Args or Script (no Func, no Stdin).
func (m *Manager) Validate(job laboro.Job) error { return checkJob(job) }

// Run publishes job, unless a result for it is already stored or it is
// still in the JOBS stream, and waits for its first complete result. The job's Timeout is enforced by the
// worker that runs it. When ctx ends first, Run returns StatusKilled (or
// StatusTimedOut for a laboro.ErrTimeout cause); the job stays in the
// stream and its result, when it comes, is stored.
func (m *Manager) Run(ctx context.Context, job laboro.Job) laboro.Result {
	fail := func(err error) laboro.Result {
		return laboro.Result{ID: job.ID, Status: laboro.StatusFailed, ExitCode: -1, Err: err}
	}
	if err := errors.Join(validID(job.ID), m.Validate(job)); err != nil {
		return fail(fmt.Errorf("%w: %w", laboro.ErrInvalidJob, err))
	}
	if m.ctx.Err() != nil {
		return fail(laboro.ErrClosed)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(m.ctx, func() { cancel(laboro.ErrKilled) })
	defer stop()

	subject := m.cfg.resultsSubject(job.ID)
	w := &waiter{asm: &assembler{dir: m.cfg.Dir}, result: make(chan laboro.Result, 1)}
	m.mu.Lock()
	if m.waiting[job.ID] != nil {
		m.mu.Unlock()
		return fail(fmt.Errorf("%w: %q is already running", laboro.ErrDuplicateID, job.ID))
	}
	m.waiting[job.ID] = w
	m.mu.Unlock()
	defer m.forget(job.ID, w)

	// From here on dispatch hands over any new result. A result stored
	// before is read from the stream instead, and a job published before
	// (by a Manager that was stopped) and still waiting for, or running on,
	// a worker is waited for: neither is published again. The JOBS stream
	// is looked at first: a worker stores a result before it acknowledges
	// the job, so a job missing there has its result stored by then, or
	// was never published.
	queued, err := lookup(ctx, m.nc, m.jobs, m.cfg.jobsSubject(job.ID))
	if err != nil {
		return m.interrupted(ctx, job, fmt.Errorf("jetstream: job %s in the stream: %w", job.ID, err))
	}
	stored, err := lookup(ctx, m.nc, m.results, subject)
	switch {
	case err != nil:
		return m.interrupted(ctx, job, fmt.Errorf("jetstream: results of %s: %w", job.ID, err))
	case stored:
		m.forget(job.ID, w)
		return m.stored(ctx, job)
	case queued:
		m.log.Debug("job already in the stream", zap.String("job", job.ID))
	default:
		if err := m.publish(ctx, job); err != nil {
			return m.interrupted(ctx, job, err)
		}
	}
	select {
	case res := <-w.result:
		res.ID = job.ID
		return res
	case <-ctx.Done():
		return m.interrupted(ctx, job, nil)
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

// dispatch hands each new result message to the Run waiting for it.
func (m *Manager) dispatch() {
	defer close(m.feedDone)
	for {
		msg, err := m.feed.Next()
		if err != nil {
			if errors.Is(err, natsjs.ErrMsgIteratorClosed) || m.nc.IsClosed() {
				return
			}
			m.log.Warn("reading results", zap.Error(err))
			select { // do not spin on a lasting error
			case <-m.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		id := msg.Headers().Get(hdrJob)
		m.mu.Lock()
		if w := m.waiting[id]; w != nil && !w.finished {
			res, ok, err := w.asm.add(msg.Headers(), msg.Data())
			switch {
			case err != nil:
				m.log.Warn("bad result message dropped", zap.String("job", id), zap.Error(err))
			case ok:
				w.finished = true
				w.result <- res
			}
		}
		m.mu.Unlock()
	}
}

// stored reads the job's result that is already in the RESULTS stream.
func (m *Manager) stored(ctx context.Context, job laboro.Job) laboro.Result {
	res, err := readResult(ctx, m.js, m.cfg, job.ID)
	if err != nil {
		return m.interrupted(ctx, job, err)
	}
	return res
}

// readResult reads the first complete result of job id from the RESULTS
// stream, waiting for one to be stored. Its Output, if any, is the
// caller's.
func readResult(ctx context.Context, js natsjs.JetStream, cfg Config, id string) (laboro.Result, error) {
	var cons natsjs.Consumer
	err := retry(ctx, js.Conn(), func(ctx context.Context) (err error) {
		cons, err = js.OrderedConsumer(ctx, cfg.resultsStream(), natsjs.OrderedConsumerConfig{
			FilterSubjects: []string{cfg.resultsSubject(id)},
			DeliverPolicy:  natsjs.DeliverAllPolicy,
		})
		return err
	})
	if err != nil {
		return laboro.Result{}, fmt.Errorf("jetstream: results of %s: %w", id, err)
	}
	it, err := cons.Messages(natsjs.PullHeartbeat(feedHeartbeat))
	if err != nil {
		return laboro.Result{}, fmt.Errorf("jetstream: results of %s: %w", id, err)
	}
	defer it.Stop()
	asm := &assembler{dir: cfg.Dir}
	defer asm.discard()
	for {
		msg, err := it.Next(natsjs.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, natsjs.ErrMsgIteratorClosed) || js.Conn().IsClosed() {
				return laboro.Result{}, fmt.Errorf("jetstream: results of %s: %w", id, err)
			}
			cfg.Logger.Warn("reading results", zap.String("job", id), zap.Error(err))
			select { // do not spin on a lasting error
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		res, ok, err := asm.add(msg.Headers(), msg.Data())
		if err != nil {
			cfg.Logger.Warn("bad result message dropped", zap.String("job", id), zap.Error(err))
			continue
		}
		if ok {
			res.ID = id
			return res, nil
		}
	}
}

// interrupted is Run's result when ctx ended, or else a failure with err.
func (m *Manager) interrupted(ctx context.Context, job laboro.Job, err error) laboro.Result {
	res := laboro.Result{ID: job.ID, Status: laboro.StatusFailed, ExitCode: -1, Err: err}
	if ctx.Err() == nil {
		m.log.Warn("job failed in the manager", zap.String("job", job.ID), zap.Error(err))
	}
	if ctx.Err() != nil {
		res.Status, res.Err = laboro.Interruption(ctx)
	}
	return res
}

func (m *Manager) publish(ctx context.Context, job laboro.Job) error {
	data, err := json.Marshal(toWire(job))
	if err != nil {
		return fmt.Errorf("jetstream: encode job %s: %w", job.ID, err)
	}
	msg := nats.NewMsg(m.cfg.jobsSubject(job.ID))
	msg.Header.Set(hdrJob, job.ID)
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
	for {
		select {
		case <-m.ctx.Done():
			return
		case msg := <-m.adv:
			m.maxDelivered(msg)
		}
	}
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
	id := raw.Header.Get(hdrJob)
	if validID(id) != nil {
		m.log.Warn("max-deliveries advisory for a message that is no job", zap.Uint64("seq", adv.StreamSeq))
		return
	}
	res := nats.NewMsg(m.cfg.resultsSubject(id))
	res.Header.Set(hdrJob, id)
	res.Header.Set(hdrAttempt, strconv.FormatUint(adv.Deliveries, 10))
	res.Header.Set(hdrStatus, strconv.Itoa(int(laboro.StatusFailed)))
	res.Header.Set(hdrExit, "-1")
	res.Header.Set(hdrReason, reasonMaxDeliver)
	res.Header.Set(hdrError, fmt.Sprintf("delivered %d times", adv.Deliveries))
	res.Header.Set(hdrChunk, "0")
	res.Header.Set(hdrChunks, "0")
	if _, err := publish(ctx, m.js, res, id+".max-deliver"); err != nil {
		m.log.Warn("publish the failure of a job past its delivery limit", zap.String("job", id), zap.Error(err))
		return
	}
	if err := m.jobs.DeleteMsg(ctx, adv.StreamSeq); err != nil {
		m.log.Warn("delete a job past its delivery limit", zap.String("job", id), zap.Error(err))
	}
	m.log.Info("job failed after its delivery limit", zap.String("job", id), zap.Uint64("deliveries", adv.Deliveries))
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
			f, err := os.CreateTemp(a.dir, "laboro-js-*.output")
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
	if err != nil || st < int(laboro.StatusSucceeded) || st > int(laboro.StatusTimedOut) ||
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
