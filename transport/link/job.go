package link

import (
	"bytes"
	"sync"

	"go.uber.org/zap"
)

// JobStream sends one job's messages one by one, in order (section "Job"
// of the rules): at most one of them is being sent at any time, and the
// completion comes after every progress. Get one with Link.Job; its
// methods are safe for concurrent use. Its sends use the link's own
// context, so they end when the link's Stop cuts them short.
type JobStream struct {
	l   *Link
	key string

	mu       sync.Mutex
	latest   []byte        // the last progress body given
	complete bool          // Complete was called: no more progress
	sending  bool          // a progress send is under way
	idle     chan struct{} // closed when that send ends
	queued   bool          // a progress is scheduled (timer)
	timer    Timer
	gen      uint64 // tells a stale progress timer from the current one
}

// Job returns the JobStream of key, the same one for every call until its
// Complete has ended (a later call then begins a new one).
func (l *Link) Job(key string) *JobStream {
	l.mu.Lock()
	defer l.mu.Unlock()
	if j, ok := l.jobs[key]; ok {
		return j
	}
	j := &JobStream{l: l, key: key}
	l.jobs[key] = j
	return j
}

// Progress reports the job's progress (rules "Job progress"): it does
// nothing if the job is complete, or if a progress message is being sent
// or queued (body then replaces what the queued one will send); otherwise
// it sends body, and once that send has ended schedules sending progress
// again after Config.Progress, with the latest body given then. So a
// running job's progress reaches the master at most once per interval,
// and at least once per interval while the job runs (which also tells the
// master it lives). Progress does not block: the send runs on the link's
// goroutine (after Stop, it is cached at once).
func (j *JobStream) Progress(body []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.complete {
		return
	}
	j.latest = bytes.Clone(body)
	if j.sending || j.queued {
		return
	}
	j.startLocked()
}

// startLocked sends the latest progress on a link goroutine.
func (j *JobStream) startLocked() {
	j.sending = true
	j.idle = make(chan struct{})
	m := Message{Key: j.key, Body: j.latest}
	j.l.mu.Lock()
	started := j.l.goLocked(func() { j.send(m) })
	j.l.mu.Unlock()
	if !started {
		// The link is stopped: the send only caches. Done here, without
		// j.mu, since send takes it.
		j.mu.Unlock()
		j.send(m)
		j.mu.Lock()
	}
}

// send sends one progress, then schedules the next one.
func (j *JobStream) send(m Message) {
	if err := j.l.Send(j.l.life, m); err != nil {
		j.l.log.Error("transport: progress lost", zap.String("key", j.key), zap.Error(err))
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.sending = false
	close(j.idle)
	if j.complete || j.l.isStopping() {
		return
	}
	j.gen++
	gen := j.gen
	j.queued = true
	j.timer = j.l.clock.AfterFunc(j.l.cfg.Progress, func() { j.fire(gen) })
}

// fire is the scheduled progress: the rules of Progress again, with the
// latest body.
func (j *JobStream) fire(gen uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if gen != j.gen || !j.queued {
		return
	}
	j.queued = false
	j.timer = nil
	if j.complete || j.sending || j.l.isStopping() {
		return
	}
	j.startLocked()
}

// Complete sends the job's completion (Final: true) (rules "Job
// completion"): no progress is sent after it, a queued progress is
// cancelled, and a progress being sent is waited for first. Complete
// returns once the completion is sent or cached. Only the first call
// counts; later ones do nothing.
func (j *JobStream) Complete(body []byte) {
	j.mu.Lock()
	if !j.endLocked() {
		j.mu.Unlock()
		return
	}
	for j.sending {
		idle := j.idle
		j.mu.Unlock()
		<-idle
		j.mu.Lock()
	}
	j.mu.Unlock()
	if err := j.l.Send(j.l.life, Message{Key: j.key, Final: true, Body: bytes.Clone(body)}); err != nil {
		j.l.log.Error("transport: completion lost", zap.String("key", j.key), zap.Error(err))
	}
	j.forget()
}

// Abandon ends the stream without a completion: no progress is sent after
// it, a queued one is cancelled, and the job is forgotten, left to the
// master (which gives back the jobs of a worker that stops, or whose lease
// ends). Use it for a job that did not end by itself but by the worker's
// own stop: its end is no outcome to report. After Complete it does
// nothing.
func (j *JobStream) Abandon() {
	j.mu.Lock()
	ended := j.endLocked()
	j.mu.Unlock()
	if ended {
		j.forget()
	}
}

// endLocked marks the stream complete and cancels a queued progress; it
// returns false if it was complete already. j.mu is held.
func (j *JobStream) endLocked() bool {
	if j.complete {
		return false
	}
	j.complete = true
	j.cancelLocked()
	return true
}

// forget takes the ended stream off the link: the key's next Job begins
// a new one.
func (j *JobStream) forget() {
	j.l.mu.Lock()
	if j.l.jobs[j.key] == j {
		delete(j.l.jobs, j.key)
	}
	j.l.mu.Unlock()
}

// cancelLocked cancels a queued progress.
func (j *JobStream) cancelLocked() {
	if j.timer != nil {
		j.timer.Stop()
		j.timer = nil
	}
	j.queued = false
	j.gen++
}

func (j *JobStream) stopTimer() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.cancelLocked()
}
