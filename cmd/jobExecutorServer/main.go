// Command jobExecutorServer runs the jobs that jobCommander sends it.
//
//	jobExecutorServer portNum bufferSize threadPoolSize [-listen ADDR] [-dir DIR] [-log LEVEL] [-request-timeout D]
//
// Set LABORO_TOKEN to require that token from every commander.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/jobexec"
	"go.uber.org/zap"
)

const usage = "usage: jobExecutorServer portNum bufferSize threadPoolSize [-listen ADDR] [-dir DIR] [-log LEVEL] [-request-timeout D]"

func main() {
	fs := flag.NewFlagSet("jobExecutorServer", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the usage line below says it all
	listen := fs.String("listen", "127.0.0.1", "address to listen on")
	dir := fs.String("dir", ".", "directory for <pid>.output files")
	level := zap.InfoLevel
	fs.Var(&level, "log", "log level: debug, info, warn, error")
	timeout := fs.Duration("request-timeout", jobexec.DefaultRequestTimeout, "how long a commander may take to send its command")
	nums, err := positional(os.Args[1:], 3)
	if err == nil {
		err = fs.Parse(os.Args[4:])
	}
	if err != nil || nums[0] > 65535 || nums[1] <= 0 || nums[2] <= 0 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level = zap.NewAtomicLevelAt(level)
	cfg.DisableStacktrace = true
	log, _ := cfg.Build()
	switch err := run(*listen, nums, *dir, *timeout, log); {
	case errors.Is(err, jobexec.ErrServerTerminated):
		log.Info("terminated by an exit command")
	case errors.Is(err, context.Canceled):
		log.Info("stopped by a signal")
	default:
		log.Error("server failed", zap.Error(err))
		os.Exit(1)
	}
}

func run(host string, nums []int, dir string, timeout time.Duration, log *zap.Logger) error {
	ex, err := laboro.New(laboro.WithBufferSize(nums[1]), laboro.WithPoolSize(nums[2]),
		laboro.WithOutputDir(dir), laboro.WithLogger(log))
	if err != nil {
		return err
	}
	defer ex.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(nums[0])))
	if err != nil {
		return err
	}
	token := os.Getenv("LABORO_TOKEN")
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && token == "" {
		log.Warn("listening beyond this machine without LABORO_TOKEN: anyone who reaches the port runs commands", zap.String("addr", ln.Addr().String()))
	}
	log.Info("serving", zap.String("addr", ln.Addr().String()))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &jobexec.Server{Executor: ex, Token: token, Logger: log, RequestTimeout: timeout}
	context.AfterFunc(ctx, func() { ex.Close() })
	return srv.Serve(ctx, ln)
}

// positional parses the first n arguments as non-negative integers.
func positional(args []string, n int) ([]int, error) {
	if len(args) < n {
		return nil, errors.New("missing arguments")
	}
	nums := make([]int, n)
	for i := range nums {
		v, err := strconv.Atoi(args[i])
		if err != nil || v < 0 {
			return nil, fmt.Errorf("argument %d: %q is not a number", i+1, args[i])
		}
		nums[i] = v
	}
	return nums, nil
}
