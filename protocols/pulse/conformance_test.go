package pulse

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/laborotest"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// The Controller, with two real Workers in this process over real Unix
// sockets, keeps laboro.Runner's contract. A task is a /bin/sh script,
// run by each worker's command, /bin/sh, from its standard input. A task
// that fails (TASK_FAILED) is given to a worker Attempts times before its
// job fails; it still ends once.
func TestControllerConformance(t *testing.T) {
	laborotest.Runner(t, laborotest.Harness{
		Start: startSystem,
		Job: func(id, script string) laboro.Job {
			job := NewTask([]byte(script))
			job.ID = id
			return job
		},
		Slots: 2,
	})
}

// system is a Controller and its Workers, for laborotest.
type system struct {
	t   *testing.T
	c   *Controller
	log *zap.Logger
	wg  sync.WaitGroup

	mu      sync.Mutex
	workers map[*Worker]context.CancelFunc
}

func startSystem(t *testing.T) laborotest.System {
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	s := &system{t: t, log: log, workers: map[*Worker]context.CancelFunc{}}
	// A lost worker's task waits a short Grace for it: the lost workers
	// here never come back.
	s.c = &Controller{Dir: shortDir(t), OutputDir: t.TempDir(), Timeout: 5 * time.Second, Grace: 100 * time.Millisecond,
		Logger: log.Named("controller")}
	s.c.init() // before the test looks at its workers
	ctx, cancel := context.WithCancel(context.Background())
	s.wg.Go(func() { s.c.Serve(ctx) })
	for range 2 {
		s.startWorker()
	}
	stop := func() {
		s.mu.Lock()
		for _, stop := range s.workers {
			stop()
		}
		s.mu.Unlock()
		cancel()
		s.wg.Wait()
	}
	// Both workers are ready before the checks begin.
	require.Eventually(t, func() bool {
		s.c.mu.Lock()
		defer s.c.mu.Unlock()
		ready := 0
		for _, w := range s.c.workers {
			if w.ready {
				ready++
			}
		}
		return ready == 2
	}, 30*time.Second, time.Millisecond, "the workers did not register")
	return laborotest.System{Runner: s.c, Stop: stop, LoseWorker: s.loseWorker}
}

// startWorker starts a Worker that ends, when told, as a crash would.
func (s *system) startWorker() {
	w := &Worker{Dir: s.c.Dir, Command: []string{"/bin/sh"}, NextPulse: 3 * time.Second, Timeout: 5 * time.Second,
		Retry: 50 * time.Millisecond, OutputDir: s.t.TempDir(), crash: true}
	w.Logger = s.log.Named("worker")
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	s.mu.Lock()
	s.workers[w] = func() { cancel(); <-ended }
	s.mu.Unlock()
	s.wg.Go(func() {
		defer close(ended)
		w.Run(ctx)
	})
}

// loseWorker ends the worker that runs a task as a crash would: its task
// is killed, its socket closed, and it sends no SHUTDOWN; the controller
// learns it only when its next pulse does not come. Another worker takes
// its place.
func (s *system) loseWorker() {
	s.c.mu.Lock()
	var busy uint64
	for id, w := range s.c.workers {
		if w.task != nil {
			busy = id
		}
	}
	s.c.mu.Unlock()
	require.NotZero(s.t, busy, "no worker runs a task")
	s.mu.Lock()
	var stop context.CancelFunc
	for w, f := range s.workers {
		if w.ID() == busy {
			stop = f
			delete(s.workers, w)
		}
	}
	s.mu.Unlock()
	require.NotNil(s.t, stop, "no worker %d", busy)
	stop()
	s.startWorker()
}
