package pulse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro/protocols/pulse/pulsepb"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// waitLong bounds every wait of these tests.
const waitLong = 15 * time.Second

// gotPulse is a pulse the scripted controller gotPulse.
type gotPulse struct {
	*pulsepb.WorkerPulse
	at time.Time
}

// scriptedController listens on <dir>/main.sock like a controller: it
// answers REGISTER with OK and the next of its ids (7, 8, …), every other
// pulse with OK unless told otherwise, and records the pulses.
type scriptedController struct {
	t      *testing.T
	dir    string
	codec  Codec
	ln     net.Listener
	pulses chan gotPulse
	wg     sync.WaitGroup

	mu          sync.Mutex
	nextID      uint64
	failRegs    int  // REGISTERs still to answer FAILED
	forget      bool // answer the next other pulse UNKNOWN_ID
	refuse      int  // other pulses still to answer FAILED
	registrants int
}

// sockDir returns a new directory with a path short enough for Unix
// sockets, removed at the end of the test.
func sockDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "pw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// newScriptedController starts a scripted controller in dir, set up by opts first.
func newScriptedController(t *testing.T, dir string, codec Codec, opts ...func(*scriptedController)) *scriptedController {
	c := &scriptedController{t: t, dir: dir, codec: codec, pulses: make(chan gotPulse, 1000), nextID: 7}
	for _, opt := range opts {
		opt(c)
	}
	c.start()
	t.Cleanup(c.stop)
	return c
}

func (c *scriptedController) start() {
	ln, err := net.Listen("unix", filepath.Join(c.dir, "main.sock"))
	if err != nil {
		c.t.Fatal(err)
	}
	c.ln = ln
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer conn.Close()
				c.answer(conn)
			}()
		}
	}()
}

// stop closes the listener and waits for the connections being answered.
func (c *scriptedController) stop() {
	if c.ln != nil {
		c.ln.Close()
		c.ln = nil
	}
	c.wg.Wait()
}

func (c *scriptedController) answer(conn net.Conn) {
	conn.SetDeadline(time.Now().Add(waitLong))
	p, err := c.codec.ReadPulse(conn)
	if err != nil {
		c.t.Logf("controller: read pulse: %v", err)
		return
	}
	c.pulses <- gotPulse{p, time.Now()}
	resp := &pulsepb.PulseResponse{}
	c.mu.Lock()
	switch {
	case p.GetType() == pulsepb.PulseType_PULSE_REGISTER && c.failRegs > 0:
		c.failRegs--
		resp.Error = pulsepb.ControllerError_CTRL_ERR_FAILED
	case p.GetType() == pulsepb.PulseType_PULSE_REGISTER:
		id := c.nextID
		c.nextID++
		c.registrants++
		resp.WorkerId = &id
	case c.forget:
		c.forget = false
		resp.Error = pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID
	case c.refuse > 0:
		c.refuse--
		resp.Error = pulsepb.ControllerError_CTRL_ERR_FAILED
	}
	c.mu.Unlock()
	if err := c.codec.WriteMessage(conn, resp); err != nil {
		c.t.Logf("controller: answer pulse: %v", err) // the worker may give up: its context ended
	}
}

// expect returns the next pulse of type typ that satisfies ok (nil: any),
// skipping others.
func (c *scriptedController) expect(typ pulsepb.PulseType, ok func(*pulsepb.WorkerPulse) bool) gotPulse {
	c.t.Helper()
	timeout := time.After(waitLong)
	for {
		select {
		case p := <-c.pulses:
			if p.GetType() == typ && (ok == nil || ok(p.WorkerPulse)) {
				return p
			}
		case <-timeout:
			c.t.Fatalf("no %v pulse within %v", typ, waitLong)
			return gotPulse{}
		}
	}
}

// next returns the next pulse.
func (c *scriptedController) next() gotPulse {
	c.t.Helper()
	select {
	case p := <-c.pulses:
		return p
	case <-time.After(waitLong):
		c.t.Fatalf("no pulse within %v", waitLong)
		return gotPulse{}
	}
}

