package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
)

// benchJob is the job of every benchmark: a trivial command, run without a
// shell, the same in the core and through JetStream.
func benchJob(i int) laboro.Job {
	return laboro.Job{ID: fmt.Sprintf("b%d", i), Command: "true"}
}

// benchCore returns an Executor that runs processes itself, n at a time:
// the baseline.
func benchCore(b *testing.B, n, buffer int) *laboro.Executor {
	b.Helper()
	ex, err := laboro.New(laboro.WithOutputDir(b.TempDir()), laboro.WithPoolSize(n),
		laboro.WithConcurrency(n), laboro.WithBufferSize(buffer))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ex.Close() })
	return ex
}

// benchServer starts an embedded server in a temporary directory, which
// wants token if set, and connects to it as its owner, in process (as
// laboro serve does) or over TCP; both are closed at the end of the
// benchmark.
func benchServer(b *testing.B, token string, inProcess bool) (*Embedded, *nats.Conn) {
	b.Helper()
	var opts []EmbeddedOption
	var conn []nats.Option
	if token != "" {
		opts = append(opts, WithToken(token))
		conn = append(conn, Token(token))
	}
	srv, err := StartEmbedded(b.TempDir(), "127.0.0.1", -1, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	if inProcess {
		conn = append(conn, srv.InProcess())
	}
	nc, err := nats.Connect(srv.URL(), conn...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return srv, nc
}

// benchWorkers starts n Workers of Concurrency 1 on srv, each on a
// connection of its own, as workers on other machines have. With token
// set, as laboro worker runs: each proves a worker's token derived from
// it, checks that the jobs are signed with its key (Config.JobKey) and has
// the server prove itself (Config.ProveServer). They stop at the end of
// the benchmark.
func benchWorkers(b *testing.B, srv *Embedded, token string, n int) {
	b.Helper()
	var auth []nats.Option
	if token != "" {
		auth = []nats.Option{Token(RoleToken(token, RoleWorker, ""))}
	}
	key := JobKey(token, "")
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var conns []*nats.Conn
	b.Cleanup(func() {
		stop()
		wg.Wait()
		for _, wc := range conns {
			wc.Close()
		}
	})
	for range n {
		wc, err := nats.Connect(srv.URL(), auth...)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, wc)
		w := &Worker{Conn: wc, Config: Config{JobKey: key, ProveServer: key != nil}, Concurrency: 1, OutputDir: b.TempDir()}
		wg.Go(func() {
			if err := w.Run(ctx); err != nil {
				b.Error(err)
			}
		})
	}
}

// benchJetStream starts an embedded server (benchServer), a Manager given
// to an Executor that runs up to concurrency jobs at once, and the given
// number of Workers (benchWorkers); with token set, as laboro serve and its
// workers run. Everything is stopped at the end of the benchmark (of each
// of its invocations).
func benchJetStream(b *testing.B, concurrency, buffer, workers int, token string) *laboro.Executor {
	b.Helper()
	srv, nc := benchServer(b, token, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := NewManager(ctx, nc, Config{Dir: b.TempDir(), JobKey: JobKey(token, "")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	benchWorkers(b, srv, token, workers)
	return benchExecutor(b, m, concurrency, buffer)
}

// benchExecutor returns an Executor that runs up to concurrency jobs at
// once through m, closed at the end of the benchmark before m is.
func benchExecutor(b *testing.B, m *Manager, concurrency, buffer int) *laboro.Executor {
	b.Helper()
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(concurrency),
		laboro.WithConcurrency(concurrency), laboro.WithBufferSize(buffer))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ex.Close() }) // runs first: before the Manager closes
	return ex
}

// BenchmarkJobs measures trivial jobs per second: through the embedded
// server, a Manager (64 jobs out at a time) and N Workers of one job each,
// and, as the baseline, the same command run by the core at concurrency N.
// One operation is one job; b.N jobs are submitted at once.
func BenchmarkJobs(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("core/workers=%d", n), func(b *testing.B) {
			runJobs(b, benchCore(b, n, max(b.N, 1)))
		})
		b.Run(fmt.Sprintf("jetstream/workers=%d", n), func(b *testing.B) {
			runJobs(b, benchJetStream(b, 64, max(b.N, 1), n, ""))
		})
	}
	// As laboro serve runs: the token proven, the jobs signed.
	b.Run("jetstream-token/workers=4", func(b *testing.B) {
		runJobs(b, benchJetStream(b, 64, max(b.N, 1), 4, "the server's token"))
	})
	// As laboro serve runs its own job slots.
	b.Run("serve/slots=4", func(b *testing.B) {
		runJobs(b, benchServe(b, 64, max(b.N, 1), 4))
	})
	// As laboro serve runs for workers of other machines: its Service
	// hears their heartbeats and keeps the last in a stream.
	b.Run("service-token/workers=4", func(b *testing.B) {
		runJobs(b, benchService(b, 64, 4))
	})
}

