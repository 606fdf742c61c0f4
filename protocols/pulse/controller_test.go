package pulse

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
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
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// shortDir is a directory short enough for Unix socket paths.
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "pt")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "ctl")
}

// testController is a Controller serving an Executor.
type testController struct {
	c    *Controller
	ex   *laboro.Executor
	logs *observer.ObservedLogs
	// stop ends Serve and closes the Executor, and returns Serve's error
	// (once Serve has returned); it is called at the end of the test too.
	stop func() error
}

// startController starts a Controller, set up by opts, and an Executor
// over it; main.sock accepts connections once it returns.
func startController(t *testing.T, codec Codec, opts ...func(*Controller)) *testController {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	c := &Controller{Dir: shortDir(t), Codec: codec, Timeout: 2 * time.Second, OutputDir: t.TempDir(), Logger: zap.New(core)}
	for _, opt := range opts {
		opt(c)
	}
	ex, err := laboro.New(laboro.WithRunner(c), laboro.WithPoolSize(16), laboro.WithConcurrency(16))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx) }()
	// main.sock appears once it accepts connections.
	require.Eventually(t, func() bool { return fileExists(filepath.Join(c.Dir, "main.sock")) }, 10*time.Second, time.Millisecond)
	var once sync.Once
	var serveErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			serveErr = <-served
			ex.Close()
		})
		return serveErr
	}
	t.Cleanup(func() { stop() })
	return &testController{c: c, ex: ex, logs: logs, stop: stop}
}

func (tc *testController) submit(t *testing.T, data string) *laboro.Handle {
	h, err := tc.ex.Submit(context.Background(), NewTask([]byte(data)))
	require.NoError(t, err)
	return h
}

// logged waits until the controller has logged msg n times.
func (tc *testController) logged(t *testing.T, msg string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return tc.logs.FilterMessage(msg).Len() >= n }, 10*time.Second, time.Millisecond,
		"%q not logged %d times", msg, n)
}

func result(t *testing.T, h *laboro.Handle) (laboro.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := h.Wait(ctx)
	require.NoError(t, err)
	var out []byte
	if res.Output != nil {
		out, err = res.Output.ReadAll()
		require.NoError(t, err)
		res.Output.Close()
	}
	return res, string(out)
}

// scriptedWorker plays a worker by hand: it pulses, and answers control
// messages on its socket with a function of the test's.
type scriptedWorker struct {
	// takeOver, when set before the worker registers, is given each
	// control message first, with its connection (its extra bytes
	// unread); when it returns true, it has taken the connection over and
	// the worker does not answer.
	takeOver func(m *pulsepb.ControlMsg, conn net.Conn) bool

	t      *testing.T
	codec  Codec
	dir    string
	id     uint64
	next   uint64 // the next_pulse it announces, in seconds
	ln     net.Listener
	mu     sync.Mutex
	answer func(m *pulsepb.ControlMsg, extra []byte) (*pulsepb.WorkerResponse, []byte)
	got    chan *pulsepb.ControlMsg
	quit   chan struct{}
	wg     sync.WaitGroup
}

// worker registers a scripted worker that announces a next_pulse of 60 s,
// so that a slow test does not lose it; one of the test's is given as
// nextPulse.
func (tc *testController) worker(t *testing.T, nextPulse ...uint64) *scriptedWorker {
	return tc.workerTakingOver(t, nil, nextPulse...)
}

// workerTakingOver is worker, with takeOver set.
func (tc *testController) workerTakingOver(t *testing.T, takeOver func(*pulsepb.ControlMsg, net.Conn) bool, nextPulse ...uint64) *scriptedWorker {
	w := &scriptedWorker{t: t, codec: tc.c.Codec, dir: tc.c.Dir, next: 60, got: make(chan *pulsepb.ControlMsg, 16), quit: make(chan struct{}),
		takeOver: takeOver}
	if len(nextPulse) > 0 {
		w.next = nextPulse[0]
	}
	w.answer = func(m *pulsepb.ControlMsg, extra []byte) (*pulsepb.WorkerResponse, []byte) {
		return &pulsepb.WorkerResponse{Error: pulsepb.WorkerError_WORKER_ERR_OK, TaskId: m.GetTaskId()}, nil
	}
	r := w.pulse(pulsepb.PulseType_PULSE_REGISTER, 0)
	require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, r.Error)
	require.NotNil(t, r.WorkerId)
	w.id = *r.WorkerId
	ln, err := net.Listen("unix", filepath.Join(w.dir, strconv.FormatUint(w.id, 10)+".sock"))
	require.NoError(t, err)
	w.ln = ln
	w.wg.Go(w.serve)
	t.Cleanup(func() { close(w.quit); ln.Close(); w.wg.Wait() })
	return w
}

