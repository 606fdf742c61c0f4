package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// copyInput copies in (standard input) to w until its end, or until ctx
// ends, when it returns ctx's error at once. A read of a pipe or a
// terminal cannot be interrupted, and standard input may stay open with
// nothing written for as long as the user likes (cat | pulse-controller):
// so each read waits first in poll(2) on in and on a pipe of its own,
// which the end of ctx makes readable, and only reads once in has data,
// its end, or an error to give, when the read does not block.
func copyInput(ctx context.Context, w io.Writer, in *os.File) error {
	wakeR, wakeW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer wakeR.Close()
	defer wakeW.Close()
	stop := context.AfterFunc(ctx, func() { wakeW.Write([]byte{0}) })
	defer stop()
	fds := []unix.PollFd{
		{Fd: int32(in.Fd()), Events: unix.POLLIN},
		{Fd: int32(wakeR.Fd()), Events: unix.POLLIN},
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := unix.Poll(fds, -1); errors.Is(err, unix.EINTR) {
			continue
		} else if err != nil {
			return fmt.Errorf("waiting for standard input: %w", err)
		}
		if fds[1].Revents != 0 {
			return ctx.Err()
		}
		if fds[0].Revents&unix.POLLNVAL != 0 {
			return errors.New("standard input is closed: give the task on standard input, or a folder of tasks with -in")
		}
		if fds[0].Revents == 0 {
			continue
		}
		n, err := in.Read(buf)
		if _, werr := w.Write(buf[:n]); werr != nil {
			return werr
		}
		if err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading standard input: %w", err)
		}
	}
}
