package transport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"go.uber.org/zap"
)

// Errors of a Dispatcher; match them with errors.Is.
var (
	// ErrDuplicate: Add of a key that an unsettled ticket has.
	ErrDuplicate = errors.New("transport: a job with this key is already dispatched")
	// ErrClosed: Add after Close, and the Err (with laboro.ErrKilled) of
	// the tickets Close settled.
	ErrClosed = errors.New("transport: dispatcher closed")
	// ErrNotHeld: Complete of a ticket the worker was never handed. The
	// result is discarded.
	ErrNotHeld = errors.New("transport: result for a job this worker was not handed")
	// ErrLate: Complete of a ticket that has already ended (abandoned,
	// cancelled, or completed by another worker), or of an unknown key. The
	// result is discarded and its output closed.
	ErrLate = errors.New("transport: result of a job that has already ended")
	// ErrAttempts wraps the Err of a ticket that was handed out
	// Config.MaxAttempts times without a result that ends it (each worker
	// lost it, or failed it in a way that is worth another try).
	ErrAttempts = errors.New("transport: job handed out too many times")
	// ErrLeaseExpired is the reason logged when a worker's jobs go back in
	// line because it showed no sign of life for Config.Lease.
	ErrLeaseExpired = errors.New("transport: worker's lease expired")
)

// Config configures a Dispatcher. Its zero value is valid: no lease, no
// grace, unlimited attempts, no logging.
type Config struct {
	// Lease is how long a worker may go without showing life (Worker.Renew)
	// before the jobs it holds go back in line; 0 means no lease: a worker
	// holds its jobs until it leaves.
	Lease time.Duration
	// Grace is how long the jobs of a worker that left wait for a worker
	// to say it still runs them (Worker.Reclaim) before they go back in
	// line; 0 means they go back at once.
	Grace time.Duration
	// MaxAttempts is how many times a job may be handed out without a
	// result (its worker lost, or Worker.Retry) before it ends failed with
	// ErrAttempts; 0 means no limit.
	MaxAttempts int
	// Logger; nil means none.
	Logger *zap.Logger
}

// Dispatcher hands the jobs of a remote manager to its workers: the part
// that every protocol's manager side shares, whatever its wire.
//
// The manager side calls Run (or Add and Wait) from its laboro.Runner: the
// job waits in line, first come first served, until a worker takes it.
// Jobs go to workers by pull (Worker.Next blocks until one is there, for
// protocols where the worker asks) or by push (Worker.Wake tells the
// worker's goroutine that work came, and Worker.Take hands it over, for
// protocols where the manager sends). A worker reports each result with
// Worker.Complete; the first result of a job ends it, and any later one is
// discarded with its output closed.
//
// A job never stays with a worker that is gone: when a worker leaves (its
// connection ended), its jobs go back to the front of the line after
// Config.Grace, unless a worker says it still runs them (Worker.Reclaim);
// when a worker shows no sign of life for Config.Lease, its jobs go back
// at once. A job whose Run ends first (Executor.Cancel, a timeout, Close)
// ends at once: it leaves the line, or the worker that holds it is told to
// cancel it through the function given to Join; a worker that cannot be
// told learns it when it next reclaims the job, and its result is dropped.
//
// K is the key by which the wire names a job (a job id, a task number);
// V is what the protocol needs to send it. A Dispatcher is safe for
// concurrent use; its zero value is not usable: make one with
// NewDispatcher.
type Dispatcher[K comparable, V any] struct {
	cfg Config
	log *zap.Logger

	mu      sync.Mutex
	tickets map[K]*Ticket[K, V] // unsettled tickets
	bigMap  bool                // tickets was made for a big AddAll
	line    line[K, V]          // tickets waiting for a worker
	workers map[*Worker[K, V]]struct{}
	leaving map[*Worker[K, V]]struct{} // workers that left, within their grace
	hungry  []*Worker[K, V]            // workers that found too little in line, to wake
	seq     uint64                     // numbers tickets in the order they were added
	closed  bool
	settled func(*Ticket[K, V])
	after   after[K, V] // what unlock does once the lock is released

	requeued func(w *Worker[K, V], keys []K, why error) // see OnRequeue
}

