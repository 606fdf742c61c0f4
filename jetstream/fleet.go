package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/laboro-go/laboro"
)

// What a fleet's console sees of its workers: each worker says every
// beatInterval who it is, how many jobs it runs at once and which it runs
// (on Config.workersSubject, core NATS: nothing is stored), and answers a
// request for the output of a job it runs now (on Config.liveSubject), so
// that a user can follow that output live from the service's machine. With
// Config.ProveServer, the jobs it runs are said, and their output answered
// for, only to a server that proved itself; an unproven one hears the
// worker's name and slots, and has the worker ask for a proof.

// beatInterval is how often a worker says it is there; a worker not heard
// from for beatsMissed intervals is taken for gone.
const (
	beatInterval = 5 * time.Second
	beatsMissed  = 3
	beatMin      = 250 * time.Millisecond
)

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
// and what it runs, and then that it is gone. It says it sooner when what
// it runs changed, but not more than once per beatMin.
func (r *workerRun) beat(ctx context.Context, nc *nats.Conn, name string, slots int) {
	subject := r.cfg.workersSubject(subjectToken(name))
	say := func(gone bool) {
		info := WorkerInfo{Name: name, Slots: slots, Gone: gone}
		if !gone && !r.proven() {
			r.askProof() // its end says the jobs (see challenge)
		} else if !gone {
			for _, run := range r.ex.Running() {
				if len(info.Running) == maxRunningSaid {
					break
				}
				info.Running = append(info.Running, run.Job.ID)
			}
		}
		b, _ := json.Marshal(info)
		if err := nc.Publish(subject, b); err != nil {
			r.log.Debug("heartbeat", zap.Error(err))
		}
	}
	t := time.NewTicker(beatInterval)
	defer t.Stop()
	for {
		say(false)
		select {
		case <-ctx.Done():
			say(true)
			nc.Flush()
			return
		case <-t.C:
		case <-r.changed:
			pause := time.NewTimer(beatMin)
			select {
			case <-pause.C:
			case <-ctx.Done():
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

// fleet is what a Service hears of its workers.
type fleet struct {
	mu      sync.Mutex
	workers map[string]WorkerInfo // by name
}

// heard records a heartbeat.
func (f *fleet) heard(msg *nats.Msg) {
	var info WorkerInfo
	if len(msg.Data) > 64<<10 || json.Unmarshal(msg.Data, &info) != nil || info.Name == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if info.Gone {
		delete(f.workers, info.Name)
		return
	}
	if _, ok := f.workers[info.Name]; !ok && len(f.workers) >= maxWorkersHeard {
		return
	}
	info.Seen = time.Now()
	f.workers[info.Name] = info
}

// maxWorkersHeard bounds the workers a Service keeps track of.
const maxWorkersHeard = 4096

// list returns the workers heard from lately, by name, and forgets the
// others.
func (f *fleet) list() []WorkerInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	list := make([]WorkerInfo, 0, len(f.workers))
	for name, info := range f.workers {
		if time.Since(info.Seen) > beatsMissed*beatInterval {
			delete(f.workers, name)
			continue
		}
		list = append(list, info)
	}
	slices.SortFunc(list, func(a, b WorkerInfo) int { return strings.Compare(a.Name, b.Name) })
	return list
}
