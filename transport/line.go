package transport

// line is the Dispatcher's queue of tickets waiting for a worker: first in,
// first out, with tickets that go back to a worker's line at the front. A
// ticket leaves it from anywhere in constant time: its entry stays behind,
// stale, and is skipped (an entry is live while its ticket waits and has
// the generation it was queued with). Its zero value is empty.
type line[K comparable, V any] struct {
	ring []entry[K, V]
	head int // index of the first entry
	size int // entries, stale ones included
	n    int // live entries: waiting tickets
}

type entry[K comparable, V any] struct {
	t   *Ticket[K, V]
	gen uint64
}

func (e entry[K, V]) live() bool { return e.t != nil && e.t.state == waiting && e.t.gen == e.gen }

func (l *line[K, V]) at(i int) *entry[K, V] { return &l.ring[(l.head+i)%len(l.ring)] }

// grow makes room for one more entry, dropping the stale ones when they
// are many.
func (l *line[K, V]) grow() {
	if l.size < len(l.ring) {
		return
	}
	if l.n < l.size/2 {
		l.resize(max(16, len(l.ring))) // half stale: compacting is enough
		return
	}
	l.resize(max(16, 2*len(l.ring)))
}

// resize moves the live entries, in their order, to a ring of the given
// capacity (at least l.n).
func (l *line[K, V]) resize(capacity int) {
	ring := make([]entry[K, V], capacity)
	j := 0
	for i := range l.size {
		if e := *l.at(i); e.live() {
			ring[j] = e
			j++
		}
	}
	l.ring, l.head, l.size = ring, 0, j
}

// tidy lets go of stale entries, which hold their tickets (and a settled
// ticket its result), once few entries are live: a job of a million tasks
// cancelled while they wait leaves nothing behind.
func (l *line[K, V]) tidy() {
	switch {
	case l.n == 0 && len(l.ring) > 1024:
		l.ring, l.head, l.size = nil, 0, 0
	case l.n == 0:
		for l.size > 0 {
			*l.at(l.size - 1) = entry[K, V]{}
			l.size--
		}
		l.head = 0
	case l.size > 64 && l.n < l.size/4:
		l.resize(max(16, 2*l.n))
	}
}

// pushBack queues t last.
func (l *line[K, V]) pushBack(t *Ticket[K, V]) {
	l.grow()
	t.gen++
	*l.at(l.size) = entry[K, V]{t, t.gen}
	l.size++
	l.n++
}

// pushFront queues t first.
func (l *line[K, V]) pushFront(t *Ticket[K, V]) {
	l.grow()
	t.gen++
	l.head = (l.head - 1 + len(l.ring)) % len(l.ring)
	*l.at(0) = entry[K, V]{t, t.gen}
	l.size++
	l.n++
}

// remove takes t, which waits, out of the line; its entry goes stale.
func (l *line[K, V]) remove(t *Ticket[K, V]) {
	l.unqueue(t)
	l.tidy()
}

// unqueue marks t's entry stale.
func (l *line[K, V]) unqueue(t *Ticket[K, V]) {
	t.gen++
	l.n--
}

// take removes and returns up to n waiting tickets that accept takes (nil
// takes all), first first. The caller changes their state.
func (l *line[K, V]) take(n int, accept func(V) bool) []*Ticket[K, V] {
	var ts []*Ticket[K, V]
	for i := 0; i < l.size && len(ts) < n && l.n > 0; i++ {
		e := l.at(i)
		if !e.live() || (accept != nil && !accept(e.t.Value)) {
			continue
		}
		ts = append(ts, e.t)
		l.unqueue(e.t)
	}
	// Drop the stale entries at the front.
	for l.size > 0 && !l.at(0).live() {
		*l.at(0) = entry[K, V]{}
		l.head = (l.head + 1) % len(l.ring)
		l.size--
	}
	l.tidy()
	return ts
}