// drain forgets the pulses gotPulse so far.
func (c *scriptedController) drain() {
	for {
		select {
		case <-c.pulses:
		default:
			return
		}
	}
}

// control sends msg and extra to worker id's socket and returns the answer.
func (c *scriptedController) control(id uint64, msg *pulsepb.ControlMsg, extra []byte) (*pulsepb.WorkerResponse, []byte) {
	c.t.Helper()
	conn, err := net.DialTimeout("unix", c.sock(id), waitLong)
	if err != nil {
		c.t.Fatalf("dial worker %d: %v", id, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLong))
	msg.ExtraSize = uint64(len(extra))
	if err := c.codec.WriteMessage(conn, msg); err != nil {
		c.t.Fatalf("send %v: %v", msg.GetType(), err)
	}
	if len(extra) > 0 {
		// A worker that refuses the message answers and closes before it
		// has read the extra bytes: its answer is still there to read.
		if _, err := conn.Write(extra); err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			c.t.Fatalf("send %v's extra: %v", msg.GetType(), err)
		}
	}
	resp, err := c.codec.ReadWorkerResponse(conn)
	if err != nil {
		c.t.Fatalf("answer to %v: %v", msg.GetType(), err)
	}
	var b bytes.Buffer
	if err := c.codec.ReadExtra(conn, &b, resp.GetExtraSize()); err != nil {
		c.t.Fatalf("extra of the answer to %v: %v", msg.GetType(), err)
	}
	return resp, b.Bytes()
}

func (c *scriptedController) sock(id uint64) string {
	return filepath.Join(c.dir, strconv.FormatUint(id, 10)+".sock")
}

func ctlMsg(typ pulsepb.ControlType, task uint64) *pulsepb.ControlMsg {
	m := &pulsepb.ControlMsg{Type: typ}
	if task != 0 {
		m.TaskId = &task
	}
	return m
}

// wantResp checks an answer's error, task_id and extra bytes (nil: any).
func wantResp(t *testing.T, what string, resp *pulsepb.WorkerResponse, extra []byte,
	code pulsepb.WorkerError, task uint64, want []byte) {
	t.Helper()
	if resp.GetError() != code || resp.GetTaskId() != task {
		t.Fatalf("%s: got %v task %d (extra %q), want %v task %d", what, resp.GetError(), resp.GetTaskId(),
			clip(extra), code, task)
	}
	if want != nil && !bytes.Equal(extra, want) {
		t.Fatalf("%s: extra %q, want %q", what, clip(extra), clip(want))
	}
}

func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// runWorker runs w until the test ends (or the returned cancel).
func runWorker(t *testing.T, w *Worker) (context.CancelFunc, <-chan error) {
	t.Helper()
	if w.Logger == nil {
		w.Logger = zaptest.NewLogger(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, ended := make(chan error, 1), make(chan struct{})
	go func() {
		done <- w.Run(ctx)
		close(ended)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ended:
		case <-time.After(waitLong):
			t.Error("Run did not return")
		}
	})
	return cancel, done
}

func waitRun(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(waitLong):
		t.Fatal("Run did not return")
		return nil
	}
}

// gatedCommand is a command that waits for the file gate to exist, then
// upper-cases its input.
func gatedCommand(gate string) []string {
	return []string{"sh", "-c", `while [ ! -e '` + gate + `' ]; do sleep 0.01; done; tr a-z A-Z`}
}

