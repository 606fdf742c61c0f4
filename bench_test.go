package laboro_test

// Benchmarks of the core. BENCHMARKS.md gives the commands, the machine
// and the figures, and explains the design of each benchmark.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/console"
	"github.com/laboro-go/laboro/metrics"
)

// benchNop is the job of the overhead benchmarks. It is a package-level
// function, so a Job or a closure referring to it costs no allocation.
func benchNop(context.Context) error { return nil }

// benchTicket is what the baselines deliver per job: the counterpart of a
// laboro.Handle, a result and a channel closed when it is ready.
type benchTicket struct {
	f    func(context.Context) error
	done chan struct{}
	err  error
}

func newBenchTicket() *benchTicket {
	return &benchTicket{f: benchNop, done: make(chan struct{})}
}

// benchCollect is the consumer of the baselines: one goroutine that waits
// for each ticket in submission order, or for ctx to end, as the laboro
// consumer does with Handle.Wait. It counts the failed jobs.
func benchCollect(ctx context.Context, tickets <-chan *benchTicket, failed *atomic.Int64) {
	for t := range tickets {
		select {
		case <-t.done:
			if t.err != nil {
				failed.Add(1)
			}
		case <-ctx.Done():
			failed.Add(1)
		}
	}
}

// BenchmarkOverhead measures what the Executor costs per job: b.N no-op Go
// function jobs, each result delivered to one consumer goroutine, against
// two hand-written baselines doing the same work. One op is one job.
func BenchmarkOverhead(b *testing.B) {
	impls := []struct {
		name string
		run  func(b *testing.B, c int)
	}{
		{"laboro", benchOverheadLaboro},
		{"laboro+observer", benchOverheadObserver},
		{"laboro+console", benchOverheadConsole},
		{"floor", benchOverheadFloor},
		{"semaphore", benchOverheadSemaphore},
	}
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			for _, c := range []int{1, 2, 8} {
				b.Run("c="+strconv.Itoa(c), func(b *testing.B) { impl.run(b, c) })
			}
		})
	}
}

// benchOverheadLaboro: this goroutine submits; one collector goroutine
// receives the Handles in order through a buffered channel and waits for
// each result with Handle.Wait, as a program that wants every result would.
func benchOverheadLaboro(b *testing.B, c int) { benchOverheadWith(b, c) }

// benchOverheadObserver: as benchOverheadLaboro, with an observer that
// does nothing: what WithObserver's events cost before anyone reads them.
func benchOverheadObserver(b *testing.B, c int) {
	benchOverheadWith(b, c, laboro.WithObserver(func(laboro.Event) {}))
}

// benchOverheadWith runs benchOverheadLaboro's work on an Executor with
// opts besides its pool, concurrency and buffer.
func benchOverheadWith(b *testing.B, c int, opts ...laboro.Option) {
	b.ReportAllocs()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ex, err := laboro.New(append([]laboro.Option{laboro.WithPoolSize(c), laboro.WithConcurrency(c),
		laboro.WithBufferSize(1024)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Close()

	submitAndCollect(b, ctx, ex, laboro.Job{Func: benchNop})
}

// benchOverheadConsole: as benchOverheadLaboro, with the web console and
// the Prometheus collector attached (what -http adds), a browser following
// the live updates and a scraper reading the metrics ten times a second:
// what watching the Executor costs its jobs.
func benchOverheadConsole(b *testing.B, c int) {
	b.ReportAllocs()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ex, err := laboro.New(laboro.WithPoolSize(c), laboro.WithConcurrency(c), laboro.WithBufferSize(1024),
		laboro.WithHistory(console.History))
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Close()
	con := console.New(console.Options{})
	con.Attach(ex)
	col := metrics.New()
	col.Attach(ex)
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	srv := httptest.NewServer(con)
	defer srv.Close()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	browsing := make(chan struct{})
	go func() { // a browser that reads every update it is sent
		defer close(browsing)
		io.Copy(io.Discard, res.Body)
	}()
	scraping := make(chan struct{})
	go func() { // a Prometheus server scraping ten times a second
		defer close(scraping)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := reg.Gather(); err != nil {
					panic(err)
				}
			}
		}
	}()
	defer func() { cancel(); res.Body.Close(); <-browsing; <-scraping }()

	submitAndCollect(b, ctx, ex, laboro.Job{Func: benchNop})
}

// benchOverheadFloor: a fixed set of c goroutines reading tickets from a
// buffered channel; the least any executor of this shape can cost.
func benchOverheadFloor(b *testing.B, c int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	jobs := make(chan *benchTicket, 1024)
	var workers sync.WaitGroup
	for range c {
		workers.Go(func() {
			for t := range jobs {
				t.err = t.f(ctx)
				close(t.done)
			}
		})
	}
	benchTickets(b, ctx, func(t *benchTicket) error {
		jobs <- t
		return nil
	})
	close(jobs)
	workers.Wait()
}

// benchOverheadSemaphore: one goroutine per job, started once a weighted
// semaphore of c grants a place.
func benchOverheadSemaphore(b *testing.B, c int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sem := semaphore.NewWeighted(int64(c))
	benchTickets(b, ctx, func(t *benchTicket) error {
		if err := sem.Acquire(ctx, 1); err != nil {
			return err
		}
		go func() {
			t.err = t.f(ctx)
			close(t.done)
			sem.Release(1)
		}()
		return nil
	})
	// Every goroutine released its place once all places are back.
	if err := sem.Acquire(ctx, int64(c)); err != nil {
		b.Fatal(err)
	}
}

// benchTickets is the part the baselines share: b.N tickets, each handed
// to start, which has it run, and then, through a channel buffered to
// 1024, to one collector goroutine that waits for each in order.
func benchTickets(b *testing.B, ctx context.Context, start func(*benchTicket) error) {
	b.ReportAllocs()
	tickets := make(chan *benchTicket, 1024)
	var failed atomic.Int64
	collected := make(chan struct{})
	b.ResetTimer()
	go func() {
		defer close(collected)
		benchCollect(ctx, tickets, &failed)
	}()
	var startErr error
	for range b.N {
		t := newBenchTicket()
		if startErr = start(t); startErr != nil {
			break
		}
		tickets <- t
	}
	close(tickets)
	<-collected
	b.StopTimer()
	if startErr != nil {
		b.Fatal(startErr)
	}
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d jobs failed", n)
	}
}

