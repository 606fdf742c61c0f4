package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/internal/web"
	"github.com/laboro-go/laboro/protocols/workerserver"
	"github.com/laboro-go/laboro/transport/link"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"
)

// defaultMaxConns bounds the connections the master serves at once
// (-max-conns). Its HTTP server has the binaries' limits (web.Server): no
// request (a worker's status with its data, a user's submission) takes
// longer than a minute to arrive, and no answer longer to leave; an idle
// connection is closed after two.
const defaultMaxConns = 1024

// config is serve's flags.
type config struct {
	listen, db, servers string
	lease               time.Duration
	hosts               []string
	maxConns            int
	keepEnded           int // Master.MaxEndedJobs
	tlsCert, tlsKey     string
	// read and idle replace the HTTP server's read timeouts and idle
	// timeout when not 0 (tests).
	read, idle time.Duration
	// serving, if not nil, writes the serving record whatever -log says:
	// with a port of the system's choice, it is how the user learns the
	// port. Without it, the serving record goes to the log.
	serving *zap.Logger
}

// serve runs the master until ctx ends. Jobs left unfinished by an
// earlier run are submitted again, so that workers' replayed statuses and
// new pings find them.
func serve(ctx context.Context, cfg config, log *zap.Logger) error {
	servers, err := readServers(cfg.servers)
	if err != nil {
		return err
	}
	if cfg.lease > 0 && cfg.lease < 3*link.DefaultProgress {
		// A busy worker's sign of life is its progress report.
		log.Warn("-lease is under three of a worker's progress reports (one every -progress, 10s by default, while its jobs run): a live worker may lose its jobs, which then run twice",
			zap.Duration("lease", cfg.lease))
	}
	token, tokenFile, err := secret.Ensure("workerserver-api", "WORKERSERVER_API_TOKEN")
	if err != nil {
		return fmt.Errorf("the API token: %w", err)
	}
	if tokenFile == "" {
		tokenFile = "$WORKERSERVER_API_TOKEN"
	}
	listen, db := cfg.listen, cfg.db
	host, _, _ := net.SplitHostPort(listen) // checked by cli.CheckAddr
	if err := secret.Guard(host, token, tokenFile); err != nil {
		return err
	}
	for id, password := range servers {
		if err := secret.Guard(host, password, fmt.Sprintf("%s: the password of worker %s", cfg.servers, id)); err != nil {
			return err
		}
	}
	m := &workerserver.Master{Servers: servers, Lease: cfg.lease, APIToken: token, Hosts: cfg.hosts, Logger: log,
		MaxEndedJobs: cfg.keepEnded}
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
	// A job's result stays in the table; the file the Master hands its
	// Run's result in is removed as the job ends.
	submit := func(job laboro.Job) (*laboro.Handle, error) {
		h, err := ex.Submit(context.Background(), job)
		if err != nil {
			return nil, err
		}
		go func() {
			<-h.Done()
			if res, ok := h.Result(); ok {
				res.Output.Close()
			}
		}()
		return h, nil
	}
	m.Submit = func(job laboro.Job) error {
		queued, stop := m.Queued(job.ID)
		defer stop()
		h, err := submit(job)
		if err != nil {
			return err
		}
		// Answer once the job is in the table, so that an accepted job
		// survives a crash of the master.
		select {
		case <-queued:
		case <-h.Done():
		}
		return nil
	}
	for _, rec := range m.Unfinished() {
		if _, err := submit(workerserver.NewJob(rec.ID, rec.Worker, rec.Params)); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	ln = netutil.LimitListener(ln, cfg.maxConns)
	cmp.Or(cfg.serving, log).Info("serving", zap.String("addr", ln.Addr().String()), zap.String("db", db), zap.String("api token", tokenFile),
		zap.Int("unfinished jobs", len(m.Unfinished())))
	hs := web.Server(m.Handler(), log.Named("http"))
	hs.ReadHeaderTimeout = cmp.Or(cfg.read, hs.ReadHeaderTimeout)
	hs.ReadTimeout = cmp.Or(cfg.read, hs.ReadTimeout)
	hs.IdleTimeout = cmp.Or(cfg.idle, hs.IdleTimeout)
	hs.RegisterOnShutdown(m.Release) // the pings held for a job answer now
	stop := context.AfterFunc(ctx, func() {
		shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hs.Shutdown(shut)
	})
	defer stop()
	if ip, err := netip.ParseAddrPort(ln.Addr().String()); cfg.tlsCert == "" && (err != nil || !ip.Addr().IsLoopback()) {
		log.Warn("serving plain HTTP beyond this machine: the workers' passwords cross the network in clear (-tls-cert, -tls-key)")
	}
	if cfg.tlsCert != "" {
		err = hs.ServeTLS(ln, cfg.tlsCert, cfg.tlsKey)
	} else {
		err = hs.Serve(ln)
	}
	if !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped by a signal")
	return nil
}

// readServers reads "id password" lines; "" means no file (no worker can
// log in). A file it cannot open is named as -servers names it.
func readServers(path string) (map[string]string, error) {
	servers := map[string]string{}
	if path == "" {
		return servers, nil
	}
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // "open FILE: " would say the path twice
		}
		return nil, fmt.Errorf("-servers %s: %w", path, err)
	}
	defer f.Close()
	// It holds every worker's password.
	if fi, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("-servers %s: %w", path, err)
	} else if err := secret.Private(path, fi); err != nil {
		return nil, fmt.Errorf("-servers: %w", err)
	}
	sc := bufio.NewScanner(f)
	lineOf := map[string]int{} // each id's
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, password, ok := strings.Cut(line, " ")
		if !ok || id == "" || strings.TrimSpace(password) == "" {
			return nil, fmt.Errorf("%s:%d: want \"id password\"", path, n)
		}
		if first, twice := lineOf[id]; twice {
			return nil, fmt.Errorf("%s:%d: worker %s was on line %d already", path, n, id, first)
		}
		servers[id], lineOf[id] = strings.TrimSpace(password), n
	}
	return servers, sc.Err()
}
