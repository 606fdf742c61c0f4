package jetstream

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A job whose Run ends before its result comes (Executor.Cancel, its
// Job.Timeout, the Executor's Close) is ended in the streams, so that no
// worker runs it, or goes on running it, and so that everyone who reads its
// outcome later reads the same:
//
//  1. A record of its end, a message with the headers of a result (its
//     status, no output), is stored on <Stream>.cancel.<id> in the RESULTS
//     stream, with "<id>.cancel" as its Nats-Msg-Id. Workers subscribe to
//     <Stream>.cancel.*: the worker that runs the job cancels it in its
//     Executor (which kills its process group), acknowledges it and
//     publishes no result. A worker about to run a job looks for the record
//     first (and remembers the records it heard of for a minute, for the
//     job it receives just after), and looks again with every in-progress
//     acknowledgement: a record is never missed, even across a reconnection.
//  2. The job's message is purged from the JOBS stream, so that a job not
//     yet taken is never delivered.
//
// The record is the job's outcome: a Manager's Run, the Service (also after
// a restart) and Client.Result give it instead of any result a worker
// stores later (a late result), or stored before without the Run having
// received it.

// recentCancels is how long a worker remembers a record it heard of for a
// job it does not run, in case the job reaches it just after.
const recentCancels = time.Minute

// endTimeout bounds the recording of an ended Run; closeGrace is how long
// Manager.Close waits for the records still being published.
const (
	endTimeout = 30 * time.Second
	closeGrace = 5 * time.Second
)

// record stores the end of job id's Run, with status st, on its cancel
// subject, and purges the job from the JOBS stream. sum is what the job
// runs (jobSum); "" when not known.
func record(ctx context.Context, js natsjs.JetStream, jobs natsjs.Stream, cfg Config, id, sum string, st laboro.Status) error {
	msg := nats.NewMsg(cfg.cancelSubject(id))
	msg.Header.Set(hdrJob, id)
	if sum != "" {
		msg.Header.Set(hdrSum, sum)
	}
	msg.Header.Set(hdrStatus, strconv.Itoa(int(st)))
	msg.Header.Set(hdrExit, "-1")
	msg.Header.Set(hdrChunk, "0")
	msg.Header.Set(hdrChunks, "0")
	if _, err := publish(ctx, js, msg, id+".cancel"); err != nil {
		return fmt.Errorf("jetstream: record the end of %s: %w", id, err)
	}
	err := retry(ctx, js.Conn(), func(ctx context.Context) error {
		return jobs.Purge(ctx, natsjs.WithPurgeSubject(cfg.jobsSubject(id)))
	})
	if err != nil {
		return fmt.Errorf("jetstream: purge job %s: %w", id, err)
	}
	return nil
}

// outcome returns job id's outcome as the streams hold it: the record of
// its Run's end, else the headers of its last result message (of a
// complete attempt, or of a chunk of one still arriving); nil when there
// is neither.
func outcome(ctx context.Context, nc *nats.Conn, results natsjs.Stream, cfg Config, id string) (*natsjs.RawStreamMsg, error) {
	msg, err := lookup(ctx, nc, results, cfg.cancelSubject(id))
	if msg != nil || err != nil {
		return msg, err
	}
	return lookup(ctx, nc, results, cfg.resultsSubject(id))
}

// endedJobs returns the ids of the jobs whose Run's end is recorded, read
// at once from the RESULTS stream's subjects.
func endedJobs(ctx context.Context, nc *nats.Conn, results natsjs.Stream, cfg Config) (map[string]bool, error) {
	var info *natsjs.StreamInfo
	err := retry(ctx, nc, func(ctx context.Context) (err error) {
		info, err = results.Info(ctx, natsjs.WithSubjectFilter(cfg.cancelSubject(">")))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: ended jobs: %w", err)
	}
	ids := make(map[string]bool, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		ids[strings.TrimPrefix(subject, cfg.cancelSubject(""))] = true
	}
	return ids, nil
}

// jobEnded reports whether job id has the record of the end of its Run
// in results, or a result stored.
func jobEnded(ctx context.Context, nc *nats.Conn, results natsjs.Stream, cfg Config, id string) (bool, error) {
	if msg, err := lookup(ctx, nc, results, cfg.cancelSubject(id)); msg != nil || err != nil {
		return msg != nil, err
	}
	// Most jobs delivered again have no result at all (their worker died
	// running them): the stream's count of messages on the subject says
	// so, and a worker's token may ask for it, not read a result.
	if n, err := count(ctx, nc, results, cfg.resultsSubject(id)); n == 0 || err != nil {
		return false, err
	}
	msg, err := lookup(ctx, nc, results, cfg.resultsSubject(id))
	return msg != nil && final(msg.Header), err
}

// final tells whether h, the headers of a result message, end an attempt.
func final(h nats.Header) bool {
	chunk, err1 := strconv.Atoi(h.Get(hdrChunk))
	chunks, err2 := strconv.Atoi(h.Get(hdrChunks))
	return err1 == nil && err2 == nil && (chunks == 0 || chunk == chunks-1)
}