// pulse sends one WorkerPulse and returns the answer.
func (w *scriptedWorker) pulse(typ pulsepb.PulseType, task uint64) *pulsepb.PulseResponse {
	w.t.Helper()
	conn, err := net.Dial("unix", filepath.Join(w.dir, "main.sock"))
	require.NoError(w.t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	require.NoError(w.t, w.codec.WriteMessage(conn, &pulsepb.WorkerPulse{Type: typ, WorkerId: w.id, TaskId: task, NextPulse: w.next}))
	r, err := w.codec.ReadPulseResponse(conn)
	require.NoError(w.t, err)
	return r
}

func (w *scriptedWorker) serve() {
	for {
		conn, err := w.ln.Accept()
		if err != nil {
			return
		}
		m, err := w.codec.ReadControl(conn)
		if err != nil {
			conn.Close()
			continue
		}
		if w.takeOver != nil && w.takeOver(m, conn) {
			continue
		}
		var extra bytes.Buffer
		w.codec.ReadExtra(conn, &extra, m.ExtraSize)
		w.mu.Lock()
		resp, out := w.answer(m, extra.Bytes())
		w.mu.Unlock()
		resp.ExtraSize = uint64(len(out))
		w.codec.WriteMessage(conn, resp)
		conn.Write(out)
		conn.Close()
		select {
		case w.got <- m:
		case <-w.quit:
			return
		}
	}
}

func (w *scriptedWorker) on(answer func(m *pulsepb.ControlMsg, extra []byte) (*pulsepb.WorkerResponse, []byte)) {
	w.mu.Lock()
	w.answer = answer
	w.mu.Unlock()
}

// received returns the next control message the worker received.
func (w *scriptedWorker) received() *pulsepb.ControlMsg {
	w.t.Helper()
	select {
	case m := <-w.got:
		return m
	case <-time.After(10 * time.Second):
		w.t.Fatal("no control message")
		return nil
	}
}

var numberings = []Numbering{SpecNumbering, LaterNumbering}

// REGISTER, OK, SET_TASK, FETCH_ME, FETCH: the task's result reaches Run.
func TestControllerTaskFlow(t *testing.T) {
	for _, n := range numberings {
		t.Run(n.String(), func(t *testing.T) {
			tc := startController(t, Codec{Numbering: n})
			w := tc.worker(t)
			var task []byte
			w.on(func(m *pulsepb.ControlMsg, extra []byte) (*pulsepb.WorkerResponse, []byte) {
				switch m.Type {
				case pulsepb.ControlType_CTRL_SET_TASK:
					task = extra
					return &pulsepb.WorkerResponse{TaskId: m.GetTaskId()}, nil
				case pulsepb.ControlType_CTRL_FETCH:
					return &pulsepb.WorkerResponse{TaskId: 1}, bytes.ToUpper(task)
				}
				return &pulsepb.WorkerResponse{Error: pulsepb.WorkerError_WORKER_ERR_FAILED}, nil
			})
			h := tc.submit(t, "solve me")
			// Waiting for a worker until the worker has pulsed: Stats
			// tells the two apart, where the Executor counts both running.
			require.Eventually(t, func() bool { return tc.c.Stats().Pending == 1 }, 10*time.Second, time.Millisecond)
			assert.Equal(t, Stats{Workers: 1, Pending: 1}, tc.c.Stats())
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_OK, 0).Error)
			m := w.received()
			assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, m.Type)
			assert.Equal(t, Stats{Workers: 1, Out: 1}, tc.c.Stats())
			assert.Equal(t, uint64(1), m.GetTaskId())
			assert.Equal(t, "solve me", string(task))
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_OK, 1).Error)
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 1).Error)
			assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, w.received().Type)
			res, out := result(t, h)
			assert.Equal(t, laboro.StatusSucceeded, res.Status)
			assert.Equal(t, "SOLVE ME", out)
			assert.Equal(t, Stats{Workers: 1}, tc.c.Stats())
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_SHUTDOWN, 0).Error)
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID, w.pulse(pulsepb.PulseType_PULSE_OK, 0).Error, "removed after SHUTDOWN")
		})
	}
}

// Tasks and results of every size cross intact, each way, around the size
// up to which a message and its bytes go in one write (smallExtra) and far
// past it, to a worker that reads and writes each part on its own.
func TestControllerTaskSizes(t *testing.T) {
	tc := startController(t, Codec{})
	w := tc.worker(t)
	var mu sync.Mutex
	var task []byte
	var id uint64
	w.on(func(m *pulsepb.ControlMsg, extra []byte) (*pulsepb.WorkerResponse, []byte) {
		mu.Lock()
		defer mu.Unlock()
		switch m.Type {
		case pulsepb.ControlType_CTRL_SET_TASK:
			task, id = extra, m.GetTaskId()
			return &pulsepb.WorkerResponse{TaskId: id}, nil
		case pulsepb.ControlType_CTRL_FETCH:
			return &pulsepb.WorkerResponse{TaskId: id}, bytes.ToUpper(task)
		}
		return &pulsepb.WorkerResponse{Error: pulsepb.WorkerError_WORKER_ERR_FAILED}, nil
	})
	for _, n := range []int{0, 1, smallExtra - 1, smallExtra, smallExtra + 1, 1 << 20} {
		data := make([]byte, n)
		for i := range data {
			data[i] = 'a' + byte(i%26)
		}
		h := tc.submit(t, string(data))
		require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_OK, 0).Error)
		require.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, w.received().Type, "task of %d bytes", n)
		mu.Lock()
		got, given := task, id
		mu.Unlock()
		require.Equal(t, data, got, "task of %d bytes as the worker read it", n)
		require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_FETCH_ME, given).Error)
		require.Equal(t, pulsepb.ControlType_CTRL_FETCH, w.received().Type)
		res, out := result(t, h)
		require.Equal(t, laboro.StatusSucceeded, res.Status, "task of %d bytes", n)
		require.Equal(t, string(bytes.ToUpper(data)), out, "result of %d bytes", n)
	}
}

