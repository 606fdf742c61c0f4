package jetstream

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport"
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
// every worker that ran it die, or because the workers would not run it
// (its error then says which worker, and why: not signed with its key,
// see Config.JobKey, or not readable by it).
var ErrMaxDeliver = errors.New("jetstream: job delivered the maximum number of times without a result")

// Config is shared by a Manager and its Workers; they must agree on Stream.
// Its zero value means the defaults, and keeps the settings of the streams
// and consumer that exist.
type Config struct {
	// Stream prefixes the streams' names (<Stream>_JOBS, <Stream>_RESULTS,
	// <Stream>_SUBMITTED) and subjects (<Stream>.jobs.<job id>,
	// <Stream>.results.<job id>, <Stream>.cancel.<job id>); "" means
	// "LABORO".
	Stream string
	// Replicas is the streams' replica count. 0 keeps the count of
	// streams that exist (so that a worker started without it does not
	// change them) and gives new streams 1. A production cluster wants 3
	// (see README.md).
	Replicas int
	// AckWait is how long a job may go unacknowledged: a worker that stops
	// acknowledging (it died) has its job redelivered after it. 0 keeps the
	// workers' consumer's setting when it exists, and means 30 s for a new
	// one.
	AckWait time.Duration
	// MaxDeliver is how many times a job is delivered; a job delivered that
	// many times without a result ends StatusFailed (ErrMaxDeliver). 0
	// keeps the consumer's setting when it exists, and means 5 for a new
	// one.
	MaxDeliver int
	// ChunkSize is the largest result message body; a bigger output is sent
	// in chunks. 0 means 512 KiB; it is lowered to fit the server's maximum
	// payload.
	ChunkSize int
	// MaxOutput bounds the output of a job that a worker stores: beyond
	// it, the output is cut, and the job fails, its error saying so. 0
	// means DefaultMaxOutput.
	MaxOutput int64
	// ResultsMaxAge and ResultsMaxBytes bound the RESULTS stream (the
	// results and their outputs): older or further results are dropped,
	// oldest first. 0 means DefaultResultsMaxAge and DefaultResultsMaxBytes;
	// negative, no bound.
	ResultsMaxAge   time.Duration
	ResultsMaxBytes int64
	// SubmittedMaxBytes bounds the SUBMITTED stream (every submission,
	// which the Service reads back when it starts): once it holds that
	// much, submitting fails (ErrSubmissionsFull) and nothing stored is
	// dropped, until batches are purged. 0 means DefaultSubmittedMaxBytes;
	// negative, no bound. A stream that holds more already when a Service
	// bounds it keeps every submission, and takes new ones once purged
	// below the bound.
	SubmittedMaxBytes int64
	// Dir is where a Manager writes the outputs it receives, handed over in
	// Result.Output; "" means os.TempDir().
	Dir string
	// JobKey, when set, signs the jobs: a Manager puts in each job it
	// publishes an HMAC of it keyed with JobKey, and a Worker runs only
	// the jobs that carry the right one. A program posing as the server
	// (holding its address while it is down, say) then cannot have the
	// workers run its commands. A job without it, or with another, is not
	// run: the worker logs why, tells the Managers, and hands it back,
	// until the delivery limit (MaxDeliver) fails it with that reason in
	// its error. The Manager and its workers need the same key:
	// JobKey(token, stream) derives it from the server's token or from a
	// worker's RoleToken, as laboro serve and laboro worker do.
	JobKey []byte
	// ClientKey, when set, has a Service prove to the Clients that ask
	// (see ProveServer) that it holds it. ClientKey(token, stream)
	// derives it from the server's token or from a client's RoleToken, as
	// laboro serve and its client commands do.
	ClientKey []byte
	// ProveServer has a Worker, with JobKey, and a Client, with ClientKey,
	// deal only with a server on which laboro's service proves that it
	// holds that key (it answers a fresh challenge with an HMAC of it: a
	// Manager with a JobKey, a Service with a ClientKey), asked once a
	// connection. A program posing as the server, then, gets from a worker
	// neither results nor live outputs, nor has it take a job (one it
	// kept, signed, or relays), and from a client it gets no job. Until
	// the server proves itself, a worker takes no job, saying why, its
	// results wait (for as long as it runs, their jobs kept leased) and
	// requests for live output go unanswered; a Client's calls wait while no
	// service answers, and fail (ErrServerUnproven) when one answers with
	// another key. Each attempt at a result checks that the connection is
	// still the one proven: one made again after the connection came
	// back, perhaps to another server, waits for that server's proof. (A
	// connection keeps what is sent while it is down for the server it
	// connects to next, unproven: give the connection
	// nats.ReconnectBufSize(-1), as laboro's worker and client commands
	// do, so that nothing is kept; a Client's submission sends again what
	// could not go.) It asks for a service running whenever the server is:
	// laboro's commands set it, as serve runs its server and its service
	// together; a worker that must store results, or a client that must
	// submit, while no service runs leaves it off.
	ProveServer bool
	// Logger; nil means none.
	Logger *zap.Logger
}