// after is what the Dispatcher does once its lock is released: wake
// workers, tell them to cancel jobs, and report settled tickets.
type after[K comparable, V any] struct {
	wake    []*Worker[K, V]
	cancel  map[*Worker[K, V]][]K
	settled []*Ticket[K, V]

	requeued []lost[K, V]
}

// lost is a worker's jobs that went back in line, for OnRequeue.
type lost[K comparable, V any] struct {
	w    *Worker[K, V]
	keys []K
	why  error
}

// NewDispatcher returns a Dispatcher with cfg.
func NewDispatcher[K comparable, V any](cfg Config) *Dispatcher[K, V] {
	d := &Dispatcher[K, V]{
		cfg:     cfg,
		log:     cfg.Logger,
		tickets: make(map[K]*Ticket[K, V]),
		workers: make(map[*Worker[K, V]]struct{}),
		leaving: make(map[*Worker[K, V]]struct{}),
	}
	if d.log == nil {
		d.log = zap.NewNop()
	}
	return d
}

// Ticket is one job inside a Dispatcher, from Add until it is settled: by
// its first result, by Abandon, or by running out of attempts.
type Ticket[K comparable, V any] struct {
	// Key names the job on the wire; Value is what the protocol sends.
	Key   K
	Value V

	d        *Dispatcher[K, V]
	seq      uint64
	deadline time.Time // of the Run's context; zero for none

	// Guarded by the Dispatcher's lock.
	done     chan struct{} // made on demand; closed once settled
	state    ticketState
	gen      uint64 // counts the times it entered the line
	holder   *Worker[K, V]
	handed   []*Worker[K, V] // every worker it was handed to, for Complete
	attempts int
	sent     time.Time      // when it was last handed out
	res      *laboro.Result // set once settled: most tickets wait, unsettled, in line
	lost     error          // why a worker last lost it; see Lost
}

type ticketState uint8

const (
	waiting ticketState = iota // in line
	held                       // handed to a worker
	settled                    // ended; res is final
)

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Done returns a channel that is closed once the ticket is settled.
func (t *Ticket[K, V]) Done() <-chan struct{} {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	if t.state == settled {
		return closedChan
	}
	if t.done == nil {
		t.done = make(chan struct{})
	}
	return t.done
}

// Result returns the ticket's result and true once it is settled.
func (t *Ticket[K, V]) Result() (laboro.Result, bool) {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	if t.state != settled {
		return laboro.Result{}, false
	}
	return *t.res, true
}

// Attempts returns how many times the job was handed to a worker.
func (t *Ticket[K, V]) Attempts() int {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	return t.attempts
}

// Lost returns why the job last went back in line from a worker that lost
// it: the worker left, its lease expired (ErrLeaseExpired), Retry's error,
// Return's reason; nil if that never happened. A Release leaves it as it
// was. A protocol whose durable record still names the worker that lost
// the job, when another takes it before OnRequeue's call, records this.
func (t *Ticket[K, V]) Lost() error {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	return t.lost
}

// Holder returns the name of the worker that holds the job; "" while it
// waits in line or once settled.
func (t *Ticket[K, V]) Holder() string {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	if t.holder == nil {
		return ""
	}
	return t.holder.name
}

// OnSettle sets a function called with every ticket once it is settled,
// whatever settled it, never with the Dispatcher's lock held; for a
// protocol that follows its jobs' ends without a goroutine per ticket
// (a job of many tasks). Set it before the first Add.
func (d *Dispatcher[K, V]) OnSettle(f func(*Ticket[K, V])) {
	d.mu.Lock()
	d.settled = f
	d.mu.Unlock()
}

