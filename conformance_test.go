package laboro_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/laborotest"
)

func TestFIFOConformance(t *testing.T) {
	laborotest.Queue(t, func() laboro.Queue { return new(laboro.FIFO) })
}

func TestProcessRunnerConformance(t *testing.T) {
	laborotest.Runner(t, laborotest.Harness{
		Start: func(t *testing.T) laborotest.System {
			return laborotest.System{Runner: &laboro.ProcessRunner{Dir: t.TempDir()}}
		},
		Job: func(id, script string) laboro.Job { return laboro.Job{ID: id, Script: script} },
	})
}

func TestFuncRunnerConformance(t *testing.T) {
	laborotest.Runner(t, laborotest.Harness{
		Start: func(*testing.T) laborotest.System { return laborotest.System{Runner: laboro.FuncRunner{}} },
		Job: func(id, script string) laboro.Job {
			return laboro.Job{ID: id, Func: func(ctx context.Context) error {
				// A function that runs a process of its own, in a group
				// that it kills when its context ends.
				cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
				cmd.Stderr = os.Stderr
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
				err := cmd.Run()
				if ctx.Err() != nil {
					return errors.Join(err, context.Cause(ctx))
				}
				return err
			}}
		},
	})
}
