package jetstream

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// Environment of a test binary started as a worker process.
const (
	envWorkerURL = "LABORO_JS_TEST_WORKER_URL"
	envWorkerDir = "LABORO_JS_TEST_WORKER_DIR"
	// envWorkerAckWait, when set, is the worker process's Config.AckWait
	// (0 keeps the consumer's); 1 s otherwise.
	envWorkerAckWait = "LABORO_JS_TEST_WORKER_ACK_WAIT"
	// envWorkerQuiet, when set, has the worker process say it is there
	// once an hour, and what it runs changed at most as often: the service
	// learns of a job it takes only from the heartbeat said as it takes
	// it.
	envWorkerQuiet = "LABORO_JS_TEST_WORKER_QUIET"
	// A test binary started as a manager process runs managerJobs jobs
	// (see managerJob) through an Executor over a Manager, until killed.
	envManagerURL   = "LABORO_JS_TEST_MANAGER_URL"
	envManagerMarks = "LABORO_JS_TEST_MANAGER_MARKS"
	managerJobs     = 500
)

func TestMain(m *testing.M) {
	if url := os.Getenv(envWorkerURL); url != "" {
		os.Exit(workerProcess(url, os.Getenv(envWorkerDir)))
	}
	if url := os.Getenv(envManagerURL); url != "" {
		os.Exit(managerProcess(url, os.Getenv(envManagerMarks)))
	}
	goleak.VerifyTestMain(m)
}

// workerProcess runs a Worker (AckWait 1 s unless envWorkerAckWait says,
// 4 jobs at a time, named by its process id) until SIGTERM.
func workerProcess(url, dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ackWait := time.Second
	if s, ok := os.LookupEnv(envWorkerAckWait); ok {
		var err error
		if ackWait, err = time.ParseDuration(s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	if _, ok := os.LookupEnv(envWorkerQuiet); ok {
		beatEvery, beatPause = time.Hour, time.Hour
	}
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	w := &Worker{Conn: nc, Config: Config{AckWait: ackWait}, Concurrency: 4, OutputDir: dir,
		Name: fmt.Sprintf("process-%d", os.Getpid())}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// managerJob is the i-th job of a manager process: it appends its number to
// marks, so that the test counts how many times each job ran.
func managerJob(i int, marks string) laboro.Job {
	return laboro.Job{ID: fmt.Sprintf("m%d", i), Script: fmt.Sprintf("echo %d >> %s; sleep 0.02; echo %d", i, marks, i)}
}

// managerProcess queues managerJobs jobs in an Executor over a Manager (64
// out at a time) and waits for them.
func managerProcess(url, marks string) int {
	ctx := context.Background()
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	m, err := NewManager(ctx, nc, Config{AckWait: managerAckWait})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer m.Close()
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(64),
		laboro.WithConcurrency(64), laboro.WithBufferSize(managerJobs))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var handles []*laboro.Handle
	for i := range managerJobs {
		h, err := ex.Submit(ctx, managerJob(i, marks))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		handles = append(handles, h)
	}
	for _, h := range handles { // Shutdown would drop the queued jobs
		h.Wait(ctx)
	}
	ex.Shutdown(ctx)
	return 0
}

// managerAckWait is the AckWait of TestManagerProcessKilled, whose workers
// never die.
const managerAckWait = 10 * time.Second
