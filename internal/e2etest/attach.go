package e2etest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
)

// AttachProc is an example program running as its own process, attached to the test's
// daemon.
type AttachProc struct {
	Cmd            *exec.Cmd
	Stdout, Stderr SyncBuffer
	Done           chan struct{} // closed when it exited
	Err            error         // its exit status, once it exited
}

// StartAttached starts cmd (its environment pointing PIBGW_ATTACH at path) with its
// output in the returned AttachProc; the cleanup kills it if it still runs.
func StartAttached(t *testing.T, path string, cmd *exec.Cmd) *AttachProc {
	t.Helper()
	p := &AttachProc{Cmd: cmd, Done: make(chan struct{})}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "PIBGW_ATTACH="+path)
	if cmd.Stdout == nil {
		cmd.Stdout = &p.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &p.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	go func() { p.Err = cmd.Wait(); close(p.Done) }()
	t.Cleanup(func() {
		select {
		case <-p.Done:
		default:
			if t.Failed() {
				// A Go program prints its goroutines' stacks on SIGQUIT: where it hung.
				if p.Quit() {
					t.Logf("%v, still running when the test failed; stderr:\n%s", cmd.Args, p.Stderr.String())
				}
			}
			cmd.Process.Kill()
			<-p.Done
		}
	})
	return p
}

// Quit sends SIGQUIT (a Go program writes its stacks to stderr and exits) and waits up to
// two seconds for the process to go; it reports whether it went.
func (p *AttachProc) Quit() bool {
	p.Cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.Done:
		return true
	case <-time.After(2 * time.Second):
		return false
	}
}

// Wait waits up to timeout for the process to exit and returns its exit error (a
// process still running then is killed and reported as failed).
func (p *AttachProc) Wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.Done:
		return p.Err
	case <-time.After(timeout):
		p.Quit()
		p.Cmd.Process.Kill()
		<-p.Done
		t.Errorf("%v still running after %v", p.Cmd.Args, timeout)
		return p.Err
	}
}

// MustSucceed fails the test unless the process exits with status 0 within timeout.
func (p *AttachProc) MustSucceed(t *testing.T, timeout time.Duration) {
	t.Helper()
	if err := p.Wait(t, timeout); err != nil {
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", p.Cmd.Args, err, p.Stdout.String(), p.Stderr.String())
	}
}

// Exited reports whether the process has exited.
func (p *AttachProc) Exited() bool {
	select {
	case <-p.Done:
		return true
	default:
		return false
	}
}

// WaitPS polls `pibgw ps --json` until cond holds for its sessions; it fails the test
// at the timeout or when p (if not nil) exits first.
func WaitPS(t *testing.T, d *Daemon, p *AttachProc, what string, cond func([]attach.SessionInfo) bool) []attach.SessionInfo {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var ss []attach.SessionInfo
		d.JSON(&ss, "ps")
		if cond(ss) {
			return ss
		}
		if p != nil && p.Exited() {
			t.Fatalf("%v exited before pibgw ps showed %s: %v\nstdout:\n%s\nstderr:\n%s", p.Cmd.Args, what, p.Err, p.Stdout.String(), p.Stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("pibgw ps did not show %s in 20 s: %+v", what, ss)
		}
	}
}

// SessionOf is the session of process pid among ss, or nil.
func SessionOf(ss []attach.SessionInfo, pid int) *attach.SessionInfo {
	for i := range ss {
		if ss[i].PID == pid {
			return &ss[i]
		}
	}
	return nil
}

// OpenToAll makes dir and its parents up to the system's temporary directory traversable
// by every user (t.TempDir makes them 0700), so that a process running as nobody reaches
// the attach socket and the example binaries in them.
func OpenToAll(t *testing.T, dir string) {
	t.Helper()
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Clean(dir); d != tmp && d != "/" && strings.HasPrefix(d, tmp+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
