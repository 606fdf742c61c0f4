package pulse

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/pulse/pulsepb"
	"github.com/laboro-go/laboro/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The reference peers' bytes. The reference (a Go controller, a C++
// worker) serializes every message with protobuf's own serializer: the
// fields in number order, zeros left out, each preceded by its length as a
// u64, little-endian. Its messages here are written out in hex, as a
// capture shows them; refMsg builds the ones that carry ids.

// refMsg returns the bytes protobuf gives a message of varint fields
// 1, 2, …  holding vals, leaving out the zeros.
func refMsg(vals ...uint64) string {
	var s string
	for i, v := range vals {
		if v == 0 {
			continue
		}
		if v >= 0x80 {
			panic("refMsg: a value of one byte only")
		}
		s += fmt.Sprintf("%02x%02x", byte(i+1)<<3, v)
	}
	return s
}

// refFrame is a message in hex with its length in front.
func refFrame(t testing.TB, msg string) []byte {
	t.Helper()
	b, err := hex.DecodeString(msg)
	require.NoError(t, err)
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(b))), b...)
}

// refRead reads one length-prefixed message and returns it in hex.
func refRead(r io.Reader) (string, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > DefaultMaxMessage {
		return "", fmt.Errorf("a message of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// refPulse sends a pulse, in hex, to the controller in dir as a reference
// worker does (one connection, one message) and returns the answer in hex.
func refPulse(t testing.TB, dir, msg string) string {
	t.Helper()
	conn, err := net.Dial("unix", filepath.Join(dir, "main.sock"))
	require.NoError(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Write(refFrame(t, msg))
	require.NoError(t, err)
	answer, err := refRead(conn)
	require.NoError(t, err)
	return answer
}

// Pulses of the reference worker, next_pulse 60, in both numberings.
const (
	specRegister  = "203c"     // spec: PULSE_REGISTER = 0, left out
	laterRegister = "0802203c" // later: PULSE_REGISTER = 2 (a vector of WIRE-NOTES)
)

// A controller that speaks one numbering and a worker that speaks the
// other do not understand each other. The controller answers as before,
// and now says so, once per peer process, with a hint; a worker id that
// it never gave is logged once per id.
func TestControllerLogsANumberingMismatch(t *testing.T) {
	const logged = "a pulse that makes sense only in the other numbering"
	for _, tt := range []struct {
		name     string
		n        Numbering
		pulse    string    // what the worker sends, in hex, three times
		answers  [3]string // what the controller answers, in hex
		describe string    // what the log says the pulse is
		hint     string
	}{
		// The later REGISTER (2) is the spec's FETCH_ME; the spec's answer
		// UNKNOWN_ID (2) reads as UNKNOWN_TYPE in the later numbering.
		{"later REGISTER to a spec controller", SpecNumbering, laterRegister, [3]string{"0802", "0802", "0802"},
			"FETCH_ME from worker 0, an id no worker is given (type 2: REGISTER in the later numbering)", "(-later;"},
		// The spec's REGISTER (0) is INVALID in the later numbering; the
		// answer UNKNOWN_TYPE (2) reads as UNKNOWN_ID in the spec's.
		{"spec REGISTER to a later controller", LaterNumbering, specRegister, [3]string{"0802", "0802", "0802"},
			"a pulse of type 0, INVALID in the later numbering (REGISTER in the spec numbering)", "(drop -later;"},
		// The spec's FETCH_ME of worker 1, task 1 is a REGISTER in the
		// later numbering, which ignores the ids and registers a worker.
		{"spec FETCH_ME to a later controller", LaterNumbering, refMsg(2, 1, 1, 60), [3]string{"08011001", "08011002", "08011003"},
			"REGISTER of worker 1 running task 1 (type 2: FETCH_ME in the spec numbering)", "(drop -later;"},
		// The later SHUTDOWN (4) is unknown in the spec's numbering.
		{"later SHUTDOWN to a spec controller", SpecNumbering, refMsg(4, 3), [3]string{"0801", "0801", "0801"},
			"a pulse of type 4, unknown (4) in the spec numbering (SHUTDOWN in the later numbering)", "(-later;"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := startController(t, Codec{Numbering: tt.n})
			for _, answer := range tt.answers {
				assert.Equal(t, answer, refPulse(t, tc.c.Dir, tt.pulse))
			}
			entries := tc.logs.FilterMessage(logged).FilterLevelExact(zap.WarnLevel).AllUntimed()
			require.Len(t, entries, 1, "once for this process")
			fields := entries[0].ContextMap()
			assert.Equal(t, tt.describe, fields["pulse"])
			assert.Contains(t, fields["hint"], tt.hint)
			assert.Equal(t, "pid "+strconv.Itoa(os.Getpid()), fields["peer"])
		})
	}
}

// A pulse from a worker id the controller never gave is answered
// UNKNOWN_ID and logged once per id; one from a worker removed, too.
func TestControllerLogsUnknownWorkers(t *testing.T) {
	for _, n := range numberings {
		t.Run(n.String(), func(t *testing.T) {
			tc := startController(t, Codec{Numbering: n})
			unknownID := map[Numbering]string{SpecNumbering: "0802", LaterNumbering: "0803"}[n]
			const ok = 1 // PULSE_OK in both numberings
			for range 2 {
				assert.Equal(t, unknownID, refPulse(t, tc.c.Dir, refMsg(ok, 7, 0, 60)))
				assert.Equal(t, unknownID, refPulse(t, tc.c.Dir, refMsg(ok, 8, 0, 60)))
			}
			never := tc.logs.FilterMessage("pulse from a worker this controller never registered; answered UNKNOWN_ID").AllUntimed()
			require.Len(t, never, 2, "once per id")
			assert.EqualValues(t, 7, never[0].ContextMap()["worker"])
			assert.EqualValues(t, 8, never[1].ContextMap()["worker"])
			assert.Contains(t, never[0].ContextMap()["hint"], "the worker seems to speak the")

			w := tc.worker(t)
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_SHUTDOWN, 0).Error)
			for range 2 {
				assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID, w.pulse(pulsepb.PulseType_PULSE_OK, 0).Error)
			}
			assert.Equal(t, 1, tc.logs.FilterMessage("pulse from a worker removed; answered UNKNOWN_ID: it should register again").Len())
			assert.Zero(t, tc.logs.FilterMessage("a pulse that makes sense only in the other numbering").Len())
		})
	}
}

