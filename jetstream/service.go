package jetstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// DefaultServiceConcurrency is how many jobs a Service has out at once
// (published and waiting for a result) when its Concurrency is 0.
const DefaultServiceConcurrency = 256

// cancelTimeout bounds the answer to a cancel request.
const cancelTimeout = 10 * time.Second

// maxListed caps the jobs listed in one StatusReply, to stay below the
// server's payload limit.
const maxListed = 1000

// ErrServiceRunning is returned by Service.Run when another Service already
// serves the same streams.
var ErrServiceRunning = errors.New("jetstream: another service already serves these streams")

// Service is the manager side of the laboro command (`laboro serve`): it
// reads the jobs that Clients submit to the <Stream>_SUBMITTED stream, runs
// each through an Executor over a Manager (so that at most Concurrency jobs
// are out at once), answers Clients' status requests, and cancels jobs at
// their request.
//
// Everything it needs is in the streams. A Service stopped, or killed, and
// started again reads the submissions from the start: a job whose outcome
// is stored (a result, or the record of its cancel) is counted as done, one
// still in the JOBS stream is waited for without being published again,
// and the others are published. No job is lost and none is run again
// because the Service restarted. It also reads each worker's last heartbeat,
// which it keeps in the <Stream>_WORKERS stream: a worker that held jobs and
// died while no Service ran has them handed to other workers, if it is not
// heard again within seconds.
//
// Only one Service may serve a set of streams; Run refuses to start when
// another one answers.
type Service struct {
	// Conn is the connection to NATS; it stays the caller's.
	Conn *nats.Conn
	// Config must agree with the Workers' on Stream; AckWait and MaxDeliver
	// left at 0 keep the consumer's settings.
	Config Config
	// Concurrency is how many jobs are out at once; 0 means
	// DefaultServiceConcurrency. It is the level of the Service's
	// Executor, one cap across every worker of the fleet, which
	// Executor.SetConcurrency changes while jobs run (up to Concurrency).
	Concurrency int
	// Observe, if set, follows the Service's Executor as laboro.WithObserver
	// does: the jobs it hands out to the fleet, from queued to finished.
	Observe func(laboro.Event)
	// Started, if set, is given the Service's Executor once it serves,
	// for a console or a metrics collector to attach.
	Started func(*laboro.Executor)
	// History is how many of the last jobs that ended the Service's
	// Executor keeps (laboro.WithHistory), for a console to list them.
	History int

	// MaxTracked bounds the jobs whose state the Service keeps for status
	// (DefaultMaxTracked if 0): beyond it, the batches that ended are
	// forgotten, oldest first, until a tenth of the room is free again.
	// Batches that run are never forgotten. A forgotten job's state is
	// "unknown", and its id may be submitted again.
	MaxTracked int

	// KeepOutputs is how many bytes of the last finished jobs' outputs
	// the Service keeps on its disk (in Config.Dir), newest first, for a
	// console to show them whole (see History); 0 keeps none: clients read
	// outputs from the streams.
	KeepOutputs int64

	mu    sync.Mutex
	m     *Manager // while it serves
	t     *tracker // the same
	sv    *serving // the same, once its Executor is made
	fleet fleet
	kept  []*laboro.Output // oldest first
	keptN int64            // their bytes
}

// keep keeps out as KeepOutputs says, closing the oldest outputs beyond
// it.
func (s *Service) keep(out *laboro.Output) {
	if out == nil {
		return
	}
	if s.KeepOutputs <= 0 {
		out.Close()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kept = append(s.kept, out)
	s.keptN += out.Size()
	for len(s.kept) > 0 && s.keptN > s.KeepOutputs {
		s.keptN -= s.kept[0].Size()
		s.kept[0].Close()
		s.kept[0] = nil
		s.kept = s.kept[1:]
	}
}

// dropKept closes the outputs kept.
func (s *Service) dropKept() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, out := range s.kept {
		out.Close()
	}
	s.kept, s.keptN = nil, 0
}

// Tail returns the output that job id, running now on a worker, has
// written from offset on: at most 64 KiB, and none when it has written
// nothing more yet. Its error matches ErrNotRunning when no worker runs the
// job (queued, ended, or its worker out of reach). A console follows a
// running job's output with it, from the service's machine.
func (s *Service) Tail(ctx context.Context, id string, offset int64) ([]byte, error) {
	s.mu.Lock()
	m := s.m
	s.mu.Unlock()
	if m == nil {
		return nil, fmt.Errorf("%w: the service is not serving", ErrNotRunning)
	}
	return m.Tail(ctx, id, offset)
}

