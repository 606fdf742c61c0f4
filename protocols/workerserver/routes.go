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

	"github.com/laboro-go/laboro/transport"
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
	asked    bool            // the form said slots: a job's end asks for jobs too
	cancels  bool            // the form said cancels: a job status asks for the server's cancels
	process  WorkerProcess   // the form's instance and process
}

// maxProcess bounds the form's instance and process fields, which the
// table keeps.
const maxProcess = 4 << 10

// route is the worker route a request came by.
type route int

const (
	routeStatus route = iota // a server's status
	routeJob                 // a job's status
	routePing
)

// worker reads and authenticates a worker's POST that came by rt, then
// calls handle.
func (m *Master) worker(w http.ResponseWriter, r *http.Request, rawID string, rt route, handle func(*session, http.ResponseWriter, *workerRequest)) {
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
	req := &workerRequest{ctx: r.Context(), id: id, serverID: f.Get(FieldServerID), status: f.Get(FieldStatus), slots: 1,
		cancels: f.Get(FieldCancels) != ""}
	if !m.authenticate(req.serverID, f.Get(FieldPassword)) {
		m.refusals.Of(m.logger()).Warn("worker refused: wrong serverId or serverPassword (at most one such line a second)",
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
		req.slots, req.asked = min(n, MaxSlots), true
	}
	if v := f.Get(FieldProcess); v != "" {
		if len(v) > maxProcess || json.Unmarshal([]byte(v), &req.process) != nil {
			writeFormErrors(w, map[string]string{FieldProcess: fmt.Sprintf("not a worker process's description (a JSON object of at most %d bytes)", maxProcess)})
			return
		}
	}
	if req.process.Instance = f.Get(FieldInstance); len(req.process.Instance) > maxProcess {
		writeFormErrors(w, map[string]string{FieldInstance: fmt.Sprintf("an instance of over %d bytes", maxProcess)})
		return
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
	refused, done, err := s.claim(req, rt)
	switch {
	case err != nil:
		s.writeTxError(w, err)
		return
	case refused != nil:
		refused.write(w)
		return
	}
	defer done()
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
	process := s.holderOf(req.id)
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
		rec.Status, rec.Data, rec.Updated, rec.Process = req.status, req.data, now, process
		// The reference lists its codes at the first Online of its
		// process only; the Online of a reconnection ("{}") keeps them.
		if startup != nil && (startup.Workers != nil || rec.Startup == nil) {
			rec.Startup = startup
		}
		s.servers.changed(tx)
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
// the Dispatcher when it is the job's end. The end of a job that asks for
// jobs (FieldSlots) brings what a ping would, in the same commit; a status
// that asks for the cancels (FieldCancels) brings them.
func (s *session) jobStatus(w http.ResponseWriter, req *workerRequest) {
	switch req.status {
	case JobProcessing, JobDone, JobFailed, JobCancelled:
	default:
		writeFormErrors(w, map[string]string{FieldStatus: fmt.Sprintf("not a worker's job status: %q", req.status)})
		return
	}
	wk := s.alive(req.serverID)
	s.confirm(req.id, req.serverID)
	var h *handout // the jobs the end of a job asks for, and the cancels
	switch {
	case req.asked && Final(req.status):
		var err error
		if h, err = s.takeFor(req, wk, false); err != nil {
			s.writeTxError(w, err)
			return
		}
	case req.cancels:
		h = &handout{server: req.serverID, wk: wk}
	}
	var r recorded
	now := time.Now()
	err := s.commit.update(func(tx *bolt.Tx) (err error) {
		if r, err = s.recordJobStatus(tx, req, now); err != nil {
			return err
		}
		if h != nil {
			_, err := h.inTx(tx, now)
			return err
		}
		return nil
	})
	if h != nil {
		s.settle(h, err)
	}
	if err != nil {
		s.writeTxError(w, err)
		return
	}
	switch {
	case r.unknown:
		s.log.Warn("a status for a job the table does not have (forgotten after it ended, beyond MaxEndedJobs, "+
			"or never there): answered, so that the worker's cache drains, and recorded nowhere",
			zap.String("job", req.id), zap.String("status", req.status), zap.String("server", req.serverID))
	case r.ended:
		s.complete(wk, req.id)
		s.log.Info("job ended", zap.String("job", req.id), zap.String("status", req.status), zap.String("server", req.serverID))
	case r.kept && req.status != r.status:
		s.log.Info("job status recorded only", zap.String("job", req.id), zap.String("status", req.status),
			zap.String("jobStatus", r.status), zap.String("server", req.serverID))
	default:
		s.log.Debug("job status", zap.String("job", req.id), zap.String("status", req.status), zap.String("server", req.serverID))
	}
	answer := jobStatusData{JobID: req.id, Status: r.status}
	if h != nil {
		answer.PingData = h.pd
	}
	writeData(w, answer)
}

// jobStatusData is the data of a job status's answer: the job's status
// after it ("" for a job the table does not have), and for a job's end
// that asked for jobs, what a ping brings (for a status that asked for
// the cancels, those).
type jobStatusData struct {
	JobID  string `json:"jobId"`
	Status string `json:"status"`
	PingData
}

// recorded is what recording a job's status did.
type recorded struct {
	status string // the job's, after it
	ended  bool   // it ended the job
	kept   bool   // it was kept in the job's history only
	// unknown: the table has no such job (forgotten after it ended, or
	// never there); nothing was recorded.
	unknown bool
}

// recordJobStatus records req, a status of job req.id from its server, in
// tx.
func (s *session) recordJobStatus(tx *bolt.Tx, req *workerRequest, now time.Time) (recorded, error) {
	row, err := getJob(tx, req.id)
	if err != nil {
		return recorded{}, err
	}
	if row == nil {
		return recorded{unknown: true}, nil
	}
	if err := appendEvent(tx, bucketJobHistory, req.id, StatusEvent{Status: req.status, Data: req.data, At: now, Server: req.serverID}); err != nil {
		return recorded{}, err
	}
	if Final(req.status) {
		// The server is done with it: nothing to cancel there.
		if err := deleteCancel(tx, req.serverID, req.id); err != nil {
			return recorded{}, err
		}
	}
	r := recorded{status: row.Status}
	switch {
	case Final(row.Status):
		r.kept = true
		return r, nil
	case row.Status == JobProcessing && row.Server == req.serverID:
	case req.status == JobDone && row.handedTo(req.serverID):
		// A server that lost the job (it went back in line, maybe
		// to another server) ran it to its end: the first result
		// wins, and the server that has it now is told to cancel it.
		if row.Status == JobProcessing {
			if err := putCancel(tx, row.Server, req.id); err != nil {
				return recorded{}, err
			}
			server := row.Server
			tx.OnCommit(func() { s.nudge(server) })
		}
	default:
		r.kept = true
		return r, nil
	}
	row.Status, row.Server, row.Data, row.Updated = req.status, req.serverID, req.data, now
	r.status, r.ended = row.Status, Final(req.status)
	return r, putJob(tx, row)
}

// ping hands the server a job, if one is in line for it, and the jobs it
// is to cancel.
func (s *session) ping(w http.ResponseWriter, req *workerRequest) {
	if req.id != req.serverID {
		writeError(w, http.StatusForbidden, "the serverId of the form is not the one of the path")
		return
	}
	h, err := s.takeFor(req, s.alive(req.id), true)
	if err != nil {
		s.writeTxError(w, err)
		return
	}
	now := time.Now()
	err = s.commit.update(func(tx *bolt.Tx) error {
		changed, err := h.inTx(tx, now)
		if err == nil && !changed {
			return errNoChange
		}
		return err
	})
	if errors.Is(err, errNoChange) {
		err = nil
	}
	s.settle(h, err)
	if err != nil {
		s.writeTxError(w, err)
		return
	}
	writeData(w, h.pd)
}

// handout is what one request of a server brings it: the jobs it took
// from the Dispatcher, on their way into the table, and the jobs it is to
// cancel.
type handout struct {
	server string
	wk     *transport.Worker[string, JobOrder]
	taken  []*dispatchTicket
	// Set by inTx, afresh on each call (an update may run more than once).
	pd     PingData          // the answer
	handed []*dispatchTicket // of taken, those handed out
	ended  []string          // of taken, those being cancelled, which ended
}

// takeFor takes from the Dispatcher up to req.slots jobs for the server
// of req (wk, alive), unless it is on its way out. A ping that finds none waits for
// one up to the master's Hold. The end of a job (not a ping) brings jobs
// only to a server Online: a new process of a worker replays the ends of
// its cache between its Connecting and its Online, which gives back the
// jobs the server had.
func (s *session) takeFor(req *workerRequest, wk *transport.Worker[string, JobOrder], ping bool) (*handout, error) {
	srv, err := s.servers.record(s.db, req.serverID)
	if err != nil {
		return nil, err
	}
	h := &handout{server: req.serverID, wk: wk}
	switch {
	case srv != nil && (srv.Status == ServerStopping || srv.Status == ServerOffline):
		return h, nil // no new work for a server on its way out
	case !ping && (srv == nil || srv.Status != ServerOnline):
		return h, nil
	}
	accept := acceptCodes(srv)
	if _, h.taken = s.take(req.serverID, req.slots, accept); len(h.taken) == 0 && ping && s.hold > 0 {
		h.taken = s.await(req.ctx, h.wk, req.serverID, req.slots, accept)
		h.wk.Renew() // it waited here: alive all along
	}
	return h, nil
}

// inTx records in tx the jobs of h handed out, and takes the cancels that
// wait for its server; it reports whether it wrote anything.
func (h *handout) inTx(tx *bolt.Tx, now time.Time) (changed bool, err error) {
	h.pd, h.handed, h.ended = PingData{}, h.handed[:0], h.ended[:0]
	cancels, err := takeCancels(tx, h.server)
	if err != nil {
		return false, err
	}
	for _, id := range cancels {
		row, err := getJob(tx, id)
		if err != nil {
			return false, err
		}
		if row != nil && row.handedTo(h.server) {
			h.pd.CancelJobs = append(h.pd.CancelJobs, id)
		}
	}
	for _, t := range h.taken {
		ok, cancelled, err := handOut(tx, t, h.server, now)
		if err != nil {
			return false, err
		}
		if cancelled {
			h.ended = append(h.ended, t.Key)
		}
		if !ok {
			continue
		}
		h.handed = append(h.handed, t)
		order := JobOrder{JobID: t.Value.JobID, Worker: t.Value.Worker, Params: t.Value.Params}
		if h.pd.Job == nil {
			h.pd.Job = &order
		} else {
			h.pd.Jobs = append(h.pd.Jobs, order)
		}
	}
	return h.pd.Job != nil || len(cancels) > 0 || len(h.ended) > 0, nil
}

// settle follows the commit of h (err its error, nil when it committed):
// the jobs taken but not handed out go back to the Dispatcher, and those
// handed out are expected of their server.
func (s *session) settle(h *handout, err error) {
	if err != nil {
		h.handed, h.pd = nil, PingData{}
	}
	if len(h.handed) < len(h.taken) {
		s.mu.Lock()
		for _, t := range h.taken {
			if !slices.Contains(h.handed, t) {
				h.wk.Release(t) // not handed out after all
			}
		}
		if err == nil && len(h.ended) > 0 {
			s.abandon(h.ended)
		}
		s.mu.Unlock()
	}
	for _, t := range h.handed {
		s.expect(t.Key, h.server)
		s.log.Info("job handed out", zap.String("job", t.Key), zap.String("server", h.server))
	}
	if len(h.pd.CancelJobs) > 0 {
		s.log.Info("jobs to cancel sent", zap.Strings("jobs", h.pd.CancelJobs), zap.String("server", h.server))
	}
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
		// reached the table yet, but the ticket says why.
		why := "the server lost it"
		if lost := t.Lost(); lost != nil {
			why = reason(lost)
		}
		ended, err := loseRow(tx, row, why, now)
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
