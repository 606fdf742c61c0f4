package jetstream

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// Environment of a test binary started as a worker process.
const (
	envWorkerURL = "LABORO_JS_TEST_WORKER_URL"
	envWorkerDir = "LABORO_JS_TEST_WORKER_DIR"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(envWorkerURL); url != "" {
		os.Exit(workerProcess(url, os.Getenv(envWorkerDir)))
	}
	goleak.VerifyTestMain(m)
}

// workerProcess runs a Worker (AckWait 1 s, 4 jobs at a time) until
// SIGTERM.
func workerProcess(url, dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	w := &Worker{Conn: nc, Config: Config{AckWait: time.Second}, Concurrency: 4, OutputDir: dir}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