// Batches returns the last n batches the Service knows of, newest first:
// those still running and the finished ones, with their counts (Unread
// left 0 if the stream does not answer within a second).
func (s *Service) Batches(n int) []BatchStatus {
	s.mu.Lock()
	t, m := s.t, s.m
	s.mu.Unlock()
	if t == nil {
		return nil
	}
	list, reads := t.recentRead(n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = fillUnread(ctx, m.js, s.Config.withDefaults(), list, reads) // Unread left 0
	return list
}

// Workers returns the workers heard from lately (each says every 2 s that
// it is there), by name.
func (s *Service) Workers() []WorkerInfo { return s.fleet.list() }

// Run serves until ctx ends, then stops at once: jobs out stay in the
// streams, their results are stored, and the next Run picks them up. It
// returns nil after ctx ends, or an error if it could not start (a request
// the server does not answer in time is made again, not taken for one).
func (s *Service) Run(ctx context.Context) error {
	err := s.run(ctx)
	if ctx.Err() != nil {
		return nil // stopped while it started
	}
	return err
}

// serving is a Service while it runs.
type serving struct {
	cfg     Config
	log     *zap.Logger
	t       *tracker
	m       *Manager
	ex      *laboro.Executor
	workers natsjs.Consumer
	// read is the sequence in the SUBMITTED stream of the last
	// submission read.
	read atomic.Uint64
	// unread indexes by id, under unreadMu, the submissions not read yet
	// up to scannedTo, read for a cancel that named jobs the Service did
	// not know (see unreadIDs).
	unreadMu  sync.Mutex
	unread    map[string]uint64
	scannedTo uint64
}

func (s *Service) run(ctx context.Context) error {
	cfg := s.Config.withDefaults()
	log := cfg.Logger
	n := s.Concurrency
	if n <= 0 {
		n = DefaultServiceConcurrency
	}
	if err := retryUnanswered(ctx, s.Conn, func(ctx context.Context) error { return ensureSubmitted(ctx, s.Conn, cfg, true) }); err != nil {
		return err
	}
	if _, err := s.Conn.Request(cfg.statusSubject(), []byte("{}"), time.Second); err == nil {
		return fmt.Errorf("%w (stream %s)", ErrServiceRunning, cfg.Stream)
	}
	m, err := NewManager(ctx, s.Conn, cfg)
	if err != nil {
		return err
	}
	sv := &serving{cfg: cfg, log: log, t: newTracker(cmp.Or(s.MaxTracked, DefaultMaxTracked)), m: m}
	s.mu.Lock()
	s.m, s.t = m, sv.t
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.m, s.t, s.sv = nil, nil, nil
		s.mu.Unlock()
	}()
	var waits sync.WaitGroup // for the jobs' results
	sv.ex, err = laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(n), laboro.WithConcurrency(n),
		laboro.WithBufferSize(n), laboro.WithLogger(log), laboro.WithHistory(s.History),
		laboro.WithObserver(func(ev laboro.Event) {
			if ev.Kind == laboro.EventStarted {
				sv.t.dispatched(ev.Job.ID)
			}
			if s.Observe != nil {
				s.Observe(ev)
			}
		}))
	if err != nil {
		m.Close()
		return err
	}
	// On the way out, the Manager is closed first, which leaves the jobs
	// out in the streams for the next Run, then the Executor, which has
	// then nothing left to kill.
	defer func() {
		m.Close()
		sv.ex.Close()
		waits.Wait()
		s.dropKept()
	}()

	err = retryUnanswered(ctx, s.Conn, func(ctx context.Context) (err error) {
		sv.workers, err = m.jobs.Consumer(ctx, consumerName)
		return err
	})
	if err != nil {
		return fmt.Errorf("jetstream: consumer %s: %w", consumerName, err)
	}
	s.fleet.reset(cfg, log)
	beats, err := s.Conn.Subscribe(cfg.workersSubjects(), s.fleet.heard)
	if err != nil {
		return fmt.Errorf("jetstream: hear workers: %w", err)
	}
	defer beats.Unsubscribe()
	ackWait := sv.workers.CachedInfo().Config.AckWait
	if names, err := s.fleet.recall(ctx, m.js, cfg, ackWait); err != nil {
		log.Warn("the workers heard before this service started are unknown: the jobs of one that died since wait for their AckWait",
			zap.Duration("ackWait", ackWait), zap.Error(err))
	} else if len(names) > 0 {
		log.Info("workers heard before this service started held jobs: those not heard again have them handed back",
			zap.Strings("workers", names))
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		s.fleet.watch(watchCtx, s.Conn, log, ackWait)
	}()
	defer func() { stopWatching(); <-watching }()
	if err := s.Conn.Publish(cfg.rollSubject(), nil); err != nil {
		log.Warn("roll call of the workers", zap.Error(err))
	}
	answers := map[string]func(context.Context, *nats.Msg){
		cfg.statusSubject():    sv.answerStatus,
		cfg.cancelAPISubject(): sv.answerCancel,
	}
	if len(cfg.ClientKey) > 0 {
		// Prove to the Clients that this is laboro's service (see
		// Config.ProveServer).
		answers[cfg.proveSubject(RoleClient)] = func(_ context.Context, msg *nats.Msg) {
			if err := answerChallenge(msg, cfg.ClientKey); err != nil {
				log.Debug("answer a client's challenge", zap.Error(err))
			}
		}
	}
	for subject, answer := range answers {
		sub, err := s.Conn.Subscribe(subject, func(msg *nats.Msg) { answer(ctx, msg) })
		if err != nil {
			return fmt.Errorf("jetstream: requests on %s: %w", subject, err)
		}
		defer sub.Unsubscribe()
	}
	s.mu.Lock()
	s.sv = sv // Cancel, as a request on the cancel subject from now on
	s.mu.Unlock()

	js, err := natsjs.New(s.Conn)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	// The submissions up to this one were made before this Run: their
	// outcomes, read back from the streams, end no batch now.
	var replayTo uint64
	var cons natsjs.Consumer
	err = retryUnanswered(ctx, s.Conn, func(ctx context.Context) error {
		st, err := js.Stream(ctx, cfg.submitStream())
		if err != nil {
			return err
		}
		replayTo = st.CachedInfo().State.LastSeq
		cons, err = js.OrderedConsumer(ctx, cfg.submitStream(), natsjs.OrderedConsumerConfig{
			DeliverPolicy: natsjs.DeliverAllPolicy,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("jetstream: submissions: %w", err)
	}
	it, err := cons.Messages(natsjs.PullHeartbeat(feedHeartbeat))
	if err != nil {
		return fmt.Errorf("jetstream: submissions: %w", err)
	}
	defer it.Stop()
	stopReading := context.AfterFunc(ctx, it.Stop)
	defer stopReading()
	log.Info("serving", zap.String("stream", cfg.Stream), zap.Int("concurrency", n))
	if s.Started != nil {
		s.Started(sv.ex)
	}

	// The jobs ended (cancelled) before this Run, read at once: a job
	// submitted before is looked up on its results only, unless it is
	// one of them. The later ones are this Run's own.
	ended, err := endedJobs(ctx, s.Conn, m.results, cfg)
	if err != nil {
		return err
	}
	pause := pauses(s.Conn)
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, natsjs.ErrMsgIteratorClosed) || s.Conn.IsClosed() {
				return nil
			}
			log.Warn("reading submissions", zap.Error(err))
			pause.Wait(ctx) // do not spin on a lasting error
			continue
		}
		pause.Reset()
		var wj wireJob
		batch := strings.TrimPrefix(msg.Subject(), cfg.submitSubject(""))
		if validID(batch) == nil {
			sv.t.read(batch)
		}
		if err := json.Unmarshal(msg.Data(), &wj); err != nil || validID(wj.ID) != nil || validID(batch) != nil {
			log.Warn("undecodable submission dropped", zap.String("subject", msg.Subject()), zap.Error(err))
			continue
		}
		var when time.Time
		replayed := false
		if md, err := msg.Metadata(); err == nil {
			when, replayed = md.Timestamp, md.Sequence.Stream <= replayTo
			sv.read.Store(md.Sequence.Stream)
		}
		if !sv.t.add(wj.ID, batch, commandLine(wj), when) {
			log.Debug("job submitted again; the first submission stands", zap.String("job", wj.ID))
			continue
		}
		// A job that ended before a restart is only counted.
		var raw *natsjs.RawStreamMsg
		if ended[wj.ID] {
			raw, err = outcome(ctx, s.Conn, m.results, cfg, wj.ID)
		} else {
			raw, err = lookup(ctx, s.Conn, m.results, cfg.resultsSubject(wj.ID))
		}
		if ctx.Err() != nil {
			return nil
		}
		if err == nil && raw != nil {
			if replayed {
				sv.t.finish(wj.ID, decodeResult(raw.Header, nil)) // counted, not logged
			} else {
				sv.finish(wj.ID, decodeResult(raw.Header, nil))
			}
			continue
		}
		// The timeout of a submitted job bounds its run, not its wait for
		// a worker.
		job := wj.job()
		job.Payload, job.Timeout = JobOptions{RunTimeout: job.Timeout}, 0
		h, err := sv.ex.Submit(ctx, job) // waits while n jobs are queued
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			sv.finish(wj.ID, laboro.Result{Status: laboro.StatusFailed, ExitCode: -1, Err: err})
			continue
		}
		if sv.t.ended(wj.ID) {
			sv.ex.Cancel(wj.ID) // cancelled while Submit waited
		}
		waits.Go(func() {
			<-h.Done()
			res, _ := h.Result()
			s.keep(res.Output) // clients read outputs from the stream
			if ctx.Err() != nil {
				return // stopped by Run's end, not finished
			}
			sv.finish(wj.ID, res)
		})
	}
}

