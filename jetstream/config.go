package jetstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Defaults for the zero fields of a Config.
const (
	DefaultStream     = "LABORO"
	DefaultAckWait    = 30 * time.Second
	DefaultMaxDeliver = 5
	DefaultChunkSize  = 512 << 10
	// DuplicateWindow is how long the streams remember a message id: a job
	// re-submitted within it is not published twice.
	DuplicateWindow = 2 * time.Minute
	// consumerName is the workers' durable consumer on the JOBS stream.
	consumerName = "workers"
)

// ErrMaxDeliver is the Err (wrapped) of a result whose job was delivered
// Config.MaxDeliver times without a result, for example because it made
// every worker that ran it die.
var ErrMaxDeliver = errors.New("jetstream: job delivered the maximum number of times without a result")

// Config is shared by a Manager and its Workers; they must agree on Stream,
// AckWait and MaxDeliver. Its zero value means the defaults.
type Config struct {
	// Stream prefixes the streams' names (<Stream>_JOBS, <Stream>_RESULTS)
	// and subjects (<Stream>.jobs, <Stream>.results.<job id>); "" means
	// "LABORO".
	Stream string
	// Replicas is the streams' replica count; 0 means 1. A production
	// cluster wants 3 (see README.md).
	Replicas int
	// AckWait is how long a job may go unacknowledged: a worker that stops
	// acknowledging (it died) has its job redelivered after it. 0 means 30 s.
	AckWait time.Duration
	// MaxDeliver is how many times a job is delivered; a job delivered that
	// many times without a result ends StatusFailed (ErrMaxDeliver). 0
	// means 5.
	MaxDeliver int
	// ChunkSize is the largest result message body; a bigger output is sent
	// in chunks. 0 means 512 KiB; it is lowered to fit the server's maximum
	// payload.
	ChunkSize int
	// Dir is where a Manager writes the outputs it receives, handed over in
	// Result.Output; "" means os.TempDir().
	Dir string
	// Logger; nil means none.
	Logger *zap.Logger
}

func (c Config) withDefaults() Config {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.ChunkSize <= 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

func (c Config) jobsStream() string    { return c.Stream + "_JOBS" }
func (c Config) resultsStream() string { return c.Stream + "_RESULTS" }
func (c Config) submitStream() string  { return c.Stream + "_SUBMITTED" }
func (c Config) jobsSubject(id string) string {
	return c.Stream + ".jobs." + id
}
func (c Config) resultsSubject(id string) string {
	return c.Stream + ".results." + id
}
func (c Config) submitSubject(batch string) string {
	return c.Stream + ".submit." + batch
}

// statusSubject is where a Service answers status requests.
func (c Config) statusSubject() string { return c.Stream + ".api.status" }
func (c Config) advisorySubject() string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + c.jobsStream() + "." + consumerName
}

// ensure creates or updates the two streams and the workers' consumer.
func ensure(ctx context.Context, js natsjs.JetStream, c Config) (jobs, results natsjs.Stream, cons natsjs.Consumer, err error) {
	jobs, err = js.CreateOrUpdateStream(ctx, natsjs.StreamConfig{
		Name:        c.jobsStream(),
		Description: "laboro jobs waiting for a worker",
		Subjects:    []string{c.Stream + ".jobs.>"},
		Retention:   natsjs.WorkQueuePolicy,
		AllowDirect: true, // fast lookups of a job still waiting
		Storage:     natsjs.FileStorage,
		Replicas:    c.Replicas,
		Duplicates:  DuplicateWindow,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("jetstream: stream %s: %w", c.jobsStream(), err)
	}
	results, err = js.CreateOrUpdateStream(ctx, natsjs.StreamConfig{
		Name:        c.resultsStream(),
		Description: "laboro job results",
		Subjects:    []string{c.Stream + ".results.>"},
		Retention:   natsjs.LimitsPolicy,
		AllowDirect: true, // fast lookups of a job's stored result
		Storage:     natsjs.FileStorage,
		Replicas:    c.Replicas,
		Duplicates:  DuplicateWindow,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("jetstream: stream %s: %w", c.resultsStream(), err)
	}
	cons, err = jobs.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{
		Durable:     consumerName,
		Description: "laboro workers",
		AckPolicy:   natsjs.AckExplicitPolicy,
		AckWait:     c.AckWait,
		MaxDeliver:  c.MaxDeliver,
		Replicas:    c.Replicas,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("jetstream: consumer %s: %w", consumerName, err)
	}
	return jobs, results, cons, nil
}

// validID refuses ids that cannot be a subject token.
func validID(id string) error {
	if id == "" {
		return errors.New("jetstream: a job needs an ID (an Executor assigns job_N)")
	}
	if strings.ContainsAny(id, ". *>\t\r\n") {
		return fmt.Errorf("jetstream: job id %q must not contain '.', '*', '>' or white space", id)
	}
	return nil
}

// wireJob is a job as it travels to workers, in JSON.
type wireJob struct {
	ID          string   `json:"id"`
	Command     string   `json:"command,omitempty"`
	Args        []string `json:"args,omitempty"`
	Script      string   `json:"script,omitempty"`
	Interpreter []string `json:"interpreter,omitempty"`
	Dir         string   `json:"dir,omitempty"`
	Env         []string `json:"env,omitempty"`
	TimeoutNS   int64    `json:"timeout_ns,omitempty"`
}

func toWire(j laboro.Job) wireJob {
	return wireJob{ID: j.ID, Command: j.Command, Args: j.Args, Script: j.Script,
		Interpreter: j.Interpreter, Dir: j.Dir, Env: j.Env, TimeoutNS: int64(j.Timeout)}
}

func (w wireJob) job() laboro.Job {
	return laboro.Job{ID: w.ID, Command: w.Command, Args: w.Args, Script: w.Script,
		Interpreter: w.Interpreter, Dir: w.Dir, Env: w.Env, Timeout: time.Duration(w.TimeoutNS)}
}

// Result message headers.
const (
	hdrJob     = "Laboro-Job"
	hdrAttempt = "Laboro-Attempt" // the delivery count of the job message
	hdrStatus  = "Laboro-Status"  // laboro.Status as a number
	hdrExit    = "Laboro-Exit"
	hdrError   = "Laboro-Error"
	hdrReason  = "Laboro-Reason" // "max-deliver" for the Manager's own failure
	hdrPID     = "Laboro-Pid"
	hdrStarted = "Laboro-Started" // RFC 3339, nanoseconds
	hdrEnded   = "Laboro-Ended"
	hdrStderr  = "Laboro-Stderr" // base64
	hdrChunk   = "Laboro-Chunk"  // index of this chunk, from 0
	hdrChunks  = "Laboro-Chunks" // number of chunks; 0: no output

	reasonMaxDeliver = "max-deliver"
)

// headerText makes s fit on one header line.
func headerText(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}

// attemptTimeout bounds one attempt to publish a message.
const attemptTimeout = 5 * time.Second

// publish stores msg with id as its Nats-Msg-Id. An attempt that gets no
// acknowledgement within attemptTimeout (a server restarting, a cluster
// electing a leader, a connection being re-established) is made again until
// ctx ends: the server drops the copies by id. A refusal from the server is
// returned at once.
func publish(ctx context.Context, js natsjs.JetStream, msg *nats.Msg, id string) (*natsjs.PubAck, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		ack, err := js.PublishMsg(actx, msg, natsjs.WithMsgID(id))
		cancel()
		var apiErr *natsjs.APIError
		if err == nil || ctx.Err() != nil || errors.As(err, &apiErr) || js.Conn().IsClosed() {
			return ack, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
