package runexp

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/laborotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Manager, with real Runners over loopback TCP, keeps the contract of
// a laboro.Runner. runexp cannot tell a runner to stop a job
// (CannotCancel): such a job ends at once on the manager, and its process
// dies when its runner stops.
func TestManagerConformance(t *testing.T) {
	laborotest.Runner(t, laborotest.Harness{
		Start:        startRunexp,
		Job:          func(id, script string) laboro.Job { return NewJob(id, ".sh", script) },
		Slots:        4,
		CannotCancel: true,
	})
}

// runexpSystem is a Manager serving on a loopback port and two Runners of
// two workers each, in this process.
type runexpSystem struct {
	t       *testing.T
	m       *Manager
	addr    string
	stopAll context.Context // ends to stop every runner at once
	runners sync.WaitGroup
	ran     map[string]chan error // each runner's RunDrain's error, by name
}

func startRunexp(t *testing.T) laborotest.System {
	m := &Manager{Dir: t.TempDir(), Timeout: 10 * time.Second, IdleWait: 200 * time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveCtx, stopServing := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- m.Serve(serveCtx, ln) }()
	stopAll, stopRunners := context.WithCancel(context.Background())
	sys := &runexpSystem{t: t, m: m, addr: ln.Addr().String(), stopAll: stopAll, ran: map[string]chan error{}}
	sys.startRunner()
	sys.startRunner()
	return laborotest.System{
		Runner: m,
		Stop: func() {
			stopRunners() // they kill their jobs
			sys.runners.Wait()
			stopServing()
			select {
			case <-served:
			case <-time.After(10 * time.Second):
				t.Error("Serve did not return")
			}
		},
		LoseWorker: sys.loseRunner,
	}
}

// startRunner starts a runner of two workers; RunDrain returns once the
// system stops, or once its connection is lost.
func (sys *runexpSystem) startRunner() {
	r := &Runner{Addr: sys.addr, Name: fmt.Sprintf("r%d", len(sys.ran)+1), Workers: 2,
		HoldWait: 50 * time.Millisecond, Dir: sys.t.TempDir()}
	ran := make(chan error, 1)
	sys.ran[r.Name] = ran
	sys.runners.Go(func() { ran <- r.RunDrain(sys.stopAll, sys.stopAll) })
}

// loseRunner cuts the connection of a runner that has a job, as a failing
// network or a crashed runner would; the runner sees it and kills its
// jobs (it returns only once they are gone, and its job runs until the
// check lets it end), and the manager gives them to the others. A new
// runner takes its place.
func (sys *runexpSystem) loseRunner() {
	m := sys.m
	m.mu.Lock()
	var victim *remote
	for s := range m.runners {
		if s.live() > 0 {
			victim = s
			break
		}
	}
	m.mu.Unlock()
	require.NotNil(sys.t, victim, "no runner has a job")
	assert.NoError(sys.t, victim.c.rw.(net.Conn).Close())
	select {
	case err := <-sys.ran[victim.host]:
		require.Error(sys.t, err)
		require.NotErrorIs(sys.t, err, context.Canceled, "the runner must stop for its lost connection")
	case <-time.After(10 * time.Second):
		sys.t.Fatalf("runner %s did not stop and kill its jobs", victim.host)
	}
	sys.startRunner()
}
