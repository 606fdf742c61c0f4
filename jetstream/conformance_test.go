package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/laborotest"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// harnessAckWait is the AckWait of the systems laborotest checks, short
// so that the job of a lost worker comes back soon.
const harnessAckWait = time.Second

// TestRunnerContract checks the Manager, with an embedded server and an
// in-process Worker, against laboro's Runner contract (laborotest.Runner).
func TestRunnerContract(t *testing.T) {
	laborotest.Runner(t, laborotest.Harness{
		Start: startSystem,
		Job:   func(id, script string) laboro.Job { return laboro.Job{ID: id, Script: script} },
	})
}

// system is an embedded server, a Manager and a Worker, each with a
// connection of its own.
type system struct {
	t      *testing.T
	srv    *Embedded
	cfg    Config
	nc     *nats.Conn // the Manager's
	m      *Manager
	worker *runningWorker
}

// runningWorker is a Worker running on its own connection.
type runningWorker struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

func startSystem(t *testing.T) laborotest.System {
	srv, err := StartEmbedded(t.TempDir(), "127.0.0.1", -1)
	require.NoError(t, err)
	s := &system{t: t, srv: srv,
		cfg: Config{AckWait: harnessAckWait, Dir: t.TempDir(), Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))}}
	s.nc, err = nats.Connect(srv.URL())
	require.NoError(t, err)
	s.m, err = NewManager(testCtx(t, 10*time.Second), s.nc, s.cfg)
	require.NoError(t, err)
	s.worker = s.startWorker()
	return laborotest.System{Runner: s.m, Stop: s.stop, LoseWorker: s.loseWorker}
}

func (s *system) startWorker() *runningWorker {
	nc, err := nats.Connect(s.srv.URL())
	require.NoError(s.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	w := &runningWorker{nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() {
		w.done <- (&Worker{Conn: nc, Config: s.cfg, Concurrency: 4, OutputDir: s.t.TempDir()}).Run(ctx)
	}()
	return w
}

// loseWorker ends the worker as a crash would: its connection goes first,
// so that it acknowledges and publishes nothing more, then its jobs are
// killed. Another one takes its place.
func (s *system) loseWorker() {
	s.worker.nc.Close()
	s.worker.stop(s.t)
	s.worker = s.startWorker()
}

func (w *runningWorker) stop(t *testing.T) {
	w.cancel()
	require.NoError(t, <-w.done)
	w.nc.Close()
}

func (s *system) stop() {
	s.worker.stop(s.t)
	s.m.Close()
	s.nc.Close()
	s.srv.Shutdown()
}