func (c Config) withDefaults() Config {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.Replicas < 0 {
		c.Replicas = 0
	}
	c.AckWait = max(c.AckWait, 0)
	c.MaxDeliver = max(c.MaxDeliver, 0)
	if c.ChunkSize <= 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = DefaultMaxOutput
	}
	c.ResultsMaxAge = limit(c.ResultsMaxAge, DefaultResultsMaxAge)
	c.ResultsMaxBytes = limit(c.ResultsMaxBytes, DefaultResultsMaxBytes)
	c.SubmittedMaxBytes = limit(c.SubmittedMaxBytes, DefaultSubmittedMaxBytes)
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// The bounds of what the streams keep, unless Config says otherwise.
const (
	DefaultMaxOutput       = 64 << 20
	DefaultResultsMaxAge   = 7 * 24 * time.Hour
	DefaultResultsMaxBytes = 4 << 30
	// DefaultSubmittedMaxBytes holds a few million submissions of shell
	// command lines.
	DefaultSubmittedMaxBytes = 4 << 30
)

// limit is a bound's value: def for 0, none (0 for NATS) for a negative.
func limit[T time.Duration | int64](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// bytesLimit is a MaxBytes for NATS: -1 for none.
func bytesLimit(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

func (c Config) jobsStream() string    { return c.Stream + "_JOBS" }
func (c Config) resultsStream() string { return c.Stream + "_RESULTS" }
func (c Config) submitStream() string  { return c.Stream + "_SUBMITTED" }
func (c Config) fleetStream() string   { return c.Stream + "_WORKERS" }
func (c Config) jobsSubject(id string) string {
	return c.Stream + ".jobs." + id
}
func (c Config) resultsSubject(id string) string {
	return c.Stream + ".results." + id
}

// cancelSubject is where the end of a job's Run is recorded, in the
// RESULTS stream (see Manager.Run): workers listen on it, and look it up
// before they run a job.
func (c Config) cancelSubject(id string) string {
	return c.Stream + ".cancel." + id
}

// liveSubject is where the worker that runs job id answers requests for
// its output.
func (c Config) liveSubject(id string) string { return c.Stream + ".live." + id }

// workersSubject is where run run of worker name says it is there (one
// subject a run, so that the stream of heartbeats keeps the last word of
// each, a run started again under a name included); workersSubjects
// matches them all.
func (c Config) workersSubject(name, run string) string {
	return c.Stream + ".workers." + name + "." + run
}
func (c Config) workersSubjects() string { return c.Stream + ".workers.>" }

// refusedSubject is where a worker says why it did not run job id (core
// NATS: nothing is stored); a Manager names the last reason it heard in
// the job's failure at its delivery limit.
func (c Config) refusedSubject(id string) string { return c.Stream + ".refused." + id }

// proveSubject is where a worker challenges the Managers on its server to
// prove they hold its JobKey, and a client the Service to prove it holds
// its ClientKey (see Config.ProveServer).
func (c Config) proveSubject(role Role) string { return c.Stream + ".api.prove." + string(role) }

// rollSubject is where a service that starts asks every worker to say it
// is there at once.
func (c Config) rollSubject() string { return c.Stream + ".workers" }

func (c Config) submitSubject(batch string) string {
	return c.Stream + ".submit." + batch
}

// statusSubject is where a Service answers status requests, and
// cancelAPISubject cancel requests.
func (c Config) statusSubject() string    { return c.Stream + ".api.status" }
func (c Config) cancelAPISubject() string { return c.Stream + ".api.cancel" }
func (c Config) advisorySubject() string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + c.jobsStream() + "." + consumerName
}

// deletedSubject is where the server says that a stream or consumer was
// deleted; deletedOurs tells those that matter to the Manager (see
// Manager.deleted): the JOBS and RESULTS streams, the workers' consumer.
func (c Config) deletedSubject() string { return "$JS.EVENT.ADVISORY.*.DELETED.>" }

func (c Config) deletedOurs(subject string) bool {
	const p = "$JS.EVENT.ADVISORY."
	switch subject {
	case p + "STREAM.DELETED." + c.jobsStream(), p + "STREAM.DELETED." + c.resultsStream(),
		p + "CONSUMER.DELETED." + c.jobsStream() + "." + consumerName:
		return true
	}
	return false
}

// remakeDelay is how long a stream deleted by hand is left alone before it
// is made again: the server removes the old stream's files after it says
// the stream is gone, and a stream made at once under the same name can
// lose its own files to that removal.
const remakeDelay = time.Second

// afterDeletion waits remakeDelay, or until ctx ends.
func afterDeletion(ctx context.Context) error {
	t := time.NewTimer(remakeDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ensure creates the two streams and the workers' consumer, or updates
// them when update is set (the Manager does; a worker, which may have the
// rights of RoleWorker only, leaves the streams that exist as they are).
func ensure(ctx context.Context, js natsjs.JetStream, c Config, update bool) (jobs, results natsjs.Stream, cons natsjs.Consumer, err error) {
	jobs, err = ensureStream(ctx, js, update, natsjs.StreamConfig{
		Name:        c.jobsStream(),
		Description: "laboro jobs waiting for a worker",
		Subjects:    []string{c.Stream + ".jobs.>"},
		Retention:   natsjs.WorkQueuePolicy,
		AllowDirect: true, // fast lookups of a job still waiting
		Storage:     natsjs.FileStorage,
		Replicas:    c.Replicas, // 0: the stream's
		Duplicates:  DuplicateWindow,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("jetstream: stream %s: %w", c.jobsStream(), err)
	}
	results, err = ensureStream(ctx, js, update, natsjs.StreamConfig{
		Name:        c.resultsStream(),
		Description: "laboro job results, and the jobs whose Run ended first",
		Subjects:    []string{c.Stream + ".results.>", c.Stream + ".cancel.>"},
		Retention:   natsjs.LimitsPolicy,
		MaxAge:      c.ResultsMaxAge,
		MaxBytes:    bytesLimit(c.ResultsMaxBytes),
		Discard:     natsjs.DiscardOld,
		AllowDirect: true, // fast lookups of a job's stored result
		Storage:     natsjs.FileStorage,
		Replicas:    c.Replicas,
		Duplicates:  DuplicateWindow,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("jetstream: stream %s: %w", c.resultsStream(), err)
	}
	// Settings left at 0 keep the consumer's, or get the defaults.
	ackWait, maxDeliver := c.AckWait, c.MaxDeliver
	switch old, err := jobs.Consumer(ctx, consumerName); {
	case err == nil:
		info := old.CachedInfo().Config
		ackWait, maxDeliver = cmp.Or(ackWait, info.AckWait), cmp.Or(maxDeliver, info.MaxDeliver)
	case !errors.Is(err, natsjs.ErrConsumerNotFound):
		// Not known: the settings it has are not to be lost to defaults.
		err = refusedOr(js.Conn(), err, "$JS.API.CONSUMER.INFO."+c.jobsStream()+"."+consumerName)
		return nil, nil, nil, fmt.Errorf("jetstream: consumer %s: %w", consumerName, err)
	}
	ackWait, maxDeliver = cmp.Or(ackWait, DefaultAckWait), cmp.Or(maxDeliver, DefaultMaxDeliver)
	cons, err = jobs.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{
		Durable:     consumerName,
		Description: "laboro workers",
		AckPolicy:   natsjs.AckExplicitPolicy,
		AckWait:     ackWait,
		MaxDeliver:  maxDeliver,
		Replicas:    c.Replicas, // 0: the stream's
	})
	if err != nil {
		err = refusedOr(js.Conn(), err, "$JS.API.CONSUMER.CREATE."+c.jobsStream()+"."+consumerName)
		return nil, nil, nil, fmt.Errorf("jetstream: consumer %s: %w", consumerName, err)
	}
	return jobs, results, cons, nil
}

// ensureStream creates the stream sc describes, or updates it when update
// is set; else a stream that exists stays as it is. sc.Replicas 0 keeps the
// replica count of a stream that exists, and makes a new one with 1.
//
// Its requests are not made again: a caller makes the whole of it again,
// with a time limit for each attempt (retry), since a request the server
// never answers would otherwise hold it until ctx ends.
func ensureStream(ctx context.Context, js natsjs.JetStream, update bool, sc natsjs.StreamConfig) (natsjs.Stream, error) {
	s, err := js.Stream(ctx, sc.Name)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		// Made, not updated: a stream another client makes meanwhile (the
		// same, from a worker) is then found as it is, and an update is
		// sent only if it differs. An update of a stream in use is work
		// for the server, and has raced in it against a consumer being
		// made.
		made := sc
		made.Replicas = cmp.Or(sc.Replicas, 1)
		s, err = js.CreateStream(ctx, made)
		if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) { // made meanwhile, otherwise
			s, err = js.Stream(ctx, sc.Name)
		}
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("no JetStream answers on this NATS server (is it started with -js?): %w", err)
	}
	if err != nil {
		return nil, refusedOr(js.Conn(), err, streamAPI+"INFO."+sc.Name, streamAPI+"CREATE."+sc.Name)
	}
	have := s.CachedInfo().Config
	sc.Replicas = cmp.Or(sc.Replicas, have.Replicas)
	if update && !sameStream(have, sc) {
		if s, err = js.UpdateStream(ctx, sc); err != nil {
			return nil, refusedOr(js.Conn(), err, streamAPI+"UPDATE."+sc.Name)
		}
	}
	return s, nil
}

// streamAPI starts the subjects of the JetStream API's requests about
// streams.
const streamAPI = "$JS.API.STREAM."

// sameStream reports whether a stream's configuration has every setting
// that want sets.
func sameStream(have, want natsjs.StreamConfig) bool {
	// The server keeps "no limit" as -1, which want says as 0.
	noLimit := func(n int64) int64 { return bytesLimit(max(n, 0)) }
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention && have.MaxAge == want.MaxAge && noLimit(have.MaxBytes) == noLimit(want.MaxBytes) &&
		noLimit(have.MaxMsgs) == noLimit(want.MaxMsgs) && noLimit(have.MaxMsgsPerSubject) == noLimit(want.MaxMsgsPerSubject) &&
		noLimit(int64(have.MaxMsgSize)) == noLimit(int64(want.MaxMsgSize)) &&
		have.Discard == want.Discard && have.AllowDirect == want.AllowDirect && have.Storage == want.Storage &&
		have.Replicas == want.Replicas && have.Duplicates == want.Duplicates
}

// JobOptions is the laboro.Job.Payload that a Manager reads, for what a
// job needs beyond laboro.Job's fields. A job may have none.
type JobOptions struct {
	// RunTimeout, if positive, bounds the job's run on its worker, counted
	// from its start there: the worker kills it after that long and
	// reports it StatusTimedOut. Job.Timeout, which the Executor applies,
	// counts from the start of the job's Run, when it is published, so that
	// the time it waits for a free worker counts too. The Service gives
	// the timeout of a submitted job as a RunTimeout.
	RunTimeout time.Duration
}

// ValidID returns nil if id may name a job or a batch in the streams (it
// is a token of their subjects): not empty, UTF-8, without '.', '*', '>'
// or white space; else an error that says why. Manager.Run and the
// Service check it; a command line checks it before it connects.
func ValidID(id string) error { return validID(id) }

// validID refuses ids that cannot be a subject token.
func validID(id string) error {
	if id == "" {
		return errors.New("jetstream: a job needs an ID (an Executor assigns job_N)")
	}
	if !utf8.ValidString(id) || strings.ContainsAny(id, ".*>") || strings.IndexFunc(id, unicode.IsSpace) >= 0 {
		return fmt.Errorf("jetstream: job id %q must be UTF-8 without '.', '*', '>' or white space", id)
	}
	return nil
}

// checkJob refuses a job that cannot travel to a worker intact: its ID, when
// set, must be usable as a subject token; it needs a Command, Args or
// Script, and no Func or Stdin, and no Payload but a JobOptions; its text must be valid UTF-8 (JSON would
// replace the other bytes).
func checkJob(job laboro.Job) error {
	if job.ID != "" {
		if err := validID(job.ID); err != nil {
			return err
		}
	}
	if job.Func != nil || job.Stdin != nil {
		return errors.New("jetstream: Func and Stdin cannot be sent to a worker")
	}
	if _, ok := job.Payload.(JobOptions); job.Payload != nil && !ok {
		return fmt.Errorf("jetstream: a job's Payload is a jetstream.JobOptions, not a %T", job.Payload)
	}
	if job.Command == "" && job.Script == "" && len(job.Args) == 0 {
		return errors.New("jetstream: a job needs a Command, Args or Script")
	}
	if err := (&laboro.ProcessRunner{}).Validate(job); err != nil {
		return fmt.Errorf("jetstream: job %s: %w", job.ID, err) // a worker could not run it
	}
	texts := append([]string{job.Command, job.Script, job.Dir}, job.Args...)
	texts = append(append(texts, job.Interpreter...), job.Env...)
	for _, t := range texts {
		if !utf8.ValidString(t) {
			return fmt.Errorf("jetstream: job %s: %q is not valid UTF-8, which a job cannot carry", job.ID, t)
		}
	}
	return nil
}

// wireJob is a job as it travels, in JSON: from a Client to a Service
// (with its timeout), and from a Manager to the workers, with the deadline
// of its Run (its Job.Timeout, applied by the Executor) and, as its
// timeout, its JobOptions.RunTimeout (applied by the worker).
type wireJob struct {
	ID          string   `json:"id"`
	Command     string   `json:"command,omitempty"`
	Args        []string `json:"args,omitempty"`
	Script      string   `json:"script,omitempty"`
	Interpreter []string `json:"interpreter,omitempty"`
	Dir         string   `json:"dir,omitempty"`
	Env         []string `json:"env,omitempty"`
	TimeoutNS   int64    `json:"timeout_ns,omitempty"`
	// DeadlineNS is when the job's Run ends, in nanoseconds since the Unix
	// epoch; 0 for none.
	DeadlineNS int64 `json:"deadline_ns,omitempty"`
}

func toWire(j laboro.Job) wireJob {
	return wireJob{ID: j.ID, Command: j.Command, Args: j.Args, Script: j.Script,
		Interpreter: j.Interpreter, Dir: j.Dir, Env: j.Env, TimeoutNS: int64(j.Timeout)}
}

// job is the laboro.Job that w describes; its deadline is apart.
func (w wireJob) job() laboro.Job {
	return laboro.Job{ID: w.ID, Command: w.Command, Args: w.Args, Script: w.Script,
		Interpreter: w.Interpreter, Dir: w.Dir, Env: w.Env, Timeout: time.Duration(w.TimeoutNS)}
}

// jobSum sums up what job runs (its command, arguments, script,
// interpreter, directory and environment: its wire form without its id
// and times, where a nil list and an empty one are alike) in 32 hex
// digits: two jobs with the same sum run the same thing.
func jobSum(job laboro.Job) string {
	w := toWire(job)
	w.ID, w.TimeoutNS, w.DeadlineNS = "", 0, 0
	what, _ := json.Marshal(w)
	sum := sha256.Sum256(what)
	return hex.EncodeToString(sum[:16])
}

// sameJob reports whether the outcome or job message of headers h belongs
// to a job whose sum is sum: yes when h has no sum (stored by a version
// of laboro that did not say).
func sameJob(h nats.Header, sum string) bool {
	s := h.Get(hdrSum)
	return s == "" || s == sum
}

// deadline returns w's deadline, and false when it has none.
func (w wireJob) deadline() (time.Time, bool) {
	if w.DeadlineNS == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, w.DeadlineNS), true
}

// Result message headers.
const (
	hdrJob     = "Laboro-Job"
	hdrAttempt = "Laboro-Attempt" // the delivery count of the job message
	hdrStatus  = "Laboro-Status"  // laboro.Status as a number
	hdrExit    = "Laboro-Exit"
	hdrError   = "Laboro-Error"
	hdrReason  = "Laboro-Reason" // "max-deliver" for the Manager's own failure; a refusal's reason
	hdrWorker  = "Laboro-Worker" // the name of the worker that refused a job
	hdrPID     = "Laboro-Pid"
	hdrStarted = "Laboro-Started" // RFC 3339, nanoseconds
	hdrEnded   = "Laboro-Ended"
	hdrStderr  = "Laboro-Stderr" // base64
	hdrChunk   = "Laboro-Chunk"  // index of this chunk, from 0
	hdrChunks  = "Laboro-Chunks" // number of chunks; 0: no output
	// hdrSum is what the job runs (jobSum), on a job's message and on
	// every outcome of it stored: an id that comes again with another job
	// is told from a job submitted again.
	hdrSum = "Laboro-Job-Sum"
	// hdrSigned is a job's HMAC keyed with Config.JobKey (jobMAC).
	hdrSigned = "Laboro-Job-Mac"

	reasonMaxDeliver = "max-deliver"
	// A worker's reasons for not running a job (on refusedSubject).
	reasonUnsigned    = "unsigned"
	reasonUndecodable = "undecodable"
)

// refusals says, for each reason a worker gives for not running a job,
// what it means to the job's user.
var refusals = map[string]string{
	reasonUnsigned: "it is not signed with the worker's key (the worker's token is from another server, " +
		"or the Manager has no Config.JobKey)",
	reasonUndecodable: "it could not read the job (a worker of another version?)",
}

// headerText makes s fit on one header line.
func headerText(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}

// feedHeartbeat is how often the server of a stream reader (the Manager's
// results, a Service's submissions) says it is alive: a reader whose server
// went away is moved to another one after two missed heartbeats.
const feedHeartbeat = time.Second

// An attempt to make a request (publish, look up) that gets no answer is
// given up after firstAttempt, and made again with twice as long each
// time, up to attemptTimeout: an answer lost with a cluster's leader is
// asked for again soon, and a slow server is not asked too often.
const (
	firstAttempt   = time.Second
	attemptTimeout = 5 * time.Second
)

// attemptLimits are the time limits of successive attempts at a request.
func attemptLimits() transport.Backoff {
	return transport.Backoff{Min: firstAttempt, Max: attemptTimeout}
}

// pauses are the waits after an error that may last (a server away), so
// that a loop does not spin on it: 100 ms, then twice as long each time up
// to 1 s, each cut short when nc, down as it begins, is back up (what
// failed for want of the server is tried again as soon as it can be).
// Reset after a success.
func pauses(nc *nats.Conn) connPause {
	return connPause{Backoff: transport.Backoff{Min: 100 * time.Millisecond, Max: time.Second}, nc: nc}
}

// connPause is a Backoff that ends its wait when its connection comes back.
type connPause struct {
	transport.Backoff
	nc *nats.Conn
}

// Wait sleeps for Next(), or until the connection, down, is back up
// (the next wait is then Min again), or until ctx ends; it returns
// ctx.Err().
func (p *connPause) Wait(ctx context.Context) error {
	if p.nc == nil || p.nc.IsConnected() || p.nc.IsClosed() {
		return p.Backoff.Wait(ctx)
	}
	back := p.nc.StatusChanged(nats.CONNECTED)
	defer p.nc.RemoveStatusListener(back)
	if p.nc.IsConnected() { // back before the listener was
		p.Reset()
		return ctx.Err()
	}
	t := time.NewTimer(p.Next())
	defer t.Stop()
	select {
	case <-t.C:
	case <-back:
		p.Reset()
	case <-ctx.Done():
	}
	return ctx.Err()
}

// publish stores msg with id as its Nats-Msg-Id. An attempt that gets no
// acknowledgement in time (a server restarting, a cluster electing a
// leader, a connection being re-established) is made again until ctx ends:
// the server drops the copies by id. A refusal from the server is
// returned at once.
func publish(ctx context.Context, js natsjs.JetStream, msg *nats.Msg, id string) (*natsjs.PubAck, error) {
	return publishProven(ctx, js, msg, id, nil)
}

// publishProven is publish that calls prove, if not nil, before each
// attempt, with ctx: the server has it prove itself (see
// Config.ProveServer) before it is given msg, even after the connection
// came back, perhaps to another server (what is sent while the connection
// is down goes to the next server as soon as it connects).
func publishProven(ctx context.Context, js natsjs.JetStream, msg *nats.Msg, id string, prove func(context.Context) error) (*natsjs.PubAck, error) {
	var ack *natsjs.PubAck
	err := retry(ctx, js.Conn(), func(actx context.Context) (err error) {
		if prove != nil {
			if err := prove(ctx); err != nil {
				return err
			}
		}
		ack, err = js.PublishMsg(actx, msg, natsjs.WithMsgID(id))
		return err
	})
	return ack, err
}

// lookup returns the last message of stream on subject, or nil when there
// is none, asking again while the server does not answer. A lookup the
// connection's rights do not cover fails at once, its error matching
// nats.ErrPermissionViolation.
func lookup(ctx context.Context, nc *nats.Conn, stream natsjs.Stream, subject string) (*natsjs.RawStreamMsg, error) {
	var found *natsjs.RawStreamMsg
	api := "$JS.API.DIRECT.GET." + streamName(stream) + "." + subject
	err := retry(ctx, nc, func(ctx context.Context) error {
		msg, err := stream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			if last := refusedTo(nc, api); last != nil {
				return last
			}
		}
		found = msg
		return err
	})
	return found, err
}