// OnRequeue sets a function called when the jobs a worker held go back in
// line because the worker was lost: it left (after Config.Grace) or its
// lease expired. It gets the worker, the keys of those jobs, in the order
// they were handed out, and why; jobs that ran out of attempts are settled
// instead (see OnSettle) and are not among them. It is called never with
// the Dispatcher's lock held, in the goroutine of Leave or of the timer
// that ended the grace or the lease; by then another worker may already
// have taken the jobs. It is for a protocol that keeps a durable record of
// who holds what. Set it before the first Join.
func (d *Dispatcher[K, V]) OnRequeue(f func(w *Worker[K, V], keys []K, why error)) {
	d.mu.Lock()
	d.requeued = f
	d.mu.Unlock()
}

// unlock releases the lock, then does what the critical section left to
// do: wake hungry workers, tell workers to cancel, report settled tickets
// and lost workers' jobs.
func (d *Dispatcher[K, V]) unlock() {
	a := d.after
	d.after = after[K, V]{}
	if len(d.hungry) > 0 && d.line.n > 0 {
		a.wake = d.hungry
		for _, w := range a.wake {
			w.isHungry = false
		}
		d.hungry = nil
	}
	notify, requeued := d.settled, d.requeued
	d.mu.Unlock()
	for _, w := range a.wake {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	for w, keys := range a.cancel {
		w.cancel(keys)
	}
	if notify != nil {
		for _, t := range a.settled {
			notify(t)
		}
	}
	if requeued != nil {
		for _, l := range a.requeued {
			requeued(l.w, l.keys, l.why)
		}
	}
}

// tellCancel has worker w told to cancel key, once the lock is released,
// if w is still there. d.mu is held.
func (d *Dispatcher[K, V]) tellCancel(w *Worker[K, V], key K) {
	if w == nil || w.gone {
		return
	}
	if d.after.cancel == nil {
		d.after.cancel = map[*Worker[K, V]][]K{}
	}
	d.after.cancel[w] = append(d.after.cancel[w], key)
}

// Deadline returns the deadline of the context the job was added with (a
// Job.Timeout applied by the Executor), for protocols that can carry it to
// the worker; false when it has none.
func (t *Ticket[K, V]) Deadline() (time.Time, bool) { return t.deadline, !t.deadline.IsZero() }

// Add puts a job in line and returns its ticket. ctx gives the job's
// deadline (see Ticket.Deadline); Add does not wait. It fails with
// ErrDuplicate while another unsettled ticket has key, and with ErrClosed
// after Close.
func (d *Dispatcher[K, V]) Add(ctx context.Context, key K, v V) (*Ticket[K, V], error) {
	t := &Ticket[K, V]{d: d, Key: key, Value: v}
	t.deadline, _ = ctx.Deadline()
	d.mu.Lock()
	switch {
	case d.closed:
		d.mu.Unlock()
		return nil, ErrClosed
	case d.tickets[key] != nil:
		d.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", ErrDuplicate, key)
	}
	d.seq++
	t.seq = d.seq
	d.tickets[key] = t
	d.line.pushBack(t)
	d.unlock()
	return t, nil
}

// AddAll puts jobs in line, values[i] under keys[i], in order, and
// returns their tickets: Add for many jobs at once (a fuq job's million
// tasks), with one lock and one allocation for all the tickets. It adds
// none if one key is taken (ErrDuplicate, also for a key given twice), or
// after Close (ErrClosed).
func (d *Dispatcher[K, V]) AddAll(ctx context.Context, keys []K, values []V) ([]*Ticket[K, V], error) {
	if len(keys) != len(values) {
		return nil, fmt.Errorf("transport: AddAll: %d keys for %d values", len(keys), len(values))
	}
	deadline, _ := ctx.Deadline()
	all := make([]Ticket[K, V], len(keys))
	ts := make([]*Ticket[K, V], len(keys))
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	if len(keys) >= 1024 {
		// Room for them all at once, rather than growing step by step.
		grown := make(map[K]*Ticket[K, V], len(d.tickets)+len(keys))
		maps.Copy(grown, d.tickets)
		d.tickets, d.bigMap = grown, true
	}
	for i, key := range keys {
		t := &all[i]
		t.d, t.Key, t.Value, t.deadline = d, key, values[i], deadline
		if d.tickets[key] != nil {
			for _, added := range ts[:i] { // none, after all
				delete(d.tickets, added.Key)
			}
			d.mu.Unlock()
			return nil, fmt.Errorf("%w: %v", ErrDuplicate, key)
		}
		d.tickets[key] = t
		ts[i] = t
	}
	for _, t := range ts {
		d.seq++
		t.seq = d.seq
		d.line.pushBack(t)
	}
	d.unlock()
	return ts, nil
}

// Wait waits for t's result and returns it. If ctx ends first, the ticket
// is abandoned (see Abandon) and Wait returns at once with the status that
// ctx's cause gives (laboro.Interruption): its worker is told to cancel
// it, and a result that comes later is discarded.
func (d *Dispatcher[K, V]) Wait(ctx context.Context, t *Ticket[K, V]) laboro.Result {
	done := t.Done()
	select {
	case <-done:
		return *t.res
	case <-ctx.Done():
	}
	res := laboro.Result{ExitCode: -1, Ended: time.Now()}
	res.Status, res.Err = laboro.Interruption(ctx)
	d.Abandon(t, res) // false: the result came meanwhile
	<-done
	return *t.res
}

// Run adds a job under key and waits for its result: Add, then Wait. A job
// that cannot be added fails (ErrDuplicate, ErrClosed).
func (d *Dispatcher[K, V]) Run(ctx context.Context, key K, v V) laboro.Result {
	t, err := d.Add(ctx, key, v)
	if err != nil {
		now := time.Now()
		return laboro.Result{Status: laboro.StatusFailed, ExitCode: -1, Err: err, Started: now, Ended: now}
	}
	return d.Wait(ctx, t)
}

// Abandon settles t with res, unless it is settled already (then it
// returns false). A ticket in line leaves it; a ticket held by a worker
// that is still there is cancelled through that worker's cancel function.
// Its result, should it come, is discarded.
func (d *Dispatcher[K, V]) Abandon(t *Ticket[K, V], res laboro.Result) bool {
	d.mu.Lock()
	defer d.unlock()
	if t.state == settled {
		return false
	}
	d.tellCancel(t.holder, t.Key)
	if res.Started.IsZero() {
		res.Started = t.sent
	}
	d.settle(t, res)
	return true
}

// AbandonAll abandons every unsettled ticket of ts with res, and tells
// each worker that holds some of them once, with all their keys.
func (d *Dispatcher[K, V]) AbandonAll(ts []*Ticket[K, V], res laboro.Result) {
	d.mu.Lock()
	defer d.unlock()
	for _, t := range ts {
		if t.state == settled {
			continue
		}
		d.tellCancel(t.holder, t.Key)
		r := res
		if r.Started.IsZero() {
			r.Started = t.sent
		}
		d.settle(t, r)
	}
}

// Close settles every unsettled ticket as killed (its Err matches
// laboro.ErrKilled and ErrClosed), without telling workers, and refuses
// Adds from then on. Workers stay joined until they leave.
func (d *Dispatcher[K, V]) Close() {
	d.mu.Lock()
	defer d.unlock()
	d.closed = true
	res := laboro.Result{Status: laboro.StatusKilled, ExitCode: -1, Err: fmt.Errorf("%w: %w", laboro.ErrKilled, ErrClosed)}
	for _, t := range d.tickets {
		r := res
		r.Started, r.Ended = t.sent, time.Now()
		d.settle(t, r)
	}
	for w := range d.workers {
		w.stopTimers()
		d.wakeLocked(w) // a Next returns
	}
	for w := range d.leaving {
		w.stopTimers()
		delete(d.leaving, w)
	}
}

// wakeLocked has w woken once the lock is released. d.mu is held.
func (d *Dispatcher[K, V]) wakeLocked(w *Worker[K, V]) {
	d.after.wake = append(d.after.wake, w)
}

// Stats are a Dispatcher's counters, read together.
type Stats struct {
	Waiting int // jobs in line
	Held    int // jobs handed to workers (including workers that left, within their grace)
	Workers int // workers joined
}

// Stats returns the Dispatcher's counters.
func (d *Dispatcher[K, V]) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Stats{Waiting: d.line.n, Held: len(d.tickets) - d.line.n, Workers: len(d.workers)}
}