// A result over the controller's limit fails its task at once, with why:
// it would be as large on any other worker. The worker, which still holds
// it, is dropped, and registers again.
func TestControllerResultTooLarge(t *testing.T) {
	tc := startController(t, Codec{Limits: Limits{MaxExtra: 1000}})
	w := tc.worker(t)
	w.on(func(m *pulsepb.ControlMsg, extra []byte) (*pulsepb.WorkerResponse, []byte) {
		switch m.Type {
		case pulsepb.ControlType_CTRL_SET_TASK:
			return &pulsepb.WorkerResponse{TaskId: m.GetTaskId()}, nil
		case pulsepb.ControlType_CTRL_FETCH:
			return &pulsepb.WorkerResponse{TaskId: 1}, make([]byte, 2000)
		}
		return &pulsepb.WorkerResponse{Error: pulsepb.WorkerError_WORKER_ERR_FAILED}, nil
	})
	h := tc.submit(t, "make it big")
	require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_OK, 0).Error)
	require.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, w.received().Type)
	require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 1).Error)
	require.Equal(t, pulsepb.ControlType_CTRL_FETCH, w.received().Type)
	res, _ := result(t, h)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorIs(t, res.Err, ErrTooLarge)
	assert.ErrorContains(t, res.Err, "task 1: its result is too large for this controller")
	assert.ErrorContains(t, res.Err, "2000 bytes, limit 1000")
	assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID, w.pulse(pulsepb.PulseType_PULSE_OK, 0).Error, "the worker was dropped")
}

// BUSY sends the task to another worker; TASK_FAILED too; each counts as
// an attempt, until Attempts have been made; NO_FETCH changes nothing.
func TestControllerBusyAndFailures(t *testing.T) {
	tc := startController(t, Codec{}, func(c *Controller) { c.Attempts = 3 })
	busy := tc.worker(t)
	busy.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		if m.Type == pulsepb.ControlType_CTRL_GET_STATUS {
			return &pulsepb.WorkerResponse{TaskId: 0}, nil
		}
		return &pulsepb.WorkerResponse{Error: pulsepb.WorkerError_WORKER_ERR_BUSY}, nil
	})
	h := tc.submit(t, "x")
	busy.pulse(pulsepb.PulseType_PULSE_OK, 0)
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, busy.received().Type)
	assert.Equal(t, pulsepb.ControlType_CTRL_GET_STATUS, busy.received().Type, "asked what it runs")

	failing := tc.worker(t)
	failing.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		if m.Type == pulsepb.ControlType_CTRL_FETCH {
			return &pulsepb.WorkerResponse{Error: pulsepb.WorkerError_WORKER_ERR_TASK_FAILED, TaskId: 1}, []byte("exit status 3")
		}
		return &pulsepb.WorkerResponse{TaskId: m.GetTaskId()}, nil
	})
	failing.pulse(pulsepb.PulseType_PULSE_OK, 0)
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, failing.received().Type)
	failing.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 1)
	assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, failing.received().Type)
	// The task comes back to it (the busy worker stays busy): after BUSY
	// and a first failure, a second failure is the last one allowed.
	failing.pulse(pulsepb.PulseType_PULSE_OK, 0)
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, failing.received().Type)
	failing.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		if m.Type == pulsepb.ControlType_CTRL_FETCH {
			return &pulsepb.WorkerResponse{Error: pulsepb.WorkerError_WORKER_ERR_NO_FETCH, TaskId: 1}, nil
		}
		return &pulsepb.WorkerResponse{TaskId: m.GetTaskId()}, nil
	})
	failing.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 1)
	assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, failing.received().Type)
	failing.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		return &pulsepb.WorkerResponse{Error: pulsepb.WorkerError_WORKER_ERR_TASK_FAILED, TaskId: 1}, []byte("exit status 4: boom\n")
	})
	failing.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 1)
	assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, failing.received().Type)
	res, _ := result(t, h)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorIs(t, res.Err, ErrTaskFailed)
	assert.ErrorIs(t, res.Err, transport.ErrAttempts)
	// The last worker's words come first, and make the job's exit status
	// and standard error's tail, as for a job that failed here.
	assert.EqualError(t, res.Err, "pulse: task failed on worker 2: exit status 4: boom (handed out 3 times, the limit)")
	assert.Equal(t, 4, res.ExitCode)
	assert.Equal(t, "boom\n", string(res.Stderr))
}

// The words of a worker's TASK_FAILED give a job its exit status and its
// standard error's tail when they are our Worker's; another worker's keep
// the job's -1.
func TestTaskFailureExitStatus(t *testing.T) {
	for text, want := range map[string]struct {
		code   int
		stderr string
	}{
		"exit status 3":                       {3, ""},
		"exit status 3: boom\n":               {3, "boom\n"},
		"exit status 127: sh: x: not found\n": {127, "sh: x: not found\n"},
		"exit status":                         {-1, ""},
		"exit status 3x":                      {-1, ""},
		"md5 mismatch":                        {-1, ""},
		"":                                    {-1, ""},
	} {
		code, stderr := (&taskFailure{worker: 1, text: []byte(text)}).exitStatus()
		assert.Equal(t, want.code, code, "%q", text)
		assert.Equal(t, want.stderr, string(stderr), "%q", text)
	}
}

// A pulse naming a task the worker was not given, confirmed by GET_STATUS,
// gets it RESTART; it is removed, and its task goes to another worker.
func TestControllerRestartsAWorkerThatDisagrees(t *testing.T) {
	tc := startController(t, Codec{Numbering: LaterNumbering})
	w := tc.worker(t)
	w.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		return &pulsepb.WorkerResponse{TaskId: 42}, nil
	})
	h := tc.submit(t, "x")
	w.pulse(pulsepb.PulseType_PULSE_OK, 0)
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, w.received().Type)
	// Pulses go on as a worker's do; one comes once the SET_TASK exchange
	// is over, and is checked.
	var m *pulsepb.ControlMsg
	require.Eventually(t, func() bool {
		w.pulse(pulsepb.PulseType_PULSE_OK, 42)
		select {
		case m = <-w.got:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	}, 10*time.Second, time.Millisecond)
	assert.Equal(t, pulsepb.ControlType_CTRL_GET_STATUS, m.Type)
	assert.Equal(t, pulsepb.ControlType_CTRL_RESTART, w.received().Type)
	// Removed once its answer to RESTART is read.
	require.Eventually(t, func() bool {
		return w.pulse(pulsepb.PulseType_PULSE_OK, 42).Error == pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID
	}, 10*time.Second, time.Millisecond)

	good := tc.worker(t)
	good.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		return &pulsepb.WorkerResponse{TaskId: 1}, []byte("ok")
	})
	good.pulse(pulsepb.PulseType_PULSE_OK, 0)
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, good.received().Type)
	good.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 1)
	res, out := result(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	assert.Equal(t, "ok", out)
}

