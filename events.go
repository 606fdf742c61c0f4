package laboro

import (
	"sync"
	"time"
)

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of Event.
const (
	// EventQueued: a job entered the buffer.
	EventQueued EventKind = iota + 1
	// EventStarted: a worker took a job from the buffer and runs it.
	EventStarted
	// EventFinished: a job ended; Result says how. Every job that was
	// queued has exactly one, whether it ran, was stopped or was terminated.
	EventFinished
	// EventConcurrency: the concurrency level changed.
	EventConcurrency
)

var eventNames = [...]string{"", "queued", "started", "finished", "concurrency"}

// String returns the kind in one word.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "event?"
}

// Event is one change of an Executor's state, given to the function set
// with WithObserver.
type Event struct {
	Kind EventKind
	// Time is when the change happened: for EventFinished, the run's end
	// as the Runner gave it (Result.Ended) when it did.
	Time time.Time
	// Job is the job concerned, with its id; zero for EventConcurrency.
	Job Job
	// Waited is set for EventStarted: how long the job waited in the
	// buffer, from its EventQueued.
	Waited time.Duration
	// Result is set for EventFinished.
	Result Result
	// Concurrency and Parallelism are the concurrency level and
	// min(level, pool size) after the change, for EventConcurrency.
	Concurrency, Parallelism int
}

// eventQueue hands events to the observer in order, from one goroutine.
// Producers push while holding the Executor's lock, which guards the queue
// too: a push appends a small record (the Event itself is built by the
// observer's goroutine, from the job's Handle), and wakes that goroutine
// only when it sleeps. Once woken, it lets events gather (eventBatch)
// before it takes them, so that a busy Executor wakes it a hundred times a
// second at most rather than once per event; it runs the observer without
// the lock.
type eventQueue struct {
	fn     func(Event)
	mu     *sync.Mutex // the Executor's
	items  []eventRecord
	asleep bool          // run waits on wake
	closed bool          // no more events: run returns once items is empty
	wake   chan struct{} // room for one
	exited chan struct{} // closed when run returns
}

// eventRecord is an Event as queued. The job and, for EventFinished, its
// Result are read from h when the Event is built: neither changes once the
// job is in the buffer, and its Result is kept in h before the event is
// pushed (retire).
type eventRecord struct {
	kind   EventKind
	h      *Handle // nil for EventConcurrency
	time   time.Time
	waited time.Duration
	n, p   int // concurrency and parallelism, for EventConcurrency
}

// event builds the Event that r stands for.
func (r *eventRecord) event() Event {
	ev := Event{Kind: r.kind, Time: r.time, Waited: r.waited, Concurrency: r.n, Parallelism: r.p}
	if r.h != nil {
		ev.Job = r.h.j.job()
		if r.kind == EventFinished {
			ev.Result = r.h.result()
		}
	}
	return ev
}

// eventBatch is how long the observer's goroutine lets events gather after
// it is woken: the most an event waits before the observer sees it, besides
// the observer's own time on earlier events. After a batch of busyBatch
// events or more, it waits busyWait instead: fewer wake-ups of a goroutine
// that would compete with the jobs for the processors (a tenth of their rate
// at a million function jobs a second on two cores, against a millisecond).
const (
	eventBatch = time.Millisecond
	busyBatch  = 64
	busyWait   = 10 * time.Millisecond
)

func newEventQueue(fn func(Event), mu *sync.Mutex) *eventQueue {
	return &eventQueue{fn: fn, mu: mu, wake: make(chan struct{}, 1), exited: make(chan struct{})}
}

// push queues r. q.mu is held.
func (q *eventQueue) push(r eventRecord) {
	q.items = append(q.items, r)
	q.awaken()
}

// awaken wakes run if it sleeps. q.mu is held.
func (q *eventQueue) awaken() {
	if q.asleep {
		q.asleep = false
		q.wake <- struct{}{}
	}
}

// close lets run return once the queued events are delivered. q.mu is not
// held.
func (q *eventQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.awaken()
	q.mu.Unlock()
}

// wait returns once run has returned.
func (q *eventQueue) wait() { <-q.exited }

// run delivers events until close; it is the queue's only consumer.
func (q *eventQueue) run() {
	defer close(q.exited)
	var batch []eventRecord
	wait := eventBatch
	for {
		q.mu.Lock()
		if len(q.items) == 0 {
			if q.closed {
				q.mu.Unlock()
				return
			}
			q.asleep = true
			q.mu.Unlock()
			<-q.wake
			time.Sleep(wait)
			continue
		}
		// Swap buffers, so producers append to the other one meanwhile.
		batch, q.items = q.items, batch[:0]
		q.mu.Unlock()
		wait = eventBatch
		if len(batch) >= busyBatch {
			wait = busyWait
		}
		for i := range batch {
			q.fn(batch[i].event())
			batch[i].h = nil
		}
	}
}
