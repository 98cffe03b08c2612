package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

type statusHandler struct{}

func (statusHandler) Handle(ctx context.Context, req *Request) (any, error) {
	return Status{Protocol: Protocol, PID: os.Getpid()}, nil
}

func (statusHandler) Capture(ctx context.Context, req *Request) (func(context.Context, io.Writer) error, error) {
	return nil, errors.New("no captures here")
}

// exhaustFDs lowers the soft descriptor limit near what is open and opens /dev/null
// until the process has none left, as 20,000 attach connections did to the daemon. It
// returns a function that frees one descriptor and one that frees them all and puts
// the limit back (also at the test's end).
func exhaustFDs(t *testing.T) (freeOne func(), freeAll func()) {
	t.Helper()
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := orig
	low.Cur = uint64(len(ents) + 16)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var spare []int
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("open: %v", err)
			}
			break
		}
		spare = append(spare, fd)
	}
	done := false
	freeAll = func() {
		if done {
			return
		}
		done = true
		for _, fd := range spare {
			syscall.Close(fd)
		}
		spare = nil
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig)
	}
	t.Cleanup(freeAll)
	freeOne = func() {
		syscall.Close(spare[len(spare)-1])
		spare = spare[:len(spare)-1]
	}
	return freeOne, freeAll
}

// An Accept that fails for want of descriptors (EMFILE) is retried until descriptors
// are free again; the control socket then answers. It used to end Serve, and `pibgw up`
// shut the daemon down ("control socket failed; shutting down").
func TestServeRetriesEMFILE(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Handler: statusHandler{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	freeOne, freeAll := exhaustFDs(t)
	freeOne() // the client's socket takes it: the daemon's accept has none
	// Something else in the process (the runtime, the race detector) may hold the freed
	// descriptor for a moment; wait for it, and free another only when it stays taken.
	var c net.Conn
	for try := 1; ; try++ {
		c, err = net.Dial("unix", path)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EMFILE) || try == 200 {
			freeAll()
			t.Fatalf("dial: %v", err)
		}
		if try%50 == 0 {
			freeOne()
		}
		time.Sleep(time.Millisecond)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for srv.retry.Failures() == 0 && time.Now().Before(deadline) {
		select {
		case err := <-served:
			freeAll()
			t.Fatalf("Serve returned %v on an accept without descriptors", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	failures := srv.retry.Failures()
	freeAll()
	if failures == 0 {
		t.Fatal("the accept never failed: the test did not exhaust the descriptors")
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, `{"verb":"status"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no answer after descriptors were freed: %v", err)
	}
	if want := `{"ok":true`; len(buf[:n]) < len(want) || string(buf[:len(want)]) != want {
		t.Fatalf("answer %q", buf[:n])
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v", err)
	default:
	}
}