func openGate(t *testing.T, gate string) {
	t.Helper()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func isSocket(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().Type() == fs.ModeSocket
}

func TestWorkerMainFlow(t *testing.T) {
	for _, tc := range []struct {
		name      string
		numbering Numbering
	}{{"spec", SpecNumbering}, {"later", LaterNumbering}} {
		t.Run(tc.name, func(t *testing.T) { testWorkerMainFlow(t, tc.numbering) })
	}
}

func testWorkerMainFlow(t *testing.T, numbering Numbering) {
	dir, outDir := sockDir(t), sockDir(t)
	gate := filepath.Join(outDir, "gate")
	codec := Codec{Numbering: numbering}
	ctl := newScriptedController(t, dir, codec)
	// A stale socket file of the worker's name is replaced.
	if ln, err := net.Listen("unix", ctl.sock(7)); err != nil {
		t.Fatal(err)
	} else {
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
	}
	w := &Worker{Dir: dir, Command: gatedCommand(gate), NextPulse: 2 * time.Second, Codec: codec,
		OutputDir: outDir}
	cancel, done := runWorker(t, w)

	reg := ctl.expect(pulsepb.PulseType_PULSE_REGISTER, nil)
	if reg.GetNextPulse() != 2 {
		t.Errorf("REGISTER announces next_pulse %d, want 2", reg.GetNextPulse())
	}
	first := ctl.next() // at once, no regular wait
	if first.GetType() != pulsepb.PulseType_PULSE_OK || first.GetWorkerId() != 7 || first.GetTaskId() != 0 ||
		first.GetNextPulse() != 2 {
		t.Errorf("first pulse after REGISTER: %v", first.WorkerPulse)
	}
	if id := w.ID(); id != 7 {
		t.Errorf("ID() = %d, want 7", id)
	}
	fi, err := os.Lstat(ctl.sock(7))
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("7.sock: %v, %v; want a socket with mode 0600", fi, err)
	}

	resp, extra := ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_GET_STATUS, 0), nil)
	wantResp(t, "GET_STATUS while idle", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 0, []byte{})
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
	wantResp(t, "FETCH while idle", resp, extra, pulsepb.WorkerError_WORKER_ERR_NO_FETCH, 0, []byte{})

	// Task 1 runs until the gate opens.
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 1), []byte("hello, world\n"))
	wantResp(t, "SET_TASK 1", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 1, []byte{})
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_GET_STATUS, 0), nil)
	wantResp(t, "GET_STATUS while running", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 1, []byte{})
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 2), []byte("other"))
	wantResp(t, "SET_TASK 2 while running", resp, extra, pulsepb.WorkerError_WORKER_ERR_BUSY, 1, []byte{})
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
	wantResp(t, "FETCH while running", resp, extra, pulsepb.WorkerError_WORKER_ERR_NO_FETCH, 1, []byte{})

	// The regular pulses carry the task, 1/2 to 3/4 of next_pulse apart.
	ctl.drain()
	p1 := ctl.expect(pulsepb.PulseType_PULSE_OK, func(p *pulsepb.WorkerPulse) bool { return p.GetTaskId() == 1 })
	p2 := ctl.expect(pulsepb.PulseType_PULSE_OK, nil)
	if p2.GetTaskId() != 1 || p2.GetWorkerId() != 7 {
		t.Errorf("pulses while running: %v, %v", p1.WorkerPulse, p2.WorkerPulse)
	}
	if d := p2.at.Sub(p1.at); d < 900*time.Millisecond {
		t.Errorf("pulses %v apart; want at least 1 s (half of next_pulse)", d)
	}

	openGate(t, gate)
	fm := ctl.expect(pulsepb.PulseType_PULSE_FETCH_ME, nil)
	if fm.GetTaskId() != 1 || fm.GetWorkerId() != 7 {
		t.Errorf("FETCH_ME: %v", fm.WorkerPulse)
	}
	// Busy until the result is fetched.
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 2), []byte("other"))
	wantResp(t, "SET_TASK 2 before FETCH", resp, extra, pulsepb.WorkerError_WORKER_ERR_BUSY, 1, []byte{})
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_GET_STATUS, 0), nil)
	wantResp(t, "GET_STATUS before FETCH", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 1, []byte{})
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
	wantResp(t, "FETCH 1", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 1, []byte("HELLO, WORLD\n"))
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
	wantResp(t, "FETCH after FETCH", resp, extra, pulsepb.WorkerError_WORKER_ERR_NO_FETCH, 0, []byte{})
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_GET_STATUS, 0), nil)
	wantResp(t, "GET_STATUS after FETCH", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 0, []byte{})
	// Later pulses carry no task.
	ctl.expect(pulsepb.PulseType_PULSE_OK, func(p *pulsepb.WorkerPulse) bool { return p.GetTaskId() == 0 })

	// Free again: a task of 3 MiB, both ways.
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = 'a' + byte(rand.N(26))
	}
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 2), big)
	wantResp(t, "SET_TASK 2", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 2, []byte{})
	ctl.expect(pulsepb.PulseType_PULSE_FETCH_ME, func(p *pulsepb.WorkerPulse) bool { return p.GetTaskId() == 2 })
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
	wantResp(t, "FETCH 2", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 2, bytes.ToUpper(big))
	// Around the size up to which an answer and its bytes go in one write,
	// to a controller that reads each part on its own.
	for i, n := range []int{smallExtra - 1, smallExtra, smallExtra + 1} {
		id := uint64(3 + i)
		what := fmt.Sprintf("task %d of %d bytes", id, n)
		resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, id), big[:n])
		wantResp(t, "SET_TASK, "+what, resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, id, []byte{})
		ctl.expect(pulsepb.PulseType_PULSE_FETCH_ME, func(p *pulsepb.WorkerPulse) bool { return p.GetTaskId() == id })
		resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
		wantResp(t, "FETCH, "+what, resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, id, bytes.ToUpper(big[:n]))
	}

	cancel()
	if err := waitRun(t, done); !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v, want context.Canceled", err)
	}
	if p := ctl.expect(pulsepb.PulseType_PULSE_SHUTDOWN, nil); p.GetWorkerId() != 7 {
		t.Errorf("SHUTDOWN from worker %d, want 7", p.GetWorkerId())
	}
	if _, err := os.Lstat(ctl.sock(7)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("7.sock after Run: %v", err)
	}
	left, _ := os.ReadDir(outDir)
	for _, e := range left {
		if e.Name() != "gate" {
			t.Errorf("file left in the output directory: %s", e.Name())
		}
	}
}