// A worker that sends no pulse within its next_pulse (1 s here) is removed
// and its task goes to another once it has not come back within Grace;
// one that answers FAILED is removed and its task goes to another at once.
func TestControllerDeadAndFailedWorkers(t *testing.T) {
	tc := startController(t, Codec{}, func(c *Controller) { c.Grace = 50 * time.Millisecond })
	silent := tc.worker(t, 1)
	h := tc.submit(t, "x")
	start := time.Now()
	silent.pulse(pulsepb.PulseType_PULSE_OK, 0)
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, silent.received().Type)
	tc.logged(t, "worker removed; its task waits for it to register again, then goes to another", 1)
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "not before next_pulse")
	tc.logged(t, "worker's jobs go back in line", 1)

	failed := tc.worker(t)
	failed.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		return &pulsepb.WorkerResponse{Error: pulsepb.WorkerError_WORKER_ERR_FAILED}, []byte("disk full")
	})
	failed.pulse(pulsepb.PulseType_PULSE_OK, 0)
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, failed.received().Type)
	tc.logged(t, "worker removed; its task goes to another", 1)

	good := tc.worker(t)
	good.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		return &pulsepb.WorkerResponse{TaskId: 1}, []byte("done")
	})
	good.pulse(pulsepb.PulseType_PULSE_OK, 0)
	good.received()
	good.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 1)
	res, out := result(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	assert.Equal(t, "done", out)
}

// Unknown ids and types, and hostile frames, on main.sock.
func TestControllerBadPulses(t *testing.T) {
	for _, n := range numberings {
		t.Run(n.String(), func(t *testing.T) {
			tc := startController(t, Codec{Numbering: n})
			w := &scriptedWorker{t: t, codec: tc.c.Codec, dir: tc.c.Dir, id: 99}
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID, w.pulse(pulsepb.PulseType_PULSE_OK, 0).Error)
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID, w.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 0).Error)

			raw := func(frame []byte) (*pulsepb.PulseResponse, error) {
				conn, err := net.Dial("unix", filepath.Join(tc.c.Dir, "main.sock"))
				require.NoError(t, err)
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(5 * time.Second))
				conn.Write(frame)
				return tc.c.Codec.ReadPulseResponse(conn)
			}
			// type = 9: no such PulseType in either numbering.
			r, err := raw([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0x08, 9})
			require.NoError(t, err)
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_TYPE, r.Error)
			r, err = raw([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff})
			require.NoError(t, err)
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_FAILED, r.Error, "garbage")
			huge := binary.LittleEndian.AppendUint64(nil, 1<<63)
			r, err = raw(huge)
			require.NoError(t, err)
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_FAILED, r.Error, "a length of 2^63 is refused")
			_, err = raw([]byte{10, 0, 0, 0, 0, 0, 0, 0, 0x08})
			assert.ErrorIs(t, err, io.EOF, "a truncated pulse closes the connection")

			// The controller still serves.
			good := tc.worker(t)
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, good.pulse(pulsepb.PulseType_PULSE_OK, 0).Error)
		})
	}
}

// A stale main.sock left by a controller that died is replaced; a live
// one is refused.
func TestControllerSocketFile(t *testing.T) {
	tc := startController(t, Codec{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	other := &Controller{Dir: tc.c.Dir}
	err := other.Serve(ctx)
	assert.ErrorIs(t, err, ErrInUse)
	assert.ErrorContains(t, err, "already answers")

	dir := shortDir(t)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	ln, err := net.Listen("unix", filepath.Join(dir, "main.sock"))
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the file stays, as after a crash
	c := &Controller{Dir: dir}
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx) }()
	require.Eventually(t, func() bool {
		conn, err := net.Dial("unix", filepath.Join(dir, "main.sock"))
		if err == nil {
			conn.Close()
		}
		return err == nil
	}, 5*time.Second, time.Millisecond)
	st, err := os.Stat(filepath.Join(dir, "main.sock"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), fmt.Sprintf("%v", st.Mode()))
	cancel()
	assert.ErrorIs(t, <-served, context.Canceled)
}

// A job that ends while its task runs (Executor.Cancel here) ends at once,
// and the worker that runs it gets RESTART and is removed.
func TestControllerRestartsTheWorkerOfACancelledTask(t *testing.T) {
	for _, n := range numberings {
		t.Run(n.String(), func(t *testing.T) {
			tc := startController(t, Codec{Numbering: n})
			w := tc.worker(t)
			h := tc.submit(t, "x")
			w.pulse(pulsepb.PulseType_PULSE_OK, 0)
			assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, w.received().Type)
			require.NoError(t, tc.ex.Cancel(h.ID()))
			res, _ := result(t, h)
			assert.Equal(t, laboro.StatusCancelled, res.Status)
			assert.ErrorIs(t, res.Err, laboro.ErrCancelled)
			assert.Equal(t, pulsepb.ControlType_CTRL_RESTART, w.received().Type)
			require.Eventually(t, func() bool { return len(tc.c.Workers()) == 0 }, 10*time.Second, time.Millisecond)
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID, w.pulse(pulsepb.PulseType_PULSE_OK, 1).Error)
		})
	}
}

