package workerserver

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/lograte"
	"github.com/laboro-go/laboro/transport"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// session is an open Master: its table, its Dispatcher and the servers
// joined to it, from Open to Close.
type session struct {
	db        *bolt.DB
	commit    *committer // the updates of pings and job statuses, grouped
	d         *transport.Dispatcher[string, JobOrder]
	log       *zap.Logger
	outputDir string
	lease     time.Duration // 0: none
	hold      time.Duration // of a ping that finds no job; 0: none
	done      chan struct{} // closed by release: held pings answer
	holding   atomic.Int32  // pings held now
	idWarning sync.Once     // of a job id that is not numeric (see NumericID)
	unoffered sync.Map      // worker codes warned of as offered by no server
	servers   serverCache   // what the servers' records say
	maxEnded  int           // ended jobs the table keeps; negative: all
	opened    time.Time     // when Open made it
	holders   holders       // the process that holds each serverId
	refusals  lograte.Limited

	runningMu sync.Mutex
	running   map[string]int // by job id, under runningMu: its Runs under way, whose ends must stay in the table

	// mu guards peers and expecting. It also makes one step, for the
	// pings that take jobs, of holding a job for its server (Add, then
	// Reclaim), and of a server's status with what it does to the jobs it
	// holds.
	mu        sync.Mutex
	peers     map[string]*transport.Worker[string, JobOrder] // by serverId
	nudgeMu   sync.Mutex
	nudges    map[string]chan struct{} // by serverId, under nudgeMu: ends its held ping
	expecting map[string]expectation   // by job id; nil once closed
	expected  uint64                   // expectations so far

	queuedMu sync.Mutex
	queued   map[string][]chan struct{} // by job id, under queuedMu: closed once its row is committed (Master.Queued)
}

// expectation is a job handed to a server (or held for it after a
// restart) that the server has not spoken of yet.
type expectation struct {
	server string
	timer  *time.Timer
	n      uint64 // tells this expectation from a later one of the job
}

type dispatchTicket = transport.Ticket[string, JobOrder]

func newSession(db *bolt.DB, lease time.Duration, log *zap.Logger, outputDir string, maxEnded int) *session {
	s := &session{
		db:        db,
		commit:    &committer{db: db},
		maxEnded:  maxEnded,
		running:   make(map[string]int),
		d:         transport.NewDispatcher[string, JobOrder](transport.Config{Lease: lease, Logger: log}),
		log:       log,
		opened:    time.Now(),
		outputDir: outputDir,
		lease:     lease,
		peers:     make(map[string]*transport.Worker[string, JobOrder]),
		nudges:    make(map[string]chan struct{}),
		done:      make(chan struct{}),
		expecting: make(map[string]expectation),
		queued:    make(map[string][]chan struct{}),
	}
	s.d.OnRequeue(s.requeued)
	if maxEnded >= 0 {
		s.commit.after = func(tx *bolt.Tx) error {
			_, err := forgetEnded(tx, maxEnded, forgetPerCommit, s.pinned)
			return err
		}
	}
	return s
}

// forgetPerCommit is the most ended jobs a commit forgets, beyond those it
// ends: the table comes back under Master.MaxEndedJobs after the jobs
// ended outside the grouped commits (Master.Cancel, a Run whose context
// ended), a few at a time.
const forgetPerCommit = 64

// forgetAll forgets the jobs ended first until the table keeps at most
// s.maxEnded ended jobs, in transactions of at most a batch, and returns
// how many it forgot. It runs at Open, before any Run.
func (s *session) forgetAll() (int, error) {
	const batch = 10_000
	total := 0
	for s.maxEnded >= 0 {
		var n int
		err := s.db.Update(func(tx *bolt.Tx) (err error) {
			n, err = forgetEnded(tx, s.maxEnded, batch, nil)
			return err
		})
		total += n
		if err != nil || n < batch {
			return total, err
		}
	}
	return total, nil
}

// pin marks a Run of job id as under way: the job's end stays in the
// table until unpin, for the Run to read it.
func (s *session) pin(id string) {
	s.runningMu.Lock()
	s.running[id]++
	s.runningMu.Unlock()
}

func (s *session) unpin(id string) {
	s.runningMu.Lock()
	if s.running[id]--; s.running[id] <= 0 {
		delete(s.running, id)
	}
	s.runningMu.Unlock()
}

