package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
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

// ErrNoService is returned by Client.Status when no Service serves the
// streams.
var ErrNoService = errors.New("jetstream: no service serves these streams (is `laboro serve` running?)")

// ErrSubmissionsFull is matched by the error of a submission that the
// SUBMITTED stream refused because it holds Config.SubmittedMaxBytes
// already: the jobs of the batch before it are stored, and nothing stored
// was dropped to make room.
var ErrSubmissionsFull = errors.New("jetstream: the SUBMITTED stream is full (Config.SubmittedMaxBytes; purge the batches that ended, or raise it)")

// publishWindow is how many submissions a Client has unacknowledged at once.
const publishWindow = 256

// statusTimeout bounds a status request whose context has no deadline.
const statusTimeout = 5 * time.Second

// Client submits jobs to a Service through the SUBMITTED stream, asks it
// for their status, and reads their results from the RESULTS stream. A
// Client needs no Service to submit: jobs wait in the stream until one
// runs. It is safe for concurrent use.
type Client struct {
	// Conn is the connection to NATS; it stays the caller's.
	Conn *nats.Conn
	// Config must agree with the Service's on Stream; its Dir receives the
	// outputs that Result reads. With ProveServer and ClientKey, the
	// Client deals only with a server on which the Service proves that
	// it holds ClientKey.
	Config Config

	checkOnce sync.Once
	check     *serverCheck // with Config.ProveServer and ClientKey
	// waited, under check.mu, says that a wait for the proof was logged
	// and the proof has not come since: a wait through an outage, call
	// after call (Wait), is said once, and its end too.
	waited bool
}

// trust has the server prove itself before a call, with
// Config.ProveServer and ClientKey, asked once a connection. While no
// Service answers, wait says whether to wait for one (until ctx ends),
// or to return ErrNoService at once. An answer that proves another key
// fails with ErrServerUnproven.
func (c *Client) trust(ctx context.Context, wait bool) error {
	cfg := c.Config.withDefaults()
	if !cfg.ProveServer || len(cfg.ClientKey) == 0 {
		return nil
	}
	c.checkOnce.Do(func() { c.check = &serverCheck{key: cfg.ClientKey, subject: cfg.proveSubject(RoleClient)} })
	if c.check.proven(c.Conn) {
		return nil
	}
	c.check.mu.Lock()
	defer c.check.mu.Unlock()
	pause := pauses(c.Conn)
	for {
		if c.check.proven(c.Conn) {
			return nil
		}
		err := c.check.challenge(ctx, c.Conn)
		switch {
		case err == nil:
			if c.waited {
				cfg.Logger.Info("laboro's service proved itself on the NATS server: going on")
				c.waited = false
			}
			return nil
		case errors.Is(err, ErrServerUnproven):
			return err
		case !wait && errors.Is(err, nats.ErrNoResponders):
			return ErrNoService
		}
		if !c.waited {
			cfg.Logger.Info("waiting for laboro's service to prove itself on the NATS server (is it starting? if laboro serve is not running, another program holds its address)",
				notConnected(c.Conn, err))
			c.waited = true
		}
		if pause.Wait(ctx) != nil {
			return fmt.Errorf("%w: %w", errUnanswered, err)
		}
	}
}

