package jetstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/laboro-go/laboro"
)

// What a fleet's service knows of its workers: each worker says every
// beatInterval who it is, how many jobs it runs at once, which it runs, and
// the deliveries of the jobs it holds (on Config.workersSubject, one subject
// for each run of a worker, which a random id names; a service keeps each
// run's last word in the stream Config.fleetStream), and
// answers a request for the output of a job it runs
// now (on Config.liveSubject), so that a user can follow that output live
// from the service's machine. With Config.ProveServer, the jobs it runs are
// said, and their output answered for, only to a server that proved itself;
// an unproven one hears the worker's name and slots, and has the worker ask
// for a proof.
//
// A worker says it at once as it takes a job, so that a job whose worker
// dies the moment after is handed back too, even by a service started
// again meanwhile; other changes (a job started, ended) not twice within
// beatMin.
//
// A worker that falls silent (killed, its machine gone) has its jobs handed
// back by the service, which gives a negative acknowledgement for each
// delivery it held: another worker takes them within seconds, instead of
// after the consumer's AckWait. The service does so only while the
// deliveries cannot have expired and gone to another worker: the worker's
// in-progress acknowledgements, every AckWait/3, keep each one at least
// AckWait*2/3 past its last heartbeat, and the service hands back before
// AckWait/2 has passed since it heard it. A service that starts reads the
// last heartbeats kept (fleet.recall): a worker killed while no service ran,
// or while the server was down with the service that embeds it, has its jobs
// handed back as well, if it is not heard again.

// beatInterval is how often a worker says it is there; a worker not heard
// from for beatsMissed intervals is taken for gone, and its jobs handed
// back.
const (
	beatInterval = 2 * time.Second
	beatsMissed  = 3
	beatMin      = 100 * time.Millisecond
)

// beatEvery and beatPause are beatInterval and beatMin, as the workers keep
// them: variables for the tests.
var beatEvery, beatPause = beatInterval, beatMin

// heartbeat is what a worker says of itself on Config.workersSubject.
type heartbeat struct {
	WorkerInfo
	// Leases are the deliveries of the jobs it holds (running, or their
	// results on the way).
	Leases []lease `json:"leases,omitempty"`
	// Said numbers a run's heartbeats, from 1; 0 from a worker that does
	// not number them.
	Said uint64 `json:"said,omitempty"`
	// Unproven is set when the worker does not say what it runs and holds,
	// to a server that has not proved itself to it yet (see
	// Config.ProveServer): a service keeps what it heard before.
	Unproven bool `json:"unproven,omitempty"`
}

// lease is a delivery of a job a worker holds: the job's id and the
// subject that acknowledges that delivery.
type lease struct {
	Job string `json:"job"`
	Ack string `json:"ack"`
}

// maxBeat bounds a heartbeat's body: a worker says no more of the jobs it
// runs and holds than fit, and a service ignores a bigger one.
const maxBeat = 256 << 10

// liveChunk bounds the output one answer to a live request carries.
const liveChunk = 64 << 10

// hdrOffset is where in a job's output a live request asks to read from,
// and where its answer's bytes are.
const hdrOffset = "Laboro-Offset"

// ErrNotRunning is returned by Tail when no worker answers for the job: it
// has not started, has ended, or its worker cannot be reached.
var ErrNotRunning = errors.New("jetstream: no worker runs the job now")

// WorkerInfo is a worker as it says it is.
type WorkerInfo struct {
	// Name is the worker's name (Worker.Name).
	Name string `json:"name"`
	// Run tells one run of a worker (a call of Worker.Run, which picks it
	// at random and logs it) from another under the same name: a service
	// keeps each run's word apart, so that what a run held before it
	// stopped is handed back although its successor speaks under its name,
	// and so that two live workers sharing a name do not have each other's
	// jobs handed back. Such twins are listed each on its own; a worker
	// started again is listed once, as its last run. Empty from a worker
	// that does not say it: its runs are then one to the service.
	Run string `json:"run,omitempty"`
	// Slots is how many jobs it runs at once.
	Slots int `json:"slots"`
	// Running are the ids of the jobs it runs now.
	Running []string `json:"running,omitempty"`
	// Seen is when the service last heard from it, by the service's clock.
	Seen time.Time `json:"-"`
	// Gone is set in a worker's last word, as it stops.
	Gone bool `json:"gone,omitempty"`
}

