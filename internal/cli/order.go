package cli

import (
	"container/list"

	"github.com/laboro-go/laboro"
)

// endOrder puts a batch's results in the order their jobs ended. Each job
// is waited for in a goroutine of its own, and those goroutines wake in no
// set order: the wait of a job that ended first may return after the wait
// of one that ran after it (one worker, a busy machine), which would then
// be reported first. So a wait that returns reports, before its own job,
// every job submitted before it that has ended too, oldest first; a job
// whose wait returns after it was reported so is not reported again.
//
// It holds the jobs submitted and not reported yet, in the order they were
// submitted: no more than the Executor holds. It is not safe for
// concurrent use: Batch calls it under its lock.
type endOrder struct {
	waiting list.List // of *laboro.Handle
}

// add records h, just submitted, and returns its place, for ended.
func (o *endOrder) add(h *laboro.Handle) *list.Element { return o.waiting.PushBack(h) }

// ended is called once the wait of the job at e has returned; it hands
// report the jobs to report now, in order: those submitted before it that
// have ended, then its own, unless reported already.
func (o *endOrder) ended(e *list.Element, report func(h *laboro.Handle, res laboro.Result)) {
	for f := o.waiting.Front(); f != nil && f != e; f = o.waiting.Front() {
		h := f.Value.(*laboro.Handle)
		res, ok := h.Result()
		if !ok {
			break
		}
		o.waiting.Remove(f)
		f.Value = nil // reported: its own wait's return finds it so
		report(h, res)
	}
	if e.Value == nil {
		return // reported by an earlier wait's return
	}
	h := o.waiting.Remove(e).(*laboro.Handle)
	e.Value = nil
	res, _ := h.Result()
	report(h, res)
}