func (s *session) pinned(id string) bool {
	s.runningMu.Lock()
	defer s.runningMu.Unlock()
	return s.running[id] > 0
}

// close stops the session's timers; the caller closes its Dispatcher and
// its table.
func (s *session) close() {
	s.release()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.expecting {
		e.timer.Stop()
	}
	s.expecting = nil
}

func (s *session) logRead(err error) {
	if closedDB(err) {
		return
	}
	s.log.Error("reading the table", zap.Error(err))
}

// joinLocked returns the server's Worker in the Dispatcher, joining it
// if it is not joined. s.mu is held.
func (s *session) joinLocked(server string) *transport.Worker[string, JobOrder] {
	w := s.peers[server]
	if w == nil {
		w = s.d.Join(server, func(keys []string) { s.tellCancel(server, keys) })
		s.peers[server] = w
	}
	return w
}

// alive records a sign of life of a server (any request it made but its
// Stopping or Offline): it is joined if it was not, and its lease runs
// again from now.
func (s *session) alive(server string) *transport.Worker[string, JobOrder] {
	s.mu.Lock()
	w := s.joinLocked(server)
	s.mu.Unlock()
	w.Renew()
	return w
}

// leaveLocked removes a server from the Dispatcher: the jobs it holds go
// back in line (see requeued). s.mu is held.
func (s *session) leaveLocked(server string, why error) {
	if w := s.peers[server]; w != nil {
		delete(s.peers, server)
		w.Leave(why)
	}
}

// Why a server's jobs go back in line.
var (
	errServerLeft      = errors.New("the server left")
	errServerRestarted = errors.New("the server restarted")
)

// add puts a job in line. A job the table has Processing at a server (a
// master restarted on its table) is held for that server instead: its
// Worker reclaims it, joining the server if it has not shown up yet, so
// that the job goes to another server only if that one shows no life, or
// does not speak of the job, for a lease (see expect).
func (s *session) add(ctx context.Context, order JobOrder) (*dispatchTicket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.d.Add(ctx, order.JobID, order)
	if err != nil {
		return nil, err
	}
	// Read under s.mu: a status of the server that gave the job back (a
	// restart, Stopping) cannot come between this and the Reclaim.
	var server string
	var ended bool
	err = s.db.View(func(tx *bolt.Tx) error {
		row, err := getJob(tx, order.JobID)
		if err == nil && row != nil {
			ended = Final(row.Status)
			if row.Status == JobProcessing {
				server = row.Server
			}
		}
		return err
	})
	if err == nil && ended {
		// It ended since its Run read the table (a server it was lost
		// with came back while it was being cancelled): whatever ended it
		// found no ticket to settle. Its Run wakes and reads the end.
		s.abandon([]string{order.JobID})
		return t, nil
	}
	if err != nil || server == "" {
		return t, nil // in line; a failed read is seen again by the next transaction
	}
	if _, ok := s.joinLocked(server).Reclaim(order.JobID); ok {
		s.expectLocked(order.JobID, server)
		s.log.Info("job held for the server that has it", zap.String("job", order.JobID), zap.String("server", server))
	}
	return t, nil
}

// errUnconfirmed is why a job that its server never spoke of goes back in
// line.
var errUnconfirmed = errors.New("the server never spoke of it")

// expect waits for the server's first word (a status) about a job just
// handed to it: a job it does not speak of within a lease, though it
// shows life, never reached it (the answer to the ping that handed it out
// was lost, or, after a restart of the master, it is not the server's any
// more), and goes back in line. A worker speaks of a job within its
// progress interval (10 s by default, the reference's too), and then at
// least once per interval: the reference's says Processing as it starts
// it, ours once it has run Worker.FirstProgress (1 s by default), or its
// end if that comes first.
func (s *session) expect(id, server string) {
	s.mu.Lock()
	s.expectLocked(id, server)
	s.mu.Unlock()
}

// expectLocked is expect with s.mu held.
func (s *session) expectLocked(id, server string) {
	if s.lease <= 0 || s.expecting == nil {
		return
	}
	if e, ok := s.expecting[id]; ok {
		e.timer.Stop()
	}
	s.expected++
	n := s.expected
	timer := time.AfterFunc(s.lease, func() { s.unconfirmed(id, server, n) })
	s.expecting[id] = expectation{server: server, timer: timer, n: n}
}

