package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/runexp"
)

// runRemote puts the same PriorityQueue in front of a remote Runner: the
// runexp Manager, which hands each job to a runexp runner over TCP. Here
// the runner is in this process, with one worker, on the loopback
// interface; on a cluster it is `runexp-runner 1 -c HOST:PORT` on another
// machine. Job.Meta (the priority) is the caller's, read by the queue;
// Job.Payload (the job type, .sh) is the Manager's: neither is in the
// other's way.
func runRemote(ctx context.Context, w io.Writer) error {
	m := &runexp.Manager{Dir: os.TempDir()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- m.Serve(serveCtx, ln) }()
	defer func() { stopServing(); <-served }()

	ex, err := laboro.New(laboro.WithQueue(new(PriorityQueue)), laboro.WithRunner(m),
		laboro.WithConcurrency(0), laboro.WithPoolSize(1), laboro.WithBufferSize(16))
	if err != nil {
		return err
	}
	defer ex.Close()

	fmt.Fprintf(w, "\nthe same queue in front of a runexp manager, with one remote worker:\n\n")
	var handles []*laboro.Handle
	prio := map[string]int{}
	for _, j := range []struct {
		name string
		prio int
	}{{"backup", 0}, {"deploy", 9}, {"lint", 1}, {"hotfix", 9}, {"test", 5}} {
		prio[j.name] = j.prio
		job := runexp.NewJob(j.name, ".sh", fmt.Sprintf("echo %s ran on the runner, pid $$\n", j.name))
		job.Meta = j.prio
		h, err := ex.Submit(ctx, job)
		if err != nil {
			return fmt.Errorf("submit %s: %w", j.name, err)
		}
		handles = append(handles, h)
	}
	fmt.Fprintf(w, "queued for the runner: %s\n", ids(ex.Queued()))

	r := &runexp.Runner{Addr: ln.Addr().String(), Name: "runner1", Workers: 1, HoldWait: 50 * time.Millisecond, Dir: os.TempDir()}
	runnerCtx, stopRunner := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runnerCtx) }()
	runnerDone := false
	defer func() {
		if !runnerDone { // an early return
			stopRunner()
			<-ran
		}
	}()
	if err := ex.SetConcurrency(1); err != nil { // one job out at a time: the queue decides
		return err
	}
	m.Finish(ex) // the runner hears FINO once every job is done

	type done struct {
		name  string
		start time.Time
		said  string // the job's own line in the runner's report
	}
	var order []done
	for _, h := range handles {
		res, err := h.Wait(ctx)
		if err != nil {
			return err
		}
		if res.Status != laboro.StatusSucceeded {
			return fmt.Errorf("%s: %s: %w", h.ID(), res.Status, res.Err)
		}
		out, err := res.Output.ReadAll()
		res.Output.Close()
		if err != nil {
			return err
		}
		said := ""
		for _, line := range bytes.Split(out, []byte("\n")) {
			if bytes.HasPrefix(line, []byte(h.ID()+" ran")) {
				said = string(line)
			}
		}
		order = append(order, done{h.ID(), res.Started, said})
	}
	// In the order the runner got them (Result.Started).
	slices.SortFunc(order, func(a, b done) int { return a.start.Compare(b.start) })
	for i, d := range order {
		fmt.Fprintf(w, "  %d. %-7s priority %d: %s\n", i+1, d.name, prio[d.name], d.said)
	}
	// Told FINO, the runner ends by itself.
	runnerDone = true
	if err := <-ran; err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	stopRunner()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return ex.Shutdown(sctx)
}