func TestWorkerTaskFailed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command []string
		want    string
	}{
		{"exit", []string{"sh", "-c", "cat >/dev/null; echo 'no good input' >&2; exit 3"}, "exit status 3: no good input\n"},
		{"no program", []string{"/nonexistent/solver"}, "/nonexistent/solver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := sockDir(t)
			ctl := newScriptedController(t, dir, Codec{})
			w := &Worker{Dir: dir, Command: tc.command, NextPulse: 2 * time.Second}
			runWorker(t, w)
			ctl.expect(pulsepb.PulseType_PULSE_OK, nil)

			resp, extra := ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 5), []byte("input"))
			wantResp(t, "SET_TASK", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 5, []byte{})
			ctl.expect(pulsepb.PulseType_PULSE_FETCH_ME, func(p *pulsepb.WorkerPulse) bool { return p.GetTaskId() == 5 })
			resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
			wantResp(t, "FETCH", resp, extra, pulsepb.WorkerError_WORKER_ERR_TASK_FAILED, 5, nil)
			if !strings.Contains(string(extra), tc.want) {
				t.Errorf("TASK_FAILED says %q, want it to contain %q", extra, tc.want)
			}
			resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
			wantResp(t, "FETCH again", resp, extra, pulsepb.WorkerError_WORKER_ERR_NO_FETCH, 0, []byte{})
			resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 6), []byte("input"))
			wantResp(t, "SET_TASK after TASK_FAILED", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 6, []byte{})
		})
	}
}

