// Command workerserver-master serves workerserver workers over HTTP and
// keeps its job table in a bbolt file, so that a restarted master loses
// nothing; it is also how a user submits jobs and follows them.
//
//	workerserver-master [-listen ADDR] [-db FILE] [-servers FILE] [-lease D] [-log LEVEL]   serve
//	workerserver-master submit [-url URL] -worker CODE [-params JSON] [-id ID] [-wait]
//	workerserver-master status [-url URL] [JOB]
//	workerserver-master cancel [-url URL] JOB
//
// The servers file has one "id password" per line: the workers allowed
// in. A worker that shows no life for -lease (90s by default) loses its
// jobs to the others. The user commands use the master's /api routes, which ask for no
// password: listen on a trusted address (127.0.0.1 by default). submit
// prints the job's id; with -wait it follows the job and exits 0 only if
// it ends Done. Exit status 2 is a usage error.
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
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/workerserver"
	"go.uber.org/zap"
)

func main() {
	s := &cli.Suite{
		Name: "workerserver-master",
		Doc: "Serves workerserver workers over HTTP and keeps its job table in a bbolt file, so that a restarted " +
			"master loses nothing; it is also how a user submits jobs and follows them, through the master's /api " +
			"routes, which ask for no password: listen on a trusted address (127.0.0.1 by default).",
		Default: "serve",
		Commands: []cli.Subcommand{
			{Name: "serve", Synopsis: "[-listen ADDR] [-db FILE] [-servers FILE] [-lease D] [-log LEVEL]",
				Doc: "Serves workers and the user API until interrupted. The servers file has one \"id password\" per " +
					"line: the workers allowed in. A worker that shows no life for -lease loses its jobs to the others.",
				Setup: serveCommand},
			{Name: "submit", Synopsis: "[-url URL] -worker CODE [-params JSON] [-id ID] [-wait]",
				Doc: "Submits a job and prints its id; with -wait, follows it and exits 0 only if it ends Done.", Setup: submitCommand},
			{Name: "status", Synopsis: "[-url URL] [JOB]", Doc: "Prints every job, or JOB.", Setup: statusCommand},
			{Name: "cancel", Synopsis: "[-url URL] JOB", Doc: "Cancels a job.", Setup: cancelCommand},
		},
	}
	s.Main(os.Args[1:])
}

func serveCommand(c *cli.Command) func(context.Context, []string) error {
	listen := c.Flags.String("listen", "127.0.0.1:8080", "address to serve on")
	db := c.Flags.String("db", "workerserver.db", "the job table (a bbolt file)")
	servers := c.Flags.String("servers", "", `file of "id password" lines: the workers allowed in`)
	lease := c.Flags.Duration("lease", workerserver.DefaultLease, "a worker silent this long loses its jobs (0: never)")
	logFlag := c.LogFlag(zap.InfoLevel)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return cli.Usagef("unexpected argument %q", args[0])
		}
		if *lease == 0 {
			*lease = -1 // none
		}
		return serve(ctx, *listen, *db, *servers, *lease, logFlag.Logger())
	}
}

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
