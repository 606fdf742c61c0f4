//go:build unix && !linux

package laboro

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// sysProcAttr puts the child in a process group of its own, so that the
// whole group can be killed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// pinThread is needed only where Pdeathsig is used.
func pinThread() func() { return func() {} }

// command is the command of a job run with ctx, whose end kills the
// process group the child leads.
func command(ctx context.Context, file string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, file, args...)
	cmd.Cancel = func() error {
		// The negative pid names the process group the child leads.
		// os/exec may call this as its Wait reaps the child: the id is
		// then free a moment, not yet another's, most likely.
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	return cmd
}

// groupWatch is the Linux watch of a child's process group; here the
// command's context does its work (command).
type groupWatch struct{}

func watchGroup(context.Context, int) *groupWatch { return nil }

func (*groupWatch) settle() {}