// benchTrue is the process of BenchmarkProcess.
const benchTrue = "/bin/true"

// BenchmarkProcess measures process jobs with their standard output
// captured to a file: b.N runs of /bin/true through laboro, against the
// same command run with os/exec and the same redirection, c at a time.
// One op is one job.
func BenchmarkProcess(b *testing.B) {
	if _, err := os.Stat(benchTrue); err != nil {
		b.Skipf("%s: %v", benchTrue, err)
	}
	impls := []struct {
		name string
		run  func(b *testing.B, c int)
	}{
		{"laboro", func(b *testing.B, c int) { benchProcessLaboro(b, c, nil) }},
		{"laboro-stderr-discard", func(b *testing.B, c int) {
			benchProcessLaboro(b, c, &laboro.ProcessRunner{Stderr: laboro.StderrDiscard})
		}},
		{"runner", benchProcessRunner},
		{"os-exec", benchProcessExec},
	}
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			for _, c := range []int{1, 2, 4} {
				b.Run("c="+strconv.Itoa(c), func(b *testing.B) { impl.run(b, c) })
			}
		})
	}
}

// benchProcessLaboro submits from this goroutine; one collector goroutine
// waits for each Handle in order, reads the result and closes its Output,
// which removes the file. runner nil means the Executor's default runner.
func benchProcessLaboro(b *testing.B, c int, runner *laboro.ProcessRunner) {
	benchProcessJobs(b, c, runner, laboro.Job{Args: []string{benchTrue}})
}

// benchProcessJobs is benchProcessLaboro of job.
func benchProcessJobs(b *testing.B, c int, runner *laboro.ProcessRunner, job laboro.Job) {
	b.ReportAllocs()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := b.TempDir()
	opts := []laboro.Option{laboro.WithPoolSize(c), laboro.WithConcurrency(c), laboro.WithBufferSize(1024)}
	if runner != nil {
		runner.Dir = dir
		opts = append(opts, laboro.WithRunner(runner))
	} else {
		opts = append(opts, laboro.WithOutputDir(dir))
	}
	ex, err := laboro.New(opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Close()

	submitAndCollect(b, ctx, ex, job)
}

// BenchmarkBareName runs `true` named as commands usually are, without
// its directory ("grep …"), so that its program is looked for in $PATH:
// by laboro (which keeps what it found for a second), and by os/exec for
// every process, c=2 at a time.
func BenchmarkBareName(b *testing.B) {
	name := filepath.Base(benchTrue)
	b.Run("laboro/c=2", func(b *testing.B) { benchProcessJobs(b, 2, nil, laboro.Job{Command: name}) })
	b.Run("os-exec/c=2", func(b *testing.B) {
		benchProcessLoop(b, 2, func(ctx context.Context, dir string) error { return benchExecName(ctx, dir, name) })
	})
}

// submitAndCollect submits job b.N times from this goroutine and hands each
// Handle, through a channel buffered like the Executor, to one collector
// goroutine that waits for the results in order, checks them and closes
// their outputs, as a program that wants every result would. Then it shuts
// the Executor down.
func submitAndCollect(b *testing.B, ctx context.Context, ex *laboro.Executor, job laboro.Job) {
	handles := make(chan *laboro.Handle, 1024)
	var failed atomic.Int64
	var firstErr atomic.Pointer[error]
	collected := make(chan struct{})
	b.ResetTimer()
	go func() {
		defer close(collected)
		for h := range handles {
			res, err := h.Wait(ctx)
			if err == nil {
				err = res.Err
			}
			if err == nil && res.Status != laboro.StatusSucceeded {
				err = errors.New(res.Status.String())
			}
			if cerr := res.Output.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				failed.Add(1)
				first := err // a copy, so that err itself stays on the stack
				firstErr.CompareAndSwap(nil, &first)
			}
		}
	}()
	var submitErr error
	for range b.N {
		h, err := ex.Submit(ctx, job)
		if err != nil {
			submitErr = err
			break
		}
		handles <- h
	}
	close(handles)
	<-collected
	b.StopTimer()
	if submitErr != nil {
		b.Fatal(submitErr)
	}
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d jobs failed, the first with: %v", n, *firstErr.Load())
	}
	if err := ex.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
}

