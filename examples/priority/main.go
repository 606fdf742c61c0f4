// Priority shows a custom scheduler: PriorityQueue, a laboro.Queue that
// starts the waiting job with the highest priority first, the priority being
// an int carried in Job.Meta.
//
//	go run ./examples/priority
//
// A Queue is only an ordering policy (Push, Pop, Remove, Snapshot, Len). The
// Executor keeps the locking, the buffer's bound, the blocking and the
// concurrency, so a scheduler is a few dozen lines with no goroutine or
// lock, tested on its own in priority_test.go. Plug it in with WithQueue:
//
//	ex, err := laboro.New(laboro.WithQueue(new(PriorityQueue)))
//	…
//	ex.Submit(ctx, laboro.Job{Command: "make release", Meta: 9})
//
// The program starts the Executor paused (concurrency 0) so that the jobs
// queue up, submits jobs of mixed priorities, lists the queue, stops one job,
// then sets the concurrency to 1 and shows that they run in priority order,
// first in, first out among equal priorities. Then it puts the same queue in
// front of a remote Runner, the runexp manager with one runner over TCP
// (remote.go): the caller's priority rides in Job.Meta, the protocol's job
// type in Job.Payload, and the jobs reach the remote worker by priority.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/laboro-go/laboro"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout)
	if err == nil {
		err = runRemote(ctx, os.Stdout)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "priority:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	ex, err := laboro.New(
		laboro.WithQueue(new(PriorityQueue)),
		laboro.WithConcurrency(0), // paused: jobs wait until it is raised
		laboro.WithPoolSize(2),
		laboro.WithBufferSize(16),
	)
	if err != nil {
		return err
	}
	defer ex.Close() // the hard stop, for an early return

	// Each job is a Go function that pretends to work for a moment.
	work := func(ctx context.Context) error {
		select {
		case <-time.After(5 * time.Millisecond):
			return nil
		case <-ctx.Done(): // Close was called
			return ctx.Err()
		}
	}

	fmt.Fprintf(w, "executor paused (concurrency 0): jobs wait in the priority queue\n\n")
	var handles []*laboro.Handle
	for _, j := range []struct {
		id   string
		prio int
	}{
		{"nightly-report", 0},
		{"resize-images", 1},
		{"page-oncall", 9},
		{"send-invoices", 5},
		{"clean-tmp", 0},
		{"rebuild-index", 1},
		{"refund-order", 5},
	} {
		h, err := ex.Submit(ctx, laboro.Job{ID: j.id, Func: work, Meta: j.prio})
		if err != nil {
			return fmt.Errorf("submit %s: %w", j.id, err)
		}
		handles = append(handles, h)
		fmt.Fprintf(w, "submitted  %-14s  priority %d\n", j.id, j.prio)
	}

	// Queued asks the queue for its Snapshot: the start order.
	fmt.Fprintf(w, "\nqueued, in the order they will start:\n")
	for i, job := range ex.Queued() {
		fmt.Fprintf(w, "  %d. %-14s  priority %d\n", i+1, job.ID, Priority(job))
	}

	// Stop goes through the queue's Remove; the others keep their places.
	if err := ex.Stop("clean-tmp"); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nstopped clean-tmp; still queued: %s\n", ids(ex.Queued()))

	// One job at a time from now on, so the run order is the queue's order.
	if err := ex.SetConcurrency(1); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nconcurrency 0 -> 1: one job at a time, in the queue's order\n\n")
	type ended struct {
		job laboro.Job
		res laboro.Result
	}
	var ran, notRun []ended
	for _, h := range handles {
		res, err := h.Wait(ctx)
		if err != nil {
			return err
		}
		if res.Started.IsZero() {
			notRun = append(notRun, ended{h.Job(), res})
		} else {
			ran = append(ran, ended{h.Job(), res})
		}
	}
	// Show the jobs that ran in the order they started (Result.Started).
	slices.SortFunc(ran, func(a, b ended) int { return a.res.Started.Compare(b.res.Started) })
	for i, e := range ran {
		fmt.Fprintf(w, "  %d. %-14s  priority %d  %s\n", i+1, e.job.ID, Priority(e.job), e.res.Status)
	}
	for _, e := range notRun {
		fmt.Fprintf(w, "  -  %-14s  priority %d  %s\n", e.job.ID, Priority(e.job), e.res.Status)
	}

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return ex.Shutdown(sctx)
}

// ids returns the jobs' ids, separated by commas.
func ids(jobs []laboro.Job) string {
	s := make([]string, len(jobs))
	for i, j := range jobs {
		s[i] = j.ID
	}
	return strings.Join(s, ", ")
}
