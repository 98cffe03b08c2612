// Package extest runs the examples as separate processes in their tests: an in-process
// fabric serving an attach socket (no root), the example built into a temporary
// directory, and each side started as its own process attached to that fabric.
package extest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/inproc"
)

// Fabric starts the default in-process fabric (pib_0 with ib0 10.10.0.1, pib_1 with ib1
// 10.10.0.2) serving an attach socket in a temporary directory, and returns it with the
// socket's path. The fabric stops when the test ends.
func Fabric(t *testing.T) (*inproc.Fabric, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "attach.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := inproc.Start(ctx, inproc.Options{Attach: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

// Build builds the example in the current directory (a test's package) into a temporary
// directory and returns the binary.
func Build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(mustGetwd(t)))
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func mustGetwd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// Buffer is a bytes.Buffer a process's output goroutine and the test share.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Proc is an example running as its own process.
type Proc struct {
	Cmd    *exec.Cmd
	Stdout Buffer
	Stderr Buffer
	done   chan struct{}
	err    error
}

// Start starts bin with args, attached to the socket at path through PIBGW_ATTACH (the
// examples' -attach default). The test's cleanup kills it if it still runs.
func Start(t *testing.T, path, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.Cmd.Env = append(os.Environ(), "PIBGW_ATTACH="+path)
	return p.start(t)
}

// StartCmd starts a prepared command (its Stdout and Stderr are set to the Proc's
// buffers unless set already).
func StartCmd(t *testing.T, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	return p.start(t)
}

func (p *Proc) start(t *testing.T) *Proc {
	t.Helper()
	if p.Cmd.Stdout == nil {
		p.Cmd.Stdout = &p.Stdout
	}
	if p.Cmd.Stderr == nil {
		p.Cmd.Stderr = &p.Stderr
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.Cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Wait waits up to timeout for the process to exit and returns its exit error; a process
// still running then is killed and reported.
func (p *Proc) Wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not exit within %v\nstdout:\n%s\nstderr:\n%s", p.Cmd.Path, timeout, p.Stdout.String(), p.Stderr.String())
		return p.err
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// MustSucceed waits for the process and fails the test unless it exits with status 0.
func (p *Proc) MustSucceed(t *testing.T, timeout time.Duration) {
	t.Helper()
	if err := p.Wait(t, timeout); err != nil {
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", p.Cmd.Args, err, p.Stdout.String(), p.Stderr.String())
	}
}

// WaitListening waits until an attached process listens (rdma_cm) on the fabric, as
// `pibgw ps` shows it.
func WaitListening(t *testing.T, f *inproc.Fabric, p *Proc) {
	t.Helper()
	WaitFor(t, 20*time.Second, p, func() bool {
		for _, s := range f.Attached() {
			if s.PID == p.Cmd.Process.Pid && s.Listens > 0 {
				return true
			}
		}
		return false
	})
}

// WaitFor polls cond until it holds; it fails the test at the timeout, or when p (if
// not nil) exits first.
func WaitFor(t *testing.T, timeout time.Duration, p *Proc, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if p != nil && p.Exited() {
			t.Fatalf("%v exited: %v\nstdout:\n%s\nstderr:\n%s", p.Cmd.Args, p.err, p.Stdout.String(), p.Stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v", timeout)
		}
	}
}
