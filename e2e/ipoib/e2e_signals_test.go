package ipoib

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/e2etest"
	"github.com/pibgw/pibgw/internal/lifecycle"
)

// Issue 43 item 9: SIGHUP stops the daemon as SIGTERM does, and a stderr whose reader
// went away does not kill it (SIGPIPE), so it always cleans up.

// waitExit waits for a daemon process to exit and fails unless it exits with status 0.
func waitExit(t *testing.T, exited chan error, what string) {
	t.Helper()
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("pibgw after %s: %v, want exit status 0", what, err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("pibgw did not stop within 15 s of %s", what)
	}
}

// checkNoNetNS fails if ns is still there.
func checkNoNetNS(t *testing.T, ns, what string) {
	t.Helper()
	if out, _ := e2etest.RunCmd("ip", "netns", "list"); strings.Contains(out, ns) {
		t.Errorf("namespace %s left after %s:\n%s", ns, what, out)
	}
}

// checkNoSocket fails if the control socket or its state file is still there.
func checkNoSocket(t *testing.T, sock, what string) {
	t.Helper()
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left after %s: %v", what, err)
	}
	if _, err := os.Lstat(lifecycle.PathFor(sock)); !os.IsNotExist(err) {
		t.Errorf("state file left after %s: %v", what, err)
	}
}

func TestE2EUpSIGHUP(t *testing.T) {
	e2etest.Require(t)
	ns := e2etest.NetNS("hup")
	d := e2etest.StartDaemon(t, "", e2etest.InterfaceTOML("ib0", "pib_0", ns, "10.91.0.1/24"), ns)
	d.Cmd.Process.Signal(syscall.SIGHUP)
	waitExit(t, d.Exited, "SIGHUP")
	checkNoNetNS(t, ns, "SIGHUP")
	checkNoSocket(t, d.Sock, "SIGHUP")
	if !strings.Contains(d.Logs(), "pibgw down") {
		t.Errorf("no \"pibgw down\" in the log after SIGHUP:\n%s", d.Logs())
	}
}

// TestE2EUpStderrClosed runs `pibgw up 2>&1 | head -1`: its stderr is a pipe whose
// reader exits after the first line. The daemon keeps running, counts the log lines it
// could not write (status), and still cleans up at SIGTERM.
func TestE2EUpStderrClosed(t *testing.T) {
	e2etest.Require(t)
	bin := e2etest.BuildPibgw(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "pibgw.sock")
	ns := e2etest.NetNS("pipe")
	cfgPath := filepath.Join(dir, "e2e.toml")
	cfg := fmt.Sprintf("[daemon]\ncontrol = %q\nlog_level = \"debug\"\n%s", sock, e2etest.InterfaceTOML("ib0", "pib_0", ns, "10.91.1.1/24"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "up", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = pw, pw
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PIBGW_CONTROL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-exited:
			exited <- err
		default:
			cmd.Process.Kill()
			<-exited
		}
		if exec.Command("ip", "netns", "pids", ns).Run() == nil {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	// head -1: one line, then the reader is gone.
	if _, err := bufio.NewReader(pr).ReadString('\n'); err != nil {
		t.Fatalf("reading the first log line: %v", err)
	}
	pr.Close()

	status := func() (control.Status, error) {
		var st control.Status
		err := control.NewClient(sock).Do(context.Background(), control.Request{Verb: control.VerbStatus}, &st)
		return st, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, err := status(); err == nil && st.PID == cmd.Process.Pid {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("pibgw up exited with its stderr's reader gone: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("pibgw up did not answer on its control socket in 30 s")
		}
	}
	// A failed request is a debug log line, which cannot be written.
	control.NewClient(sock).Do(context.Background(), control.Request{Verb: "no-such-verb"}, nil)
	st, err := status()
	if err != nil {
		t.Fatalf("status after a log line to the closed pipe: %v", err)
	}
	if st.LogWriteErrors == 0 {
		t.Errorf("status log_write_errors = 0 with stderr's reader gone")
	}
	if out, err := e2etest.RunCmd("ip", "netns", "list"); err != nil || !strings.Contains(out, ns) {
		t.Errorf("namespace %s missing while the daemon runs: %v\n%s", ns, err, out)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, exited, "SIGTERM with stderr's reader gone")
	checkNoNetNS(t, ns, "SIGTERM")
	checkNoSocket(t, sock, "SIGTERM")
}

// TestSwitchSIGHUP: `pibgw switch` (no root needed) stops cleanly on SIGHUP too.
func TestSwitchSIGHUP(t *testing.T) {
	bin := e2etest.BuildPibgw(t)
	sock := filepath.Join(t.TempDir(), "switch.sock")
	cmd := exec.Command(bin, "switch", "--control", sock, "--listen", "127.0.0.1:0")
	var logs e2etest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-exited:
			exited <- err
		default:
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("switch log:\n%s", logs.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var st control.Status
		if control.NewClient(sock).Do(context.Background(), control.Request{Verb: control.VerbStatus}, &st) == nil && st.PID == cmd.Process.Pid {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("pibgw switch exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("pibgw switch did not answer on its control socket in 30 s")
		}
	}
	cmd.Process.Signal(syscall.SIGHUP)
	waitExit(t, exited, "SIGHUP")
	checkNoSocket(t, sock, "SIGHUP")
}
