package main

import (
	"context"
	"io"
	"net"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/laboro-go/laboro/protocols/jobexec"
)

// BenchmarkIssueJob measures jobs per second for /bin/true at concurrency
// 2, with eight submitters in flight: spawned by the core in this process
// (the baseline), sent to the server binary by the package's Client, and
// sent by one jobCommander process each, as a user would.
func BenchmarkIssueJob(b *testing.B) {
	b.Run("core", func(b *testing.B) {
		ex, err := laboro.New(laboro.WithOutputDir(b.TempDir()), laboro.WithPoolSize(2),
			laboro.WithConcurrency(2), laboro.WithBufferSize(1024))
		if err != nil {
			b.Fatal(err)
		}
		defer ex.Close()
		inFlight(b, func() error {
			h, err := ex.Submit(context.Background(), laboro.Job{Args: []string{"/bin/true"}})
			if err != nil {
				return err
			}
			res, err := h.Wait(context.Background())
			if err == nil {
				err = res.Output.Close()
			}
			return err
		})
	})
	b.Run("client", func(b *testing.B) {
		s := benchServer(b)
		c := s.client(b)
		inFlight(b, func() error {
			_, err := c.Do(context.Background(), "issueJob", []string{"/bin/true"}, io.Discard)
			return err
		})
	})
	b.Run("commander", func(b *testing.B) {
		s := benchServer(b)
		inFlight(b, func() error {
			return exec.Command(s.commander, s.host, s.port, "issueJob", "/bin/true").Run()
		})
	})
}

// benchServer starts the server binary with room for every submitter and
// concurrency 2.
// client is a Client of s with the token s made at its start.
func (s *server) client(b *testing.B) *jobexec.Client {
	return &jobexec.Client{Addr: net.JoinHostPort(s.host, s.port), Token: e2e.Token(b, "jobexec")}
}

func benchServer(b *testing.B) *server {
	s := startServer(b, "0", "1024", "2")
	c := s.client(b)
	if _, err := c.Do(context.Background(), "setConcurrency", []string{"2"}, io.Discard); err != nil {
		b.Fatal(err)
	}
	return s
}

// inFlight runs op b.N times from eight goroutines.
func inFlight(b *testing.B, op func() error) {
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRoundTrip measures the latency of poll and setConcurrency with
// 1,000 jobs queued (concurrency 0, so none starts), through the Client
// and through a jobCommander process, and reports p50 and p99.
func BenchmarkRoundTrip(b *testing.B) {
	const queued = 1000
	s := startServer(b, "0", "2000", "1", "-max-conns", "1100") // a commander a queued job
	c := s.client(b)
	ctx := context.Background()
	if _, err := c.Do(ctx, "setConcurrency", []string{"0"}, io.Discard); err != nil {
		b.Fatal(err)
	}
	var submitters sync.WaitGroup
	for range queued {
		submitters.Go(func() { c.Do(ctx, "issueJob", []string{"/bin/true"}, io.Discard) })
	}
	defer func() {
		c.Do(ctx, "exit", nil, io.Discard) // the queued jobs end before execution
		submitters.Wait()
	}()
	var out strings.Builder
	for deadline := time.Now().Add(time.Minute); strings.Count(out.String(), "\n") < queued; {
		if time.Now().After(deadline) {
			b.Fatalf("only %d jobs queued", strings.Count(out.String(), "\n"))
		}
		out.Reset()
		if _, err := c.Do(ctx, "poll", nil, &out); err != nil {
			b.Fatal(err)
		}
	}

	for _, cmd := range [][]string{{"poll"}, {"setConcurrency", "0"}} {
		b.Run(cmd[0]+"/client", func(b *testing.B) {
			latencies(b, func() error {
				_, err := c.Do(ctx, cmd[0], cmd[1:], io.Discard)
				return err
			})
		})
		b.Run(cmd[0]+"/commander", func(b *testing.B) {
			latencies(b, func() error {
				return exec.Command(s.commander, append([]string{s.host, s.port}, cmd...)...).Run()
			})
		})
	}
}

// latencies times op b.N times, one at a time, and reports p50 and p99.
func latencies(b *testing.B, op func() error) {
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)*50/100].Microseconds()), "p50-µs")
	b.ReportMetric(float64(ds[min(len(ds)-1, len(ds)*99/100)].Microseconds()), "p99-µs")
}
