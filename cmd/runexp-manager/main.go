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
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/laboro-go/laboro/protocols/runexp"
	"github.com/schollz/progressbar/v3"
	"go.uber.org/zap"
	"golang.org/x/term"
)

func main() {
	fs := flag.NewFlagSet("runexp-manager", flag.ContinueOnError)
	var port int
	var group, runs, outputs string
	for _, name := range []string{"p", "port"} {
		fs.IntVar(&port, name, runexp.DefaultPort, "port to listen on")
	}
	for _, name := range []string{"g", "group"} {
		fs.StringVar(&group, name, runexp.DefaultGroup, "group name announced to runners")
	}
	for _, name := range []string{"r", "runs"} {
		fs.StringVar(&runs, name, "", "job folder (default BASEDIR/runs)")
	}
	for _, name := range []string{"o", "outputs"} {
		fs.StringVar(&outputs, name, "", "results folder (default BASEDIR/outputs)")
	}
	ban := fs.Bool("ban", false, "hold (ATENDI) or ban (ELIRI) runners that fail too often")
	printJobs := fs.Bool("print-jobs", false, "list the jobs not yet done, and exit")
	sorted := fs.Bool("sort", false, "serve jobs in name order instead of shuffled")
	listen := fs.String("listen", "", "address to listen on (default: every interface)")
	tty := term.IsTerminal(int(os.Stderr.Fd()))
	level := zap.InfoLevel
	if tty {
		level = zap.WarnLevel // the progress bar tells the rest
	}
	fs.Var(&level, "log", "log level: debug, info, warn, error")
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() > 1 || port < 0 || port > 65535 {
		fmt.Fprintln(os.Stderr, "usage: runexp-manager [-p PORT] [-g GROUP] [-r RUNS] [-o OUTPUTS] [--ban] [--print-jobs] [--sort] [BASEDIR]")
		os.Exit(2)
	}
	base := fs.Arg(0)
	if base == "" {
		base = "."
	}
	folder := runexp.Folder{Runs: or(runs, filepath.Join(base, "runs")), Outputs: or(outputs, filepath.Join(base, "outputs"))}
	if *printJobs {
		os.Exit(list(folder))
	}

	cfg := zap.NewDevelopmentConfig()
	cfg.Level, cfg.DisableStacktrace = zap.NewAtomicLevelAt(level), true
	log, _ := cfg.Build()
	ln, err := net.Listen("tcp", net.JoinHostPort(*listen, strconv.Itoa(port)))
	if err != nil {
		log.Fatal("cannot listen", zap.Error(err))
	}
	log.Info("serving", zap.String("addr", ln.Addr().String()), zap.String("runs", folder.Runs))
	m := &runexp.Manager{Group: group, Logger: log}
	if *ban {
		m.Policy = runexp.BanPolicy{}
	}
	run := &runexp.FolderRun{Folder: folder, Manager: m, Sorted: *sorted}
	if tty {
		run.OnProgress = bar()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := run.Run(ctx, ln)
	fmt.Printf("%d jobs: %d succeeded, %d failed\n", p.Total, p.Done-p.Failed, p.Failed)
	if err != nil {
		log.Error("manager stopped", zap.Error(err))
	}
	if err != nil || p.Failed > 0 || p.Done < p.Total {
		os.Exit(1)
	}
}

// list prints the jobs not yet done, one name per line.
func list(folder runexp.Folder) int {
	todo, _, skipped, err := folder.Jobs()
	for _, e := range skipped {
		fmt.Fprintln(os.Stderr, e)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, j := range todo {
		fmt.Println(j.Name + string(j.Type))
	}
	return 0
}

// bar returns a progress display on stderr.
func bar() func(runexp.Progress) {
	var b *progressbar.ProgressBar
	return func(p runexp.Progress) {
		if b == nil {
			b = progressbar.NewOptions(p.Total, progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionFullWidth(),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
		}
		b.Describe(fmt.Sprintf("running %d, failed %d, runners %d", p.Running, p.Failed, p.Runners))
		b.Set(p.Done)
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