func TestWorkerReregisters(t *testing.T) {
	dir, outDir := sockDir(t), sockDir(t)
	gate := filepath.Join(outDir, "gate")
	ctl := newScriptedController(t, dir, Codec{})
	w := &Worker{Dir: dir, Command: gatedCommand(gate), NextPulse: 2 * time.Second}
	runWorker(t, w)
	ctl.expect(pulsepb.PulseType_PULSE_OK, nil)
	resp, extra := ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 3), []byte("kept\n"))
	wantResp(t, "SET_TASK", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 3, []byte{})

	// FAILED is no reason to register again.
	ctl.mu.Lock()
	ctl.refuse = 2
	ctl.mu.Unlock()
	ctl.drain()
	ctl.next()
	ctl.next()
	if p := ctl.next(); p.GetType() != pulsepb.PulseType_PULSE_OK || p.GetWorkerId() != 7 {
		t.Errorf("pulse after two refused: %v", p.WorkerPulse)
	}

	ctl.mu.Lock()
	ctl.forget = true
	ctl.mu.Unlock()
	ctl.expect(pulsepb.PulseType_PULSE_REGISTER, nil)
	p := ctl.expect(pulsepb.PulseType_PULSE_OK, nil)
	if p.GetWorkerId() != 8 || p.GetTaskId() != 3 {
		t.Errorf("first pulse after registering again: %v; want worker 8, task 3", p.WorkerPulse)
	}
	if id := w.ID(); id != 8 {
		t.Errorf("ID() = %d, want 8", id)
	}
	if !isSocket(ctl.sock(8)) {
		t.Error("8.sock missing")
	}
	if _, err := os.Lstat(ctl.sock(7)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("7.sock still there: %v", err)
	}

	// The task ran on; its result is offered under the new id.
	openGate(t, gate)
	fm := ctl.expect(pulsepb.PulseType_PULSE_FETCH_ME, nil)
	if fm.GetWorkerId() != 8 || fm.GetTaskId() != 3 {
		t.Errorf("FETCH_ME: %v", fm.WorkerPulse)
	}
	resp, extra = ctl.control(8, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
	wantResp(t, "FETCH", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 3, []byte("KEPT\n"))
}

