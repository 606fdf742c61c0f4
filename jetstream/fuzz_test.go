package jetstream

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// The fuzz targets of the decoders that take bytes from the wire: result
// messages (assembler.add, decodeResult), jobs (wireJob), a client's proof
// (tokenAuth) and workers' heartbeats (fleet.heard). Their seed
// corpora are in testdata/fuzz/<target>; run one with
//
//	go test -run '^$' -fuzz '^FuzzAssembler$' -fuzztime 60s .

// resultMsg is one result message decoded from a fuzz input.
type resultMsg struct {
	h    nats.Header
	body []byte
}

// Framing of FuzzAssembler's input: messages separated by msgSep; in each,
// header lines "Name: value" (the "Laboro-" prefix of the name may be left
// out) up to the first empty line, then the body.
const (
	msgSep      = "\n%%\n"
	maxMessages = 64
)

func decodeMessages(data []byte) []resultMsg {
	var msgs []resultMsg
	for rec := range bytes.SplitSeq(data, []byte(msgSep)) {
		if len(msgs) == maxMessages {
			break
		}
		head, body, _ := bytes.Cut(rec, []byte("\n\n"))
		h := nats.Header{}
		for line := range strings.SplitSeq(string(head), "\n") {
			name, value, ok := strings.Cut(line, ": ")
			if !ok {
				continue
			}
			if !strings.HasPrefix(name, "Laboro-") {
				name = "Laboro-" + name
			}
			h.Add(name, value)
		}
		msgs = append(msgs, resultMsg{h: h, body: body})
	}
	return msgs
}

// encodeMessages is the inverse of decodeMessages, for the seeds written in
// Go.
func encodeMessages(msgs ...resultMsg) []byte {
	var b bytes.Buffer
	for i, m := range msgs {
		if i > 0 {
			b.WriteString(msgSep)
		}
		for _, k := range slices.Sorted(maps.Keys(m.h)) {
			for _, v := range m.h[k] {
				b.WriteString(strings.TrimPrefix(k, "Laboro-") + ": " + v + "\n")
			}
		}
		b.WriteString("\n")
		b.Write(m.body)
	}
	return b.Bytes()
}

// assemblerModel is what assembler.add should do, written plainly: per
// attempt, the bodies of chunks 0, 1, … taken in order; a chunk seen
// before is ignored, a gap drops the attempt.
type assemblerModel map[string][][]byte

type modelOutcome int

const (
	outcomeError modelOutcome = iota
	outcomeWait
	outcomeResult
)

// add returns the expected outcome and, for a result with output, the
// output's bytes (nil for a result without output).
func (m assemblerModel) add(h nats.Header, body []byte) (modelOutcome, []byte) {
	attempt := h.Get(hdrAttempt)
	chunk, err1 := strconv.Atoi(h.Get(hdrChunk))
	chunks, err2 := strconv.Atoi(h.Get(hdrChunks))
	if err1 != nil || err2 != nil || chunk < 0 || chunks < 0 || (chunks > 0 && chunk >= chunks) {
		return outcomeError, nil
	}
	if chunks == 0 {
		return outcomeResult, nil
	}
	got, started := m[attempt]
	switch {
	case !started && chunk != 0:
		return outcomeError, nil
	case chunk < len(got):
		return outcomeWait, nil // published again
	case chunk > len(got):
		delete(m, attempt)
		return outcomeError, nil
	}
	got = append(got, bytes.Clone(body))
	if len(got) < chunks {
		m[attempt] = got
		return outcomeWait, nil
	}
	delete(m, attempt)
	return outcomeResult, append([]byte{}, bytes.Join(got, nil)...)
}