// Lookup returns the unsettled ticket of key.
func (d *Dispatcher[K, V]) Lookup(key K) (*Ticket[K, V], bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tickets[key]
	return t, t != nil
}

// settle gives t its final result and wakes its Wait. d.mu is held.
func (d *Dispatcher[K, V]) settle(t *Ticket[K, V], res laboro.Result) {
	if t.state == waiting {
		d.line.remove(t)
	}
	if h := t.holder; h != nil {
		delete(h.held, t)
	}
	t.holder, t.handed = nil, nil
	t.state = settled
	t.res = &res
	delete(d.tickets, t.Key)
	if len(d.tickets) == 0 && d.bigMap {
		d.tickets, d.bigMap = map[K]*Ticket[K, V]{}, false // a map does not shrink: let a big one go
	}
	if t.done != nil {
		close(t.done)
	}
	if d.settled != nil {
		d.after.settled = append(d.after.settled, t)
	}
}

// requeue puts tickets that their worker lost back at the front of the
// line, in their order, or ends those out of attempts. d.mu is held.
func (d *Dispatcher[K, V]) requeue(ts []*Ticket[K, V], why error) {
	for i := len(ts) - 1; i >= 0; i-- {
		t := ts[i]
		if why != nil {
			t.lost = why
		}
		if t.holder != nil {
			delete(t.holder.held, t)
			t.holder = nil
		}
		if d.cfg.MaxAttempts > 0 && t.attempts >= d.cfg.MaxAttempts {
			d.settle(t, laboro.Result{Status: laboro.StatusFailed, ExitCode: -1, Started: t.sent, Ended: time.Now(),
				Err: &attemptsError{n: t.attempts, last: t.lost}})
			continue
		}
		t.state = waiting
		d.line.pushFront(t)
	}
}