// RESTART ends the worker's work: the running task is killed (its whole
// process group), an outcome waiting for FETCH is dropped, and the worker
// registers again, free, without a SHUTDOWN.
func TestWorkerRestart(t *testing.T) {
	dir, outDir := sockDir(t), sockDir(t)
	pids := filepath.Join(outDir, "pids")
	ctl := newScriptedController(t, dir, Codec{Numbering: LaterNumbering})
	// A task "wait" runs until killed, in a shell and its child; any other
	// ends at once.
	script := `read x; if [ "$x" = wait ]; then sleep 300 & echo $$ $! > ` + pids + `.tmp; mv ` + pids + `.tmp ` + pids + `; wait; fi; echo done`
	w := &Worker{Dir: dir, Command: []string{"sh", "-c", script}, NextPulse: 2 * time.Second,
		Codec: Codec{Numbering: LaterNumbering}, OutputDir: outDir}
	cancel, done := runWorker(t, w)
	ctl.expect(pulsepb.PulseType_PULSE_OK, nil)
	resp, extra := ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 4), []byte("wait\n"))
	wantResp(t, "SET_TASK", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 4, []byte{})
	var b []byte
	waitFor(t, "the task to start", func() bool {
		var err error
		b, err = os.ReadFile(pids)
		return err == nil
	})
	ctl.drain()

	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_RESTART, 0), []byte("ignored"))
	wantResp(t, "RESTART", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 4, []byte{})
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "process "+f+" of the task to die", func() bool { return processGone(pid) })
	}
	ctl.expect(pulsepb.PulseType_PULSE_REGISTER, nil)
	if p := ctl.next(); p.GetType() != pulsepb.PulseType_PULSE_OK || p.GetWorkerId() != 8 || p.GetTaskId() != 0 {
		t.Errorf("first pulse after RESTART: %v; want OK from worker 8, no task", p.WorkerPulse)
	}
	if _, err := os.Lstat(ctl.sock(7)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("7.sock after RESTART: %v", err)
	}
	resp, extra = ctl.control(8, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
	wantResp(t, "FETCH after RESTART", resp, extra, pulsepb.WorkerError_WORKER_ERR_NO_FETCH, 0, []byte{})

	// An outcome that waits for FETCH is dropped too.
	resp, extra = ctl.control(8, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 5), []byte("now\n"))
	wantResp(t, "SET_TASK", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 5, []byte{})
	ctl.expect(pulsepb.PulseType_PULSE_FETCH_ME, func(p *pulsepb.WorkerPulse) bool { return p.GetTaskId() == 5 })
	resp, extra = ctl.control(8, ctlMsg(pulsepb.ControlType_CTRL_RESTART, 0), nil)
	wantResp(t, "RESTART", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 5, []byte{})
	ctl.expect(pulsepb.PulseType_PULSE_REGISTER, nil)
	if p := ctl.next(); p.GetType() != pulsepb.PulseType_PULSE_OK || p.GetWorkerId() != 9 || p.GetTaskId() != 0 {
		t.Errorf("first pulse after RESTART: %v; want OK from worker 9, no task", p.WorkerPulse)
	}
	resp, extra = ctl.control(9, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
	wantResp(t, "FETCH after RESTART", resp, extra, pulsepb.WorkerError_WORKER_ERR_NO_FETCH, 0, []byte{})

	cancel()
	if err := waitRun(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	ctl.stop() // every pulse sent has been recorded
	var shutdowns []uint64
	for len(ctl.pulses) > 0 {
		if p := <-ctl.pulses; p.GetType() == pulsepb.PulseType_PULSE_SHUTDOWN {
			shutdowns = append(shutdowns, p.GetWorkerId())
		}
	}
	if len(shutdowns) != 1 || shutdowns[0] != 9 {
		t.Errorf("SHUTDOWN from workers %v; want only 9's, at the end", shutdowns)
	}
	if left, _ := os.ReadDir(outDir); len(left) != 1 {
		t.Errorf("files left in the output directory: %v", left)
	}
}

// waitFor polls cond until it holds, for up to waitLong.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", waitLong, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// processGone reports whether process pid no longer runs: it is gone, or
// a zombie.
func processGone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

func TestWorkerRetriesRegister(t *testing.T) {
	dir := sockDir(t)
	w := &Worker{Dir: dir, Command: []string{"cat"}, NextPulse: 2 * time.Second, Retry: 100 * time.Millisecond}
	runWorker(t, w)
	time.Sleep(250 * time.Millisecond) // no controller yet: the first attempts fail
	if id := w.ID(); id != 0 {
		t.Fatalf("ID() = %d before registering", id)
	}
	ctl := newScriptedController(t, dir, Codec{}, func(c *scriptedController) { c.failRegs = 1 })
	r1 := ctl.expect(pulsepb.PulseType_PULSE_REGISTER, nil)
	r2 := ctl.expect(pulsepb.PulseType_PULSE_REGISTER, nil)
	if d := r2.at.Sub(r1.at); d < 100*time.Millisecond {
		t.Errorf("REGISTER again after %v; want a wait of at least Retry", d)
	}
	if p := ctl.expect(pulsepb.PulseType_PULSE_OK, nil); p.GetWorkerId() != 7 {
		t.Errorf("pulse from worker %d, want 7", p.GetWorkerId())
	}
	ctl.mu.Lock()
	n := ctl.registrants
	ctl.mu.Unlock()
	if n != 1 {
		t.Errorf("%d registrations, want 1", n)
	}
}

// A worker given the id of a socket another process listens on (a worker
// of a controller that was restarted, which numbers from the same start)
// leaves that socket to its owner and registers again; a stale socket file
// of its id, with no one listening, it replaces.
func TestWorkerLeavesALiveSocket(t *testing.T) {
	dir := sockDir(t)
	ctl := newScriptedController(t, dir, Codec{})
	live, err := net.Listen("unix", ctl.sock(7)) // the earlier worker 7
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: ctl.sock(8), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close() // 8.sock stays, with no one listening

	w := &Worker{Dir: dir, Command: []string{"cat"}, NextPulse: 2 * time.Second}
	runWorker(t, w)
	ctl.expect(pulsepb.PulseType_PULSE_REGISTER, nil)
	ctl.expect(pulsepb.PulseType_PULSE_REGISTER, nil)
	if p := ctl.expect(pulsepb.PulseType_PULSE_OK, nil); p.GetWorkerId() != 8 {
		t.Errorf("pulse from worker %d, want 8", p.GetWorkerId())
	}
	resp, extra := ctl.control(8, ctlMsg(pulsepb.ControlType_CTRL_GET_STATUS, 0), nil)
	wantResp(t, "GET_STATUS", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 0, []byte{})

	// 7.sock is still the earlier worker's: dialled once, to see that it
	// was live, and not replaced.
	live.(*net.UnixListener).SetDeadline(time.Now().Add(waitLong))
	conn, err := live.Accept()
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	c, err := net.Dial("unix", ctl.sock(7))
	if err != nil {
		t.Fatalf("7.sock was taken from its owner: %v", err)
	}
	c.Close()
	if conn, err = live.Accept(); err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

func TestWorkerPulsesAgain(t *testing.T) {
	// The controller goes away for a while: the worker keeps its id and
	// pulses again, sooner than a regular pulse, once it is back.
	dir := sockDir(t)
	ctl := newScriptedController(t, dir, Codec{})
	w := &Worker{Dir: dir, Command: []string{"cat"}, NextPulse: 4 * time.Second, Retry: 100 * time.Millisecond}
	runWorker(t, w)
	ctl.expect(pulsepb.PulseType_PULSE_OK, nil)
	ctl.stop()
	os.Remove(filepath.Join(dir, "main.sock"))
	time.Sleep(2500 * time.Millisecond) // past the first regular pulse (2 to 3 s)
	back := time.Now()
	ctl.start()
	p := ctl.expect(pulsepb.PulseType_PULSE_OK, nil)
	if p.GetWorkerId() != 7 {
		t.Errorf("pulse from worker %d, want 7", p.GetWorkerId())
	}
	t.Logf("the worker pulsed %v after the controller came back", p.at.Sub(back))
	ctl.mu.Lock()
	n := ctl.registrants
	ctl.mu.Unlock()
	if n != 1 {
		t.Errorf("%d registrations, want 1", n)
	}
}

func TestWorkerBadControl(t *testing.T) {
	dir := sockDir(t)
	ctl := newScriptedController(t, dir, Codec{})
	w := &Worker{Dir: dir, Command: []string{"cat"}, NextPulse: 2 * time.Second,
		Codec: Codec{Limits: Limits{MaxExtra: 16}}}
	runWorker(t, w)
	ctl.expect(pulsepb.PulseType_PULSE_OK, nil)

	// An unknown type, written by hand: the codec refuses to encode it.
	conn, err := net.DialTimeout("unix", ctl.sock(7), waitLong)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLong))
	if _, err := conn.Write([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x09}); err != nil { // ControlMsg{type: 9}
		t.Fatal(err)
	}
	resp, err := ctl.codec.ReadWorkerResponse(conn)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := ctl.codec.ReadExtra(conn, &b, resp.GetExtraSize()); err != nil {
		t.Fatal(err)
	}
	if resp.GetError() != pulsepb.WorkerError_WORKER_ERR_FAILED || b.Len() == 0 {
		t.Errorf("unknown type: got %v %q, want FAILED with a reason", resp.GetError(), b.Bytes())
	}

	resp, extra := ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 0), []byte("x"))
	wantResp(t, "SET_TASK without task_id", resp, extra, pulsepb.WorkerError_WORKER_ERR_FAILED, 0, nil)
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 1), make([]byte, 17))
	wantResp(t, "SET_TASK over MaxExtra", resp, extra, pulsepb.WorkerError_WORKER_ERR_FAILED, 0, nil)
	if !strings.Contains(string(extra), "limit") {
		t.Errorf("SET_TASK over MaxExtra: FAILED says %q", extra)
	}

	// Still free and working.
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 2), []byte("echo"))
	wantResp(t, "SET_TASK", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 2, []byte{})
	ctl.expect(pulsepb.PulseType_PULSE_FETCH_ME, nil)
	resp, extra = ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_FETCH, 0), nil)
	wantResp(t, "FETCH", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 2, []byte("echo"))
}