// A job that ends while its task's outcome is ready on the worker: the
// worker is fetched, not restarted, and the result is discarded, its file
// removed.
func TestControllerDropsALateResult(t *testing.T) {
	tc := startController(t, Codec{})
	w := tc.worker(t)
	answer := make(chan struct{})
	w.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		if m.Type == pulsepb.ControlType_CTRL_SET_TASK {
			<-answer // the controller waits for this answer
			return &pulsepb.WorkerResponse{TaskId: m.GetTaskId()}, nil
		}
		return &pulsepb.WorkerResponse{TaskId: 1}, []byte("too late")
	})
	h := tc.submit(t, "x")
	w.pulse(pulsepb.PulseType_PULSE_OK, 0)
	require.Eventually(t, func() bool { return tc.c.d.Stats().Held == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, tc.ex.Cancel(h.ID()))
	res, _ := result(t, h)
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	// The task ended on the worker, which asks to be fetched.
	w.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 1)
	close(answer)
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, w.received().Type)
	assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, w.received().Type)
	tc.logged(t, "fetched result discarded", 1)
	entries, err := os.ReadDir(tc.c.OutputDir)
	require.NoError(t, err)
	assert.Empty(t, entries, "the discarded result's file is removed")
	assert.Equal(t, []uint64{w.id}, tc.c.Workers(), "not restarted")

	// It is free for the next task.
	w.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		if m.Type == pulsepb.ControlType_CTRL_SET_TASK {
			return &pulsepb.WorkerResponse{TaskId: m.GetTaskId()}, nil
		}
		return &pulsepb.WorkerResponse{TaskId: 2}, []byte("in time")
	})
	h = tc.submit(t, "y")
	assert.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, w.received().Type)
	w.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 2)
	assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, w.received().Type)
	res, out := result(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "in time", out)
}

// main.sock appears only once it accepts connections: whoever sees the
// file can connect.
func TestControllerSocketAcceptsOnceItExists(t *testing.T) {
	for range 20 {
		dir := shortDir(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c := &Controller{Dir: dir}
		served := make(chan error, 1)
		go func() { served <- c.Serve(ctx) }()
		path := filepath.Join(dir, "main.sock")
		require.Eventually(t, func() bool { return fileExists(path) }, 10*time.Second, 50*time.Microsecond)
		conn, err := net.Dial("unix", path)
		require.NoError(t, err)
		conn.Close()
		cancel()
		require.ErrorIs(t, <-served, context.Canceled)
		assert.False(t, fileExists(path), "main.sock removed")
	}
}

// The task travels in Job.Payload; Meta is the caller's.
func TestControllerTaskInPayload(t *testing.T) {
	c := &Controller{}
	require.NoError(t, c.Validate(NewTask([]byte("x"))))
	require.NoError(t, c.Validate(NewTaskFile("/x")))
	require.Error(t, c.Validate(laboro.Job{Meta: Task{}}))
	job := NewTask([]byte("x"))
	job.Meta = "the caller's"
	require.NoError(t, c.Validate(job))
	res := c.Run(context.Background(), laboro.Job{ID: "j", Meta: Task{}})
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.Equal(t, "j", res.ID)
}

// A controller started where workers of an earlier one still listen gives
// ids above theirs, and answers their pulses UNKNOWN_ID, so that they
// register again: had it given a new worker the id of a live one, it would
// have taken the pulses of the one for the other's.
func TestControllerSkipsEarlierWorkerIDs(t *testing.T) {
	dir := shortDir(t)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	old, err := net.Listen("unix", filepath.Join(dir, "5.sock")) // a worker of a controller that was killed
	require.NoError(t, err)
	defer old.Close()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "9.sock"), nil, 0o600)) // not a socket: not a worker's
	tc := startController(t, Codec{}, func(c *Controller) { c.Dir = dir })

	w := tc.worker(t)
	require.Equal(t, uint64(6), w.id, "the first id after the earlier worker's")
	oldWorker := &scriptedWorker{t: t, codec: tc.c.Codec, dir: dir, id: 5, next: 60}
	require.Equal(t, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID, oldWorker.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 3).Error)
	tc.logged(t, "pulse from a worker of an earlier controller; answered UNKNOWN_ID: it should register again", 1)

	// The earlier worker is told RESTART, once, so that it registers
	// again at once; the task goes to the new worker.
	conn, err := old.Accept()
	require.NoError(t, err)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	m, err := tc.c.Codec.ReadControl(conn)
	require.NoError(t, err)
	assert.Equal(t, pulsepb.ControlType_CTRL_RESTART, m.GetType())
	require.NoError(t, tc.c.Codec.WriteMessage(conn, &pulsepb.WorkerResponse{}))
	conn.Close()
	tc.logged(t, "a worker of an earlier controller was told to register again (RESTART)", 1)
	tc.submit(t, "data")
	require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_OK, 0).Error)
	m = w.received()
	require.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, m.GetType())
	require.NoError(t, old.(*net.UnixListener).SetDeadline(time.Now()))
	_, err = old.Accept()
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the earlier worker's socket was dialled again")
}