// benchServe is benchJetStream as laboro serve runs the jobs itself: the
// Manager and one Worker of the given slots share the process's one
// connection to its embedded server, made in process, and the jobs are
// signed.
func benchServe(b *testing.B, concurrency, buffer, slots int) *laboro.Executor {
	b.Helper()
	const token = "the server's token"
	_, nc := benchServer(b, token, true)
	cfg := Config{Dir: b.TempDir(), JobKey: JobKey(token, "")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := NewManager(ctx, nc, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	w := &Worker{Conn: nc, Config: cfg, Concurrency: slots, OutputDir: b.TempDir()}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	b.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	return benchExecutor(b, m, concurrency, buffer)
}

// benchService is benchJetStream's token setting with the Manager of a
// Service, as laboro serve runs it for workers elsewhere: the Service's
// Executor, up to concurrency jobs out at once, is returned, and the
// Service hears the workers' heartbeats.
func benchService(b *testing.B, concurrency, workers int) *laboro.Executor {
	b.Helper()
	const token = "the server's token"
	srv, nc := benchServer(b, token, true)
	svc := &Service{Conn: nc, Config: Config{Dir: b.TempDir(), JobKey: JobKey(token, ""), ClientKey: ClientKey(token, "")},
		Concurrency: concurrency}
	started := make(chan *laboro.Executor, 1)
	svc.Started = func(ex *laboro.Executor) { started <- ex }
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- svc.Run(ctx) }()
	b.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			b.Error(err)
		}
	})
	var ex *laboro.Executor
	select {
	case ex = <-started:
	case err := <-served:
		b.Fatal("service:", err)
	}
	benchWorkers(b, srv, token, workers)
	return ex
}

// runJobs submits b.N jobs to ex, waits for every result and reports the
// rate.
func runJobs(b *testing.B, ex *laboro.Executor) {
	ctx := context.Background()
	// One job before the timer: for jetstream, the stream and consumers
	// are up and a worker has fetched; the figure is the steady rate.
	if h, err := ex.Submit(ctx, benchJob(-1)); err != nil {
		b.Fatal(err)
	} else if res, err := h.Wait(ctx); err != nil || res.Status != laboro.StatusSucceeded {
		b.Fatalf("warm-up job: %v %v %v", res.Status, err, res.Err)
	} else {
		res.Output.Close()
	}
	handles := make([]*laboro.Handle, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		h, err := ex.Submit(ctx, benchJob(i))
		if err != nil {
			b.Fatal(err)
		}
		handles[i] = h
	}
	for i, h := range handles {
		res, err := h.Wait(ctx)
		if err != nil || res.Status != laboro.StatusSucceeded {
			b.Fatalf("job %d: %v %v %v", i, res.Status, err, res.Err)
		}
		res.Output.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkLatency measures one job at a time, from Submit to the return
// of Wait: through the embedded server, a Manager and one Worker of one
// job, and, as the baseline, in the core at concurrency 1. It reports the
// median and the 99th percentile, and the medians of the two parts of a
// job's time outside its process: from Submit to the process's start
// (Result.Started) and from its end (Result.Ended) to the return of Wait.
func BenchmarkLatency(b *testing.B) {
	b.Run("core", func(b *testing.B) {
		runLatency(b, benchCore(b, 1, 1))
	})
	b.Run("jetstream", func(b *testing.B) {
		runLatency(b, benchJetStream(b, 1, 1, 1, ""))
	})
}

func runLatency(b *testing.B, ex *laboro.Executor) {
	ctx := context.Background()
	took := make([]time.Duration, b.N)
	before := make([]time.Duration, b.N) // Submit to the process's start
	after := make([]time.Duration, b.N)  // the process's end to Wait
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		h, err := ex.Submit(ctx, benchJob(i))
		if err != nil {
			b.Fatal(err)
		}
		res, err := h.Wait(ctx)
		end := time.Now()
		if err != nil || res.Status != laboro.StatusSucceeded {
			b.Fatalf("job %d: %v %v %v", i, res.Status, err, res.Err)
		}
		took[i], before[i], after[i] = end.Sub(start), res.Started.Sub(start), end.Sub(res.Ended)
		res.Output.Close()
	}
	b.StopTimer()
	for _, d := range [][]time.Duration{took, before, after} {
		slices.Sort(d)
	}
	b.ReportMetric(percentile(took, 0.50), "p50-µs")
	b.ReportMetric(percentile(took, 0.99), "p99-µs")
	b.ReportMetric(percentile(before, 0.50), "start-p50-µs")
	b.ReportMetric(percentile(after, 0.50), "end-p50-µs")
}

// percentile returns the q-quantile of sorted durations, in microseconds
// (nearest rank).
func percentile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return float64(sorted[min(max(rank, 1), len(sorted))-1]) / float64(time.Microsecond)
}

