package workerserver

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// One process per serverId: two worker processes started under one id
// (the same servers-file entry given to two machines, a worker started
// twice) would otherwise be taken for one server. The second one's Online
// looked like a restart of the first, whose jobs went back in line and ran
// twice; the cancels of the server went to whichever asked first, not to
// the one running the job; the Stopping of either gave the other's jobs
// back, and left it alive but Offline, never given a job again. So the
// master keeps, for each serverId, the process that holds it (its
// instance, FieldInstance), and refuses every other one while it shows
// life.

// holder is the worker process that holds a serverId: the last one whose
// request the master accepted.
type holder struct {
	proc WorkerProcess
	life time.Time // when its last request began or ended; for one the table named at Open, the Open
	// busy counts its requests under way (a held ping): it lives. They
	// end by busyUntil at the latest (a held ping, after the Hold), but
	// for the time it takes to answer them: a process that ended while
	// one was under way shows no life from when it ends.
	busy      int
	busyUntil time.Time
	released  bool // its last request said Stopping or Offline
	// requests counts the requests accepted under the serverId since the
	// master started, by this process and those that held it before.
	requests uint64
}

// silence returns how long the holder has shown no life at now.
func (h *holder) silence(now time.Time) time.Duration {
	if h == nil || h.busy > 0 {
		return 0
	}
	return now.Sub(h.life)
}

// retry returns how long from now another process may have to wait
// before the holder has shown no life for lease, should it show none
// from now: the lease, after the end of its requests under way, which
// come a moment after their expected end (a second more, the unit of
// Retry-After).
func (h *holder) retry(now time.Time, lease time.Duration) time.Duration {
	if h.busy > 0 {
		return max(h.busyUntil.Sub(now), 0) + lease + time.Second
	}
	return lease - now.Sub(h.life)
}

// inUse is the refusal of a process whose serverId another one holds.
type inUse struct {
	server  string
	holder  WorkerProcess
	silence time.Duration // since the holder last showed life
	lease   time.Duration // the silence after which another process is accepted
	retry   time.Duration // see holder.retry
	// requests is the holder's count (holder.requests): a refused
	// process that sees it grow knows the holder lives.
	requests uint64
}

func (e *inUse) Error() string {
	return fmt.Sprintf("serverId %q is in use by another worker process (%s), which showed life %s ago: a second process "+
		"under one serverId is refused while the first shows life, and accepted once it has shown none for %s; "+
		"stop one of them, or give each its own serverId", e.server, e.holder, e.silence.Round(100*time.Millisecond), e.lease)
}

// write answers the refused request: 409, the refusal named
// (HeaderRefusal), and, in Retry-After, when the holder's silence would
// reach the lease at the earliest (see holder.retry).
func (e *inUse) write(w http.ResponseWriter) {
	w.Header().Set(HeaderRefusal, RefusalInUse)
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.retry.Seconds()))))
	w.Header().Set(HeaderHolderRequests, strconv.FormatUint(e.requests, 10))
	writeError(w, http.StatusConflict, e.Error())
}

// holders are the processes that hold the serverIds, by serverId.
type holders struct {
	mu sync.Mutex
	by map[string]*holder
}

// claimLease is how long a process that holds a serverId may show no life
// before another is accepted under it: the lease, or, when the master has
// none, DefaultLease (a process that never comes back must not keep its
// serverId for ever).
func (s *session) claimLease() time.Duration {
	if s.lease > 0 {
		return s.lease
	}
	return DefaultLease
}

// claim checks that the process of req may speak for its serverId, and
// records it as its holder. It is accepted if it holds it already, or if
// the holder said Stopping or Offline, or showed no life for claimLease
// (a request under way, such as a held ping, is life), or if req is the
// Connecting of a process that starts on the holder's host with the
// holder's cache folder (its restart: a Worker locks its CacheDir, so the
// holder has ended); the first process of a serverId takes it. Otherwise
// it is refused with an *inUse. rt is the route req came by. An accepted
// request calls done once answered.
func (s *session) claim(req *workerRequest, rt route) (refused *inUse, done func(), err error) {
	now := time.Now()
	me := req.process
	leaving := rt == routeStatus && (req.status == ServerStopping || req.status == ServerOffline)
	until := now // when this request ends at the latest, but for answering it
	if rt == routePing {
		until = now.Add(s.hold)
	}
	s.holders.mu.Lock()
	defer s.holders.mu.Unlock()
	h := s.holders.by[req.serverID]
	if h == nil {
		// First heard of since Open: the table names the process that
		// held the serverId before, which has a lease from the Open to
		// come back.
		rec, err := s.servers.record(s.db, req.serverID)
		if err != nil {
			return nil, nil, err
		}
		if rec != nil && rec.Process != nil {
			h = &holder{proc: *rec.Process, life: s.opened, released: rec.Status == ServerStopping || rec.Status == ServerOffline}
		}
	}
	var why string
	busy, busyUntil := 0, until
	var requests uint64
	if h != nil {
		requests = h.requests
	}
	switch silence := h.silence(now); {
	case h == nil:
		why = "the first process heard of under it"
	case h.proc.Instance == me.Instance:
		if me.Host == "" && me.PID == 0 {
			me = h.proc // a request that does not describe the process keeps what it said
		}
		if busy = h.busy; busy > 0 && h.busyUntil.After(until) {
			busyUntil = h.busyUntil
		}
	case h.released:
		why = "the one that held it said " + ServerStopping + " or " + ServerOffline
	case silence >= s.claimLease():
		why = "the one that held it showed no life for " + s.claimLease().String()
	case rt == routeStatus && req.status == ServerConnecting && me.sameSite(h.proc):
		why = "a restart: it starts on the host, with the cache folder, of the one that held it, which has ended (the folder is locked while a worker runs)"
	default:
		refused := &inUse{server: req.serverID, holder: h.proc, silence: silence, lease: s.claimLease(), retry: h.retry(now, s.claimLease()), requests: h.requests}
		s.refusals.Of(s.log).Warn("worker process refused: another one holds its serverId and shows life; "+
			"two processes under one serverId: stop one, or give each its own (at most one such line a second)",
			zap.String("server", req.serverID), zap.Stringer("refused", me), zap.Stringer("holder", h.proc),
			zap.Duration("holderSilence", silence))
		return refused, nil, nil
	}
	if why != "" {
		fields := []zap.Field{zap.String("server", req.serverID), zap.Stringer("process", me), zap.String("why", why)}
		if h != nil {
			fields = append(fields, zap.Stringer("before", h.proc))
		}
		s.log.Info("a worker process holds the serverId", fields...)
	}
	if s.holders.by == nil {
		s.holders.by = make(map[string]*holder)
	}
	h = &holder{proc: me, life: now, busy: busy + 1, busyUntil: busyUntil, released: leaving, requests: requests + 1}
	s.holders.by[req.serverID] = h
	return nil, func() {
		s.holders.mu.Lock()
		defer s.holders.mu.Unlock()
		// Counted by the holder it began under, which may have been
		// replaced meanwhile (the same process's other request).
		if cur := s.holders.by[req.serverID]; cur != nil && cur.proc.Instance == h.proc.Instance {
			cur.busy--
			cur.life = time.Now()
		}
	}, nil
}

// holderOf returns the process that holds server as the table should
// keep it: nil for one that does not name its instance, or none.
func (s *session) holderOf(server string) *WorkerProcess {
	s.holders.mu.Lock()
	defer s.holders.mu.Unlock()
	h := s.holders.by[server]
	if h == nil || h.proc.Instance == "" {
		return nil
	}
	p := h.proc
	return &p
}