// refController answers every pulse with the same bytes, as a
// reference controller of the other numbering answers a REGISTER; it
// sends what it read, in hex, to got.
func refController(t *testing.T, dir, answer string) <-chan string {
	require.NoError(t, os.MkdirAll(dir, 0o700))
	ln, err := net.Listen("unix", filepath.Join(dir, "main.sock"))
	require.NoError(t, err)
	got := make(chan string, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		transport.Serve(ctx, ln, func(_ context.Context, conn net.Conn) {
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			msg, err := refRead(conn)
			if err != nil {
				return
			}
			conn.Write(refFrame(t, answer))
			select {
			case got <- msg:
			default:
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return got
}

// A worker whose REGISTER a controller of the other numbering refuses
// says so once, with a hint, and goes on trying.
func TestWorkerLogsANumberingMismatch(t *testing.T) {
	const logged = "an answer that makes sense only in the other numbering"
	for _, tt := range []struct {
		name   string
		n      Numbering
		sent   string // the worker's REGISTER
		answer string // the reference controller's answer
		what   string
		hint   string
	}{
		// The later Go controller reads the spec's REGISTER (0) as INVALID
		// and answers UNKNOWN_TYPE (2), UNKNOWN_ID in the spec's numbering.
		{"spec worker, later controller", SpecNumbering, specRegister, "0802",
			"UNKNOWN_ID (error 2: UNKNOWN_TYPE in the later numbering)", "(-later;"},
		// The spec's Go controller reads the later REGISTER (2) as a
		// FETCH_ME of worker 0 and answers UNKNOWN_ID (2), UNKNOWN_TYPE in
		// the later numbering.
		{"later worker, spec controller", LaterNumbering, laterRegister, "0802",
			"UNKNOWN_TYPE (error 2: UNKNOWN_ID in the spec numbering)", "(drop -later;"},
		// An answer OK of the spec's numbering (0, left out) is INVALID in
		// the later one.
		{"later worker, spec OK", LaterNumbering, laterRegister, "1001",
			"error 0, OK in the spec numbering", "(drop -later;"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortDir(t)
			got := refController(t, dir, tt.answer)
			core, logs := observer.New(zap.DebugLevel)
			w := &Worker{Dir: dir, Command: []string{"cat"}, Codec: Codec{Numbering: tt.n}, Retry: time.Millisecond,
				Timeout: 5 * time.Second, OutputDir: t.TempDir(), Logger: zap.New(core)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- w.Run(ctx) }()
			for range 3 {
				select {
				case msg := <-got:
					assert.Equal(t, tt.sent, msg)
				case <-time.After(10 * time.Second):
					t.Fatal("the worker does not try to register again")
				}
			}
			cancel()
			require.ErrorIs(t, <-ran, context.Canceled)
			entries := logs.FilterMessage(logged).AllUntimed()
			require.Len(t, entries, 1, "once")
			fields := entries[0].ContextMap()
			assert.Equal(t, "REGISTER", fields["pulse"])
			assert.Equal(t, tt.what, fields["answer"])
			assert.Contains(t, fields["hint"], tt.hint)
		})
	}
}

// specRefWorker plays the reference C++ worker of the spec's numbering
// (commit d6e222d), byte for byte: SET_TASK solves the task (its MD5) at
// once, pulsing FETCH_ME before it answers, and the worker stays
// PROCESSING for good: every later SET_TASK is answered BUSY. Its answers
// carry the task_id it had when the message came.
type specRefWorker struct {
	t    *testing.T
	dir  string
	id   uint64
	ln   net.Listener
	got  chan pulsepb.ControlType
	quit chan struct{}
	done chan struct{}

	mu         sync.Mutex
	task       uint64 // current_task_id
	processing bool
	fetch      []byte // fetch_data
	setTasks   int    // the SET_TASKs it answered
}

// startSpecRefWorker registers a specRefWorker with the controller in dir
// and has it listen on its socket.
func startSpecRefWorker(t *testing.T, dir string) *specRefWorker {
	answer := refPulse(t, dir, specRegister)
	w := &specRefWorker{t: t, dir: dir, got: make(chan pulsepb.ControlType, 64), quit: make(chan struct{}), done: make(chan struct{})}
	b, err := hex.DecodeString(answer)
	require.NoError(t, err)
	require.Len(t, b, 2, "OK (left out) and a worker_id: %s", answer)
	require.Equal(t, byte(0x10), b[0], "OK (left out) and a worker_id: %s", answer)
	w.id = uint64(b[1])
	w.ln, err = net.Listen("unix", filepath.Join(dir, strconv.FormatUint(w.id, 10)+".sock"))
	require.NoError(t, err)
	go w.serve()
	t.Cleanup(func() { close(w.quit); w.ln.Close(); <-w.done })
	return w
}

// pulse sends PULSE_OK (1) with the current task, as the reference does
// every 30 to 45 s.
func (w *specRefWorker) pulse() string {
	w.mu.Lock()
	task := w.task
	w.mu.Unlock()
	return refPulse(w.t, w.dir, refMsg(1, w.id, task, 60))
}

func (w *specRefWorker) serve() {
	defer close(w.done)
	for {
		conn, err := w.ln.Accept()
		if err != nil {
			return
		}
		typ := w.answer(conn)
		conn.Close()
		select {
		case w.got <- typ:
		case <-w.quit:
			return
		}
	}
}

// answer reads one ControlMsg and its extra bytes and answers as the
// reference does.
func (w *specRefWorker) answer(conn net.Conn) pulsepb.ControlType {
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	m, err := Codec{}.ReadControl(conn)
	if err != nil {
		return -1
	}
	extra := make([]byte, m.ExtraSize)
	if _, err := io.ReadFull(conn, extra); err != nil {
		return -1
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	cur := w.task // response.set_task_id(current_task_id), before the switch
	var resp string
	var out []byte
	switch m.Type {
	case pulsepb.ControlType_CTRL_SET_TASK:
		w.setTasks++
		if w.processing {
			resp = refMsg(2, cur) // WORKER_ERR_BUSY = 2
			break
		}
		w.task, w.processing = m.GetTaskId(), true
		sum := md5.Sum(extra)
		w.fetch = sum[:]
		// SetFetchData pulses FETCH_ME (2) before the answer is sent.
		refPulse(w.t, w.dir, refMsg(2, w.id, w.task, 60))
		resp = refMsg(0, cur)
	case pulsepb.ControlType_CTRL_FETCH:
		if len(w.fetch) == 0 {
			resp = refMsg(1, cur) // WORKER_ERR_NO_FETCH = 1
			break
		}
		resp, out = refMsg(0, cur, uint64(len(w.fetch))), w.fetch
	default: // GET_STATUS, RESTART: OK
		resp = refMsg(0, cur)
	}
	conn.Write(append(refFrame(w.t, resp), out...))
	return m.Type
}

// next returns the next control message the worker answered.
func (w *specRefWorker) next(timeout <-chan time.Time) pulsepb.ControlType {
	w.t.Helper()
	select {
	case typ := <-w.got:
		return typ
	case <-timeout:
		w.t.Fatal("no control message in time")
		return -1
	}
}

// The reference worker of the spec's numbering solves one task, then
// answers BUSY forever. Each BUSY counts as an attempt, so the next task
// is offered to it Attempts times, no more, and then fails with an error
// that says the workers stayed busy.
func TestControllerTaskFailsWhenTheWorkersStayBusy(t *testing.T) {
	const attempts = 3
	tc := startController(t, Codec{}, func(c *Controller) { c.Attempts = attempts })
	w := startSpecRefWorker(t, tc.c.Dir)
	timeout := time.After(20 * time.Second)
	// The first in line before the second is submitted: the two Runs
	// would otherwise race to it, and the worker solve the second.
	first := tc.submit(t, "first task")
	require.Eventually(t, func() bool { return tc.c.d.Stats().Waiting == 1 }, 10*time.Second, time.Millisecond)
	second := tc.submit(t, "second task")

	// The reference pulses OK only after 30 to 45 s; this one at once.
	assert.Equal(t, "", w.pulse(), "OK, left out")
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, w.next(timeout))
	assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, w.next(timeout))
	res, out := result(t, first)
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	sum := md5.Sum([]byte("first task"))
	assert.Equal(t, string(sum[:]), out)

	// The second task: SET_TASK answered BUSY, GET_STATUS (what does it
	// run?), and again at every pulse, until the attempts run out.
	for done := false; !done; {
		select {
		case <-second.Done():
			done = true
		case typ := <-w.got:
			switch typ {
			case pulsepb.ControlType_CTRL_SET_TASK:
			case pulsepb.ControlType_CTRL_GET_STATUS:
				assert.Equal(t, "", w.pulse())
			default:
				t.Fatalf("unexpected %v", typ)
			}
		case <-timeout:
			t.Fatal("the task is still offered")
		}
	}
	res, _ = result(t, second)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorIs(t, res.Err, ErrBusy)
	assert.ErrorIs(t, res.Err, transport.ErrAttempts)
	assert.ErrorContains(t, res.Err, "the workers stayed busy")
	w.mu.Lock()
	assert.Equal(t, 1+attempts, w.setTasks, "the first task, and the second Attempts times")
	w.mu.Unlock()
	tc.logged(t, "worker busy; the task was given out too many times: it fails", 1)
	assert.Equal(t, []uint64{w.id}, tc.c.Workers(), "the worker stays")
}

// A task a worker answers BUSY goes to another worker that is free.
func TestControllerBusyTaskGoesToAnotherWorker(t *testing.T) {
	tc := startController(t, Codec{}, func(c *Controller) { c.Attempts = 3 })
	busy := startSpecRefWorker(t, tc.c.Dir)
	timeout := time.After(20 * time.Second)
	first := tc.submit(t, "first task")
	busy.pulse()
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, busy.next(timeout))
	assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, busy.next(timeout))
	res, _ := result(t, first)
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)

	second := tc.submit(t, "second task")
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, busy.next(timeout))
	assert.Equal(t, pulsepb.ControlType_CTRL_GET_STATUS, busy.next(timeout))
	free := startSpecRefWorker(t, tc.c.Dir)
	free.pulse()
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, free.next(timeout))
	assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, free.next(timeout))
	res, out := result(t, second)
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	sum := md5.Sum([]byte("second task"))
	assert.Equal(t, string(sum[:]), out)
}