// streamName is stream's name, "" if unknown.
func streamName(stream natsjs.Stream) string {
	if info := stream.CachedInfo(); info != nil {
		return info.Config.Name
	}
	return ""
}

// refusedOr returns what refusedTo returns for the first of subjects it
// finds refused, else err: the error of a request to one of them.
func refusedOr(nc *nats.Conn, err error, subjects ...string) error {
	for _, subject := range subjects {
		if last := refusedTo(nc, subject); last != nil {
			return last
		}
	}
	return err
}

// refusedTo returns the connection's last error when it is the server's
// refusal to let it publish to subject (a request beyond its token's
// rights, which the server does not answer), and nil otherwise.
func refusedTo(nc *nats.Conn, subject string) error {
	last := nc.LastError()
	if errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), "Publish to \""+subject+"\"") {
		return last
	}
	return nil
}

// count returns how many messages stream holds on subject, asking again
// while the server does not answer.
func count(ctx context.Context, nc *nats.Conn, stream natsjs.Stream, subject string) (uint64, error) {
	var info *natsjs.StreamInfo
	err := retry(ctx, nc, func(ctx context.Context) (err error) {
		info, err = stream.Info(ctx, natsjs.WithSubjectFilter(subject))
		return err
	})
	if err != nil {
		return 0, err
	}
	return info.State.Subjects[subject], nil
}