// finish records job id's result, and logs the end of its batch. (The
// outcomes read back as a Run starts are recorded alone: a batch read so
// far may look ended, and one that ended before is no news.)
func (sv *serving) finish(id string, res laboro.Result) {
	if b, last := sv.t.finish(id, res); last {
		sv.batchDone(b)
	}
}

// batchDone logs the end of batch b, whose jobs read have all ended, unless
// it has submissions not read yet (the Service reads as it has room): it
// goes on then.
func (sv *serving) batchDone(b BatchStatus) {
	reads, done := sv.t.doneReads(b.Batch)
	if !done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	batches := []BatchStatus{b}
	if fillUnread(ctx, sv.m.js, sv.cfg, batches, []uint64{reads}) == nil && batches[0].Unread > 0 {
		return
	}
	// Failed is said apart from the jobs cancelled, timed out or killed:
	// an operator who cancelled a job does not read it as a failure.
	fields := []zap.Field{zap.String("batch", b.Batch), zap.Int("jobs", b.Jobs),
		zap.Int("succeeded", b.Succeeded), zap.Int("failed", b.Failures()-b.TimedOut-b.Killed)}
	for _, n := range []struct {
		key string
		n   int
	}{{"timed_out", b.TimedOut}, {"killed", b.Killed}, {"cancelled", b.Cancelled}} {
		if n.n > 0 {
			fields = append(fields, zap.Int(n.key, n.n))
		}
	}
	sv.log.Info("batch done", fields...)
}