// attemptsError ends a job handed out Config.MaxAttempts times. It says
// the last attempt's reason first: what a user acts on is why the job
// failed ("exit status 3: …"), the count comes after. It matches
// ErrAttempts and that reason.
type attemptsError struct {
	n    int
	last error
}

func (e *attemptsError) Error() string {
	if e.last == nil {
		return fmt.Sprintf("%v (%d times)", ErrAttempts, e.n)
	}
	return fmt.Sprintf("%v (handed out %d times, the limit)", e.last, e.n)
}

func (e *attemptsError) Unwrap() []error {
	if e.last == nil {
		return []error{ErrAttempts}
	}
	return []error{ErrAttempts, e.last}
}

// Worker is one remote worker as the Dispatcher sees it, from Join to
// Leave. Its methods are safe for concurrent use.
type Worker[K comparable, V any] struct {
	d      *Dispatcher[K, V]
	name   string
	cancel func(keys []K)
	wake   chan struct{}

	// Guarded by the Dispatcher's lock.
	held     map[*Ticket[K, V]]struct{}
	isHungry bool
	gone     bool      // left
	renewed  time.Time // last sign of life
	lease    *time.Timer
	grace    *time.Timer
}

// Join adds a worker. name is for logs and Stats. cancel is called, never
// with the Dispatcher's lock held and never after Leave, with the keys of
// jobs this worker holds that ended without it (their Run gave up, or
// another worker's result came first): the protocol tells the worker to
// kill them. cancel must not block for long; nil means the protocol cannot
// tell the worker, which runs them to their end.
func (d *Dispatcher[K, V]) Join(name string, cancel func(keys []K)) *Worker[K, V] {
	if cancel == nil {
		cancel = func([]K) {}
	}
	w := &Worker[K, V]{d: d, name: name, cancel: cancel, wake: make(chan struct{}, 1), held: map[*Ticket[K, V]]struct{}{}}
	d.mu.Lock()
	d.workers[w] = struct{}{}
	w.renewed = time.Now()
	if d.cfg.Lease > 0 && !d.closed {
		w.lease = time.AfterFunc(d.cfg.Lease, w.checkLease)
	}
	d.mu.Unlock()
	return w
}

