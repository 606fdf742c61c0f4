package laboro

// Queue orders the jobs that wait in the Executor's buffer. The Executor owns
// the locking, the capacity and the blocking: a Queue is only an ordering
// policy, called with the Executor's lock held, so it needs no locking of its
// own and must not block or call back into the Executor. Replace the default
// FIFO with WithQueue to run, for example, by priority or fairly across
// submitters. Push and Remove must keep the order of the other queued jobs,
// so that what Queued shows stays true; laborotest.Queue checks an
// implementation against this contract.
type Queue interface {
	// Push adds a job that has just been accepted.
	Push(h *Handle)
	// Pop removes and returns the job to run next; nil when empty.
	Pop() *Handle
	// Remove removes and returns the job with that id; nil when absent.
	Remove(id string) *Handle
	// Snapshot returns the queued jobs in the order Pop would return them.
	Snapshot() []*Handle
	// Len returns the number of queued jobs.
	Len() int
}

// FIFO is the default Queue: first in, first out, as the buffer of the
// original job executor. It is a ring that grows as needed; the Executor
// bounds its length. Its zero value is an empty queue. It is not safe for
// concurrent use on its own.
type FIFO struct {
	ring []*Handle
	head int
	n    int
}

var _ Queue = (*FIFO)(nil)

// Push appends h.
func (q *FIFO) Push(h *Handle) {
	if q.n == len(q.ring) {
		q.grow()
	}
	q.ring[(q.head+q.n)%len(q.ring)] = h
	q.n++
}

func (q *FIFO) grow() {
	ring := make([]*Handle, max(16, 2*len(q.ring)))
	for i := range q.n {
		ring[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	q.ring, q.head = ring, 0
}

// Pop removes the oldest job.
func (q *FIFO) Pop() *Handle {
	if q.n == 0 {
		return nil
	}
	h := q.ring[q.head]
	q.ring[q.head] = nil
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	return h
}

// Remove removes the job with that id, keeping the others in order. It
// takes time linear in the queue's length.
func (q *FIFO) Remove(id string) *Handle {
	for i := range q.n {
		if h := q.ring[(q.head+i)%len(q.ring)]; h.ID() == id {
			// Close the gap by moving the later jobs one place forward.
			for j := i; j < q.n-1; j++ {
				q.ring[(q.head+j)%len(q.ring)] = q.ring[(q.head+j+1)%len(q.ring)]
			}
			q.ring[(q.head+q.n-1)%len(q.ring)] = nil
			q.n--
			return h
		}
	}
	return nil
}

// Snapshot returns the queued jobs, oldest first.
func (q *FIFO) Snapshot() []*Handle {
	out := make([]*Handle, q.n)
	for i := range out {
		out[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	return out
}

// Len returns the number of queued jobs.
func (q *FIFO) Len() int { return q.n }

// waiter is a Submit blocked on a full buffer. Waiters are served strictly
// in arrival order: a slot that frees goes to the oldest waiter, and a new
// Submit does not overtake them.
type waiter struct {
	h *Handle
	// ready receives one value once outcome is set; its buffer of one lets
	// the Executor signal without blocking while holding its lock, and
	// lets the waiter be reused from a pool.
	ready   chan struct{}
	outcome waitOutcome
}

type waitOutcome uint8

const (
	waitPending    waitOutcome = iota
	waitQueued                 // the job entered the buffer
	waitTerminated             // the Executor shut down first
)

// waitList is the FIFO of blocked submitters.
type waitList struct {
	items []*waiter
}

func (l *waitList) push(w *waiter) { l.items = append(l.items, w) }

func (l *waitList) len() int { return len(l.items) }

func (l *waitList) pop() *waiter {
	w := l.items[0]
	l.items[0] = nil
	l.items = l.items[1:]
	if len(l.items) == 0 {
		l.items = l.items[:0:0] // let the backing array go once drained
	}
	return w
}

func (l *waitList) remove(w *waiter) {
	for i, x := range l.items {
		if x == w {
			l.items = append(l.items[:i], l.items[i+1:]...)
			return
		}
	}
}
