// Package web serves the console and the Prometheus metrics of a binary's
// Executor (the -http flag of jobExecutorServer and laboro run), and makes
// every HTTP server of the binaries, with the same limits (Server).
package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/console"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/metrics"
)

// History is how many finished jobs the Executor keeps for its console
// (laboro.WithHistory).
const History = console.History

// MaxConns bounds the connections the console serves at once.
const MaxConns = 128

// Web is a console and a metrics collector for one Executor.
type Web struct {
	Console   *console.Console
	Collector *metrics.Collector
	reg       *prometheus.Registry
}

// Fleet is how the console of an Executor whose jobs run on other machines
// sees them (see console.Options).
type Fleet struct {
	Tail    func(ctx context.Context, id string, offset int64) ([]byte, error)
	Workers func() []console.Worker
	Batches func() []console.Batch
	Cancel  func(ctx context.Context, id string) error
}

// New makes the console, behind token, and the collector; give the
// Executor laboro.WithHistory(History). fleet is nil for jobs that
// run on this machine.
func New(token string, fleet *Fleet) *Web {
	w := &Web{Collector: metrics.New(), reg: prometheus.NewRegistry()}
	w.reg.MustRegister(w.Collector, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := console.Options{Token: token,
		Metrics: promhttp.HandlerFor(w.reg, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: 10 * time.Second})}
	if fleet != nil {
		opts.Tail, opts.Workers, opts.Batches, opts.Cancel = fleet.Tail, fleet.Workers, fleet.Batches, fleet.Cancel
		w.Collector.CountWorkers(func() int { return len(fleet.Workers()) })
	}
	w.Console = console.New(opts)
	return w
}

// CheckAddr refuses an address beyond the loopback unless allowed: the
// console can run commands' lifecycles (cancel, concurrency), so it stays
// on the machine unless the operator says otherwise.
func CheckAddr(addr string, beyond bool) error {
	if err := cli.CheckAddr("http", addr); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr)
	if beyond || secret.Loopback(host) {
		return nil
	}
	return fmt.Errorf("-http %q reaches beyond this machine: add -http-public to mean it (the console still needs the token)", addr)
}

// Listen listens on the console's address.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("the console: %w", err)
	}
	return ln, nil
}

// The limits of every HTTP server of the binaries (Server): a request's
// header must arrive within 10 s and the whole request within a minute, an
// answer must leave within a minute, an idle connection is closed after
// two, and a request's header is at most 64 KiB.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = time.Minute
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
)

// writeTimeout is a var for the tests' sake.
var writeTimeout = time.Minute

// Server returns an HTTP server of h with the limits above; the server's
// own errors (a client's bad request, a failed handshake) go to log.
func Server(h http.Handler, log *zap.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		ErrorLog: zap.NewStdLog(log)}
}

// Serve attaches ex and serves on ln until ctx ends. tokenFrom tells the
// operator where the token is, for the log line that gives the URL (the
// token itself is never logged).
func (w *Web) Serve(ctx context.Context, ln net.Listener, ex *laboro.Executor, tokenFrom string, log *zap.Logger) error {
	w.Console.Attach(ex)
	w.Collector.Attach(ex)
	log.Info("console", zap.String("url", "http://"+ln.Addr().String()+"/?token=…"), zap.String("token", tokenFrom),
		zap.String("metrics", "http://"+ln.Addr().String()+"/metrics"))
	// The live streams set a deadline for each of their writes, past the
	// server's own; every other answer has the server's.
	srv := Server(w.Console, log)
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		srv.Close() // the live streams do not end by themselves
	})
	defer stop()
	err := srv.Serve(netutil.LimitListener(ln, MaxConns))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