// maxRunningSaid bounds the job ids one heartbeat lists.
const maxRunningSaid = 1024

// subjectToken makes s one token of a NATS subject: no dots, spaces or
// wildcards.
func subjectToken(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f:
			return '_'
		}
		return r
	}, s)
}

// defaultWorkerName is the host's name and the process id.
func defaultWorkerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// beat says, every beatInterval until ctx ends, that this worker is there
// and what it runs, and then that it is gone. It says it at once as it
// takes a job (the job is then in the service's hands should the worker
// die the moment after) and when its connection is back after a drop, and
// soon when what it runs changed otherwise, but then not more than once
// per beatMin.
func (r *workerRun) beat(ctx context.Context, nc *nats.Conn, name, run string, slots int) {
	said := uint64(0)
	subject := r.cfg.workersSubject(subjectToken(name), run)
	say := func(gone bool) {
		said++
		info := heartbeat{WorkerInfo: WorkerInfo{Name: name, Run: run, Slots: slots, Gone: gone}, Said: said}
		if !gone && !r.proven() {
			info.Unproven = true
			r.askProof() // its end says the jobs (see challenge)
		} else if !gone {
			for _, run := range r.ex.Running() {
				if len(info.Running) == maxRunningSaid {
					break
				}
				info.Running = append(info.Running, run.Job.ID)
			}
			info.Leases = r.leases()
		}
		b, _ := json.Marshal(info)
		for len(b) > maxBeat && len(info.Running)+len(info.Leases) > 0 {
			info.Running, info.Leases = info.Running[:len(info.Running)/2], info.Leases[:len(info.Leases)/2]
			b, _ = json.Marshal(info)
		}
		if err := nc.Publish(subject, b); err != nil {
			r.log.Debug("heartbeat", zap.Error(err))
		}
	}
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	// Said again as soon as the connection is back: a service that started
	// meanwhile called the roll when this worker could not hear it, and
	// hears of its jobs then long before it would take it for gone.
	back := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(back)
	for {
		say(false)
		at := time.Now()
		select {
		case <-ctx.Done():
			say(true)
			nc.Flush()
			return
		case <-t.C:
		case <-back:
		case <-r.took:
		case <-r.changed:
			if wait := beatPause - time.Since(at); wait > 0 {
				pause := time.NewTimer(wait)
				select {
				case <-pause.C:
				case <-r.took: // said at once, with the change
				case <-back:
				case <-ctx.Done():
				}
				pause.Stop()
			}
		}
	}
}

// answerLive answers a request for the output of a job this worker runs
// now: the bytes from the request's offset on, at most liveChunk (none yet
// when its process has not started). A job it does not run gets no answer
// from it: the worker that runs it answers.
func (r *workerRun) answerLive(msg *nats.Msg) {
	if msg.Reply == "" {
		return
	}
	if !r.proven() {
		// Not to a program posing as the server; the next request may
		// find it proven.
		r.askProof()
		return
	}
	id := strings.TrimPrefix(msg.Subject, r.cfg.liveSubject(""))
	running := r.ex.Running()
	i := slices.IndexFunc(running, func(run laboro.Running) bool { return run.Job.ID == id })
	if i < 0 {
		return
	}
	path := running[i].Output
	offset, err := strconv.ParseInt(msg.Header.Get(hdrOffset), 10, 64)
	if err != nil || offset < 0 {
		offset = 0
	}
	reply := nats.NewMsg(msg.Reply)
	reply.Header.Set(hdrOffset, strconv.FormatInt(offset, 10))
	if path != "" {
		if f, err := os.Open(path); err == nil {
			buf := make([]byte, liveChunk)
			n, err := f.ReadAt(buf, offset)
			f.Close()
			if err != nil && err != io.EOF {
				r.log.Debug("live output", zap.String("job", id), zap.Error(err))
			}
			reply.Data = buf[:n]
		}
	}
	if err := msg.RespondMsg(reply); err != nil {
		r.log.Debug("live output", zap.String("job", id), zap.Error(err))
	}
}

// tailWait is how long tail waits for the worker that runs a job to answer
// (all workers hear the request; the others are silent).
const tailWait = time.Second