// confirm records that a server spoke of a job.
func (s *session) confirm(id, server string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.expecting[id]; ok && e.server == server {
		e.timer.Stop()
		delete(s.expecting, id)
	}
}

// unconfirmed gives back a job that its server did not speak of within a
// lease of having it.
func (s *session) unconfirmed(id, server string, n uint64) {
	s.mu.Lock()
	if e, ok := s.expecting[id]; !ok || e.n != n {
		s.mu.Unlock()
		return // confirmed, handed out again, or closed
	}
	delete(s.expecting, id)
	w := s.peers[server]
	s.mu.Unlock()
	t, ok := s.d.Lookup(id)
	if w == nil || !ok || !w.Return(t, errUnconfirmed) {
		return // ended, or no longer held there
	}
	s.requeued(w, []string{id}, errUnconfirmed)
}

// take hands the server up to n jobs first in line that accept takes.
func (s *session) take(server string, n int, accept func(JobOrder) bool) (*transport.Worker[string, JobOrder], []*dispatchTicket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.joinLocked(server)
	return w, w.Take(n, accept)
}

// complete settles a job that a server ended (its first result), so that
// its Run wakes and reads the end from the table. A server that holds it
// no longer (it went back in line, or to another server, or was held
// there since a restart) reclaims it first.
func (s *session) complete(w *transport.Worker[string, JobOrder], id string) {
	err := w.Complete(id, laboro.Result{})
	if errors.Is(err, transport.ErrNotHeld) {
		if _, ok := w.Reclaim(id); ok {
			err = w.Complete(id, laboro.Result{})
		}
	}
	if err != nil {
		// No Run waits for it (a restarted master that has not submitted
		// it yet, or a Run that ended first): the table is all.
		s.log.Debug("job end with no Run waiting", zap.String("job", id), zap.Error(err))
	}
}

// tellCancel has a server told, at its next ping, to cancel jobs that
// ended without it (their Run ended first, or another server's result
// came first). The Dispatcher calls it.
func (s *session) tellCancel(server string, keys []string) {
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, id := range keys {
			if err := putCancel(tx, server, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.logWrite(err)
		return
	}
	s.log.Info("jobs to cancel at the next ping", zap.String("server", server), zap.Strings("jobs", keys))
	s.nudge(server)
}

// release answers the held pings now, and has the next ones answer at once.
func (s *session) release() {
	s.nudgeMu.Lock()
	defer s.nudgeMu.Unlock()
	select {
	case <-s.done:
	default:
		close(s.done)
	}
}

// nudge ends a held ping of server (see await): jobs to cancel came for
// it, or it is leaving.
func (s *session) nudge(server string) {
	select {
	case s.nudgeOf(server) <- struct{}{}:
	default:
	}
}

// nudgeOf returns the channel that ends a held ping of server.
func (s *session) nudgeOf(server string) chan struct{} {
	s.nudgeMu.Lock()
	defer s.nudgeMu.Unlock()
	ch := s.nudges[server]
	if ch == nil {
		ch = make(chan struct{}, 1)
		s.nudges[server] = ch
	}
	return ch
}

// await waits, up to s.hold, for jobs in line that server accepts, and
// takes up to n of them; none when none came, when jobs to cancel came for
// the server (or were there already), or when ctx or the session ended.
func (s *session) await(ctx context.Context, w *transport.Worker[string, JobOrder], server string, n int, accept func(JobOrder) bool) []*dispatchTicket {
	nudge := s.nudgeOf(server)
	select {
	case <-nudge: // an old one: the table says whether cancels wait
	default:
	}
	var waiting bool
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		waiting, err = hasCancels(tx, server)
		return err
	})
	if err != nil || waiting {
		return nil
	}
	select {
	case <-s.done:
		return nil
	default:
	}
	s.holding.Add(1)
	defer s.holding.Add(-1)
	timer := time.NewTimer(s.hold)
	defer timer.Stop()
	for {
		select {
		case <-w.Wake():
			if _, ts := s.take(server, n, accept); len(ts) > 0 {
				return ts
			}
		case <-nudge:
			return nil
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return nil
		case <-s.done:
			return nil
		}
	}
}

