package tun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WatchNetNSRemoved calls removed with the name of each named network namespace deleted
// from NetNSDir (`ip netns del`, or another program) until ctx is done: inotify, read
// through Go's poller (no thread waits). ready, if not nil, is called once the watch is
// in place; removed runs on WatchNetNSRemoved's goroutine.
func WatchNetNSRemoved(ctx context.Context, ready func(), removed func(name string)) error {
	if err := os.MkdirAll(NetNSDir, 0o755); err != nil {
		return fmt.Errorf("tun: watch %s: %w", NetNSDir, err)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("tun: watch %s: inotify: %w", NetNSDir, err)
	}
	if _, err := unix.InotifyAddWatch(fd, NetNSDir, unix.IN_DELETE|unix.IN_MOVED_FROM); err != nil {
		unix.Close(fd)
		return fmt.Errorf("tun: watch %s: inotify: %w", NetNSDir, err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer func() {
		if stop() {
			f.Close()
		}
	}()
	if ready != nil {
		ready()
	}
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("tun: watch %s: %w", NetNSDir, err)
		}
		for b := buf[:n]; len(b) >= unix.SizeofInotifyEvent; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
			end := unix.SizeofInotifyEvent + int(ev.Len)
			if end > len(b) {
				break
			}
			name := string(bytes.TrimRight(b[unix.SizeofInotifyEvent:end], "\x00"))
			b = b[end:]
			if name != "" && ev.Mask&unix.IN_ISDIR == 0 {
				removed(name)
			}
		}
	}
}
