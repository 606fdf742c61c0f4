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

// endsPending holds the jobs of a Stream with Ends that were submitted and
// not reported, by id. A batch may submit a job with the id of one that
// has ended and whose end is not told yet (the Executor refuses only the
// ids of jobs it holds): the ends of the two are told in that order, so
// the later ones wait in line behind the first.
type endsPending struct {
	first map[string]*laboro.Handle
	later map[string][]*laboro.Handle // rarely made
}

// add records h, just submitted.
func (p *endsPending) add(h *laboro.Handle) {
	id := h.ID()
	if p.first == nil {
		p.first = make(map[string]*laboro.Handle)
	}
	if _, ok := p.first[id]; !ok {
		p.first[id] = h
		return
	}
	if p.later == nil {
		p.later = make(map[string][]*laboro.Handle)
	}
	p.later[id] = append(p.later[id], h)
}

// ended returns the job of id whose end is told now, and forgets it; nil
// if there is none (a job another caller submitted).
func (p *endsPending) ended(id string) *laboro.Handle {
	h, ok := p.first[id]
	if !ok {
		return nil
	}
	if next := p.later[id]; len(next) > 0 {
		p.first[id] = next[0]
		if len(next) == 1 {
			delete(p.later, id)
		} else {
			p.later[id] = next[1:]
		}
	} else {
		delete(p.first, id)
	}
	return h
}
