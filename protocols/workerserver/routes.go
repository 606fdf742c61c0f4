package workerserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// The worker routes: a server's status, a job's status, and the ping.

func writeAnswer(w http.ResponseWriter, code int, a Answer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(a)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeAnswer(w, code, Answer{Error: msg})
}

func writeFormErrors(w http.ResponseWriter, errs map[string]string) {
	writeAnswer(w, http.StatusBadRequest, Answer{FormErrors: errs})
}

func writeData(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeAnswer(w, http.StatusOK, Answer{Data: b})
}

// errNoChange rolls back an update transaction that changed nothing,
// which is a success (and spares the commit's sync).
var errNoChange = errors.New("no change")

// httpError carries an answer's code out of a transaction, rolling it back.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

// writeTxError answers for a failed transaction: its httpError, 503 if the
// master was closed meanwhile, else 500.
func (s *session) writeTxError(w http.ResponseWriter, err error) {
	var he *httpError
	switch {
	case errors.As(err, &he):
		writeError(w, he.code, he.msg)
	case closedDB(err):
		writeError(w, http.StatusServiceUnavailable, ErrMasterClosed.Error())
	default:
		s.log.Error("writing the table", zap.Error(err))
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// workerRequest is an authenticated worker's POST.
type workerRequest struct {
	ctx      context.Context // the HTTP request's
	id       string          // from the path: the server's or the job's
	serverID string
	status   string
	data     json.RawMessage // nil when the form had none
	slots    int             // jobs a ping may bring: 1 unless it said more
}

// worker reads and authenticates a worker's POST, then calls handle.
func (m *Master) worker(w http.ResponseWriter, r *http.Request, rawID string, handle func(*session, http.ResponseWriter, *workerRequest)) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "method not allowed: use POST")
		return
	}
	id, err := url.PathUnescape(rawID)
	if err != nil || id == "" {
		writeError(w, http.StatusNotFound, "not found")
		return
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/x-www-form-urlencoded" {
		writeFormErrors(w, map[string]string{"form": "the body must be application/x-www-form-urlencoded"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, m.maxBody())
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) || err.Error() == "http: POST too large" {
			writeError(w, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		writeFormErrors(w, map[string]string{"form": err.Error()})
		return
	}
	f := r.PostForm
	req := &workerRequest{ctx: r.Context(), id: id, serverID: f.Get(FieldServerID), status: f.Get(FieldStatus), slots: 1}
	if !m.authenticate(req.serverID, f.Get(FieldPassword)) {
		m.logger().Warn("worker refused: wrong serverId or serverPassword",
			zap.String("serverId", req.serverID), zap.String("remote", r.RemoteAddr))
		writeError(w, http.StatusUnauthorized, "wrong serverId or serverPassword")
		return
	}
	if v := f.Get(FieldSlots); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeFormErrors(w, map[string]string{FieldSlots: fmt.Sprintf("not a number of jobs (1 or more): %.20q", v)})
			return
		}
		req.slots = min(n, MaxSlots)
	}
	if d := f.Get(FieldData); d != "" {
		if !json.Valid([]byte(d)) {
			writeFormErrors(w, map[string]string{FieldData: "not a JSON document"})
			return
		}
		req.data = json.RawMessage(d)
	}
	s := m.current()
	if s == nil {
		writeError(w, http.StatusServiceUnavailable, ErrMasterClosed.Error())
		return
	}
	handle(s, w, req)
}