// tail asks the worker that runs job id for its output from offset on.
func tail(ctx context.Context, nc *nats.Conn, cfg Config, id string, offset int64) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, tailWait)
		defer cancel()
	}
	req := nats.NewMsg(cfg.liveSubject(id))
	req.Header.Set(hdrOffset, strconv.FormatInt(offset, 10))
	reply, err := nc.RequestMsgWithContext(ctx, req)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("%w: %s", ErrNotRunning, id)
	case err != nil:
		return nil, fmt.Errorf("jetstream: live output of %s: %w", id, err)
	}
	if got := reply.Header.Get(hdrOffset); got != strconv.FormatInt(offset, 10) {
		return nil, fmt.Errorf("jetstream: live output of %s: answer for offset %q, not %d", id, got, offset)
	}
	return reply.Data, nil
}

// key is where a fleet keeps what b says (workerKey).
func (b heartbeat) key() string { return workerKey(b.Name, b.Run) }

// workerKey is where a fleet keeps run run of worker name.
func workerKey(name, run string) string {
	if run == "" {
		return name
	}
	return name + "\x00" + run
}

// fleet is what a Service hears of its workers.
type fleet struct {
	mu      sync.Mutex
	log     *zap.Logger
	workers map[string]heardOf // by name and run (heartbeat.key)
	// names are the names heard live: the run each was last heard from,
	// and whether the service warned that two live workers share it.
	names map[string]nameHeard
	// acks is in the acknowledgement subject of every delivery of the
	// workers' consumer: a lease said with another is not handed back.
	acks string
	// back is when the service started, or its own connection was last
	// seen down or back up (reconnects tells): a worker's silence counts
	// from then only, for the service could not hear it before.
	back       time.Time
	reconnects uint64
}

// heardOf is a worker as its last heartbeat says.
type heardOf struct {
	info   WorkerInfo
	leases []lease
	said   uint64 // the number of the last heartbeat (heartbeat.Said)
}

// nameHeard is a worker's name as a fleet heard it (fleet.names).
type nameHeard struct {
	run    string
	shared bool
}

// reset forgets the workers heard of, for a Service's Run on cfg's
// streams, logging to log.
func (f *fleet) reset(cfg Config, log *zap.Logger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = log
	f.workers, f.names = map[string]heardOf{}, map[string]nameHeard{}
	f.acks = "." + cfg.jobsStream() + "." + consumerName + "."
	f.back, f.reconnects = time.Now(), 0 // none heard before
}

// heard records a heartbeat.
func (f *fleet) heard(msg *nats.Msg) {
	beat, ok := parseBeat(msg.Data)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if beat.Gone {
		f.forget(beat.Name, beat.Run)
		return
	}
	f.note(beat, time.Now(), true)
}

// forget drops run run of worker name. f.mu is held.
func (f *fleet) forget(name, run string) {
	delete(f.workers, workerKey(name, run))
	if n, ok := f.names[name]; ok && n.run == run {
		delete(f.names, name)
	}
}

// parseBeat reads a heartbeat's body.
func parseBeat(data []byte) (beat heartbeat, ok bool) {
	if len(data) > maxBeat || json.Unmarshal(data, &beat) != nil || beat.Name == "" ||
		strings.Contains(beat.Name, "\x00") || strings.Contains(beat.Run, "\x00") { // NUL parts a key (heartbeat.key)
		return heartbeat{}, false
	}
	return beat, true
}

// note records beat, heard at seen; live is set when it was heard as it
// was said (not recalled from the stream). f.mu is held.
func (f *fleet) note(beat heartbeat, seen time.Time, live bool) {
	key := beat.key()
	prev, ok := f.workers[key]
	if !ok && len(f.workers) >= maxWorkersHeard {
		return
	}
	beat.Seen = seen
	w := heardOf{info: beat.WorkerInfo, said: beat.Said}
	if live {
		// A run heard again after another of its name spoke: two live
		// workers share the name (a run that stopped says no more).
		n, spoke := f.names[beat.Name]
		if ok && spoke && n.run != beat.Run && !n.shared {
			n.shared = true
			f.log.Warn("two live workers share this name: give each its own (Worker.Name, laboro worker -name); "+
				"each logged its run as it started", zap.String("worker", beat.Name), zap.Strings("runs", []string{n.run, beat.Run}))
		}
		n.run = beat.Run
		f.names[beat.Name] = n
	}
	if beat.Unproven && beat.Said > prev.said {
		// It says nothing of its jobs to a server it has not heard prove
		// itself (one that came back, or this service, new): they are
		// what it said last. Its deliveries stay its own meanwhile, kept
		// by its in-progress acknowledgements.
		w.info.Running, w.leases = prev.info.Running, prev.leases
	} else {
		w.leases = slices.DeleteFunc(beat.Leases, func(l lease) bool { return !f.ours(l.Ack) })
	}
	f.workers[key] = w
}

