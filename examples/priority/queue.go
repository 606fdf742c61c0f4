package main

import (
	"container/heap"
	"slices"

	"github.com/laboro-go/laboro"
)

// PriorityQueue is a laboro.Queue that starts the waiting job of highest
// priority first, and among jobs of equal priority the one queued first. A
// job's priority is its Job.Meta when that is an int; any other Meta,
// including nil, counts as 0.
//
// Push, Pop and Remove take O(log n) time, Len O(1), and Snapshot
// O(n log n). Its zero value is an empty queue.
//
// Like every Queue it is only an ordering policy: the Executor calls it with
// its own lock held and bounds its length, so PriorityQueue has no lock of
// its own and is not safe for concurrent use by itself. Give it to one
// Executor with laboro.WithQueue and do not touch it afterwards.
//
// Strict priorities can starve: while high-priority jobs keep arriving, a
// low-priority one waits forever. A fairer variant would age the jobs,
// ordering by priority plus time waited, or would let every k-th Pop take
// the oldest job whatever its priority.
type PriorityQueue struct {
	heap entries
	byID map[string]*entry // for Remove
	seq  uint64            // Push order, to keep equal priorities first in, first out
}

var _ laboro.Queue = (*PriorityQueue)(nil)

// entry is one queued job, with what orders it and where it is in the heap.
type entry struct {
	h     *laboro.Handle
	prio  int
	seq   uint64
	index int // in PriorityQueue.heap, kept up to date by Swap
}

// Priority returns the priority PriorityQueue gives job: Job.Meta when it is
// an int, 0 otherwise.
func Priority(job laboro.Job) int {
	p, _ := job.Meta.(int)
	return p
}

// Push adds h after every queued job of the same or higher priority.
func (q *PriorityQueue) Push(h *laboro.Handle) {
	if q.byID == nil {
		q.byID = make(map[string]*entry)
	}
	q.seq++
	e := &entry{h: h, prio: Priority(h.Job()), seq: q.seq}
	q.byID[h.ID()] = e
	heap.Push(&q.heap, e)
}

// Pop removes and returns the job to start next, or nil when the queue is
// empty.
func (q *PriorityQueue) Pop() *laboro.Handle {
	if len(q.heap) == 0 {
		return nil
	}
	e := heap.Pop(&q.heap).(*entry)
	delete(q.byID, e.h.ID())
	return e.h
}

// Remove removes and returns the job with that id, or returns nil when no
// queued job has it. The other jobs keep their order.
func (q *PriorityQueue) Remove(id string) *laboro.Handle {
	e, ok := q.byID[id]
	if !ok {
		return nil
	}
	heap.Remove(&q.heap, e.index)
	delete(q.byID, id)
	return e.h
}

// Snapshot returns the queued jobs in the order Pop would return them.
func (q *PriorityQueue) Snapshot() []*laboro.Handle {
	sorted := slices.Clone(q.heap)
	slices.SortFunc(sorted, func(a, b *entry) int {
		switch {
		case a.before(b):
			return -1
		case b.before(a):
			return 1
		}
		return 0
	})
	out := make([]*laboro.Handle, len(sorted))
	for i, e := range sorted {
		out[i] = e.h
	}
	return out
}

// Len returns the number of queued jobs.
func (q *PriorityQueue) Len() int { return len(q.heap) }

// before reports whether e starts before f: a higher priority first, then
// the one pushed first. No two entries tie, so the order is total and Pop
// is stable.
func (e *entry) before(f *entry) bool {
	if e.prio != f.prio {
		return e.prio > f.prio
	}
	return e.seq < f.seq
}

// entries implements heap.Interface; entries[0] starts next.
type entries []*entry

func (s entries) Len() int           { return len(s) }
func (s entries) Less(i, j int) bool { return s[i].before(s[j]) }

func (s entries) Swap(i, j int) {
	s[i], s[j] = s[j], s[i]
	s[i].index = i
	s[j].index = j
}

func (s *entries) Push(x any) {
	e := x.(*entry)
	e.index = len(*s)
	*s = append(*s, e)
}

func (s *entries) Pop() any {
	old := *s
	n := len(old) - 1
	e := old[n]
	old[n] = nil // let the Handle go
	*s = old[:n]
	return e
}