// authenticate compares in constant time (of hashes, so that not even the
// password's length shows).
func (m *Master) authenticate(id, password string) bool {
	want, ok := m.Servers[id]
	if !ok {
		want = password + "\x00" // compare anyway, and fail
	}
	a, b := sha256.Sum256([]byte(password)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1 && ok && id != ""
}

// serverStatus records a server's status. Stopping and Offline make it
// leave the Dispatcher, and the Online of a new process of it (after
// Connecting) makes it join again as new: either way the jobs it had go
// back in line. Any other status is a sign of life.
func (s *session) serverStatus(w http.ResponseWriter, req *workerRequest) {
	if req.id != req.serverID {
		writeError(w, http.StatusForbidden, "the serverId of the form is not the one of the path")
		return
	}
	var startup *Startup
	switch req.status {
	case ServerOnline:
		startup = new(Startup)
		if len(req.data) > 0 {
			if err := json.Unmarshal(req.data, startup); err != nil {
				writeFormErrors(w, map[string]string{FieldData: "not a startup document: " + err.Error()})
				return
			}
		}
	case ServerConnecting, ServerReconnecting, ServerStopping, ServerOffline:
	default:
		writeFormErrors(w, map[string]string{FieldStatus: fmt.Sprintf("unknown server status %q", req.status)})
		return
	}
	leaving := req.status == ServerStopping || req.status == ServerOffline
	// Under s.mu: the jobs the table gives back and those the Dispatcher
	// gives back are the same (see session.add).
	s.mu.Lock()
	defer s.mu.Unlock()
	if leaving {
		s.nudge(req.id) // a ping of it held for a job answers now, without one
	}
	var restarted bool
	var cancelled []string // jobs being cancelled that the server lost: they end
	now := time.Now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		rec, err := getServer(tx, req.id)
		if err != nil {
			return err
		}
		if rec == nil {
			rec = &ServerRecord{ID: req.id}
		}
		// A worker process that starts says Connecting, then replays its
		// cache, then Online: a job still Processing at it now died with
		// its previous process, and goes back in line; so do those of a
		// server on its way out.
		restarted = req.status == ServerOnline && rec.Status == ServerConnecting
		switch {
		case restarted:
			cancelled, err = requeueServerJobs(tx, req.id, errServerRestarted, now)
		case leaving:
			cancelled, err = requeueServerJobs(tx, req.id, fmt.Errorf("%w (%s)", errServerLeft, req.status), now)
		}
		if err != nil {
			return err
		}
		rec.Status, rec.Data, rec.Updated = req.status, req.data, now
		// The reference lists its codes at the first Online of its
		// process only; the Online of a reconnection ("{}") keeps them.
		if startup != nil && (startup.Workers != nil || rec.Startup == nil) {
			rec.Startup = startup
		}
		s.offers.changed(tx)
		if err := putServer(tx, rec); err != nil {
			return err
		}
		return appendEvent(tx, bucketServerHistory, req.id, StatusEvent{Status: req.status, Data: req.data, At: now, Server: req.id})
	})
	if err != nil {
		s.writeTxError(w, err)
		return
	}
	switch {
	case leaving:
		s.leaveLocked(req.id, errServerLeft)
	case restarted:
		s.leaveLocked(req.id, errServerRestarted)
		s.joinLocked(req.id)
	default:
		s.joinLocked(req.id).Renew()
	}
	// Still under s.mu, so that no ping takes them from the line first.
	s.abandon(cancelled)
	if len(cancelled) > 0 {
		s.log.Info("jobs being cancelled that the server lost end Cancelled", zap.String("server", req.id), zap.Strings("jobs", cancelled))
	}
	s.log.Info("server status", zap.String("server", req.id), zap.String("status", req.status))
	writeData(w, map[string]string{"status": req.status})
}

// jobStatus records a job's status from a server, and settles the job in
// the Dispatcher when it is the job's end.
func (s *session) jobStatus(w http.ResponseWriter, req *workerRequest) {
	switch req.status {
	case JobProcessing, JobDone, JobFailed, JobCancelled:
	default:
		writeFormErrors(w, map[string]string{FieldStatus: fmt.Sprintf("not a worker's job status: %q", req.status)})
		return
	}
	wk := s.alive(req.serverID)
	s.confirm(req.id, req.serverID)
	var (
		status string // the job's, after this one
		ended  bool   // this status ended the job
		kept   bool   // this status was recorded in History only
	)
	now := time.Now()
	err := s.commit.update(func(tx *bolt.Tx) error {
		status, ended, kept = "", false, false
		row, err := getJob(tx, req.id)
		if err != nil {
			return err
		}
		if row == nil {
			return &httpError{code: http.StatusNotFound, msg: fmt.Sprintf("unknown job %q", req.id)}
		}
		if err := appendEvent(tx, bucketJobHistory, req.id, StatusEvent{Status: req.status, Data: req.data, At: now, Server: req.serverID}); err != nil {
			return err
		}
		if Final(req.status) {
			// The server is done with it: nothing to cancel there.
			if err := deleteCancel(tx, req.serverID, req.id); err != nil {
				return err
			}
		}
		status = row.Status
		switch {
		case Final(row.Status):
			kept = true
			return nil
		case row.Status == JobProcessing && row.Server == req.serverID:
		case req.status == JobDone && row.handedTo(req.serverID):
			// A server that lost the job (it went back in line, maybe
			// to another server) ran it to its end: the first result
			// wins, and the server that has it now is told to cancel it.
			if row.Status == JobProcessing {
				if err := putCancel(tx, row.Server, req.id); err != nil {
					return err
				}
				server := row.Server
				tx.OnCommit(func() { s.nudge(server) })
			}
		default:
			kept = true
			return nil
		}
		row.Status, row.Server, row.Data, row.Updated = req.status, req.serverID, req.data, now
		status = row.Status
		ended = Final(req.status)
		return putJob(tx, row)
	})
	if err != nil {
		s.writeTxError(w, err)
		return
	}
	switch {
	case ended:
		s.complete(wk, req.id)
		s.log.Info("job ended", zap.String("job", req.id), zap.String("status", req.status), zap.String("server", req.serverID))
	case kept && req.status != status:
		s.log.Info("job status recorded only", zap.String("job", req.id), zap.String("status", req.status),
			zap.String("jobStatus", status), zap.String("server", req.serverID))
	default:
		s.log.Debug("job status", zap.String("job", req.id), zap.String("status", req.status), zap.String("server", req.serverID))
	}
	writeData(w, map[string]string{"jobId": req.id, "status": status})
}

