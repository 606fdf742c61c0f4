package cli

import (
	"sync"

	"github.com/laboro-go/laboro"
)

// Ends lets a Batch learn of its jobs' ends from the Executor's observer,
// in batches and in the order the jobs ended, rather than by a wait for
// each job: a batch of many short jobs (laboro run's) then wakes one
// goroutine for each batch of ends rather than one for each job, and
// refills the Executor's buffer in batches rather than a job each time a
// place frees.
//
// The Executor must be made with laboro.WithObserver(ends.Observe) and a
// buffer that holds Ahead jobs, and serve one Stream at a time. Jobs that
// others submit to the same Executor (a console's) are no concern of the
// batch's: their ends are passed over.
type Ends struct {
	// Ahead returns how many of the batch's jobs the batch keeps in the
	// Executor, running and queued: enough for its workers not to run out
	// of jobs while the ends of others wait to be told (the observer's
	// events come up to 10 ms late while the Executor is busy). It is
	// called again each time that many are in, so that it may follow the
	// concurrency level.
	Ahead func() int

	mu       sync.Mutex
	finished func(laboro.Event) // the running Stream's; nil between Streams
}

// Observe is the Executor's observer (laboro.WithObserver): it hands each
// job's end to the Stream that runs.
func (e *Ends) Observe(ev laboro.Event) {
	if ev.Kind != laboro.EventFinished {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.finished != nil {
		e.finished(ev)
	}
}

// follow has fn called with each end from now on; nil stops it, and once
// follow(nil) has returned fn is not running and is not called again.
func (e *Ends) follow(fn func(laboro.Event)) {
	e.mu.Lock()
	e.finished = fn
	e.mu.Unlock()
}