// ensureSubmitted creates the stream of submitted jobs, or updates it when
// update is set (the Service does; a Client, which may have the rights of
// RoleClient only, leaves it as it is).
func ensureSubmitted(ctx context.Context, nc *nats.Conn, cfg Config, update bool) error {
	js, err := natsjs.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	_, err = ensureStream(ctx, js, update, natsjs.StreamConfig{
		Name:        cfg.submitStream(),
		Description: "laboro jobs submitted to the service",
		Subjects:    []string{cfg.submitSubject(">")},
		Retention:   natsjs.LimitsPolicy,
		Storage:     natsjs.FileStorage,
		Replicas:    cfg.Replicas, // 0: the stream's
		Duplicates:  DuplicateWindow,
		// Full, it refuses what comes: a submission dropped would be a
		// job lost.
		MaxBytes: bytesLimit(cfg.SubmittedMaxBytes),
		Discard:  natsjs.DiscardNew,
	})
	if err != nil {
		return fmt.Errorf("jetstream: stream %s: %w", cfg.submitStream(), err)
	}
	return nil
}

// answerStatus replies to one status request.
func (sv *serving) answerStatus(ctx context.Context, msg *nats.Msg) {
	var req StatusRequest
	reply := StatusReply{}
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		reply.Error = "bad status request: " + err.Error()
	} else {
		var reads []uint64
		reply, reads = sv.t.statusRead(req)
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if info, err := sv.workers.Info(ictx); err == nil {
			reply.InStream = info.NumPending
			reply.OnWorkers = info.NumAckPending
		} else if ictx.Err() == nil {
			reply.Problems = append(reply.Problems, "the workers' consumer: "+err.Error())
		}
		if err := sv.countUnread(ictx, &reply, reads); err != nil && ictx.Err() == nil {
			reply.Problems = append(reply.Problems, "the stream of submissions: "+err.Error())
		}
		reply.Problems = append(reply.Problems, sv.m.Problems()...)
		cancel()
	}
	sv.respond(msg, reply)
}

// countUnread sets in reply the submissions not read yet: in all, and of each of
// its batches (see unreadOf).
func (sv *serving) countUnread(ctx context.Context, reply *StatusReply, reads []uint64) error {
	st, err := sv.m.js.Stream(ctx, sv.cfg.submitStream())
	if err != nil {
		return err
	}
	last := st.CachedInfo().State.LastSeq
	reply.Unread = last - min(sv.read.Load(), last)
	return unreadOf(ctx, st, sv.cfg, reply.Batches, reads)
}

// fillUnread is unreadOf, on the SUBMITTED stream of cfg.
func fillUnread(ctx context.Context, js natsjs.JetStream, cfg Config, batches []BatchStatus, reads []uint64) error {
	st, err := js.Stream(ctx, cfg.submitStream())
	if err != nil {
		return err
	}
	return unreadOf(ctx, st, cfg, batches, reads)
}

// unreadOf sets the Unread of each of batches, of which reads are the
// submissions read when their statuses were taken: those the stream holds
// now and were not read then (a batch whose jobs all ended is done only if
// it has none).
func unreadOf(ctx context.Context, st natsjs.Stream, cfg Config, batches []BatchStatus, reads []uint64) error {
	if len(batches) == 0 {
		return nil
	}
	counts, err := submitted(ctx, st, cfg, batches)
	if err != nil {
		return err
	}
	for i := range batches {
		if n := counts[batches[i].Batch]; n > reads[i] {
			batches[i].Unread = int(n - reads[i])
		}
	}
	return nil
}

// submitted counts the submissions the stream holds of each of batches.
func submitted(ctx context.Context, st natsjs.Stream, cfg Config, batches []BatchStatus) (map[string]uint64, error) {
	filter := cfg.submitSubject(">")
	if len(batches) == 1 {
		filter = cfg.submitSubject(batches[0].Batch)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	counts := make(map[string]uint64, len(info.State.Subjects))
	for subject, n := range info.State.Subjects {
		counts[strings.TrimPrefix(subject, cfg.submitSubject(""))] = n
	}
	return counts, nil
}

// ErrNotServing is matched by the error of Service.Cancel when the
// Service is not serving.
var ErrNotServing = errors.New("jetstream: the service is not serving")

// Cancel cancels jobs as a CancelRequest does (laboro cancel), from the
// Service's own process: a console's cancel goes through it, so that the
// cancel is recorded in the streams and the job does not run again after a
// restart, as it would if only the Service's Executor cancelled it while
// it waits there. Its error matches ErrNotServing when the Service is not
// serving, and says which jobs could not be cancelled.
func (s *Service) Cancel(ctx context.Context, ids ...string) (CancelReply, error) {
	s.mu.Lock()
	sv := s.sv
	s.mu.Unlock()
	if sv == nil {
		return CancelReply{}, ErrNotServing
	}
	reply := sv.cancelJobs(ctx, ids)
	if reply.Error != "" {
		return reply, errors.New("jetstream: " + reply.Error)
	}
	return reply, nil
}

// answerCancel answers a CancelRequest (see cancelJobs).
func (sv *serving) answerCancel(ctx context.Context, msg *nats.Msg) {
	var req CancelRequest
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		sv.respond(msg, CancelReply{Error: "bad cancel request: " + err.Error()})
		return
	}
	sv.respond(msg, sv.cancelJobs(ctx, req.IDs))
}