func FuzzAssembler(f *testing.F) {
	// More seeds, with the realistic ones, are in testdata/fuzz/FuzzAssembler.
	f.Add(encodeMessages(resultMsg{h: nats.Header{
		hdrJob: {"j"}, hdrAttempt: {"1"}, hdrStatus: {"1"}, hdrExit: {"0"},
		hdrChunk: {"0"}, hdrChunks: {"1"}}, body: []byte("out\n")}))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		a := &assembler{dir: dir}
		model := assemblerModel{}
		var outs []*laboro.Output
		defer func() {
			for _, o := range outs {
				o.Close()
			}
		}()
		for i, m := range decodeMessages(data) {
			res, ok, err := a.add(m.h, m.body)
			want, wantOutput := model.add(m.h, m.body)
			if ok && res.Output != nil {
				outs = append(outs, res.Output)
			}
			switch {
			case err != nil:
				if ok || !reflect.DeepEqual(res, laboro.Result{}) {
					t.Fatalf("message %d: error %v with a result (ok %v): %+v", i, err, ok, res)
				}
				if want != outcomeError {
					t.Fatalf("message %d %v: unexpected error %v", i, m.h, err)
				}
			case !ok:
				if !reflect.DeepEqual(res, laboro.Result{}) {
					t.Fatalf("message %d: not ok with a result: %+v", i, res)
				}
				if want != outcomeWait {
					t.Fatalf("message %d %v: no result and no error, want outcome %d", i, m.h, want)
				}
			default:
				if want != outcomeResult {
					t.Fatalf("message %d %v: a result, want outcome %d", i, m.h, want)
				}
				checkResult(t, i, m.h, res, dir, wantOutput)
			}
		}
		a.discard()
		if len(a.attempts) != 0 {
			t.Fatalf("%d attempts left after discard", len(a.attempts))
		}
		// Only the returned outputs are left, until they are closed.
		var want []string
		for _, o := range outs {
			want = append(want, filepath.Base(o.Path()))
		}
		slices.Sort(want)
		if got := dirNames(t, dir); !slices.Equal(got, want) {
			t.Fatalf("files left after discard: %q, want the outputs %q", got, want)
		}
		for _, o := range outs {
			if err := o.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if got := dirNames(t, dir); len(got) != 0 {
			t.Fatalf("files left after the outputs were closed: %q", got)
		}
	})
}

