package attach

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A connect that finds the attach socket's accept queue full (EAGAIN: the daemon is
// working through a burst, another user's flood) is tried again until the daemon
// accepts: an honest process attaching beside a flood used to fail at once ("connect:
// resource temporarily unavailable", issue 43's hostile-user run).
func TestDialRetriesFullQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "attach.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil { // a queue of one: easy to fill
		t.Fatal(err)
	}
	// Fill the queue: connects that nobody accepts, until one is refused with EAGAIN.
	var fillers []net.Conn
	defer func() {
		for _, c := range fillers {
			c.Close()
		}
	}()
	for {
		c, err := net.Dial("unixpacket", path)
		if err != nil {
			if !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("filling the queue: %v", err)
			}
			break
		}
		if fillers = append(fillers, c); len(fillers) > 100 {
			t.Fatal("the accept queue never filled")
		}
	}
	// A short context: the queue stays full, the dial gives up with EAGAIN.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = dialSocket(ctx, path)
	cancel()
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("dial into a queue that stays full: %v, want EAGAIN", err)
	}
	// The daemon accepts again a moment later: the dial gets through.
	go func() {
		time.Sleep(100 * time.Millisecond)
		for range fillers {
			if nfd, _, err := syscall.Accept(fd); err == nil {
				defer syscall.Close(nfd)
			}
		}
		nfd, _, err := syscall.Accept(fd)
		if err == nil {
			time.Sleep(time.Second)
			syscall.Close(nfd)
		}
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dialSocket(ctx, path)
	if err != nil {
		t.Fatalf("dial once the daemon accepts again: %v", err)
	}
	c.Close()
}
