package workerserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/laborotest"
	"github.com/stretchr/testify/require"
)

// The Master, with Workers, keeps laboro's Runner contract: a real Master
// (its table in a bbolt file) served over loopback HTTP, and two Workers
// in this process that run real processes and talk to it over HTTP.
func TestRunnerConformance(t *testing.T) {
	scripts := t.TempDir()
	var n atomic.Int64
	laborotest.Runner(t, laborotest.Harness{
		Start: startSystem,
		Job: func(id, script string) laboro.Job {
			file := filepath.Join(scripts, fmt.Sprintf("%s-%d.sh", id, n.Add(1)))
			if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
				panic(err)
			}
			name, _ := json.Marshal(file)
			return NewJob(id, "sh", map[string]json.RawMessage{"file": name})
		},
	})
}

// shCode is the worker code of the conformance jobs: it runs the script
// file named by the params' "file".
const shCode = `#!/bin/sh
file=$(sed -n 's/.*"file":"\([^"]*\)".*/\1/p')
exec /bin/sh "$file"
`

// system is a Master and its Workers.
type system struct {
	t     *testing.T
	m     *Master
	srv   *httptest.Server
	codes string

	mu      sync.Mutex
	workers []*testWorker
	started int
}

// testWorker is a Worker running in this process, whose HTTP client can
// be cut as a crash would.
type testWorker struct {
	w      *Worker
	cut    *cutTransport
	cancel context.CancelFunc
	done   chan struct{}
}

// cutTransport fails every request once cut.
type cutTransport struct {
	base *http.Transport
	cut  atomic.Bool
}

var errCut = errors.New("connection cut")

func (c *cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.base.RoundTrip(r)
}

func startSystem(t *testing.T) laborotest.System {
	servers := map[string]string{}
	for i := 1; i <= 9; i++ {
		servers[fmt.Sprint("w", i)] = fmt.Sprint("pw", i)
	}
	m := &Master{Servers: servers, OutputDir: t.TempDir(), Lease: 2 * time.Second}
	require.NoError(t, m.Open(filepath.Join(t.TempDir(), "master.db")))
	s := &system{t: t, m: m, srv: httptest.NewServer(m.Handler()), codes: t.TempDir()}
	require.NoError(t, os.WriteFile(filepath.Join(s.codes, "sh"), []byte(shCode), 0o755))
	s.startWorker()
	s.startWorker()
	return laborotest.System{Runner: m, Stop: s.stop, LoseWorker: s.loseWorker}
}

// startWorker starts a Worker under a serverId not used before.
func (s *system) startWorker() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started++
	id := fmt.Sprint("w", s.started)
	cut := &cutTransport{base: http.DefaultTransport.(*http.Transport).Clone()}
	tw := &testWorker{
		w: &Worker{URL: s.srv.URL, ServerID: id, Password: s.m.Servers[id], CodeDir: s.codes, CacheDir: s.t.TempDir(),
			Concurrency: 4, Ping: 20 * time.Millisecond, Progress: 100 * time.Millisecond, Reconnect: 50 * time.Millisecond,
			Client: &http.Client{Transport: cut, Timeout: 10 * time.Second}},
		cut:  cut,
		done: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	tw.cancel = cancel
	go func() {
		defer close(tw.done)
		tw.w.Run(ctx)
	}()
	s.workers = append(s.workers, tw)
}

// end stops a Worker and waits for it.
func (tw *testWorker) end() {
	tw.cancel()
	<-tw.done
	tw.cut.base.CloseIdleConnections()
}

// busy reports whether the Worker runs a job.
func (tw *testWorker) busy() bool {
	tw.w.mu.Lock()
	defer tw.w.mu.Unlock()
	return len(tw.w.running) > 0
}

// loseWorker ends the Worker that runs a job as a crash would: its
// connection cut first, so that the master hears nothing more of it (no
// status of its jobs, no Stopping or Offline), then its processes killed;
// and starts another Worker, under a new serverId.
func (s *system) loseWorker() {
	s.mu.Lock()
	var lost *testWorker
	for i, tw := range s.workers {
		if tw.busy() {
			lost = tw
			s.workers = append(s.workers[:i:i], s.workers[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	require.NotNil(s.t, lost, "no worker runs a job")
	lost.cut.cut.Store(true)
	lost.cut.base.CloseIdleConnections()
	lost.end()
	s.startWorker()
}

func (s *system) stop() {
	s.mu.Lock()
	workers := s.workers
	s.workers = nil
	s.mu.Unlock()
	for _, tw := range workers {
		tw.end()
	}
	s.srv.Close()
	require.NoError(s.t, s.m.Close())
}