// A worker of a controller that stopped takes the tasks of the next one
// on its directory at once, not at its next pulse (ten minutes here): the
// new controller tells it RESTART, and it registers again.
func TestEarlierWorkerJoinsNextController(t *testing.T) {
	dir := shortDir(t)
	serve := func() (*Controller, *laboro.Executor, func()) {
		c := &Controller{Dir: dir, Timeout: 2 * time.Second, OutputDir: t.TempDir(), Logger: zaptest.NewLogger(t)}
		ex, err := laboro.New(laboro.WithRunner(c), laboro.WithPoolSize(4), laboro.WithConcurrency(4))
		require.NoError(t, err)
		ln, err := c.Listen()
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- c.ServeListener(ctx, ln) }()
		return c, ex, func() { cancel(); ex.Close(); <-served }
	}
	first, _, stop := serve()
	runWorker(t, &Worker{Dir: dir, Command: []string{"tr", "a-z", "A-Z"}, NextPulse: 10 * time.Minute})
	require.Eventually(t, func() bool { return len(first.Workers()) == 1 }, 20*time.Second, time.Millisecond)
	stop()

	_, ex, stop := serve()
	defer stop()
	h, err := ex.Submit(context.Background(), NewTask([]byte("again")))
	require.NoError(t, err)
	res, out := result(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "AGAIN", out)
}

// Beyond MaxConns, a connection to main.sock is closed unanswered; once
// one ends, workers are served again (one registers). So is a connection
// to a worker's socket beyond its MaxConns, which answers again afterwards.
func TestMaxConns(t *testing.T) {
	tc := startController(t, Codec{}, func(c *Controller) { c.MaxConns, c.Timeout = 1, time.Minute })
	// twoSilent dials path twice and says nothing: one connection is
	// served (until the server's Timeout, a minute), the other is beyond
	// MaxConns. It reports whether the first to end ended unanswered, and
	// closes both.
	twoSilent := func(path string) bool {
		ended := make(chan bool, 2)
		var conns []net.Conn
		for range 2 {
			conn, err := net.Dial("unix", path)
			require.NoError(t, err)
			defer conn.Close()
			conns = append(conns, conn)
		}
		for _, conn := range conns {
			go func() {
				n, err := conn.Read(make([]byte, 1))
				ended <- n == 0 && errors.Is(err, io.EOF)
			}()
		}
		unanswered := <-ended
		for _, conn := range conns {
			conn.Close()
		}
		<-ended
		return unanswered
	}
	assert.True(t, twoSilent(filepath.Join(tc.c.Dir, "main.sock")), "a connection beyond MaxConns was served")
	tc.logged(t, "connection refused: too many connections (Controller.MaxConns; at most one such line a second)", 1)
	require.Eventually(t, func() bool { return tc.c.conns.Load() == 0 }, 10*time.Second, time.Millisecond)

	core, logs := observer.New(zap.InfoLevel)
	w := &Worker{Dir: tc.c.Dir, Command: []string{"cat"}, NextPulse: 10 * time.Minute, Timeout: time.Minute,
		MaxConns: 1, Logger: zap.New(core)}
	runWorker(t, w)
	require.Eventually(t, func() bool { return logs.FilterMessage("listening").Len() == 1 }, 20*time.Second, time.Millisecond)
	assert.True(t, twoSilent(filepath.Join(tc.c.Dir, strconv.FormatUint(w.ID(), 10)+".sock")),
		"a connection beyond the worker's MaxConns was served")
	assert.Equal(t, 1, logs.FilterMessage("connection refused: too many connections (Worker.MaxConns; at most one such line a second)").Len())
	// Once the served one has ended, the socket answers again.
	require.Eventually(t, func() bool {
		conn, err := net.Dial("unix", filepath.Join(tc.c.Dir, strconv.FormatUint(w.ID(), 10)+".sock"))
		if err != nil {
			return false
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(waitLong))
		if tc.c.Codec.WriteMessage(conn, &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_GET_STATUS}) != nil {
			return false
		}
		_, err = tc.c.Codec.ReadWorkerResponse(conn)
		return err == nil
	}, waitLong, time.Millisecond, "the worker's socket does not answer after a refusal")
}

// A Controller keeps at most MaxWorkers workers registered: one more is
// answered FAILED, and is welcome once one of them has shut down.
func TestControllerBoundsTheWorkers(t *testing.T) {
	tc := startController(t, Codec{}, func(c *Controller) { c.MaxWorkers = 2 })
	first := tc.worker(t)
	tc.worker(t)
	extra := &scriptedWorker{t: t, codec: tc.c.Codec, dir: tc.c.Dir, next: 60}
	assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_FAILED, extra.pulse(pulsepb.PulseType_PULSE_REGISTER, 0).Error)
	tc.logged(t, "worker refused: too many workers registered (Controller.MaxWorkers)", 1)
	assert.Len(t, tc.c.Workers(), 2)

	assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, first.pulse(pulsepb.PulseType_PULSE_SHUTDOWN, 0).Error)
	assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, extra.pulse(pulsepb.PulseType_PULSE_REGISTER, 0).Error)
}

// lose has the controller remove w, which holds task id, as it does a
// worker that misses its pulses (as when the controller stalls past the
// worker's next_pulse): w sends none within its next_pulse. Then w pulses
// under its old id, naming its task, as a worker that learns it was
// forgotten does, and is answered UNKNOWN_ID.
func (tc *testController) lose(t *testing.T, w *scriptedWorker, id uint64) {
	t.Helper()
	require.Eventually(t, func() bool { return !slices.Contains(tc.c.Workers(), w.id) }, 10*time.Second, time.Millisecond,
		"worker %d not removed", w.id)
	require.Equal(t, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID, w.pulse(pulsepb.PulseType_PULSE_FETCH_ME, id).Error)
}

// answersFetch has w answer FETCH with the outcome of task id, result.
func answersFetch(w *scriptedWorker, id uint64, result string) {
	w.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		if m.GetType() == pulsepb.ControlType_CTRL_FETCH {
			return &pulsepb.WorkerResponse{TaskId: id}, []byte(result)
		}
		return &pulsepb.WorkerResponse{TaskId: m.GetTaskId()}, nil
	})
}