// BenchmarkServiceRestart measures how long a Service takes, when it
// starts, to rebuild what it knows from the streams: jobs finished before
// are read back from the SUBMITTED stream and looked up in RESULTS, one by
// one. The batch runs once, outside the timer; each operation is one
// Service started on its streams, until its status counts every job done.
func BenchmarkServiceRestart(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			srv, err := StartEmbedded(b.TempDir(), "127.0.0.1", -1)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(srv.Shutdown)
			nc, err := nats.Connect(srv.URL())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(nc.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cfg := Config{Dir: b.TempDir()}
			serve := func() (stop func()) {
				sctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- (&Service{Conn: nc, Config: cfg}).Run(sctx) }()
				return func() {
					cancel()
					if err := <-done; err != nil {
						b.Error(err)
					}
				}
			}
			wctx, stopWorker := context.WithCancel(ctx)
			wdone := make(chan error, 1)
			go func() { wdone <- (&Worker{Conn: nc, Concurrency: 4, OutputDir: b.TempDir()}).Run(wctx) }()
			jobs := make([]laboro.Job, n)
			for i := range jobs {
				jobs[i] = laboro.Job{Command: "true"}
			}
			cl := &Client{Conn: nc, Config: cfg}
			if _, err := cl.Submit(ctx, "replay", jobs); err != nil {
				b.Fatal(err)
			}
			stop := serve()
			if _, err := cl.Wait(ctx, "replay", n, 100*time.Millisecond, nil); err != nil {
				b.Fatal(err)
			}
			stop()
			stopWorker()
			<-wdone

			b.ResetTimer()
			for range b.N {
				stop := serve()
				if _, err := cl.Wait(ctx, "replay", n, time.Millisecond, nil); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				stop()
				b.StartTimer()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchmarkSignJob is what Config.JobKey adds to a job: its signature,
// made by the Manager and checked by the worker, over a job's subject and
// body as a Manager publishes them.
func BenchmarkSignJob(b *testing.B) {
	key := JobKey("the server's token", "")
	data, err := json.Marshal(toWire(laboro.Job{ID: "batch-12345", Command: "make -C /src/project test TARGET=linux-amd64"}))
	if err != nil {
		b.Fatal(err)
	}
	subject := Config{}.withDefaults().jobsSubject("batch-12345")
	h := nats.Header{}
	h.Set(hdrSigned, jobMAC(key, subject, data))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if !signedBy(key, subject, h, data) {
			b.Fatal("not signed")
		}
	}
}

// BenchmarkHearEnds is a worker hearing of b.N Runs' ends, for jobs it does
// not run, within recentCancels (a batch of b.N waiting jobs cancelled): one
// op is one end heard of and remembered.
func BenchmarkHearEnds(b *testing.B) {
	r := &workerRun{taken: map[string]*taken{}, recent: map[string]time.Time{}}
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("b1-%d", i+1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, id := range ids {
		r.end(id)
	}
}