// retry calls f, with a time limit for each attempt (attemptLimits), until
// it succeeds, fails for good (transient says), or ctx ends.
func retry(ctx context.Context, nc *nats.Conn, f func(context.Context) error) error {
	return retryIf(ctx, nc, f, func(err error) bool { return transient(nc, err) })
}

// retryUnanswered is retry that makes f again only when it got no answer in
// time: any other error is returned at once, for the caller to report,
// even one that may go away (a server without JetStream, for now or for
// good). What a program does first (a Service starting, a Client's first
// submission) fails so, with the reason, rather than wait without a word.
func retryUnanswered(ctx context.Context, nc *nats.Conn, f func(context.Context) error) error {
	return retryIf(ctx, nc, f, func(err error) bool {
		return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
	})
}

// retryIf calls f, with a time limit for each attempt (attemptLimits),
// until it succeeds, fails with an error that again does not take, or ctx
// ends.
func retryIf(ctx context.Context, nc *nats.Conn, f func(context.Context) error, again func(error) bool) error {
	limits, pause := attemptLimits(), pauses(nc)
	for {
		actx, cancel := context.WithTimeout(ctx, limits.Next())
		err := f(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !again(err) {
			return err
		}
		if pause.Wait(ctx) != nil {
			return err
		}
	}
}

// The server's error codes: errCodeDuplicateInProcess for a message whose
// id is being stored by an attempt still under way; errCodeStoreFailed for
// a message a stream cannot take (full, with DiscardNew).
const (
	errCodeDuplicateInProcess natsjs.ErrorCode = 10158
	errCodeStoreFailed        natsjs.ErrorCode = 10077
)

// storeFailed tells whether err is a stream's refusal to store a message
// (it is full).
func storeFailed(err error) bool {
	var apiErr *natsjs.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStoreFailed
}

// notConnected is the reason to log while waiting for the NATS server: the
// connection's state and its own last error (a wrong token) while it is
// not connected, rather than the request's timeout that err then is.
func notConnected(nc *nats.Conn, err error) zap.Field {
	if !nc.IsConnected() {
		if last := nc.LastError(); last != nil {
			return zap.NamedError("error", fmt.Errorf("not connected: %w", last))
		}
		return zap.String("error", "not connected ("+strings.ToLower(nc.Status().String())+")")
	}
	return zap.Error(err)
}

// transient tells whether err may go away if the request is made again: no
// answer (a server restarting, a connection being re-established), or
// JetStream saying it is not available for now. Other refusals from the
// server, a request beyond the connection's rights, a closed connection
// and a server that proves another key (ErrServerUnproven) are for good.
func transient(nc *nats.Conn, err error) bool {
	if nc.IsClosed() || errors.Is(err, ErrServerUnproven) || errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) {
		// 10158: a copy of the message, with the same id, is being
		// stored (an attempt made again while the first is under way): the
		// next attempt gets the first one's answer.
		return (apiErr.Code == 503 && apiErr.ErrorCode != errCodeStoreFailed) ||
			apiErr.ErrorCode == natsjs.JSErrCodeJetStreamNotEnabled || apiErr.ErrorCode == errCodeDuplicateInProcess
	}
	return true
}
