package laboro

import (
	"slices"
	"time"
)

// Stats is a snapshot of an Executor's counters, read together.
//
// The Executor keeps them as its jobs move, under the lock it holds for
// that anyway: a few additions per job, and one reading of the monotonic
// clock when a job enters the buffer. Whoever watches (a console, a
// Prometheus collector) reads them at its own pace, so watching costs the
// jobs nothing more however often it looks.
type Stats struct {
	Concurrency int // the concurrency level
	PoolSize    int // worker goroutines
	Parallelism int // min(Concurrency, PoolSize)
	Running     int // jobs running
	Queued      int // jobs in the buffer
	Blocked     int // Submit calls waiting for room in the buffer
	BufferSize  int // the buffer's capacity

	// Started counts the jobs taken from the buffer to run since New: the
	// Runner's Run is called once for each. A job counts as Running from
	// then until its result is recorded, after Run has returned.
	Started int64
	// Ended counts the jobs that ended since New, by status:
	// Ended[StatusFailed] is the number of jobs that failed.
	Ended [StatusCancelled + 1]int64
	// OutputBytes is the standard output the jobs that ended wrote, in
	// bytes (the sum of their Output.Size).
	OutputBytes int64
	// Waits and Runs are counted as each job that ran ends: how long it
	// waited, from entering the buffer to its Result.Started, and how long
	// it ran, from Result.Started to Result.Ended.
	Waits, Runs Histogram
	// Changes grows with every change of a job's state (queued, blocked,
	// started, ended) and of the concurrency level: a poller that reads the
	// same number twice has nothing new to show.
	Changes uint64
}

// Finished counts the jobs that ended since New, whatever their status.
func (s *Stats) Finished() int64 {
	var n int64
	for _, v := range s.Ended {
		n += v
	}
	return n
}

// histogramBounds are the upper bounds of a Histogram's buckets: from a
// millisecond (a trivial job, a short wait) to a day.
var histogramBounds = [...]time.Duration{time.Millisecond, 5 * time.Millisecond, 25 * time.Millisecond,
	100 * time.Millisecond, 500 * time.Millisecond, time.Second, 5 * time.Second, 30 * time.Second,
	2 * time.Minute, 10 * time.Minute, time.Hour, 24 * time.Hour}

// HistogramBounds returns the upper bounds of a Histogram's buckets, from
// a millisecond to a day, in increasing order.
func HistogramBounds() []time.Duration { return slices.Clone(histogramBounds[:]) }

// Histogram counts durations in buckets.
type Histogram struct {
	// Count is how many durations were counted, Sum their total.
	Count int64
	Sum   time.Duration
	// Buckets[i] counts the durations up to HistogramBounds()[i] that are
	// above the bound before it; the last bucket counts those above the
	// last bound. (Prometheus's buckets are these summed from the first.)
	Buckets [len(histogramBounds) + 1]int64
}

// add counts d; a negative d (clocks of two machines) counts as 0.
func (h *Histogram) add(d time.Duration) {
	d = max(d, 0)
	i := 0
	for i < len(histogramBounds) && d > histogramBounds[i] {
		i++
	}
	h.Buckets[i]++
	h.Count++
	h.Sum += d
}

// Finished is a job that ended, as Recent gives it.
type Finished struct {
	Job    Job
	Result Result
}

// history is the ring of the last jobs that ended (WithHistory).
type history struct {
	ring []*Handle
	next int // where the next one goes; the oldest, once the ring is full
	full bool
}

// kept returns how many jobs the ring holds.
func (r *history) kept() int {
	if r.full {
		return len(r.ring)
	}
	return r.next
}

// newest returns the job that ended i-th from the newest, i < kept.
func (r *history) newest(i int) *Handle { return r.ring[(r.next-1-i+len(r.ring))%len(r.ring)] }

// finished reads h, which retire kept, under the Executor's lock: its
// result was kept under the lock, before h was put in the ring.
func finished(h *Handle) Finished { return Finished{Job: h.j.job(), Result: h.result()} }

func (r *history) add(h *Handle) {
	r.ring[r.next] = h
	r.next++
	if r.next == len(r.ring) {
		r.next, r.full = 0, true
	}
}

// Recent returns the last jobs that ended, newest first: at most n, and at
// most as many as WithHistory keeps (none without it).
func (e *Executor) Recent(n int) []Finished {
	e.mu.Lock()
	defer e.mu.Unlock()
	n = min(n, e.history.kept())
	out := make([]Finished, 0, max(n, 0))
	for i := range n {
		out = append(out, finished(e.history.newest(i)))
	}
	return out
}

// Ended returns the job id among the last jobs that ended (WithHistory),
// and false if it is not among them.
func (e *Executor) Ended(id string) (Finished, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.history.kept() {
		if h := e.history.newest(i); h.j.ID == id {
			return finished(h), true
		}
	}
	return Finished{}, false
}