// benchProcessExec runs the command with os/exec from c goroutines, each
// job's standard output going to a file of its own that is then removed.
func benchProcessExec(b *testing.B, c int) {
	benchProcessLoop(b, c, benchExecOnce)
}

// benchProcessRunner calls a ProcessRunner directly from c goroutines, as
// benchProcessExec calls os/exec: the runner's cost without the Executor's.
func benchProcessRunner(b *testing.B, c int) {
	benchProcessLoop(b, c, func(ctx context.Context, dir string) error {
		r := laboro.ProcessRunner{Dir: dir}
		res := r.Run(ctx, laboro.Job{Args: []string{benchTrue}})
		if err := res.Output.Close(); err != nil {
			return err
		}
		return res.Err
	})
}

// benchProcessLoop runs once b.N times from c goroutines.
func benchProcessLoop(b *testing.B, c int, once func(ctx context.Context, dir string) error) {
	b.ReportAllocs()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := b.TempDir()
	var next atomic.Int64
	var workers sync.WaitGroup
	errs := make(chan error, c)
	b.ResetTimer()
	for range c {
		workers.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := once(ctx, dir); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	workers.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func benchExecOnce(ctx context.Context, dir string) error { return benchExecName(ctx, dir, benchTrue) }

// benchExecName is benchExecOnce of the program name.
func benchExecName(ctx context.Context, dir, name string) error {
	f, err := os.CreateTemp(dir, "*.output")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, name)
	cmd.Stdout = f
	err = cmd.Run()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(f.Name()); err == nil {
		err = rerr
	}
	return err
}

// BenchmarkOutputFile measures the output file alone: creating it in the
// output directory, closing it and removing it, as each process job does.
func BenchmarkOutputFile(b *testing.B) {
	b.ReportAllocs()
	dir := b.TempDir()
	for b.Loop() {
		f, err := os.CreateTemp(dir, "*.output")
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.Remove(f.Name()); err != nil {
			b.Fatal(err)
		}
	}
}

// benchQueued is how many jobs BenchmarkQueuedMemory queues.
const benchQueued = 100_000

// BenchmarkQueuedMemory measures the heap that queued jobs hold: 100,000
// command jobs submitted to a paused Executor. Each job's command text is
// made inside the measured window, as a program reading a job list would,
// so B/queued-job includes it; cmd-bytes/job says how much of it that is.
func BenchmarkQueuedMemory(b *testing.B) {
	b.ReportAllocs()
	var perJob, cmdBytes float64
	for range b.N {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		ex, err := laboro.New(laboro.WithConcurrency(0), laboro.WithBufferSize(benchQueued),
			laboro.WithOutputDir(b.TempDir()))
		if err != nil {
			cancel()
			b.Fatal(err)
		}
		handles := make([]*laboro.Handle, 0, benchQueued) // outside the window
		before := benchHeapAlloc()
		b.StartTimer()
		var text int
		for i := range benchQueued {
			cmd := fmt.Sprintf("/bin/echo job %06d", i)
			text += len(cmd)
			h, err := ex.Submit(ctx, laboro.Job{Command: cmd})
			if err != nil {
				b.Fatal(err)
			}
			handles = append(handles, h)
		}
		b.StopTimer()
		after := benchHeapAlloc()
		if q := ex.Stats().Queued; q != benchQueued {
			b.Fatalf("%d jobs queued, want %d", q, benchQueued)
		}
		perJob += float64(int64(after)-int64(before)) / benchQueued
		cmdBytes += float64(text) / benchQueued
		if err := ex.Close(); err != nil {
			b.Fatal(err)
		}
		cancel()
		runtime.KeepAlive(handles)
		b.StartTimer()
	}
	b.ReportMetric(perJob/float64(b.N), "B/queued-job")
	b.ReportMetric(cmdBytes/float64(b.N), "cmd-bytes/job")
}

// benchHeapAlloc returns the live heap after a full collection.
func benchHeapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// benchBigOutput is how much BenchmarkLargeOutputRSS's job prints.
const benchBigOutput = 1 << 30

// BenchmarkLargeOutputRSS measures how much this process's resident set
// grows while a process job prints 1 GiB that is then streamed from its
// Output to io.Discard. It reports the growth of the peak (VmHWM, reset
// through /proc/self/clear_refs) when the kernel lets us reset it, and
// always the growth seen by sampling VmRSS every 5 ms.
func BenchmarkLargeOutputRSS(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("BenchmarkLargeOutputRSS reads /proc/self/status: Linux only")
	}
	if _, err := exec.LookPath("head"); err != nil {
		b.Skip("BenchmarkLargeOutputRSS needs head(1):", err)
	}
	dir := b.TempDir()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		b.Fatal(err)
	}
	if free := uint64(fs.Bavail) * uint64(fs.Bsize); free < benchBigOutput+64<<20 {
		b.Skipf("BenchmarkLargeOutputRSS needs 1 GiB free in %s; %d MiB are", dir, free>>20)
	}
	b.ReportAllocs()
	var hwmGrowth, sampledGrowth float64
	hwmOK := true
	for range b.N {
		hwm, sampled, ok := benchBigOutputOnce(b, dir)
		hwmGrowth += hwm
		sampledGrowth += sampled
		hwmOK = hwmOK && ok
	}
	if hwmOK {
		b.ReportMetric(hwmGrowth/float64(b.N), "MiB-peak-RSS-growth")
	} else {
		b.Log("cannot reset VmHWM through /proc/self/clear_refs; reporting sampled VmRSS only")
	}
	b.ReportMetric(sampledGrowth/float64(b.N), "MiB-sampled-RSS-growth")
}