// abandon settles the tickets of jobs that the table has ended on the
// master's own account, so that their Runs wake and read the end there.
func (s *session) abandon(ids []string) {
	for _, id := range ids {
		if t, ok := s.d.Lookup(id); ok {
			s.d.Abandon(t, laboro.Result{Status: laboro.StatusKilled, ExitCode: -1, Err: laboro.ErrKilled, Ended: time.Now()})
		}
	}
}

// requeued records that the jobs a lost server held went back in line
// (it left, or its lease expired), or ends those that were being
// cancelled. The Dispatcher calls it.
func (s *session) requeued(w *transport.Worker[string, JobOrder], keys []string, why error) {
	server, now := w.Name(), time.Now()
	var n int
	var cancelled []string
	err := s.db.Update(func(tx *bolt.Tx) error {
		n, cancelled = 0, nil
		for _, id := range keys {
			// A job taken again since is recorded by its hand-out.
			if t, ok := s.d.Lookup(id); !ok || t.Holder() != "" {
				continue
			}
			row, err := getJob(tx, id)
			if err != nil {
				return err
			}
			if row == nil || row.Status != JobProcessing || row.Server != server {
				continue
			}
			ended, err := loseRow(tx, row, reason(why), now)
			if err != nil {
				return err
			}
			if ended {
				cancelled = append(cancelled, id)
			}
			n++
		}
		if n == 0 {
			return errNoChange
		}
		return nil
	})
	switch {
	case errors.Is(err, errNoChange):
	case err != nil:
		s.logWrite(err)
	default:
		s.abandon(cancelled)
		if len(cancelled) > 0 {
			s.log.Info("jobs being cancelled that the server lost end Cancelled", zap.String("server", server),
				zap.Strings("jobs", cancelled), zap.Error(why))
		}
		if n > len(cancelled) {
			s.log.Warn("server's jobs back in line", zap.String("server", server), zap.Int("jobs", n-len(cancelled)), zap.Error(why))
		}
	}
}

func (s *session) logWrite(err error) {
	if closedDB(err) {
		return // closed meanwhile: the table stays as it was
	}
	s.log.Error("writing the table", zap.Error(err))
}

// reason says why a job went back in line, for its history.
func reason(why error) string {
	if errors.Is(why, transport.ErrLeaseExpired) {
		return "the server showed no life for a lease"
	}
	return why.Error()
}

// requeueData is the data of the master's Queued when a job goes back in
// line.
type requeueData struct {
	Reason string `json:"reason"`
}

// requeueRow puts back in line a job Processing at a server that lost it.
func requeueRow(tx *bolt.Tx, row *jobRow, reason string, now time.Time) error {
	data, err := json.Marshal(requeueData{Reason: reason})
	if err != nil {
		return err
	}
	server := row.Server
	row.Status, row.Server, row.Data, row.Updated = JobQueued, "", nil, now
	if err := putJob(tx, row); err != nil {
		return err
	}
	return appendEvent(tx, bucketJobHistory, row.ID, StatusEvent{Status: JobQueued, Data: data, At: now, Server: server})
}

// loseRow records that the server of a job Processing there lost it: the
// job goes back in line, or, if it was being cancelled, ends Cancelled
// (then ended is true, and its Run is to be woken).
func loseRow(tx *bolt.Tx, row *jobRow, reason string, now time.Time) (ended bool, err error) {
	if !row.Cancelling {
		return false, requeueRow(tx, row, reason, now)
	}
	if err := deleteCancel(tx, row.Server, row.ID); err != nil {
		return false, err
	}
	return true, endRow(tx, row, JobCancelled, "cancelled on the master, and its server lost it: "+reason)
}

// requeueServerJobs puts back in line every job the table has Processing
// at a server that lost them (it restarted, or left), whether a Run waits
// for them or not, and ends those being cancelled, whose ids it returns.
func requeueServerJobs(tx *bolt.Tx, server string, why error, now time.Time) (cancelled []string, err error) {
	var lost []*jobRow
	held := func(at []byte) bool { return string(at) == server }
	for _, id := range openJobIDs(tx, held) {
		row, err := getJob(tx, string(id))
		if err != nil {
			return nil, err
		}
		if row != nil && row.Status == JobProcessing && row.Server == server {
			lost = append(lost, row)
		}
	}
	for _, row := range lost {
		ended, err := loseRow(tx, row, reason(why), now)
		if err != nil {
			return nil, err
		}
		if ended {
			cancelled = append(cancelled, row.ID)
		}
	}
	return cancelled, nil
}