// ping hands the server a job, if one is in line for it, and the jobs it
// is to cancel.
func (s *session) ping(w http.ResponseWriter, req *workerRequest) {
	if req.id != req.serverID {
		writeError(w, http.StatusForbidden, "the serverId of the form is not the one of the path")
		return
	}
	var srv *ServerRecord
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		srv, err = getServer(tx, req.id)
		return err
	})
	if err != nil {
		s.writeTxError(w, err)
		return
	}
	wk := s.alive(req.id)
	var taken []*dispatchTicket
	if srv == nil || (srv.Status != ServerStopping && srv.Status != ServerOffline) {
		// (no new work for a server on its way out)
		accept := acceptCodes(srv)
		if _, taken = s.take(req.id, req.slots, accept); len(taken) == 0 && s.hold > 0 {
			taken = s.await(req.ctx, wk, req.id, req.slots, accept)
			wk.Renew() // it waited here: alive all along
		}
	}

	var pd PingData
	var handed []*dispatchTicket // of taken, those handed out
	var ended []string           // of taken, those being cancelled, which ended
	now := time.Now()
	err = s.commit.update(func(tx *bolt.Tx) error {
		pd, handed, ended = PingData{}, handed[:0], ended[:0]
		cancels, err := takeCancels(tx, req.id)
		if err != nil {
			return err
		}
		for _, id := range cancels {
			row, err := getJob(tx, id)
			if err != nil {
				return err
			}
			if row != nil && row.handedTo(req.id) {
				pd.CancelJobs = append(pd.CancelJobs, id)
			}
		}
		for _, t := range taken {
			ok, cancelled, err := handOut(tx, t, req.id, now)
			if err != nil {
				return err
			}
			if cancelled {
				ended = append(ended, t.Key)
			}
			if !ok {
				continue
			}
			handed = append(handed, t)
			order := JobOrder{JobID: t.Value.JobID, Worker: t.Value.Worker, Params: t.Value.Params}
			if pd.Job == nil {
				pd.Job = &order
			} else {
				pd.Jobs = append(pd.Jobs, order)
			}
		}
		if pd.Job == nil && len(cancels) == 0 && len(ended) == 0 {
			return errNoChange
		}
		return nil
	})
	if errors.Is(err, errNoChange) {
		err = nil
	}
	if err != nil {
		handed = nil
	}
	if len(handed) < len(taken) {
		s.mu.Lock()
		for _, t := range taken {
			if !slices.Contains(handed, t) {
				wk.Release(t) // not handed out after all
			}
		}
		if err == nil && len(ended) > 0 {
			s.abandon(ended)
		}
		s.mu.Unlock()
	}
	if err != nil {
		s.writeTxError(w, err)
		return
	}
	for _, t := range handed {
		s.expect(t.Key, req.id)
		s.log.Info("job handed out", zap.String("job", t.Key), zap.String("server", req.id))
	}
	if len(pd.CancelJobs) > 0 {
		s.log.Info("jobs to cancel sent", zap.Strings("jobs", pd.CancelJobs), zap.String("server", req.id))
	}
	writeData(w, pd)
}

// handOut records in the table that server has the job of t, which it
// took, unless the job ended meanwhile (its Run ended, or it was cancelled
// while Queued, or while at a server that lost it, which ends it now: then
// cancelled is true); it reports whether the job is to be handed out.
func handOut(tx *bolt.Tx, t *dispatchTicket, server string, now time.Time) (handed, cancelled bool, err error) {
	if t.Holder() != server {
		return false, false, nil // settled meanwhile
	}
	row, err := getJob(tx, t.Key)
	if err != nil || row == nil || Final(row.Status) {
		return false, false, err
	}
	if row.Status == JobProcessing && row.Server != server {
		// Another server lost it; the Dispatcher's word of it has not
		// reached the table yet.
		ended, err := loseRow(tx, row, "the server lost it", now)
		if err != nil || ended {
			return false, ended, err
		}
	}
	row.Status, row.Server, row.Data, row.Updated = JobProcessing, server, nil, now
	if !slices.Contains(row.Servers, server) {
		row.Servers = append(row.Servers, server)
	}
	if err := putJob(tx, row); err != nil {
		return false, false, err
	}
	return true, false, appendEvent(tx, bucketJobHistory, row.ID, StatusEvent{Status: JobProcessing, At: now, Server: server})
}

// acceptCodes takes the jobs whose worker code the server offered at the
// last Online that listed codes; any job if it never listed them.
func acceptCodes(srv *ServerRecord) func(JobOrder) bool {
	if !listsCodes(srv) {
		return nil
	}
	return func(o JobOrder) bool { return offers(srv, o.Worker) }
}

// listsCodes reports whether a server listed the codes it offers (an
// empty list included).
func listsCodes(srv *ServerRecord) bool {
	return srv != nil && srv.Startup != nil && srv.Startup.Workers != nil
}

// offers reports whether a server runs jobs of code: it listed it, or it
// never listed its codes.
func offers(srv *ServerRecord, code string) bool {
	if !listsCodes(srv) {
		return true
	}
	return slices.ContainsFunc(srv.Startup.Workers, func(c WorkerCode) bool { return c.Code == code })
}