// cancelJobs cancels the jobs of one request that have not ended: their
// cancel is recorded (see Manager), which stops their workers, and then
// their Runs are cancelled in the Executor; a job still queued here never
// reaches the streams.
func (sv *serving) cancelJobs(ctx context.Context, ids []string) CancelReply {
	var reply CancelReply
	ctx, stop := context.WithTimeout(ctx, cancelTimeout)
	defer stop()
	// The jobs submitted that the Service has not read yet go first: the
	// record of each stored, it ends cancelled when read, and never runs.
	// Then the jobs that wait, so that the end of a running one gives none
	// of them its place.
	var failed, unknown, done []string
	var firstErr error
	cancel := func(some []string) {
		for i, err := range sv.cancelAll(ctx, some) {
			if err == nil {
				done = append(done, some[i])
				continue
			}
			failed = append(failed, some[i])
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	for _, id := range ids {
		if sv.t.state(id) == "" {
			unknown = append(unknown, id)
		}
	}
	unread, err := sv.unreadIDs(ctx, unknown)
	if err != nil {
		sv.log.Warn("cancel: read the submissions not read yet", zap.Error(err))
	}
	cancel(slices.Sorted(maps.Keys(unread)))
	for _, id := range failed {
		delete(unread, id)
	}
	for _, state := range []string{StateWaiting, StateDispatched} {
		var inState []string
		for _, id := range ids {
			if sv.t.state(id) == state {
				inState = append(inState, id)
			}
		}
		cancel(inState)
	}
	// One line a request, however many jobs it names.
	if len(done) > 0 {
		sv.log.Info("jobs cancelled", zap.Int("jobs", len(done)), zap.Strings("ids", done[:min(len(done), 10)]))
	}
	if len(failed) > 0 {
		sv.log.Warn("jobs not cancelled", zap.Int("jobs", len(failed)), zap.Strings("ids", failed[:min(len(failed), 10)]),
			zap.Error(firstErr))
	}
	reply.Jobs = sv.t.status(StatusRequest{IDs: ids}).Jobs
	for i, j := range reply.Jobs {
		if j.State == StateUnknown && unread[j.ID] {
			// Read later, it ends so.
			reply.Jobs[i].State, reply.Jobs[i].Error = laboro.StatusCancelled.String(), laboro.ErrCancelled.Error()
		}
	}
	if len(failed) > 0 {
		reply.Error = "could not cancel " + strings.Join(failed, ", ")
	}
	return reply
}

// maxUnreadIndexed bounds the submissions not read yet that a Service
// indexes to cancel them; scanBatch is how many it reads at a time.
const (
	maxUnreadIndexed = 1 << 18
	scanBatch        = 1000
)

// unreadIDs returns those of ids that wait in the SUBMITTED stream, not
// read yet by the Service. It reads the headers of the
// submissions past those read, and past those an earlier call read, up to
// maxUnreadIndexed of them.
func (sv *serving) unreadIDs(ctx context.Context, ids []string) (map[string]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	sv.unreadMu.Lock()
	defer sv.unreadMu.Unlock()
	st, err := sv.m.js.Stream(ctx, sv.cfg.submitStream())
	if err != nil {
		return nil, err
	}
	last := st.CachedInfo().State.LastSeq
	if read := sv.read.Load(); read >= sv.scannedTo || sv.unread == nil {
		sv.unread, sv.scannedTo = map[string]uint64{}, read // each one indexed was read since
	}
	if sv.scannedTo < last && len(sv.unread) < maxUnreadIndexed {
		err = sv.scanUnread(ctx, st, last)
	}
	found := map[string]bool{}
	read := sv.read.Load()
	for _, id := range ids {
		if seq, ok := sv.unread[id]; ok && seq > read {
			found[id] = true
		}
	}
	return found, err
}

// scanUnread indexes the submissions from scannedTo to last, reading their
// headers only. sv.unreadMu is held.
func (sv *serving) scanUnread(ctx context.Context, st natsjs.Stream, last uint64) error {
	cons, err := st.CreateConsumer(ctx, natsjs.ConsumerConfig{
		DeliverPolicy: natsjs.DeliverByStartSequencePolicy, OptStartSeq: sv.scannedTo + 1,
		AckPolicy: natsjs.AckNonePolicy, HeadersOnly: true, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := st.DeleteConsumer(dctx, cons.CachedInfo().Name); err != nil {
			sv.log.Debug("delete the consumer of submissions not read yet", zap.Error(err))
		}
	}()
	for sv.scannedTo < last && len(sv.unread) < maxUnreadIndexed {
		if err := ctx.Err(); err != nil {
			return err // the rest for the next cancel
		}
		batch, err := cons.Fetch(scanBatch, natsjs.FetchMaxWait(time.Second))
		if err != nil {
			return err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				continue
			}
			if id := msg.Headers().Get(hdrJob); id != "" {
				sv.unread[id] = md.Sequence.Stream
			}
			sv.scannedTo = max(sv.scannedTo, md.Sequence.Stream)
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if n == 0 {
			return nil // none past it
		}
	}
	return nil
}

// cancelParallel bounds the cancels of one request under way at once:
// each is two exchanges with the server (the record stored, the job
// purged), which one after the other took 0.15 ms a job.
const cancelParallel = 32

// cancelAll cancels ids, cancelParallel at a time, and returns the error
// of each.
func (sv *serving) cancelAll(ctx context.Context, ids []string) []error {
	errs := make([]error, len(ids))
	var g errgroup.Group
	g.SetLimit(cancelParallel)
	for i, id := range ids {
		g.Go(func() error {
			errs[i] = sv.cancel(ctx, id)
			return nil
		})
	}
	g.Wait()
	return errs
}

// cancel cancels job id, which has not ended.
func (sv *serving) cancel(ctx context.Context, id string) error {
	// The record first: once it is stored, the job is cancelled whatever
	// happens to this Service.
	// (The job's sum is left out: a batch's ids are never given to other
	// jobs.)
	if err := record(ctx, sv.m.js, sv.m.jobs, sv.cfg, id, "", laboro.StatusCancelled); err != nil {
		return err
	}
	if b, last := sv.t.cancel(id); last {
		sv.batchDone(b)
	}
	sv.ex.Cancel(id) // ErrNotFound: not yet in the Executor, or ended
	sv.log.Debug("job cancelled", zap.String("job", id))
	return nil
}

func (sv *serving) respond(msg *nats.Msg, reply any) {
	data, err := json.Marshal(reply)
	if err == nil {
		err = msg.Respond(data)
	}
	if err != nil {
		sv.log.Warn("answering a request", zap.String("subject", msg.Subject), zap.Error(err))
	}
}

// StatusRequest asks a Service about batches and jobs.
type StatusRequest struct {
	// Batches names the batches to report; none means all.
	Batches []string `json:"batches,omitempty"`
	// IDs names jobs to report one by one, in Jobs.
	IDs []string `json:"ids,omitempty"`
	// Unsuccessful adds to Jobs the jobs of the reported batches that ended
	// otherwise than StatusSucceeded (at most 1,000).
	Unsuccessful bool `json:"unsuccessful,omitempty"`
	// Failures adds to Jobs, when Unsuccessful is not set, the first
	// Failures jobs (1,000 at most) of the reported batches that ended
	// otherwise than succeeded or cancelled, for a report to show at once
	// why jobs failed; the reply's Truncated says that more did. A
	// Service of an older version lists none.
	Failures int `json:"failures,omitempty"`
}

// CancelRequest asks a Service to cancel jobs.
type CancelRequest struct {
	// IDs names the jobs to cancel.
	IDs []string `json:"ids"`
}

// CancelReply is a Service's answer to a CancelRequest.
type CancelReply struct {
	// Jobs are the jobs asked about, in the order asked, in their state
	// after the request: "cancelled" for those it cancelled (also those
	// submitted that it had not read), their end for those that had ended,
	// StateUnknown for ids the Service does not know.
	Jobs []JobStatus `json:"jobs"`
	// Error is set when the request, or the cancel of some of its jobs,
	// failed.
	Error string `json:"error,omitempty"`
}

// StatusReply is a Service's answer to a StatusRequest.
type StatusReply struct {
	// Batches are the batches asked about (those that exist), in order of
	// submission.
	Batches []BatchStatus `json:"batches"`
	// Jobs are the jobs asked about by id, then the unsuccessful ones.
	Jobs []JobStatus `json:"jobs,omitempty"`
	// Truncated says that more jobs matched than Jobs lists.
	Truncated bool `json:"truncated,omitempty"`
	// Unread is how many submissions wait in the SUBMITTED stream for the
	// Service to read them: it reads as it has room (Concurrency jobs out,
	// as many queued). Each of Batches counts its own.
	Unread uint64 `json:"unread"`
	// InStream is how many jobs wait in the JOBS stream for a worker.
	InStream uint64 `json:"in_stream"`
	// OnWorkers is how many jobs workers have taken and not yet finished.
	OnWorkers int `json:"on_workers"`
	// Problems are what went wrong in the streams that a user should hear
	// of, last first (see Manager.Problems).
	Problems []string `json:"problems,omitempty"`
	// Error is set when the request could not be answered.
	Error string `json:"error,omitempty"`
}

// BatchStatus counts the jobs of one batch by state.
type BatchStatus struct {
	Batch string `json:"batch"`
	// Submitted is when its first job was submitted.
	Submitted time.Time `json:"submitted"`
	// Jobs is how many jobs the Service has read.
	Jobs int `json:"jobs"`
	// Unread is how many of its submissions the Service has not read yet:
	// it reads them as it has room. The batch is done once its Jobs have
	// ended and none is unread.
	Unread int `json:"unread,omitempty"`
	// Waiting jobs are queued in the Service; Dispatched ones are published
	// (waiting in the stream or running on a worker).
	Waiting    int `json:"waiting"`
	Dispatched int `json:"dispatched"`
	// Succeeded and Failed jobs ended; Failed counts every status but
	// StatusSucceeded, as it always has: a peer of an older version takes
	// Succeeded + Failed for the jobs that ended. Cancelled, TimedOut and
	// Killed say how many of the Failed ended so (see Failures); a Service
	// of an older version sends none of them, and they read 0.
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled,omitempty"`
	TimedOut  int `json:"timed_out,omitempty"`
	Killed    int `json:"killed,omitempty"`
	// Ended is when its last job ended, once every job read has (zero
	// before, and again when more of its jobs come).
	Ended time.Time `json:"ended,omitzero"`
}

// Done is how many of the batch's jobs ended.
func (b BatchStatus) Done() int { return b.Succeeded + b.Failed }

// Failures is how many of the batch's jobs ended otherwise than succeeded
// or cancelled: they failed (a non-zero exit, a command that could not
// start, …), timed out or were killed.
func (b BatchStatus) Failures() int { return b.Failed - b.Cancelled }

// count adds delta to b's count of the jobs in state (StateWaiting,
// StateDispatched, or a laboro.Status in words once a job ended).
func (b *BatchStatus) count(state string, delta int) {
	switch state {
	case StateWaiting:
		b.Waiting += delta
	case StateDispatched:
		b.Dispatched += delta
	case stateSucceeded:
		b.Succeeded += delta
	default:
		b.Failed += delta
		switch state {
		case stateCancelled:
			b.Cancelled += delta
		case stateTimedOut:
			b.TimedOut += delta
		case stateKilled:
			b.Killed += delta
		}
	}
}

// The ends a BatchStatus counts apart, in words, as a job's State says them.
var (
	stateSucceeded = laboro.StatusSucceeded.String()
	stateCancelled = laboro.StatusCancelled.String()
	stateTimedOut  = laboro.StatusTimedOut.String()
	stateKilled    = laboro.StatusKilled.String()
)

// JobStatus is the state of one job.
type JobStatus struct {
	ID    string `json:"id"`
	Batch string `json:"batch,omitempty"`
	// State is "waiting", "dispatched", a laboro.Status in words once the
	// job ended ("succeeded", "failed", "timed out", …), or "unknown".
	State string `json:"state"`
	// ExitCode is the process's exit status once it ended, -1 when it did
	// not exit normally.
	ExitCode int `json:"exit_code"`
	// Error explains every ending but success.
	Error string `json:"error,omitempty"`
	// Command is the job's command line (its Args joined, or its script),
	// cut at MaxCommandShown bytes.
	Command string `json:"command,omitempty"`
	// Stderr is the tail of what a job that did not succeed wrote to its
	// standard error: its last MaxStderrShown bytes at most.
	Stderr string `json:"stderr,omitempty"`
}

// What a Service keeps of each job's command, and of a failed job's
// standard error, to show them.
const (
	MaxCommandShown = 512
	MaxStderrShown  = 2048
)

// commandLine is how a job is shown: its command, its arguments joined, or
// its script, cut at MaxCommandShown bytes.
func commandLine(j wireJob) string {
	s := j.Command
	switch {
	case s == "" && len(j.Args) > 0:
		s = strings.Join(j.Args, " ")
	case s == "":
		s = j.Script
	}
	if len(s) > MaxCommandShown {
		s = strings.ToValidUTF8(s[:MaxCommandShown], "") + "…"
	}
	return s
}

// stderrTail is the last MaxStderrShown bytes of b, as text.
func stderrTail(b []byte) string {
	if len(b) > MaxStderrShown {
		b = b[len(b)-MaxStderrShown:]
	}
	return strings.ToValidUTF8(string(b), "")
}

// Job states before a result.
const (
	StateWaiting    = "waiting"
	StateDispatched = "dispatched"
	StateUnknown    = "unknown"
)

// DefaultMaxTracked is the Service's MaxTracked when it is not set: a
// million jobs, about 140 MB of their states.
const DefaultMaxTracked = 1 << 20

// tracker is what a Service knows of its batches and jobs.
type tracker struct {
	mu           sync.Mutex
	jobs         map[string]*JobStatus
	batches      map[string]*batchEntry
	order        []string // batch names, in order of first submission
	max          int      // jobs kept at most, while batches that ended can be forgotten
	endedBatches int      // batches that ended, which trim may forget
	// reads counts the submissions read of each batch, those that added
	// no job included (kept when the batch is forgotten: its submissions
	// stay in the stream).
	reads map[string]uint64
}

type batchEntry struct {
	BatchStatus
	ids []string
}

func newTracker(max int) *tracker {
	return &tracker{jobs: map[string]*JobStatus{}, batches: map[string]*batchEntry{}, max: max, reads: map[string]uint64{}}
}

// trim forgets the batches that ended, oldest first, until the jobs kept
// leave a tenth of the room free; it keeps every batch that runs. It is
// called only while an ended batch is there to forget, so a table full of
// running batches costs no walk per job. t.mu is held.
func (t *tracker) trim() {
	target := t.max - t.max/10
	kept := t.order[:0]
	for _, name := range t.order {
		b := t.batches[name]
		if len(t.jobs) <= target || b.Done() < b.Jobs {
			kept = append(kept, name)
			continue
		}
		for _, id := range b.ids {
			delete(t.jobs, id)
		}
		delete(t.batches, name)
		t.endedBatches--
	}
	clear(t.order[len(kept):])
	t.order = kept
}

// add records a submitted job, unless its id is known already.
func (t *tracker) add(id, batch, command string, when time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.jobs[id] != nil {
		return false
	}
	t.jobs[id] = &JobStatus{ID: id, Batch: batch, State: StateWaiting, ExitCode: -1, Command: command}
	b := t.batches[batch]
	if b == nil {
		b = &batchEntry{BatchStatus: BatchStatus{Batch: batch, Submitted: when}}
		t.batches[batch] = b
		t.order = append(t.order, batch)
	} else if b.Done() == b.Jobs {
		t.endedBatches-- // it runs again
	}
	b.ids = append(b.ids, id)
	b.Jobs++
	b.Waiting++
	b.Ended = time.Time{}
	if len(t.jobs) > t.max && t.endedBatches > 0 {
		t.trim()
	}
	return true
}

func (t *tracker) dispatched(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if j := t.jobs[id]; j != nil && j.State == StateWaiting {
		b := t.batches[j.Batch]
		b.count(j.State, -1)
		j.State = StateDispatched
		b.count(j.State, 1)
	}
}

// finish records a job's result. It returns the batch's counts when this
// was its last job.
func (t *tracker) finish(id string, res laboro.Result) (BatchStatus, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[id]
	if j == nil || (j.State != StateWaiting && j.State != StateDispatched) {
		return BatchStatus{}, false
	}
	b := t.batches[j.Batch]
	b.count(j.State, -1)
	j.State, j.ExitCode = res.Status.String(), res.ExitCode
	b.count(j.State, 1)
	if res.Status != laboro.StatusSucceeded {
		if res.Err != nil {
			j.Error = res.Err.Error()
		}
		j.Stderr = stderrTail(res.Stderr)
	}
	if b.Done() == b.Jobs {
		b.Ended = res.Ended
		if b.Ended.IsZero() {
			b.Ended = time.Now()
		}
		t.endedBatches++
		return b.BatchStatus, true
	}
	return b.BatchStatus, false
}

// recentRead returns the last n batches, newest first, and the
// submissions read of each.
func (t *tracker) recentRead(n int) ([]BatchStatus, []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	list := make([]BatchStatus, 0, min(n, len(t.order)))
	var reads []uint64
	for i := len(t.order) - 1; i >= 0 && len(list) < n; i-- {
		list = append(list, t.batches[t.order[i]].BatchStatus)
		reads = append(reads, t.reads[t.order[i]])
	}
	return list, reads
}

// state returns job id's state, "" when it is unknown.
func (t *tracker) state(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if j := t.jobs[id]; j != nil {
		return j.State
	}
	return ""
}

// ended tells whether job id is known and has ended.
func (t *tracker) ended(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[id]
	return j != nil && j.State != StateWaiting && j.State != StateDispatched
}

// cancel records that job id was cancelled: the record of its cancel is
// its outcome, even if it ended otherwise just before. It returns the
// batch's counts when this ended its last job.
func (t *tracker) cancel(id string) (BatchStatus, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[id]
	if j == nil {
		return BatchStatus{}, false
	}
	b := t.batches[j.Batch]
	ended := j.State != StateWaiting && j.State != StateDispatched
	b.count(j.State, -1)
	j.State, j.ExitCode, j.Error = stateCancelled, -1, laboro.ErrCancelled.Error()
	b.count(j.State, 1)
	if ended || b.Done() != b.Jobs {
		return b.BatchStatus, false
	}
	b.Ended = time.Now()
	t.endedBatches++
	return b.BatchStatus, true
}

func (t *tracker) status(req StatusRequest) StatusReply {
	reply, _ := t.statusRead(req)
	return reply
}

// doneReads returns the submissions of batch read, and whether every job
// of it read has ended.
func (t *tracker) doneReads(batch string) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.batches[batch]
	return t.reads[batch], b != nil && b.Done() == b.Jobs
}

// read counts a submission of batch read.
func (t *tracker) read(batch string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reads[batch]++
}

// statusRead is status, with the submissions read of each batch of the
// reply at that moment.
func (t *tracker) statusRead(req StatusRequest) (StatusReply, []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var reply StatusReply
	var reads []uint64
	names := req.Batches
	if len(names) == 0 {
		names = t.order
	}
	for _, id := range req.IDs {
		if j := t.jobs[id]; j != nil {
			reply.Jobs = append(reply.Jobs, *j)
		} else {
			reply.Jobs = append(reply.Jobs, JobStatus{ID: id, State: StateUnknown, ExitCode: -1})
		}
	}
	failures := len(reply.Jobs) + min(req.Failures, maxListed) // the bound of Jobs with them
	for _, name := range names {
		b := t.batches[name]
		if b == nil {
			continue
		}
		reply.Batches = append(reply.Batches, b.BatchStatus)
		reads = append(reads, t.reads[name])
		switch {
		case req.Unsuccessful && b.Failed > 0:
			t.list(&reply, b, b.Failed, maxListed, func(state string) bool { return state != stateSucceeded })
		case !req.Unsuccessful && req.Failures > 0 && b.Failures() > 0:
			t.list(&reply, b, b.Failures(), failures, func(state string) bool {
				return state != stateSucceeded && state != stateCancelled
			})
		}
	}
	return reply, reads
}

// list adds to reply.Jobs, in the order they were read, the jobs of b that
// ended in a state that match takes, n of them in all, until reply.Jobs
// holds limit: it says then, in reply.Truncated, that more match. t.mu is
// held.
func (t *tracker) list(reply *StatusReply, b *batchEntry, n, limit int, match func(state string) bool) {
	// The walk stops at the last match, or at the first beyond limit: a
	// batch of a million jobs whose first ones failed costs no more.
	for _, id := range b.ids {
		if n == 0 {
			return
		}
		j := t.jobs[id]
		if j.State == StateWaiting || j.State == StateDispatched || !match(j.State) {
			continue
		}
		if len(reply.Jobs) >= limit {
			reply.Truncated = true
			return
		}
		reply.Jobs = append(reply.Jobs, *j)
		n--
	}
}