// benchBigOutputOnce runs the 1 GiB job once and returns the growth of
// VmHWM since it was reset (valid when ok) and of the highest sampled VmRSS
// over VmRSS at the start, both in MiB.
func benchBigOutputOnce(b *testing.B, dir string) (hwm, sampled float64, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ex, err := laboro.New(laboro.WithPoolSize(1), laboro.WithConcurrency(1), laboro.WithOutputDir(dir))
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Close()

	runtime.GC()
	ok = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	// The peak as reset, and the resident set now: the kernel updates
	// them at slightly different moments, so each growth has its own base.
	hwmBase, err := benchProcStatus("VmHWM")
	if err != nil {
		b.Fatal(err)
	}
	base, err := benchProcStatus("VmRSS")
	if err != nil {
		b.Fatal(err)
	}
	var peak atomic.Uint64
	peak.Store(base)
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if v, err := benchProcStatus("VmRSS"); err == nil && v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	})

	h, err := ex.Submit(ctx, laboro.Job{Args: []string{"head", "-c", strconv.Itoa(benchBigOutput), "/dev/zero"}})
	if err != nil {
		b.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err == nil {
		err = res.Err
	}
	var n int64
	if err == nil {
		n, err = res.Output.WriteTo(io.Discard)
		if cerr := res.Output.Close(); err == nil {
			err = cerr
		}
	}
	close(stop)
	sampler.Wait()
	if err != nil {
		b.Fatal(err)
	}
	high, err := benchProcStatus("VmHWM")
	if err != nil {
		b.Fatal(err)
	}
	if n != benchBigOutput {
		b.Fatalf("streamed %d bytes, want %d", n, benchBigOutput)
	}
	const mib = 1 << 20
	return float64(int64(high)-int64(hwmBase)) / mib, float64(int64(peak.Load())-int64(base)) / mib, ok
}

// benchProcStatus returns a size field of /proc/self/status, in bytes.
func benchProcStatus(field string) (uint64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, value, found := bytes.Cut(sc.Bytes(), []byte(":"))
		if !found || string(name) != field {
			continue
		}
		kb, err := strconv.ParseUint(string(bytes.TrimSuffix(bytes.TrimSpace(value), []byte(" kB"))), 10, 64)
		return kb << 10, err
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}
