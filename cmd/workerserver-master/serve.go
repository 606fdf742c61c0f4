package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/workerserver"
	"go.uber.org/zap"
)

// serve runs the master until ctx ends. Jobs left unfinished by an
// earlier run are submitted again, so that workers' replayed statuses and
// new pings find them.
func serve(ctx context.Context, listen, db, serversFile string, lease time.Duration, log *zap.Logger) error {
	servers, err := readServers(serversFile)
	if err != nil {
		return err
	}
	m := &workerserver.Master{Servers: servers, Lease: lease, Logger: log}
	if err := m.Open(db); err != nil {
		return err
	}
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(4096), laboro.WithConcurrency(4096),
		laboro.WithBufferSize(4096), laboro.WithLogger(log))
	if err != nil {
		m.Close()
		return err
	}
	// The master closes first: its waiting Runs end and the table stays
	// as it is (closing the Executor first would cancel the jobs).
	defer ex.Close()
	defer m.Close()
	m.Submit = func(job laboro.Job) error {
		h, err := ex.Submit(context.Background(), job)
		if err != nil {
			return err
		}
		// Answer once the job is in the table, so that an accepted job
		// survives a crash of the master.
		for {
			if _, ok := m.Job(job.ID); ok {
				return nil
			}
			select {
			case <-h.Done():
				return nil
			case <-time.After(time.Millisecond):
			}
		}
	}
	for _, rec := range m.Unfinished() {
		if _, err := ex.Submit(context.Background(), workerserver.NewJob(rec.ID, rec.Worker, rec.Params)); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	log.Info("serving", zap.String("addr", ln.Addr().String()), zap.String("db", db), zap.Int("unfinished jobs", len(m.Unfinished())))
	hs := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hs.Shutdown(shut)
	})
	defer stop()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped by a signal")
	return nil
}

// readServers reads "id password" lines; "" means no file (no worker can
// log in).
func readServers(path string) (map[string]string, error) {
	servers := map[string]string{}
	if path == "" {
		return servers, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, password, ok := strings.Cut(line, " ")
		if !ok || id == "" || strings.TrimSpace(password) == "" {
			return nil, fmt.Errorf("%s:%d: want \"id password\"", path, n)
		}
		servers[id] = strings.TrimSpace(password)
	}
	return servers, sc.Err()
}
