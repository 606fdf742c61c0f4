package pulse

import (
	"bytes"
	"context"
	"os"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// watchController wakes kick whenever a controller's main.sock appears in
// dir: a controller that starts, or starts again, is found at once, not
// after the retry wait or at the next pulse, which may be a minute away.
// It returns when ctx ends, or at once when dir cannot be watched (the
// worker then finds the controller as before).
func watchController(ctx context.Context, dir string, kick chan<- struct{}, log *zap.Logger) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		log.Debug("cannot watch for the controller", zap.Error(err))
		return
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: Close ends a Read
	defer f.Close()
	// A worker started before its controller makes the directory, as the
	// controller would (0700), to watch it.
	if err := os.Mkdir(dir, 0o700); err == nil {
		log.Debug("made the socket directory", zap.String("dir", dir))
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		log.Debug("cannot watch for the controller", zap.String("dir", dir), zap.Error(err))
		return
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			end := min(off+unix.SizeofInotifyEvent+int(ev.Len), n)
			name := bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:end], "\x00")
			if string(name) == mainSocket {
				select {
				case kick <- struct{}{}:
				default:
				}
			}
			off = end
		}
	}
}