// Name returns the name the worker joined with.
func (w *Worker[K, V]) Name() string { return w.name }

// Wake returns a channel that receives when jobs came in line after a
// Take or Next of this worker found fewer than it wanted. A push protocol
// selects on it in the worker's goroutine and then calls Take.
func (w *Worker[K, V]) Wake() <-chan struct{} { return w.wake }

// Take hands this worker up to n jobs from the front of the line, skipping
// those accept refuses (nil accepts all), and returns them; none when the
// line has none for it. It never waits. A worker that got fewer than n is
// woken (Wake) when more come; one that got n should Take again before it
// waits on Wake.
func (w *Worker[K, V]) Take(n int, accept func(V) bool) []*Ticket[K, V] {
	d := w.d
	d.mu.Lock()
	defer d.unlock()
	if w.gone || d.closed {
		return nil
	}
	var ts []*Ticket[K, V]
	if n > 0 {
		ts = d.line.take(n, accept)
	}
	now := time.Now()
	for _, t := range ts {
		t.state, t.holder, t.sent = held, w, now
		t.attempts++
		t.handed = append(t.handed, w)
		w.held[t] = struct{}{}
	}
	if len(ts) < n && !w.isHungry {
		w.isHungry = true
		d.hungry = append(d.hungry, w)
	}
	return ts
}