// checkResult checks a complete result returned by assembler.add for
// message i: its fields are those of its headers, and its output, in dir,
// holds exactly want (nil: no output).
func checkResult(t *testing.T, i int, h nats.Header, res laboro.Result, dir string, want []byte) {
	t.Helper()
	if dec := decodeResult(h, res.Output); !reflect.DeepEqual(res, dec) {
		t.Fatalf("message %d: result %+v, its headers say %+v", i, res, dec)
	}
	if want == nil {
		if res.Output != nil {
			t.Fatalf("message %d: an output of %d bytes, want none", i, res.Output.Size())
		}
		return
	}
	if res.Output == nil {
		t.Fatalf("message %d: no output, want %d bytes", i, len(want))
	}
	if filepath.Dir(res.Output.Path()) != dir {
		t.Fatalf("message %d: output %s outside %s", i, res.Output.Path(), dir)
	}
	if res.Output.Size() != int64(len(want)) {
		t.Fatalf("message %d: output size %d, want %d", i, res.Output.Size(), len(want))
	}
	got, err := res.Output.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("message %d: output %q, want %q", i, got, want)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

func FuzzDecodeResult(f *testing.F) {
	// More seeds are in testdata/fuzz/FuzzDecodeResult.
	f.Add("1", "0", "", "", "4242", "2025-01-02T03:04:05.123456789Z", "2025-01-02T03:04:06Z", "")
	f.Fuzz(func(t *testing.T, status, exit, text, reason, pid, started, ended, stderr string) {
		h := nats.Header{}
		for k, v := range map[string]string{hdrStatus: status, hdrExit: exit, hdrError: text,
			hdrReason: reason, hdrPID: pid, hdrStarted: started, hdrEnded: ended, hdrStderr: stderr} {
			if v != "" {
				h.Set(k, v)
			}
		}
		out := laboro.NewOutput("/nonexistent/out", 3)
		res := decodeResult(h, out)
		if res.Status == 0 {
			t.Fatalf("status 0: %+v", res)
		}
		if res.Output != out {
			t.Fatalf("output %v, want %v", res.Output, out)
		}
		if res.Status != laboro.StatusSucceeded && res.Err == nil {
			t.Fatalf("status %v without an error", res.Status)
		}
		maxDeliver := reason == reasonMaxDeliver
		if got := errors.Is(res.Err, ErrMaxDeliver); got != maxDeliver {
			t.Fatalf("reason %q: errors.Is(%v, ErrMaxDeliver) = %v", reason, res.Err, got)
		}
		if !maxDeliver {
			switch res.Status {
			case laboro.StatusTimedOut:
				if !errors.Is(res.Err, laboro.ErrTimeout) {
					t.Fatalf("timed out with %v", res.Err)
				}
			case laboro.StatusKilled:
				if !errors.Is(res.Err, laboro.ErrKilled) {
					t.Fatalf("killed with %v", res.Err)
				}
			case laboro.StatusCancelled:
				if !errors.Is(res.Err, laboro.ErrCancelled) {
					t.Fatalf("cancelled with %v", res.Err)
				}
			}
		}
		if maxDeliver && res.Status != laboro.StatusFailed {
			t.Fatalf("reason %q gave %v", reason, res.Status)
		}
		if n, err := strconv.Atoi(status); !maxDeliver && err == nil && n >= 1 && n <= int(laboro.StatusCancelled) &&
			res.Status != laboro.Status(n) {
			t.Fatalf("status header %q gave %v", status, res.Status)
		}
		wantExit := -1
		if n, err := strconv.Atoi(exit); err == nil {
			wantExit = n
		}
		if res.ExitCode != wantExit {
			t.Fatalf("exit header %q gave %d", exit, res.ExitCode)
		}
		if b, err := base64.StdEncoding.DecodeString(stderr); err == nil && !bytes.Equal(b, res.Stderr) {
			t.Fatalf("stderr %q gave %q, want %q", stderr, res.Stderr, b)
		}
		if tm, err := time.Parse(time.RFC3339Nano, started); err == nil && !tm.Equal(res.Started) {
			t.Fatalf("started %q gave %v", started, res.Started)
		}
	})
}

// noSubjectToken lists what NATS refuses in a subject token, or gives a
// meaning to: the separator, the wildcards and the white space of its
// protocol (nats-server's isValidSubject).
const noSubjectToken = ".*> \t\n\r\f"

func FuzzWireJob(f *testing.F) {
	// More seeds are in testdata/fuzz/FuzzWireJob.
	f.Add([]byte(`{"id":"job_1","args":["echo","hi"],"timeout_ns":1000000000}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The input as a job that travels: its fields survive the JSON
		// encoding, as long as the Manager would send it.
		raw := string(data)
		id := raw
		if validID(id) != nil {
			id = "x"
		}
		sent := laboro.Job{ID: id, Command: raw, Args: []string{raw, "a"}, Script: raw,
			Interpreter: []string{raw}, Dir: raw, Env: []string{"K=" + raw}, Timeout: time.Duration(len(raw))}
		if err := checkJob(sent); err != nil {
			// Empty, it has nothing to run (its Args start with "").
			if utf8.ValidString(raw) && raw != "" {
				t.Fatalf("job refused: %v", err)
			}
		} else if raw == "" {
			t.Fatalf("a job with nothing to run accepted: %#v", sent)
		} else {
			enc, err := json.Marshal(toWire(sent))
			if err != nil {
				t.Fatal(err)
			}
			var back wireJob
			if err := json.Unmarshal(enc, &back); err != nil {
				t.Fatal(err)
			}
			if got := back.job(); !reflect.DeepEqual(got, sent) {
				t.Fatalf("job %#v came back as %#v", sent, got)
			}
		}

		// validID refuses what cannot be a subject token.
		var w wireJob
		jsonErr := json.Unmarshal(data, &w)
		for _, s := range []string{raw, w.ID} {
			if validID(s) != nil {
				continue
			}
			if s == "" || strings.ContainsAny(s, noSubjectToken) {
				t.Fatalf("validID accepts %q", s)
			}
		}

		// The input as the JSON of a job, as a worker or the Service reads
		// it.
		if jsonErr != nil {
			return
		}
		got := toWire(w.job())
		got.DeadlineNS = w.DeadlineNS // not a field of laboro.Job
		if !reflect.DeepEqual(got, w) {
			t.Fatalf("wire job %#v came back as %#v", w, got)
		}
		enc, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		var again wireJob
		if err := json.Unmarshal(enc, &again); err != nil {
			t.Fatal(err)
		}
		if norm := normalized(w); !reflect.DeepEqual(again, norm) {
			t.Fatalf("wire job %#v encoded as %s came back as %#v", norm, enc, again)
		}
	})
}

// normalized is w as its JSON encoding gives it back: empty lists are left
// out.
func normalized(w wireJob) wireJob {
	for _, l := range []*[]string{&w.Args, &w.Interpreter, &w.Env} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	return w
}

// fakeClient is what tokenAuth.Check sees of a connection: the fields of
// its CONNECT and the nonce it was greeted with.
type fakeClient struct {
	opts  server.ClientOpts
	nonce []byte
	user  *server.User
}

func (c *fakeClient) GetOpts() *server.ClientOpts                 { return &c.opts }
func (c *fakeClient) GetTLSConnectionState() *tls.ConnectionState { return nil }
func (c *fakeClient) RegisterUser(u *server.User)                 { c.user = u }
func (c *fakeClient) RemoteAddress() net.Addr                     { return nil }
func (c *fakeClient) GetNonce() []byte                            { return c.nonce }
func (c *fakeClient) Kind() int                                   { return server.CLIENT }
func (c *fakeClient) GetID() uint64                               { return 1 }

// FuzzTokenProof feeds the server's check of a CONNECT whatever a client
// may send as its proof (the nkey and sig fields), or as a plain token: it
// never panics, and admits exactly the proofs and tokens of the server's
// token and of role tokens derived from it, each with its own rights.
func FuzzTokenProof(f *testing.F) {
	const token = "the-server-token-0123456789"
	nonce := []byte("aNonceOf11b")
	for _, seed := range []struct{ name, sig, plain string }{
		{"laboro", base64.RawURLEncoding.EncodeToString(tokenProof([]byte(token), nonce)), ""},
		{"worker.LABORO", base64.RawURLEncoding.EncodeToString(tokenProof([]byte(roleMAC(token, RoleWorker, "LABORO")), nonce)), ""},
		{"client.OTHER", "", ""},
		{"admin.LABORO", "AAAA", ""},
		{"worker.", "", ""},
		{"worker.A.B", "", ""},
		{"", "", token},
		{"", "", RoleToken(token, RoleClient, "")},
		{"laboro", "!!not base64", ""},
	} {
		f.Add(seed.name, seed.sig, seed.plain, nonce)
	}
	auth := tokenAuth(token)
	f.Fuzz(func(t *testing.T, name, sig, plain string, nonce []byte) {
		c := &fakeClient{opts: server.ClientOpts{Nkey: name, Sig: sig, Token: plain}, nonce: nonce}
		admitted := auth.Check(c)
		// The model: which client this is, and whether its proof or its
		// token is right.
		var want bool
		var role Role
		var stream string
		if name != "" {
			key, ok := []byte(token), name == ownerProof
			if r, s, cut := strings.Cut(name, "."); !ok && cut && (Role(r) == RoleWorker || Role(r) == RoleClient) && s != "" && !strings.Contains(s, ".") {
				role, stream, ok = Role(r), s, true
				key = []byte(roleMAC(token, role, stream))
			}
			want = ok && len(nonce) > 0 && sig == base64.RawURLEncoding.EncodeToString(tokenProof(key, nonce))
		} else if plain == token {
			want = true
		} else if r, s, mac, ok := parseRole(plain); ok {
			role, stream = r, s
			want = mac == roleMAC(token, r, s)
		}
		require.Equal(t, want, admitted, "nkey %q sig %q token %q nonce %q", name, sig, plain, nonce)
		if !admitted {
			require.Nil(t, c.user)
			return
		}
		if role == "" {
			require.Equal(t, ownerPermissions(), c.user.Permissions)
		} else {
			require.Equal(t, rolePermissions(role, stream), c.user.Permissions)
		}
	})
}

// FuzzHeartbeats feeds a service's fleet whatever workers may say on their
// subject (any holder of a worker's token can): a run of heartbeat bodies
// separated by msgSep. It never panics, keeps each worker under its name
// and run, keeps no more workers than maxWorkersHeard, lists each name
// once, and keeps no lease it would hand back anywhere but to its own
// consumer.
func FuzzHeartbeats(f *testing.F) {
	// More seeds are in testdata/fuzz/FuzzHeartbeats.
	ack := "$JS.ACK.LABORO_JOBS.workers.1.7.7.1764370000000000000.0"
	f.Add([]byte(`{"name":"a","slots":2,"running":["j1"],"leases":[{"job":"j1","ack":"` + ack + `"}],"run":"R1","said":1}` +
		msgSep + `{"name":"a","slots":2,"run":"R2","said":1,"unproven":true}` +
		msgSep + `{"name":"a","slots":2,"run":"R1","said":2}` +
		msgSep + `{"name":"a","run":"R2","gone":true}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var fl fleet
		fl.reset(Config{}.withDefaults(), zap.NewNop())
		n := 0
		for body := range bytes.SplitSeq(data, []byte(msgSep)) {
			if n++; n > maxMessages {
				break
			}
			fl.heard(&nats.Msg{Data: body})
		}
		fl.mu.Lock()
		require.LessOrEqual(t, len(fl.workers), maxWorkersHeard)
		for key, w := range fl.workers {
			require.Equal(t, workerKey(w.info.Name, w.info.Run), key)
			require.NotEmpty(t, w.info.Name)
			require.NotContains(t, w.info.Name+w.info.Run, "\x00", "a key's parts are apart")
			for _, l := range w.leases {
				require.True(t, fl.ours(l.Ack), "lease %q kept", l.Ack)
			}
		}
		for name, heard := range fl.names {
			_, ok := fl.workers[workerKey(name, heard.run)]
			require.True(t, ok, "name %q heard last from run %q, not kept", name, heard.run)
		}
		fl.mu.Unlock()
		list := fl.list()
		keys := keys(list)
		require.True(t, slices.IsSortedFunc(list, func(a, b WorkerInfo) int {
			return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Run, b.Run))
		}))
		require.Equal(t, len(keys), len(slices.Compact(slices.Clone(keys))), "each run once")
		fl.mu.Lock()
		for i, w := range list {
			if i > 0 && list[i-1].Name == w.Name {
				require.True(t, fl.names[w.Name].shared, "name %q listed twice, not shared", w.Name)
			}
		}
		fl.mu.Unlock()
	})
}