// A worker the controller lost while it ran a task, registered again
// under a new id, offers the task's outcome: it is taken, and the task is
// not given again (it ran once).
func TestControllerTakesTheOutcomeOfAWorkerItLost(t *testing.T) {
	tc := startController(t, Codec{})
	lost := tc.worker(t, 1) // next_pulse 1 s
	h := tc.submit(t, "x")
	lost.pulse(pulsepb.PulseType_PULSE_OK, 0)
	m := lost.received()
	require.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, m.GetType())
	id := m.GetTaskId()
	tc.lose(t, lost, id)

	back := tc.worker(t) // the same worker, registered again
	answersFetch(back, id, "its result")
	require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, back.pulse(pulsepb.PulseType_PULSE_FETCH_ME, id).Error)
	assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, back.received().GetType())
	res, out := result(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "its result", out)
	assert.Equal(t, 1, tc.logs.FilterMessage("task given").Len(), "the task was given again")
	assert.Zero(t, tc.logs.FilterMessage("fetched outcome discarded: the worker was given no task, and no task waits for this one").Len())
}

// A task whose worker was lost went to another worker (no Grace); the
// lost worker comes back. The first outcome offered is the task's only
// result: the lost worker's, and the other worker gets RESTART; or the
// other worker's, and the lost worker's is dropped.
func TestControllerFirstOutcomeWins(t *testing.T) {
	for _, first := range []string{"the lost worker", "the other worker"} {
		t.Run(first, func(t *testing.T) {
			tc := startController(t, Codec{}, func(c *Controller) { c.Grace = -1 })
			lost := tc.worker(t, 1)
			h := tc.submit(t, "x")
			lost.pulse(pulsepb.PulseType_PULSE_OK, 0)
			id := lost.received().GetTaskId()
			other := tc.worker(t)
			answersFetch(other, id, "the other worker's")
			other.pulse(pulsepb.PulseType_PULSE_OK, 0)
			m := other.received() // once lost is removed
			require.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, m.GetType())
			require.Equal(t, id, m.GetTaskId())

			if first == "the other worker" {
				require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, other.pulse(pulsepb.PulseType_PULSE_FETCH_ME, id).Error)
				assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, other.received().GetType())
				res, out := result(t, h)
				assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
				assert.Equal(t, "the other worker's", out)
			}
			tc.lose(t, lost, id)
			back := tc.worker(t)
			answersFetch(back, id, "the lost worker's")
			require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, back.pulse(pulsepb.PulseType_PULSE_FETCH_ME, id).Error)
			assert.Equal(t, pulsepb.ControlType_CTRL_FETCH, back.received().GetType(), "its outcome is fetched, so that it is free")
			if first == "the other worker" {
				tc.logged(t, "fetched outcome discarded: the worker was given no task, and no task waits for this one", 1)
				return
			}
			res, out := result(t, h)
			assert.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
			assert.Equal(t, "the lost worker's", out)
			assert.Equal(t, pulsepb.ControlType_CTRL_RESTART, other.received().GetType(), "the other copy is cancelled")
			// Its outcome, offered after, is not taken: it is removed
			// once its RESTART is answered.
			require.Eventually(t, func() bool { return !slices.Contains(tc.c.Workers(), other.id) }, 10*time.Second, time.Millisecond)
			assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID, other.pulse(pulsepb.PulseType_PULSE_FETCH_ME, id).Error)
		})
	}
}

// A worker that never held a task cannot take it back by naming it: it
// is asked what it runs and, as it runs a task it was not given, told
// RESTART.
func TestControllerKeepsATaskFromAWorkerThatDidNotHoldIt(t *testing.T) {
	tc := startController(t, Codec{}, func(c *Controller) { c.Grace = time.Minute })
	lost := tc.worker(t, 1)
	tc.submit(t, "x")
	lost.pulse(pulsepb.PulseType_PULSE_OK, 0)
	id := lost.received().GetTaskId()
	require.Eventually(t, func() bool { return !slices.Contains(tc.c.Workers(), lost.id) }, 10*time.Second, time.Millisecond)
	// Not lost under a new id (it did not pulse under its old one): a
	// worker that claims the task.
	stranger := tc.worker(t)
	stranger.on(func(m *pulsepb.ControlMsg, _ []byte) (*pulsepb.WorkerResponse, []byte) {
		return &pulsepb.WorkerResponse{TaskId: id}, nil
	})
	require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, stranger.pulse(pulsepb.PulseType_PULSE_OK, id).Error)
	assert.Equal(t, pulsepb.ControlType_CTRL_GET_STATUS, stranger.received().GetType())
	assert.Equal(t, pulsepb.ControlType_CTRL_RESTART, stranger.received().GetType())
	assert.Zero(t, tc.logs.FilterMessage("task taken back by its worker, registered again: it is not given again").Len())
}

// drip plays a peer that holds a connection by sending a byte now and
// then: it writes first at once, then a byte every gap (well within the
// other side's Timeout for each read), until the other side closes the
// connection; the channel returned is closed then. The gap between bytes
// is what the test is about, not a wait for something to happen.
func drip(t *testing.T, conn net.Conn, first []byte, gap time.Duration) <-chan struct{} {
	closed := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); conn.Close(); wg.Wait() })
	wg.Go(func() {
		defer close(closed)
		// The other side writes nothing: a read ends when it closes.
		conn.Read(make([]byte, 1))
	})
	wg.Go(func() {
		if _, err := conn.Write(first); err != nil {
			return
		}
		tick := time.NewTicker(gap)
		defer tick.Stop()
		for {
			select {
			case <-closed:
				return
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}
	})
	return closed
}

