// Command workerserver-master serves workerserver workers over HTTP and
// keeps its job table in a bbolt file, so that a restarted master loses
// nothing; it is also how a user submits jobs and follows them.
//
//	workerserver-master [serve] [-listen ADDR] [-host NAME,…] [-db FILE] [-servers FILE] [-lease D] [-keep-ended N] [-tls-cert FILE -tls-key FILE] [-max-conns N] [-log LEVEL]
//	workerserver-master submit [-url URL] -worker CODE [-params JSON] [-id ID] [-wait]
//	workerserver-master status [-url URL] [-n N] [JOB]
//	workerserver-master cancel [-url URL] JOB
//
// serve, the command run when the first argument is a flag or there is
// none, serves the workers and the user commands. The servers file has
// one "id password" per line: the workers allowed in. A worker that
// shows no life for -lease (90s by default) loses its jobs to the
// others. The table keeps the last -keep-ended jobs to end
// (100,000 by default; -1 keeps every one), forgetting those that ended
// first, so that its file stops growing. The user commands use the master's /api routes,
// which take a token: the master makes it at its first start and keeps it
// in workerserver-api.token in the user's state directory
// (~/.local/state/laboro; $WORKERSERVER_API_TOKEN overrides it), where the
// user commands find it; on another machine, copy the file or set the
// variable. The /api refuses requests from web pages (cross-origin, forms)
// and for host names other than localhost and -host. The master listens
// on 127.0.0.1:8080 by default, and serves HTTPS with -tls-cert and
// -tls-key; beyond the loopback without them it warns that the workers'
// passwords cross the network in clear. submit
// prints the job's id (a number the master picks, unless -id); with -wait
// it follows the job, warns once if no worker offers its code still after
// a few seconds, and exits 0 only if it ends Done. status lists the last
// -n jobs submitted (1000 by default), or JOB, and shows why a queued job
// waits ("no worker offers CODE") and a job being cancelled.
// Exit status 2 is a usage error.
package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/protocols/workerserver"
	"go.uber.org/zap"
)

func main() {
	s := &cli.Suite{
		Name: "workerserver-master",
		Doc: "Serves workerserver workers over HTTP and keeps its job table in a bbolt file, so that a restarted " +
			"master loses nothing; it is also how a user submits jobs and follows them, through the master's /api " +
			"routes, which take the token the master keeps in workerserver-api.token in ~/.local/state/laboro " +
			"(or $WORKERSERVER_API_TOKEN), made at its first start; the user commands read it there.",
		Default: "serve",
		Commands: []cli.Subcommand{
			{Name: "serve", Synopsis: "[-listen ADDR] [-host NAME,…] [-db FILE] [-servers FILE] [-lease D] [-keep-ended N] [-tls-cert FILE -tls-key FILE] [-max-conns N] [-log LEVEL]",
				Doc: "Serves workers and the user API until interrupted. The servers file has one \"id password\" per " +
					"line: the workers allowed in. A worker that shows no life for -lease loses its jobs to the others.",
				Setup: serveCommand},
			{Name: "submit", Synopsis: "[-url URL] -worker CODE [-params JSON] [-id ID] [-wait]",
				Doc: "Submits a job and prints its id (a number the master picks, unless -id); with -wait, follows it, warns " +
					"if no worker offers its code, and exits 0 only if it ends Done.", Setup: submitCommand},
			{Name: "status", Synopsis: "[-url URL] [-n N] [JOB]", Doc: "Prints the last N jobs submitted (1000), or JOB: id, worker, status, server, then " +
				"its progress or why it waits (\"no worker offers CODE\").", Setup: statusCommand},
			{Name: "cancel", Synopsis: "[-url URL] JOB", Doc: "Cancels a job.", Setup: cancelCommand},
		},
	}
	s.Main(os.Args[1:])
}

func serveCommand(c *cli.Command) func(context.Context, []string) error {
	listen := c.Flags.String("listen", "127.0.0.1:8080", "address to serve on")
	db := c.Flags.String("db", "", "the job table, a bbolt file (default workerserver.db in ~/.local/state/laboro)")
	servers := c.Flags.String("servers", "", `file of "id password" lines: the workers allowed in`)
	lease := c.Flags.Duration("lease", workerserver.DefaultLease, "a worker silent this long loses its jobs (0: never)")
	c.NotNegative("lease")
	tlsCert := c.Flags.String("tls-cert", "", "serve HTTPS with this certificate (PEM), with -tls-key")
	tlsKey := c.Flags.String("tls-key", "", "the certificate's key (PEM), with -tls-cert")
	hosts := c.Flags.String("host", "", "host names the /api answers to besides localhost and IP addresses, comma-separated")
	maxConns := c.Flags.Int("max-conns", defaultMaxConns, "connections served at once; more wait to be accepted")
	keepEnded := c.Flags.Int("keep-ended", workerserver.DefaultMaxEndedJobs, "ended jobs the table keeps, forgetting those that ended first (-1: every one)")
	logFlag := c.LogFlag(zap.InfoLevel)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return cli.Usagef("unexpected argument %q", args[0])
		}
		if *lease == 0 {
			*lease = -1 // none
		}
		if (*tlsCert == "") != (*tlsKey == "") {
			return cli.Usagef("-tls-cert and -tls-key go together")
		}
		if *keepEnded < -1 || *keepEnded == 0 {
			return cli.Usagef("-keep-ended %d: must be at least 1, or -1 to keep every ended job", *keepEnded)
		}
		if *maxConns < 1 {
			return cli.Usagef("-max-conns %d: must be at least 1", *maxConns)
		}
		if err := cli.CheckAddr("listen", *listen); err != nil {
			return err
		}
		if *db == "" {
			dir, err := secret.Dir()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			*db = filepath.Join(dir, "workerserver.db")
		}
		var names []string
		for _, h := range strings.Split(*hosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				names = append(names, h)
			}
		}
		return serve(ctx, config{listen: *listen, db: *db, servers: *servers, lease: *lease, hosts: names, maxConns: *maxConns, keepEnded: *keepEnded,
			tlsCert: *tlsCert, tlsKey: *tlsKey, serving: logFlag.Records()},
			logFlag.Logger())
	}
}