// NewBatch returns a new batch name, for example "20261122-041500-3fa2c1":
// the time in UTC and a random part.
func NewBatch() string {
	var r [3]byte
	rand.Read(r[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(r[:])
}

// Submit stores jobs in the SUBMITTED stream as part of batch (which must be
// usable as a subject token; see NewBatch) and returns their ids once the
// server has them on disk. A job without an ID gets "<batch>-<n>", n its
// place in the batch counting from 1 (after the jobs submitted to it
// before); a job whose ID was submitted before is
// not run again (the first submission stands). Jobs need a Command, Args or
// Script. A job's Timeout bounds its run on a worker, from its start there
// (see JobOptions.RunTimeout). Every job is checked before any is stored.
// A job whose publication is lost with the connection (a server
// restarting) is sent again once the connection is back: its id has it
// stored once.
func (c *Client) Submit(ctx context.Context, batch string, jobs []laboro.Job) ([]string, error) {
	ids := make([]string, 0, len(jobs))
	_, err := c.submit(ctx, batch, func(yield func(laboro.Job, error) bool) {
		for _, job := range jobs {
			if !yield(job, nil) {
				return
			}
		}
	}, func(id string) { ids = append(ids, id) })
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// SubmitAll is Submit for jobs that come one at a time (the lines of a
// file or a pipe), however many: it holds none of them in memory, but
// keeps each, checked and encoded, in a temporary file (once they pass
// spoolInMemory bytes), and stores them once the last has come and every
// one is good. It returns how many it stored. An error from jobs stores
// none.
func (c *Client) SubmitAll(ctx context.Context, batch string, jobs iter.Seq2[laboro.Job, error]) (int, error) {
	return c.submit(ctx, batch, jobs, nil)
}

// submit is Submit and SubmitAll: it calls stored, if not nil, with the
// id of each job, in order, before it stores them.
func (c *Client) submit(ctx context.Context, batch string, jobs iter.Seq2[laboro.Job, error], stored func(id string)) (int, error) {
	cfg := c.Config.withDefaults()
	if err := validID(batch); err != nil {
		return 0, fmt.Errorf("jetstream: batch name: %w", err)
	}
	if err := retryUnanswered(ctx, c.Conn, func(ctx context.Context) error { return ensureSubmitted(ctx, c.Conn, cfg, false) }); err != nil {
		return 0, err
	}
	js, err := natsjs.New(c.Conn)
	if err != nil {
		return 0, fmt.Errorf("jetstream: %w", err)
	}
	subject := cfg.submitSubject(batch)
	offset := -1 // the jobs the batch has, asked of the server for the first job without an id
	// Every job is checked before any is stored; its message is made as it
	// is sent (a message with its header is a kilobyte: a million jobs
	// would hold a gigabyte).
	var sp spool
	defer sp.Close()
	n := 0
	for job, err := range jobs {
		if err != nil {
			return 0, err
		}
		n++
		if job.ID == "" {
			if offset < 0 {
				if offset, err = batchSize(ctx, js, cfg, subject); err != nil {
					return 0, err
				}
			}
			job.ID = batch + "-" + strconv.Itoa(offset+n)
		}
		if err := checkJob(job); err != nil {
			return 0, fmt.Errorf("%w (job %d of the batch)", err, n)
		}
		data, err := json.Marshal(toWire(job))
		if err != nil {
			return 0, fmt.Errorf("jetstream: encode job %s: %w", job.ID, err)
		}
		if max := c.Conn.MaxPayload() - 1024; int64(len(data)) > max {
			return 0, fmt.Errorf("jetstream: job %s takes %d bytes, more than the server's limit of %d", job.ID, len(data), max)
		}
		if err := sp.add(job.ID, data); err != nil {
			return 0, fmt.Errorf("jetstream: keep job %s until the batch is checked: %w", job.ID, err)
		}
		if stored != nil {
			stored(job.ID)
		}
	}
	// resend stores a job whose publication failed on the way (the
	// connection dropped: a server restarting), once the connection is
	// back and its server proven: under the same id, it is stored once
	// however many copies arrive.
	resend := func(msg *nats.Msg, err error) error {
		id := msg.Header.Get(hdrJob)
		if !storeFailed(err) && transient(c.Conn, err) {
			_, err = publishProven(ctx, js, msg, id, func(ctx context.Context) error { return c.trust(ctx, true) })
		}
		if storeFailed(err) {
			err = fmt.Errorf("%w: %w", ErrSubmissionsFull, err)
		}
		if err != nil {
			return fmt.Errorf("jetstream: submit %s: %w", id, err)
		}
		return nil
	}
	pending := make([]natsjs.PubAckFuture, 0, publishWindow)
	flush := func() error {
		for _, f := range pending {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				if err := resend(f.Msg(), err); err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		pending = pending[:0]
		return nil
	}
	for id, data := range sp.records() {
		if err := c.trust(ctx, true); err != nil {
			return 0, err
		}
		msg := nats.NewMsg(subject)
		msg.Header.Set(hdrJob, id)
		msg.Data = data // the message holds it until its acknowledgement
		f, err := js.PublishMsgAsync(msg, natsjs.WithMsgID(id))
		if err != nil {
			if err := resend(msg, err); err != nil {
				return 0, err
			}
			continue
		}
		if pending = append(pending, f); len(pending) == publishWindow {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := sp.err(); err != nil {
		return 0, fmt.Errorf("jetstream: read back the batch's jobs: %w", err)
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return n, nil
}

// batchSize returns how many jobs the SUBMITTED stream holds on subject,
// asking again while the server does not answer.
func batchSize(ctx context.Context, js natsjs.JetStream, cfg Config, subject string) (int, error) {
	var s natsjs.Stream
	err := retry(ctx, js.Conn(), func(ctx context.Context) (err error) {
		s, err = js.Stream(ctx, cfg.submitStream())
		return err
	})
	var n uint64
	if err == nil {
		n, err = count(ctx, js.Conn(), s, subject)
	}
	if err != nil {
		return 0, fmt.Errorf("jetstream: stream %s: %w", cfg.submitStream(), err)
	}
	return int(n), nil
}

// Status asks the Service about batches and jobs. It returns ErrNoService
// when no Service answers.
func (c *Client) Status(ctx context.Context, req StatusRequest) (StatusReply, error) {
	var reply StatusReply
	if err := c.request(ctx, c.Config.withDefaults().statusSubject(), req, &reply); err != nil {
		return StatusReply{}, err
	}
	if reply.Error != "" {
		return reply, fmt.Errorf("jetstream: status: %s", reply.Error)
	}
	return reply, nil
}

// Cancel asks the Service to cancel jobs by id: a job waiting in the
// Service, or submitted and not read by it yet, never runs, a running one
// is killed by its worker, and all end StatusCancelled, for good (a job is
// never run again once cancelled).
// The reply gives each job's state after the request. It returns
// ErrNoService when no Service answers, and an error with the reply when
// some jobs could not be cancelled. Many ids go in several requests of
// at most maxCancelIDs, one after the other, each answered in its own
// time (a context without a deadline gives each one of statusTimeout);
// when one fails, the reply holds the jobs of those answered before it.
func (c *Client) Cancel(ctx context.Context, ids ...string) (CancelReply, error) {
	parts := slices.Collect(slices.Chunk(ids, maxCancelIDs))
	if len(parts) == 0 {
		parts = [][]string{nil}
	}
	subject := c.Config.withDefaults().cancelAPISubject()
	var all CancelReply
	var failed []string
	for _, part := range parts {
		var reply CancelReply
		if err := c.request(ctx, subject, CancelRequest{IDs: part}, &reply); err != nil {
			return all, err
		}
		all.Jobs = append(all.Jobs, reply.Jobs...)
		if reply.Error != "" {
			failed = append(failed, reply.Error)
		}
	}
	if len(failed) > 0 {
		all.Error = strings.Join(failed, "; ")
		return all, fmt.Errorf("jetstream: cancel: %s", all.Error)
	}
	return all, nil
}

// maxCancelIDs bounds the ids of one cancel request: the Service cancels
// them one after the other (two exchanges with the server each), so that
// a request is answered well within its time.
const maxCancelIDs = 250

// request sends req to a Service on subject and decodes its reply into
// reply. A context without a deadline gets one of statusTimeout.
func (c *Client) request(ctx context.Context, subject string, req, reply any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, statusTimeout)
		defer cancel()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if err := c.trust(ctx, false); err != nil {
		return err
	}
	msg, err := c.Conn.RequestWithContext(ctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return ErrNoService
	}
	if err != nil {
		return fmt.Errorf("jetstream: request to the service: %w", err)
	}
	if err := json.Unmarshal(msg.Data, reply); err != nil {
		return fmt.Errorf("jetstream: reply of the service: %w", err)
	}
	return nil
}

// errUnanswered is the error of a Client's call that no service answered
// in its time: none is running, or the connection is down (a server
// restarting).
var errUnanswered = errors.New("jetstream: laboro's service did not answer in time (is `laboro serve` running, or starting again?)")

// unanswered reports whether err says that no answer came (see
// errUnanswered): one may come later.
func unanswered(err error) bool {
	return errors.Is(err, errUnanswered) || errors.Is(err, ErrNoService) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrReconnectBufExceeded)
}

// Wait asks the Service about batch every interval until n of its jobs (or,
// with n ≤ 0, all the jobs submitted to it) have ended, calling progress (if
// not nil) with each answer. It returns the last answer. While no Service
// answers, it waits for one to start, or to come back (a restart of the
// server or of the Service).
func (c *Client) Wait(ctx context.Context, batch string, n int, interval time.Duration, progress func(BatchStatus)) (BatchStatus, error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		reply, err := c.Status(ctx, StatusRequest{Batches: []string{batch}})
		b := BatchStatus{Batch: batch}
		switch {
		case ctx.Err() != nil:
			return b, ctx.Err()
		case unanswered(err):
			// The jobs wait for a Service to start, or to come back.
			c.Config.withDefaults().Logger.Debug("laboro's service did not answer; asking again", zap.Error(err))
		case err != nil:
			return b, err
		default:
			if len(reply.Batches) == 1 {
				b = reply.Batches[0]
			}
			if progress != nil {
				progress(b)
			}
			if want := max(n, b.Jobs); b.Jobs > 0 && b.Done() >= want && b.Unread == 0 {
				return b, nil
			}
		}
		select {
		case <-ctx.Done():
			return b, ctx.Err()
		case <-tick.C:
		}
	}
}

// Result reads job id's result from the RESULTS stream, waiting until
// there is one: until a Service runs the job, and, should no Service have
// run yet on these streams, until one makes the stream. Its Output (in
// Config.Dir) is the caller's to Close.
func (c *Client) Result(ctx context.Context, id string) (laboro.Result, error) {
	if err := validID(id); err != nil {
		return laboro.Result{}, err
	}
	js, err := natsjs.New(c.Conn)
	if err != nil {
		return laboro.Result{}, fmt.Errorf("jetstream: %w", err)
	}
	cfg := c.Config.withDefaults()
	if cfg.Dir, err = outputsIn(cfg.Dir); err != nil {
		return laboro.Result{}, err
	}
	if err := c.trust(ctx, true); err != nil {
		return laboro.Result{}, err
	}
	results, err := waitStream(ctx, js, cfg.resultsStream(), cfg.Logger)
	if err != nil {
		return laboro.Result{}, err
	}
	return readResult(ctx, js, results, cfg, id)
}

// waitStream returns the stream called name, waiting while there is none:
// a Service makes the JOBS and RESULTS streams as it starts, and a job
// submitted before any did (it waits in the SUBMIT stream) has its result
// once one has run it. It says once, through log, that it waits.
func waitStream(ctx context.Context, js natsjs.JetStream, name string, log *zap.Logger) (natsjs.Stream, error) {
	pause := pauses(js.Conn())
	said := false
	for {
		var s natsjs.Stream
		err := retry(ctx, js.Conn(), func(ctx context.Context) (err error) {
			s, err = js.Stream(ctx, name)
			return err
		})
		if !errors.Is(err, natsjs.ErrStreamNotFound) {
			if err != nil {
				return nil, fmt.Errorf("jetstream: stream %s: %w", name, err)
			}
			return s, nil
		}
		if !said {
			log.Info("no service has made the stream yet: waiting for one", zap.String("stream", name))
			said = true
		}
		if pause.Wait(ctx) != nil {
			return nil, fmt.Errorf("jetstream: stream %s (no service has made it): %w", name, ctx.Err())
		}
	}
}