func TestWorkerNeedsCommand(t *testing.T) {
	w := &Worker{Dir: sockDir(t)}
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("Run without Command: no error")
	}
}

// A worker whose directory others may enter says nothing to whatever
// answers there (it may not be the controller): it refuses before its
// first REGISTER.
func TestWorkerRefusesAnOpenDirectoryBeforeRegistering(t *testing.T) {
	dir := sockDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "main.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	w := &Worker{Dir: dir, Command: []string{"cat"}}
	if err := w.Run(context.Background()); !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("Run: %v, want ErrUnsafeDir", err)
	}
	if err := ln.SetDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	// A connection made before Run returned would wait here.
	if _, err := ln.Accept(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the worker connected (Accept: %v)", err)
	}
}

// A peer that sends the worker a task a byte now and then, each well
// within the worker's Timeout (500 ms), is cut once the whole exchange has
// taken 6 × Timeout: logged at most once a second, and only those
// connections close: the worker, free, takes the next task.
func TestWorkerCutsADrippingPeer(t *testing.T) {
	dir := sockDir(t)
	ctl := newScriptedController(t, dir, Codec{})
	core, logs := observer.New(zap.InfoLevel)
	w := &Worker{Dir: dir, Command: []string{"cat"}, NextPulse: time.Minute, Timeout: 500 * time.Millisecond, Logger: zap.New(core)}
	runWorker(t, w)
	ctl.expect(pulsepb.PulseType_PULSE_OK, nil)

	// The first is taken as the task (the worker is busy receiving it),
	// the second refused as the worker is busy: both drip.
	var cuts []<-chan struct{}
	start := time.Now()
	for range 2 {
		conn, err := net.DialTimeout("unix", ctl.sock(7), waitLong)
		if err != nil {
			t.Fatal(err)
		}
		task := uint64(1)
		head, err := ctl.codec.AppendMessage(nil, &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_SET_TASK, ExtraSize: 1000, TaskId: &task})
		if err != nil {
			t.Fatal(err)
		}
		cuts = append(cuts, drip(t, conn, head, 25*time.Millisecond))
	}
	for _, closed := range cuts {
		select {
		case <-closed:
		case <-time.After(waitLong):
			t.Fatal("the worker holds a dripping connection")
		}
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("cut after %v, before 6 × Timeout", took)
	}
	msg := "connection closed: the controller's side was silent or too slow (Worker.Timeout for each read or write, Worker.ExchangeTimeout for it all; at most one such line a second)"
	waitFor(t, "the cut logged", func() bool { return logs.FilterMessage(msg).Len() > 0 })
	if cut := logs.FilterMessage(msg).All()[0]; !strings.Contains(cut.ContextMap()["error"].(string), "the peer is too slow") {
		t.Errorf("the cut says %q", cut.ContextMap()["error"])
	}

	resp, extra := ctl.control(7, ctlMsg(pulsepb.ControlType_CTRL_SET_TASK, 2), []byte("echo"))
	wantResp(t, "SET_TASK after the cut", resp, extra, pulsepb.WorkerError_WORKER_ERR_OK, 2, []byte{})
}
