package fuq_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/laborotest"
	"github.com/laboro-go/laboro/protocols/fuq"
	"github.com/laboro-go/laboro/protocols/fuq/fuqtest"
	"github.com/stretchr/testify/require"
)

// The Foreman passes laboro's Runner checks, with real workers over
// loopback TCP running real processes: two Workers of two processors, and
// a grace of 200 ms for the tasks of a lost worker.
func TestForemanConformance(t *testing.T) { conformance(t, false) }

// The same over the reference's transport: HTTPS and a websocket.
func TestForemanConformanceWeb(t *testing.T) { conformance(t, true) }

func conformance(t *testing.T, web bool) {
	dir := t.TempDir()
	logDir := filepath.Join(dir, "logs")
	require.NoError(t, os.Mkdir(logDir, 0o755))
	laborotest.Runner(t, laborotest.Harness{
		Start: func(t *testing.T) laborotest.System { return startFuq(t, web) },
		// A fuq job of one task, whose command is the script; fuq runs
		// it as "<script> 1".
		Job: func(id, script string) laboro.Job {
			path := filepath.Join(dir, id+".sh")
			if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
				panic(err)
			}
			job := fuq.NewJob(id, path, 1, dir, logDir)
			job.ID = id
			return job
		},
		Slots: 4,
	})
}

// fuqSystem is a Foreman serving on a loopback port and the Workers
// connected to it, each known by the id the Foreman gave it.
type fuqSystem struct {
	t       *testing.T
	f       *fuq.Foreman
	addr    string
	ctx     context.Context
	mu      sync.Mutex
	workers map[int]context.CancelFunc // by the Foreman's worker id
	lastID  int
	running sync.WaitGroup
	web     *fuq.WebDialer // how workers join, over the reference's transport; nil over TCP
}

func startFuq(t *testing.T, web bool) laborotest.System {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	s := &fuqSystem{
		t: t, f: &fuq.Foreman{Grace: 200 * time.Millisecond, Timeout: 5 * time.Second}, addr: ln.Addr().String(),
		ctx: ctx, workers: map[int]context.CancelFunc{},
	}
	served := make(chan struct{})
	if web {
		pki := fuqtest.NewPKI(t)
		secret := []byte("conformance")
		s.web = &fuq.WebDialer{URL: "https://" + s.addr, TLS: pki.Client, Auth: secret}
		go func() { s.f.ServeWeb(ctx, ln, fuq.WebConfig{Auth: secret, TLS: pki.Server}); close(served) }()
	} else {
		go func() { s.f.Serve(ctx, ln); close(served) }()
	}
	s.startWorker()
	s.startWorker()
	return laborotest.System{
		Runner: s.f,
		Stop: func() {
			cancel()
			<-served
			s.running.Wait()
		},
		LoseWorker: s.loseWorker,
	}
}

// startWorker starts a Worker and waits until the Foreman has it.
func (s *fuqSystem) startWorker() {
	w := &fuq.Worker{Procs: 2, SpoolDir: s.t.TempDir(), Reconnect: 50 * time.Millisecond, Timeout: 5 * time.Second}
	if s.web != nil {
		w.Web = s.web
	} else {
		w.Addr = s.addr
	}
	ctx, cancel := context.WithCancel(s.ctx)
	s.running.Go(func() { w.Run(ctx) })
	// Workers start one at a time and do not reconnect here: the next
	// id the Foreman gives is this one's.
	var id int
	require.Eventually(s.t, func() bool {
		for _, wi := range s.f.Workers() {
			if wi.ID > s.lastID {
				id = wi.ID
				return true
			}
		}
		return false
	}, 20*time.Second, time.Millisecond, "the worker did not connect")
	s.mu.Lock()
	s.workers[id], s.lastID = cancel, id
	s.mu.Unlock()
}

// loseWorker ends the worker that runs a task as a crash would: its
// connection drops and its tasks are killed with it, without an UPDATE.
// (A Worker whose context ends closes its connection and kills its
// tasks.) Another worker takes its place.
func (s *fuqSystem) loseWorker() {
	victim := 0
	for _, wi := range s.f.Workers() {
		if wi.Running > 0 {
			victim = wi.ID
			break
		}
	}
	s.mu.Lock()
	stop := s.workers[victim]
	delete(s.workers, victim)
	s.mu.Unlock()
	require.NotNil(s.t, stop, "no worker runs a task")
	stop()
	require.Eventually(s.t, func() bool {
		for _, wi := range s.f.Workers() {
			if wi.ID == victim {
				return false
			}
		}
		return true
	}, 20*time.Second, time.Millisecond, "the lost worker's connection did not end")
	s.startWorker()
}