// The stream of heartbeats (Config.fleetStream) keeps each worker's last
// for fleetKept, fleetMaxBytes in all.
const (
	fleetKept     = 5 * time.Minute
	fleetMaxBytes = 64 << 20
)

// ensureFleet makes the stream that keeps each worker's last heartbeat, or
// updates it.
func ensureFleet(ctx context.Context, js natsjs.JetStream, cfg Config) (natsjs.Stream, error) {
	st, err := ensureStream(ctx, js, true, natsjs.StreamConfig{
		Name:              cfg.fleetStream(),
		Description:       "laboro workers' last heartbeats",
		Subjects:          []string{cfg.workersSubjects()},
		Retention:         natsjs.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		MaxMsgs:           maxWorkersHeard,
		MaxBytes:          fleetMaxBytes,
		MaxMsgSize:        maxBeat,
		MaxAge:            fleetKept,
		Discard:           natsjs.DiscardOld,
		Storage:           natsjs.FileStorage, // it outlives a server that dies with its service
		Replicas:          cfg.Replicas,       // 0: the stream's
		Duplicates:        DuplicateWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", cfg.fleetStream(), err)
	}
	return st, nil
}

// recall learns, from the stream of heartbeats, the workers that held
// deliveries when they last spoke, less than ackWait/2 ago: those a service
// heard before this one started. It returns their names. A worker heard
// since is left as heard. How long ago a heartbeat was stored is read on
// the server's clock (its time now comes with the stream's information),
// so that the clocks of the service's and the server's machines need not
// agree; and a recalled worker's silence counts from this service's start
// (reset), for a live one may take that long to reach a server started
// again.
func (f *fleet) recall(ctx context.Context, js natsjs.JetStream, cfg Config, ackWait time.Duration) ([]string, error) {
	var info *natsjs.StreamInfo
	var st natsjs.Stream
	err := retryUnanswered(ctx, js.Conn(), func(ctx context.Context) (err error) {
		if st, err = ensureFleet(ctx, js, cfg); err != nil {
			return err
		}
		if info, err = st.Info(ctx); err != nil {
			return fmt.Errorf("jetstream: stream %s: %w", cfg.fleetStream(), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	now, serverNow := time.Now(), info.TimeStamp
	if serverNow.IsZero() { // a server that does not say its time
		serverNow = now
	}
	n := min(info.State.Msgs, maxWorkersHeard)
	if n == 0 {
		return nil, nil
	}
	var cons natsjs.Consumer
	err = retryUnanswered(ctx, js.Conn(), func(ctx context.Context) (err error) {
		cons, err = st.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{InactiveThreshold: time.Minute})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", cfg.fleetStream(), err)
	}
	batch, err := cons.Fetch(int(n), natsjs.FetchMaxWait(time.Second))
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", cfg.fleetStream(), err)
	}
	var names []string
	for msg := range batch.Messages() {
		md, err := msg.Metadata()
		if err != nil {
			continue
		}
		age := max(serverNow.Sub(md.Timestamp), 0)
		beat, ok := parseBeat(msg.Data())
		if !ok || beat.Gone || age >= ackWait/2 {
			continue // gone, or its deliveries may be another worker's now
		}
		f.mu.Lock()
		_, heard := f.workers[beat.key()]
		// One that held nothing of ours is left to be heard, or not.
		if !heard && slices.ContainsFunc(beat.Leases, func(l lease) bool { return f.ours(l.Ack) }) {
			f.note(beat, now.Add(-age), false)
			if _, kept := f.workers[beat.key()]; kept {
				names = append(names, beat.Name)
			}
		}
		f.mu.Unlock()
	}
	return names, batch.Error()
}

// ours reports whether ack acknowledges a delivery of the workers'
// consumer: a worker's heartbeat must not have the service publish
// anywhere else.
func (f *fleet) ours(ack string) bool {
	return strings.HasPrefix(ack, "$JS.ACK.") && strings.Contains(ack, f.acks) && len(ack) <= 512 &&
		!strings.ContainsAny(ack, "*> \t\r\n")
}

// maxWorkersHeard bounds the workers a Service keeps track of.
const maxWorkersHeard = 4096

// silent reports whether a worker last heard at seen is taken for gone at
// now. f.mu is held.
func (f *fleet) silent(seen, now time.Time) bool {
	if seen.Before(f.back) {
		seen = f.back
	}
	return now.Sub(seen) > beatsMissed*beatInterval
}

// list returns the workers heard from lately, by name and run: every run
// of a name two live workers share; of the runs of another name (a worker
// started again, its run before not silent yet), the one heard last.
func (f *fleet) list() []WorkerInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	var list []WorkerInfo
	last := make(map[string]WorkerInfo, len(f.workers))
	for _, w := range f.workers {
		switch {
		case f.silent(w.info.Seen, now):
		case f.names[w.info.Name].shared:
			list = append(list, w.info) // twins: each
		default:
			if l, ok := last[w.info.Name]; !ok || w.info.Seen.After(l.Seen) {
				last[w.info.Name] = w.info
			}
		}
	}
	list = slices.AppendSeq(list, maps.Values(last))
	slices.SortFunc(list, func(a, b WorkerInfo) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Run, b.Run))
	})
	return list
}

