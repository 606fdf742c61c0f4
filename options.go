package laboro

import (
	"os"
	"runtime"

	"go.uber.org/zap"
)

// Defaults for the options of New.
const (
	// DefaultBufferSize is the buffer's capacity when WithBufferSize is not given.
	DefaultBufferSize = 1024
	// DefaultConcurrency is the initial concurrency level, as in the
	// original job executor.
	DefaultConcurrency = 1
)

// Option configures an Executor in New.
type Option func(*config)

type config struct {
	bufferSize  int
	poolSize    int
	concurrency int
	runner      Runner
	queue       Queue
	logger      *zap.Logger
	outputDir   string
	observer    func(Event)
	history     int
}

func defaultConfig() config {
	return config{
		bufferSize:  DefaultBufferSize,
		poolSize:    runtime.NumCPU(),
		concurrency: DefaultConcurrency,
	}
}

func (c *config) validate() error {
	switch {
	case c.bufferSize <= 0:
		return configErrorf("buffer size must be > 0, got %d", c.bufferSize)
	case c.poolSize <= 0:
		return configErrorf("worker pool size must be > 0, got %d", c.poolSize)
	case c.concurrency < 0:
		return configErrorf("concurrency must be >= 0, got %d", c.concurrency)
	case c.history < 0 || c.history > MaxHistory:
		return configErrorf("history must be between 0 and %d, got %d", MaxHistory, c.history)
	case c.queue != nil && c.queue.Len() != 0:
		return configErrorf("the queue must start empty, it holds %d jobs", c.queue.Len())
	case c.runner != nil && c.outputDir != "":
		return configErrorf("WithOutputDir applies to the default runner; set the directory on the runner given to WithRunner")
	}
	if c.outputDir != "" {
		fi, err := os.Stat(c.outputDir)
		if err != nil {
			return configErrorf("output directory: %v", err)
		}
		if !fi.IsDir() {
			return configErrorf("output directory %q is not a directory", c.outputDir)
		}
	}
	return nil
}

// WithBufferSize sets how many jobs may wait to run; Submit blocks while
// that many wait. It must be > 0. Default: DefaultBufferSize.
func WithBufferSize(n int) Option { return func(c *config) { c.bufferSize = n } }

// WithPoolSize sets the number of worker goroutines: the most jobs that can
// ever run at once, whatever the concurrency level. It must be > 0.
// Default: runtime.NumCPU().
func WithPoolSize(n int) Option { return func(c *config) { c.poolSize = n } }

// WithConcurrency sets the initial concurrency level (see
// Executor.SetConcurrency). 0 starts paused. Default: 1.
func WithConcurrency(n int) Option { return func(c *config) { c.concurrency = n } }

// WithRunner sets what runs each job. Default: Go functions (Job.Func) run
// in-process, everything else runs as a process through a ProcessRunner
// writing to the output directory.
func WithRunner(r Runner) Option { return func(c *config) { c.runner = r } }

// WithQueue replaces the FIFO ordering of waiting jobs. The queue must be
// empty and must not be used elsewhere.
func WithQueue(q Queue) Option { return func(c *config) { c.queue = q } }

// WithLogger sets the logger. Default: zap.NewNop(). Each job that fails
// or times out is logged once ("job failed"), and each job whose process
// Close killed ("job killed"), at Warn, with its id, command, status, exit status, error
// and the end of its standard error. A script's command is its Payload's
// String when it has one (a protocol's job made from a file: the file),
// else its text, cut at 256 bytes.
func WithLogger(l *zap.Logger) Option { return func(c *config) { c.logger = l } }

// WithOutputDir sets the directory, which must exist, where the default
// runner writes <pid>.output files. Default: a run directory of the
// Executor's own under os.TempDir, removed once the Executor has finished
// (Shutdown or Close) and every Output in it has been closed.
func WithOutputDir(dir string) Option { return func(c *config) { c.outputDir = dir } }

// WithObserver registers fn to follow the Executor: it receives every
// Event, in the order the Executor's state changed, from a single goroutine
// of the Executor's, so it may call the Executor. Events queue up while fn
// runs; a slow fn delays the events, never the jobs. They reach fn in
// batches, a millisecond after the change, or up to 10 ms while the
// Executor is busy (its goroutine then competes less with the jobs): an
// event may come after the Handle's Wait has returned.
func WithObserver(fn func(Event)) Option { return func(c *config) { c.observer = fn } }

// WithHistory has the Executor keep the last n jobs that ended, with their
// results, for Recent: what a console lists as finished. It costs a pointer
// per job and holds n results (their stderr tails included) in memory.
// Default 0: none kept. At most MaxHistory.
func WithHistory(n int) Option { return func(c *config) { c.history = n } }

// MaxHistory bounds WithHistory.
const MaxHistory = 1 << 20