// A worker that answers FETCH with the header of a result at once, then
// its bytes one every 25 ms, each well within the controller's Timeout
// (500 ms), is cut once the whole exchange has taken 6 × Timeout, and
// removed; main.sock serves on.
func TestControllerCutsADrippingWorker(t *testing.T) {
	tc := startController(t, Codec{}, func(c *Controller) { c.Timeout = 500 * time.Millisecond })
	cut := make(chan (<-chan struct{}), 1)
	w := tc.workerTakingOver(t, func(m *pulsepb.ControlMsg, conn net.Conn) bool {
		if m.GetType() != pulsepb.ControlType_CTRL_FETCH {
			return false
		}
		head, err := tc.c.Codec.AppendMessage(nil, &pulsepb.WorkerResponse{TaskId: 1, ExtraSize: 1000})
		require.NoError(t, err)
		cut <- drip(t, conn, head, 25*time.Millisecond)
		return true
	})
	tc.submit(t, "x")
	require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_OK, 0).Error)
	require.Equal(t, pulsepb.ControlType_CTRL_SET_TASK, w.received().GetType())
	start := time.Now()
	require.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_FETCH_ME, 1).Error)
	select {
	case closed := <-cut:
		select {
		case <-closed:
		case <-time.After(waitLong):
			t.Fatal("the controller holds a dripping connection")
		}
	case <-time.After(waitLong):
		t.Fatal("no FETCH")
	}
	assert.GreaterOrEqual(t, time.Since(start), 3*time.Second, "cut before 6 × Timeout")
	tc.logged(t, "worker removed; its task waits for it to register again, then goes to another", 1)
	removed := tc.logs.FilterMessage("worker removed; its task waits for it to register again, then goes to another").All()[0]
	assert.Contains(t, removed.ContextMap()["why"], "FETCH failed: pulse: the peer is too slow: the exchange took longer than its deadline (3s)")
	assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID, w.pulse(pulsepb.PulseType_PULSE_OK, 1).Error, "main.sock serves on")
}

// A peer that connects to main.sock and says nothing does not delay the
// controller's end (it has a minute's Timeout here): its connection is
// closed as Serve's context ends, and that is not logged as the peer's
// fault.
func TestControllerStopsDespiteASilentPeer(t *testing.T) {
	tc := startController(t, Codec{}, func(c *Controller) { c.Timeout = time.Minute })
	conn, err := net.Dial("unix", filepath.Join(tc.c.Dir, "main.sock"))
	require.NoError(t, err)
	defer conn.Close()
	require.Eventually(t, func() bool { return tc.c.conns.Load() == 1 }, 10*time.Second, time.Millisecond, "the connection is not served")
	stopped := make(chan error, 1)
	go func() { stopped <- tc.stop() }()
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(waitLong):
		t.Fatal("Serve waits for a silent peer")
	}
	conn.SetReadDeadline(time.Now().Add(waitLong))
	_, err = conn.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the silent peer's connection is closed")
	assert.Zero(t, tc.logs.FilterMessageSnippet("no whole pulse").Len())
}

// A peer that sends a pulse a byte now and then is cut once the
// controller's Timeout has passed since it connected, whatever the gaps:
// logged at most once a second, and only that connection closes.
func TestControllerCutsADrippingPulse(t *testing.T) {
	tc := startController(t, Codec{}, func(c *Controller) { c.Timeout = 500 * time.Millisecond })
	var cuts []<-chan struct{}
	for range 3 {
		conn, err := net.Dial("unix", filepath.Join(tc.c.Dir, "main.sock"))
		require.NoError(t, err)
		// A length of 1000 bytes, then the bytes.
		cuts = append(cuts, drip(t, conn, binary.LittleEndian.AppendUint64(nil, 1000), 25*time.Millisecond))
	}
	w := tc.worker(t) // main.sock serves others meanwhile
	for _, closed := range cuts {
		select {
		case <-closed:
		case <-time.After(waitLong):
			t.Fatal("the controller holds a dripping pulse")
		}
	}
	msg := "connection closed: no whole pulse within the controller's Timeout (a peer silent, or sending a byte now and then; at most one such line a second)"
	tc.logged(t, msg, 1)
	// The cuts come together: fewer lines than cuts.
	assert.Less(t, tc.logs.FilterMessage(msg).Len(), len(cuts), "logged at most once a second")
	assert.Equal(t, pulsepb.ControllerError_CTRL_ERR_OK, w.pulse(pulsepb.PulseType_PULSE_OK, 0).Error)
}

// At a clean stop the workers are not removed as if they had failed: they
// are forgotten (a debug line each, as they are told nothing and run on),
// and one line says the controller stopped and how many it left.
func TestControllerStopsWithoutBlamingItsWorkers(t *testing.T) {
	tc := startController(t, Codec{})
	tc.worker(t)
	tc.worker(t)
	require.ErrorIs(t, tc.stop(), context.Canceled)
	assert.Zero(t, tc.logs.FilterMessageSnippet("worker removed").Len(), "a worker is blamed for the stop")
	forgotten := tc.logs.FilterMessage("worker forgotten as the controller stops").All()
	require.Len(t, forgotten, 2)
	assert.Equal(t, zap.DebugLevel, forgotten[0].Level)
	stopped := tc.logs.FilterMessage("stopped serving; the workers still running register again with the next controller on this directory").All()
	require.Len(t, stopped, 1)
	assert.Equal(t, zap.InfoLevel, stopped[0].Level)
	assert.Equal(t, int64(2), stopped[0].ContextMap()["workers"])
}