// Next hands this worker the job at the front of the line that accept
// takes, waiting up to wait for one (or until ctx ends, or the worker
// leaves); nil when none came.
func (w *Worker[K, V]) Next(ctx context.Context, wait time.Duration, accept func(V) bool) *Ticket[K, V] {
	var timer <-chan time.Time
	for {
		if ts := w.Take(1, accept); len(ts) == 1 {
			return ts[0]
		}
		if w.out() {
			return nil
		}
		if timer == nil {
			if wait <= 0 {
				return nil
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-w.wake:
		case <-timer:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// Complete reports the result of the job key from this worker. The first
// result of a job settles it and is delivered to its Run; a result from a
// worker the job was never handed fails with ErrNotHeld, and one of a job
// that has ended already with ErrLate; either is discarded and its output
// closed. Another worker that holds the job (it was handed out again) is
// told to cancel it. As in the Executor, a Result.Status of 0 becomes
// StatusSucceeded, or StatusFailed with an Err; Result.Started, when zero,
// becomes the time the job was handed out, and Result.Ended, when zero,
// now. A result from a worker that lost the job (it left, or its lease
// expired) is taken too while the job has none.
func (w *Worker[K, V]) Complete(key K, res laboro.Result) error {
	d := w.d
	d.mu.Lock()
	t := d.tickets[key]
	var err error
	switch {
	case t == nil:
		err = fmt.Errorf("%w: %v", ErrLate, key)
	case !handedTo(t, w):
		err = fmt.Errorf("%w: %v", ErrNotHeld, key)
	}
	if err != nil {
		d.unlock()
		res.Output.Close()
		return err
	}
	if other := t.holder; other != w {
		d.tellCancel(other, key)
	}
	if res.Status == 0 {
		res.Status = laboro.StatusSucceeded
		if res.Err != nil {
			res.Status = laboro.StatusFailed
		}
	}
	if res.Started.IsZero() {
		res.Started = t.sent
	}
	if res.Ended.IsZero() {
		res.Ended = time.Now()
	}
	d.settle(t, res)
	w.renewed = time.Now()
	d.unlock()
	return nil
}

// out reports whether the worker left or the Dispatcher closed.
func (w *Worker[K, V]) out() bool {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	return w.gone || w.d.closed
}

func handedTo[K comparable, V any](t *Ticket[K, V], w *Worker[K, V]) bool {
	for _, h := range t.handed {
		if h == w {
			return true
		}
	}
	return false
}

// Release gives back a job this worker took but did not start (it had no
// room after all): it goes to the front of the line, and the hand-out does
// not count as an attempt. It returns false if the worker does not hold it.
func (w *Worker[K, V]) Release(t *Ticket[K, V]) bool { return w.Return(t, nil) }

// Return gives back, as Release does, a job handed to this worker that
// the worker never received as far as the protocol can tell (the answer
// that carried it was lost), and records why for Lost. It returns false if
// the worker does not hold it.
func (w *Worker[K, V]) Return(t *Ticket[K, V], why error) bool {
	d := w.d
	d.mu.Lock()
	if t.holder != w || t.state != held {
		d.unlock()
		return false
	}
	t.attempts--
	t.handed = t.handed[:len(t.handed)-1]
	d.requeue([]*Ticket[K, V]{t}, why)
	d.unlock()
	return true
}

// Retry gives back a job that failed on this worker in a way another
// worker may not (the worker's own fault): it goes to the front of the
// line, or, once handed out Config.MaxAttempts times, ends failed with an
// error matching ErrAttempts and err, whose text is err's first. It returns false if the worker does
// not hold it.
func (w *Worker[K, V]) Retry(t *Ticket[K, V], err error) bool {
	d := w.d
	d.mu.Lock()
	if t.holder != w || t.state != held {
		d.unlock()
		return false
	}
	d.requeue([]*Ticket[K, V]{t}, err)
	d.unlock()
	return true
}

// Reclaim records that this worker runs the job key (a worker that
// reconnects names the jobs it still runs): the job is held by this worker
// from now on, out of the line or away from the worker that left it. If
// the job was handed meanwhile to another worker that is still joined,
// that worker is told to cancel it (through its cancel function), so that
// a job runs only where the Dispatcher counts it. It returns false when no
// job of that key is unsettled: the protocol should tell the worker to
// cancel it, and its result will be discarded.
func (w *Worker[K, V]) Reclaim(key K) (*Ticket[K, V], bool) {
	d := w.d
	d.mu.Lock()
	defer d.unlock()
	t := d.tickets[key]
	if t == nil || w.gone {
		return nil, false
	}
	switch t.state {
	case waiting:
		d.line.remove(t)
		t.attempts++
	case held:
		if t.holder == w {
			return t, true
		}
		delete(t.holder.held, t)
		d.tellCancel(t.holder, key)
	}
	t.state, t.holder = held, w
	if !handedTo(t, w) {
		t.handed = append(t.handed, w)
	}
	if t.sent.IsZero() {
		t.sent = time.Now()
	}
	w.held[t] = struct{}{}
	return t, true
}

// Renew records a sign of life of this worker: its lease runs again from
// now.
func (w *Worker[K, V]) Renew() {
	w.d.mu.Lock()
	w.renewed = time.Now()
	w.d.mu.Unlock()
}

// Held returns the keys of the jobs this worker holds.
func (w *Worker[K, V]) Held() []K {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	keys := make([]K, 0, len(w.held))
	for t := range w.held {
		keys = append(keys, t.Key)
	}
	return keys
}

// Leave removes the worker (its connection ended; err says why, nil for a
// clean goodbye). Its jobs wait Config.Grace for a worker to reclaim them,
// then go back to the front of the line. After Leave, the worker takes no
// job and its cancel function is not called again.
func (w *Worker[K, V]) Leave(err error) {
	d := w.d
	d.mu.Lock()
	defer d.unlock()
	if _, joined := d.workers[w]; !joined {
		return
	}
	delete(d.workers, w)
	w.gone = true
	w.stopTimers()
	d.wakeLocked(w) // its Next returns
	if n := len(w.held); n > 0 && d.cfg.Grace > 0 && !d.closed {
		d.leaving[w] = struct{}{}
		w.grace = time.AfterFunc(d.cfg.Grace, func() { w.lose(fmt.Errorf("worker %s did not come back: %w", w.name, errOr(err, errLeft))) })
		d.log.Info("worker left; its jobs wait for it", zap.String("worker", w.name), zap.Int("jobs", n),
			zap.Duration("grace", d.cfg.Grace), zap.Error(err))
		return
	}
	d.loseLocked(w, errOr(err, errLeft))
}

var errLeft = errors.New("worker left")

// Await sets the waiting jobs of keys aside, as the jobs of a worker
// named name that left (why says why): for Config.Grace a worker may
// Reclaim them, or Complete them after a Reclaim, and those still aside
// then go back to the front of the line. It is for jobs that may be
// running on workers the Dispatcher has not met: those of a program
// started again, whose workers come back to say what they ran and what
// ended meanwhile. Without a Grace it does nothing.
func (d *Dispatcher[K, V]) Await(name string, keys []K, why error) {
	if d.cfg.Grace <= 0 || len(keys) == 0 {
		return
	}
	w := d.Join(name, nil)
	d.mu.Lock()
	for _, k := range keys {
		if t := d.tickets[k]; t != nil && t.state == waiting {
			d.line.unqueue(t)
			t.state, t.holder = held, w
			w.held[t] = struct{}{}
		}
	}
	d.line.tidy()
	d.mu.Unlock() // nothing to do after: the line only shrank
	w.Leave(why)
}

func errOr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// lose puts every job the worker that left holds back in line, once its
// grace has passed.
func (w *Worker[K, V]) lose(why error) {
	d := w.d
	d.mu.Lock()
	defer d.unlock()
	if _, ok := d.leaving[w]; !ok {
		return // Close came first
	}
	delete(d.leaving, w)
	w.grace = nil
	d.loseLocked(w, why)
}

// loseLocked puts the jobs w holds back in line. d.mu is held.
func (d *Dispatcher[K, V]) loseLocked(w *Worker[K, V], why error) {
	ts := w.heldInOrder()
	d.requeue(ts, why)
	if len(ts) > 0 {
		d.log.Warn("worker's jobs go back in line", zap.String("worker", w.name), zap.Int("jobs", len(ts)), zap.Error(why))
	}
	if d.requeued == nil {
		return
	}
	var keys []K
	for _, t := range ts {
		if t.state == waiting {
			keys = append(keys, t.Key)
		}
	}
	if len(keys) > 0 {
		d.after.requeued = append(d.after.requeued, lost[K, V]{w: w, keys: keys, why: why})
	}
}

// heldInOrder returns the tickets the worker holds, in the order they
// were handed out. d.mu is held.
func (w *Worker[K, V]) heldInOrder() []*Ticket[K, V] {
	ts := make([]*Ticket[K, V], 0, len(w.held))
	for t := range w.held {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *Ticket[K, V]) int { return cmp.Compare(a.seq, b.seq) })
	return ts
}

// checkLease runs when the lease may have run out.
func (w *Worker[K, V]) checkLease() {
	d := w.d
	d.mu.Lock()
	if w.lease == nil {
		d.mu.Unlock()
		return
	}
	if left := d.cfg.Lease - time.Since(w.renewed); left > 0 {
		w.lease.Reset(left)
		d.mu.Unlock()
		return
	}
	// Expired: its jobs go back; the worker may show life again later,
	// and its results are still taken.
	w.lease.Reset(d.cfg.Lease)
	d.loseLocked(w, ErrLeaseExpired)
	d.unlock()
}

// stopTimers stops the worker's lease and grace timers. d.mu is held.
func (w *Worker[K, V]) stopTimers() {
	if w.lease != nil {
		w.lease.Stop()
		w.lease = nil
	}
	if w.grace != nil {
		w.grace.Stop()
		w.grace = nil
	}
}
