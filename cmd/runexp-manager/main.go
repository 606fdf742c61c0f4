// Command runexp-manager serves the job files of a folder to runexp runners
// and writes their results.
//
//	runexp-manager [-p PORT] [-g GROUP] [-r RUNS] [-o OUTPUTS] [--ban] [--print-jobs] [--sort] [BASEDIR]
//
// Every file under RUNS (BASEDIR/runs) is a job; the result of job NAME goes
// to OUTPUTS/NAME.res (BASEDIR/outputs). Jobs whose result shows success are
// skipped, so a restarted manager resumes. It ends when every job has a
// result and every runner has said FINO ANKAU: status 0 when all succeeded,
// 1 when some failed or the run was interrupted, 2 for a usage error.
package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/runexp"
	"go.uber.org/zap"
)

func main() {
	c := cli.New("runexp-manager", "[-p PORT] [-g GROUP] [-r RUNS] [-o OUTPUTS] [--ban] [--print-jobs] [--sort] [BASEDIR]",
		"Serves every job file under RUNS (BASEDIR/runs) to runexp runners and writes the result of job NAME to "+
			"OUTPUTS/NAME.res (BASEDIR/outputs). Jobs whose result shows success are skipped, so a restarted manager resumes. "+
			"Exit status: 0 when every job succeeded, 1 when some failed or the run was interrupted, 2 for a usage error.")
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
	listen := c.Flags.String("listen", "", "address to listen on (default: every interface)")
	progress := cli.NewProgress(os.Stderr, 0)
	level := zap.InfoLevel
	if progress.Terminal() {
		level = zap.WarnLevel // the progress bar tells the rest
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
			return list(folder)
		}
		m := &runexp.Manager{Group: group, Logger: logFlag.Logger()}
		if *ban {
			m.Policy = runexp.BanPolicy{}
		}
		return serve(ctx, m, folder, net.JoinHostPort(*listen, strconv.Itoa(port)), *sorted, progress)
	})
}
