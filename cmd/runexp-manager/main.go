// Command runexp-manager serves the job files of a folder to runexp runners
// and writes their results.
//
//	runexp-manager [-p PORT] [--listen ADDR --allow ADDRS] [-g GROUP] [-r RUNS] [-o OUTPUTS] [--ban] [--print-jobs] [--sort] [--goodbye D] [BASEDIR]
//
// It listens on the loopback unless told otherwise. The protocol has no
// room for a secret, so a manager that listens beyond its machine must be
// told the addresses of its runners (--allow 10.0.0.0/24,192.168.1.7); a
// connection from elsewhere is closed before a word is said. Anyone who
// can connect can take jobs and report results: on a network you do not
// trust, reach the manager through a tunnel (ssh -L) instead.
//
// Every file under RUNS (BASEDIR/runs) is a job; the result of job NAME goes
// to OUTPUTS/NAME.res (BASEDIR/outputs). Jobs whose result shows success are
// skipped, so a restarted manager resumes. It ends when every job has a
// result and every runner has said FINO ANKAU (a runner silent for
// --goodbye, 30 s, after the last job is let go): status 0 when all succeeded,
// 1 when some failed, 2 for a usage error, 130 when interrupted (after a
// summary of what was done; a restart resumes the rest).
package main

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/protocols/runexp"
	"go.uber.org/zap"
	"golang.org/x/term"
)

func main() {
	c := cli.New("runexp-manager", "[-p PORT] [--listen ADDR --allow ADDRS] [-g GROUP] [-r RUNS] [-o OUTPUTS] [--ban] [--print-jobs] [--sort] [--max-conns N] [--goodbye D] [-log LEVEL] [BASEDIR]",
		"Serves every job file under RUNS (BASEDIR/runs) to runexp runners and writes the result of job NAME to "+
			"OUTPUTS/NAME.res (BASEDIR/outputs). Jobs whose result shows success are skipped, so a restarted manager resumes. "+
			"It listens on the loopback unless told otherwise; the protocol has no room for a secret, so listening beyond "+
			"it needs --allow, the addresses runners may connect from (connections from elsewhere are closed at once). "+
			"Exit status: 0 when every job succeeded, 1 when some failed, 2 for a usage error, "+
			"130 when interrupted (after a summary of what was done; a restart resumes the rest).")
	var port int
	var group, runs, outputs string
	for _, name := range []string{"p", "port"} {
		c.Flags.IntVar(&port, name, runexp.DefaultPort, "port to listen on")
	}
	for _, name := range []string{"g", "group"} {
		c.Flags.StringVar(&group, name, runexp.DefaultGroup, "group name announced to runners")
	}
	for _, name := range []string{"r", "runs"} {
		c.Flags.StringVar(&runs, name, "", "job folder (default BASEDIR/runs)")
	}
	for _, name := range []string{"o", "outputs"} {
		c.Flags.StringVar(&outputs, name, "", "results folder (default BASEDIR/outputs)")
	}
	ban := c.Flags.Bool("ban", false, "hold (ATENDI) or ban (ELIRI) runners that fail too often")
	printJobs := c.Flags.Bool("print-jobs", false, "list the jobs not yet done, and exit")
	sorted := c.Flags.Bool("sort", false, "serve jobs in name order instead of shuffled")
	listen := c.Flags.String("listen", "127.0.0.1", "address to listen on (\"\" for every interface, with --allow)")
	maxConns := c.Flags.Int("max-conns", runexp.DefaultMaxConns, "connections served at once; more are closed at once")
	goodbye := c.Flags.Duration("goodbye", 30*time.Second, "how long runners left with nothing to run may take to say goodbye once every job has ended; then they are let go")
	c.Positive("goodbye")
	allowFlag := c.Flags.String("allow", "", "addresses or networks runners may connect from, comma-separated (10.0.0.0/24,192.168.1.7); loopback always may")
	level := zap.InfoLevel
	if term.IsTerminal(int(os.Stderr.Fd())) {
		level = zap.WarnLevel // the progress tells the rest
	}
	logFlag := c.LogFlag(level)
	c.Main(os.Args[1:], func(ctx context.Context, args []string) error {
		if len(args) > 1 {
			return cli.Usagef("one BASEDIR at most, not %d", len(args))
		}
		if port < 0 || port > 65535 {
			return cli.Usagef("port %d: must be 0 to 65535", port)
		}
		base := "."
		if len(args) == 1 {
			base = args[0]
		}
		folder := runexp.Folder{Runs: or(runs, filepath.Join(base, "runs")), Outputs: or(outputs, filepath.Join(base, "outputs"))}
		if *printJobs {
			if err := needRuns(folder); err != nil {
				return err
			}
			return list(folder)
		}
		allow, err := parseAllow(*allowFlag)
		if err != nil {
			return err
		}
		if _, _, err := net.SplitHostPort(*listen); err == nil {
			return cli.Usagef("--listen %q: give the host alone; the port is -p", *listen)
		}
		if !secret.Loopback(*listen) && allow == nil {
			return cli.Usagef("--listen %q reaches beyond this machine: say which runners may connect with --allow ADDRS", *listen)
		}
		if allow != nil { // and local runners
			allow = append(allow, netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))
		}
		if *maxConns < 1 {
			return cli.Usagef("--max-conns %d: must be at least 1", *maxConns)
		}
		if err := needRuns(folder); err != nil {
			return err
		}
		m := &runexp.Manager{Group: group, Allow: allow, MaxConns: *maxConns, Logger: logFlag.Logger()}
		if *ban {
			m.Policy = runexp.BanPolicy{}
		}
		host := strings.TrimSuffix(strings.TrimPrefix(*listen, "["), "]") // [::1] as ::1
		// A bar on a terminal and no line of counts off one; with a JSON
		// log, one record of the counts as the batch ends.
		progress := logFlag.Progress(0)
		return serve(ctx, m, folder, net.JoinHostPort(host, strconv.Itoa(port)), *sorted, *goodbye, progress, logFlag.Records())
	})
}

// needRuns is a usage error when the folder of runs does not exist: with
// no arguments, the manager was likely started in the wrong directory.
func needRuns(folder runexp.Folder) error {
	if _, err := os.Stat(folder.Runs); errors.Is(err, fs.ErrNotExist) {
		return cli.Usagef("no folder of runs at %s: give BASEDIR, the folder that holds runs/ and outputs/, or -runs DIR", folder.Runs)
	}
	return nil
}

// parseAllow parses --allow: addresses or prefixes, comma-separated; nil
// for "".
func parseAllow(s string) ([]netip.Prefix, error) {
	var allow []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			allow = append(allow, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, cli.Usagef("--allow %q: not an address or a network (like 10.0.0.0/24)", f)
		}
		allow = append(allow, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return allow, nil
}
