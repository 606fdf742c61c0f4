package workerserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/secret"
)

// The user API: /api/jobs and /api/servers (see Master).

// guardAPI refuses, before h, a user API request that is not the user's:
// one from a web page (cross-origin, or a form), one for a Host name it
// does not serve, one without the token.
func (m *Master) guardAPI(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if site := r.Header.Get("Sec-Fetch-Site"); r.Header.Get("Origin") != "" || (site != "" && site != "none" && site != "same-origin") {
			writeError(w, http.StatusForbidden, "cross-origin requests are refused")
			return
		}
		if !m.knownHost(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("host %q is not served here (Master.Hosts, -host)", r.Host))
			return
		}
		if r.Method == http.MethodPost {
			if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
				writeError(w, http.StatusUnsupportedMediaType, "a POST must be application/json")
				return
			}
		}
		if m.APIToken != "" {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || !secret.Equal(strings.TrimSpace(tok), m.APIToken) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="workerserver"`)
				writeError(w, http.StatusUnauthorized, "the API token is missing or wrong")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// knownHost reports whether the user API answers to a request for host.
func (m *Master) knownHost(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if name == "" || strings.EqualFold(name, "localhost") {
		return true
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	for _, h := range m.Hosts {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// DefaultListLimit is how many jobs GET /api/jobs lists when its request
// names no limit: the last ones submitted. MaxListLimit is the most it
// lists (?limit=).
const (
	DefaultListLimit = 1000
	MaxListLimit     = 100_000
)

func (m *Master) apiJobs(w http.ResponseWriter, r *http.Request) {
	n := DefaultListLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > MaxListLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q is not a whole number from 1 to %d", v, MaxListLimit))
			return
		}
	}
	if !m.open(w) {
		return
	}
	recs := m.LastJobs(n)
	if recs == nil {
		recs = []JobRecord{}
	}
	writeData(w, recs)
}

func (m *Master) apiJob(w http.ResponseWriter, r *http.Request) {
	if !m.open(w) {
		return
	}
	rec, ok := m.Job(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, m.unknownJob(r.PathValue("id")))
		return
	}
	writeData(w, rec)
}

// unknownJob says that the table has no job id, and why that may be.
func (m *Master) unknownJob(id string) string {
	if n := m.maxEnded(); n >= 0 {
		return fmt.Sprintf("unknown job %q: never submitted, or forgotten after it ended (the table keeps the last %d jobs to end)", id, n)
	}
	return fmt.Sprintf("unknown job %q", id)
}

func (m *Master) apiCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := m.Cancel(id)
	switch {
	case errors.Is(err, ErrUnknownJob):
		writeError(w, http.StatusNotFound, m.unknownJob(id))
	case errors.Is(err, ErrJobFinished):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, ErrMasterClosed):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		rec, _ := m.Job(id)
		writeData(w, rec)
	}
}

// submitRequest is the body of POST /api/jobs.
type submitRequest struct {
	ID     string                     `json:"id"`
	Worker string                     `json:"worker"`
	Params map[string]json.RawMessage `json:"params"`
}

func (m *Master) apiSubmit(w http.ResponseWriter, r *http.Request) {
	if m.Submit == nil {
		writeError(w, http.StatusNotImplemented, "submission is not enabled on this master")
		return
	}
	if !m.open(w) {
		return
	}
	var sr submitRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, m.maxBody()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sr); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		writeFormErrors(w, map[string]string{"body": "want {\"id\", \"worker\", \"params\"}: " + err.Error()})
		return
	}
	if dec.More() {
		writeFormErrors(w, map[string]string{"body": "want one JSON object, {\"id\", \"worker\", \"params\"}: more follows it"})
		return
	}
	if sr.ID == "" {
		id, err := m.NewID()
		if err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrMasterClosed) {
				code = http.StatusServiceUnavailable
			}
			writeError(w, code, err.Error())
			return
		}
		sr.ID = id
	} else if _, exists := m.Job(sr.ID); exists {
		writeError(w, http.StatusConflict, fmt.Sprintf("job %q already exists", sr.ID))
		return
	}
	job := NewJob(sr.ID, sr.Worker, sr.Params)
	if err := m.Validate(job); err != nil {
		writeFormErrors(w, map[string]string{"body": err.Error()})
		return
	}
	if err := m.Submit(job); err != nil {
		code := http.StatusServiceUnavailable
		switch {
		case errors.Is(err, laboro.ErrDuplicateID):
			code = http.StatusConflict
		case errors.Is(err, laboro.ErrInvalidJob):
			code = http.StatusBadRequest
		}
		writeError(w, code, err.Error())
		return
	}
	writeData(w, map[string]string{"id": sr.ID})
}

func (m *Master) apiServers(w http.ResponseWriter, r *http.Request) {
	if !m.open(w) {
		return
	}
	recs := m.ServerRecords()
	if recs == nil {
		recs = []ServerRecord{}
	}
	writeData(w, recs)
}

func (m *Master) apiServer(w http.ResponseWriter, r *http.Request) {
	if !m.open(w) {
		return
	}
	rec, ok := m.Server(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown server %q", r.PathValue("id")))
		return
	}
	writeData(w, rec)
}

// open answers 503 and returns false when the master is closed.
func (m *Master) open(w http.ResponseWriter) bool {
	if m.current() == nil {
		writeError(w, http.StatusServiceUnavailable, ErrMasterClosed.Error())
		return false
	}
	return true
}