// vanished forgets the workers silent at now, and returns them with the
// deliveries to hand back: none for a worker last heard ackWait/2 or more
// ago, whose deliveries may have expired and gone to another worker since.
// up and reconnects are the state of the service's connection: while it is
// down, and for as long after it is back up, no worker is silent (those
// that run hand back nothing, as a service cut off from the server would
// otherwise have every one of their jobs run again).
func (f *fleet) vanished(now time.Time, ackWait time.Duration, up bool, reconnects uint64) []heardOf {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !up || reconnects != f.reconnects {
		f.back, f.reconnects = now, reconnects
		return nil
	}
	var gone []heardOf
	for _, w := range f.workers {
		if !f.silent(w.info.Seen, now) {
			continue
		}
		f.forget(w.info.Name, w.info.Run)
		if now.Sub(w.info.Seen) >= ackWait/2 {
			w.leases = nil
		}
		gone = append(gone, w)
	}
	return gone
}

// watch hands back, every beatInterval until ctx ends, the jobs of the
// workers that fell silent (see vanished), saying so.
func (f *fleet) watch(ctx context.Context, nc *nats.Conn, log *zap.Logger, ackWait time.Duration) {
	tick := time.NewTicker(beatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, w := range f.vanished(now, ackWait, nc.IsConnected(), nc.Stats().Reconnects) {
				handBack(nc, log, w, now)
			}
		}
	}
}

// handBack gives a negative acknowledgement for each delivery w held, so
// that the server delivers its jobs again at once.
func handBack(nc *nats.Conn, log *zap.Logger, w heardOf, now time.Time) {
	log = log.With(zap.String("worker", w.info.Name), zap.Duration("silent", now.Sub(w.info.Seen).Round(time.Second)))
	if len(w.leases) == 0 {
		log.Info("worker not heard from: taken for gone")
		return
	}
	if !nc.IsConnected() {
		// A negative acknowledgement kept until the connection is back
		// could come after the deliveries expired and went elsewhere.
		log.Warn("worker not heard from: the jobs it held wait for their AckWait (this service is cut off from the server)",
			zap.Int("jobs", len(w.leases)))
		return
	}
	ids := make([]string, 0, min(len(w.leases), 10))
	for _, l := range w.leases {
		if err := nc.Publish(l.Ack, []byte("-NAK")); err != nil {
			log.Warn("handing a job back", zap.String("job", l.Job), zap.Error(err))
		}
		if len(ids) < cap(ids) {
			ids = append(ids, l.Job)
		}
	}
	log.Warn("worker not heard from: the jobs it held are handed to other workers",
		zap.Int("jobs", len(w.leases)), zap.Strings("ids", ids))
}
