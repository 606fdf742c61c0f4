package laboro_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if script := os.Getenv(workerJobEnv); script != "" {
		runWorker(script) // never returns: the test kills it
	}
	if dirs := os.Getenv(removeAtExitEnv); dirs != "" {
		holdDirs(dirs) // never returns: the test kills it
	}
	goleak.VerifyTestMain(m,
		// The default pool that package ants starts when it is loaded
		// (BenchmarkPools compares laboro with it).
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"))
}

// testCtx returns a context that ends with the test, or after a minute.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newExecutor returns an Executor that the test shuts down at its end.
func newExecutor(t *testing.T, opts ...laboro.Option) *laboro.Executor {
	t.Helper()
	ex, err := laboro.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ex.Close()) })
	return ex
}

func submit(t *testing.T, ex *laboro.Executor, job laboro.Job) *laboro.Handle {
	t.Helper()
	h, err := ex.Submit(testCtx(t), job)
	require.NoError(t, err)
	return h
}

func wait(t *testing.T, h *laboro.Handle) laboro.Result {
	t.Helper()
	res, err := h.Wait(testCtx(t))
	require.NoError(t, err)
	t.Cleanup(func() { res.Output.Close() })
	return res
}

// output reads a result's output and removes its file.
func output(t *testing.T, res laboro.Result) string {
	t.Helper()
	require.NotNil(t, res.Output, "result has no output: %+v", res)
	b, err := res.Output.ReadAll()
	require.NoError(t, err)
	require.NoError(t, res.Output.Close())
	return string(b)
}

// gate is a set of Go func jobs that block until released, and that record
// how many of them run at once.
type gate struct {
	release chan struct{}
	started chan string

	mu              sync.Mutex
	running, maxRun int
}

func newGate() *gate {
	return &gate{release: make(chan struct{}), started: make(chan string, 1000)}
}

// job returns a job that reports its start, waits for one release (or its
// context), and counts overlaps.
func (g *gate) job(name string) laboro.Job {
	return laboro.Job{Func: func(ctx context.Context) error {
		g.mu.Lock()
		g.running++
		g.maxRun = max(g.maxRun, g.running)
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.running--
			g.mu.Unlock()
		}()
		g.started <- name
		select {
		case <-g.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
}

func (g *gate) max() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxRun
}

func (g *gate) resetMax() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.maxRun = g.running
}

// expectStarts waits for n job starts and returns their names in order.
func (g *gate) expectStarts(t *testing.T, n int) []string {
	t.Helper()
	var names []string
	for range n {
		select {
		case name := <-g.started:
			names = append(names, name)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d jobs started: %v", len(names), n, names)
		}
	}
	return names
}

// expectNoStart checks that no job starts for a short while.
func (g *gate) expectNoStart(t *testing.T) {
	t.Helper()
	select {
	case name := <-g.started:
		t.Fatalf("job %s started, none should have", name)
	case <-time.After(100 * time.Millisecond):
	}
}

// eventually polls cond until it holds or ten seconds pass.
func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond, append([]any{msg}, args...)...)
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }
