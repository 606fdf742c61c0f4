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
	// Result is set for EventFinished.
	Result Result
	// Concurrency and Parallelism are the concurrency level and
	// min(level, pool size) after the change, for EventConcurrency.
	Concurrency, Parallelism int
}

// eventQueue hands events to the observer in order, from one goroutine.
// Producers push while holding the Executor's lock; the observer runs
// without it.
type eventQueue struct {
	fn     func(Event)
	mu     sync.Mutex
	cond   sync.Cond
	items  []Event
	closed bool
	exited chan struct{} // closed when run returns
}

func newEventQueue(fn func(Event)) *eventQueue {
	q := &eventQueue{fn: fn, exited: make(chan struct{})}
	q.cond.L = &q.mu
	return q
}

func (q *eventQueue) push(ev Event) {
	q.mu.Lock()
	q.items = append(q.items, ev)
	q.mu.Unlock()
	q.cond.Signal()
}

// close lets run return once the queued events are delivered.
func (q *eventQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Signal()
}

// wait returns once run has returned.
func (q *eventQueue) wait() { <-q.exited }

// run delivers events until close; it is the queue's only consumer.
func (q *eventQueue) run() {
	defer close(q.exited)
	var batch []Event
	for {
		q.mu.Lock()
		for len(q.items) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.items) == 0 {
			q.mu.Unlock()
			return
		}
		// Swap buffers, so producers append to the other one meanwhile.
		batch, q.items = q.items, batch[:0]
		q.mu.Unlock()
		for i := range batch {
			q.fn(batch[i])
			batch[i] = Event{}
		}
	}
}
