package laborotest_test

import (
	"testing"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/laborotest"
)

// A custom Queue is checked in its package's tests; here, the default FIFO.
func ExampleQueue() {
	_ = func(t *testing.T) { // func TestMyQueue(t *testing.T)
		laborotest.Queue(t, func() laboro.Queue { return new(laboro.FIFO) })
	}
}

// A Runner is checked with a harness that starts it and makes its jobs;
// here, the process runner, whose jobs are scripts. A remote Runner's
// harness starts a manager and its workers, and sets LoseWorker.
func ExampleRunner() {
	_ = func(t *testing.T) { // func TestMyRunner(t *testing.T)
		laborotest.Runner(t, laborotest.Harness{
			Start: func(t *testing.T) laborotest.System {
				return laborotest.System{Runner: &laboro.ProcessRunner{Dir: t.TempDir()}}
			},
			Job: func(id, script string) laboro.Job { return laboro.Job{ID: id, Script: script} },
		})
	}
}
