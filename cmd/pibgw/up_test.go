package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
)

// `pibgw up` with userspace interfaces needs no root: the real backend (gVisor netstacks
// and ipoib interfaces) on the default fabric, the control socket, and a clean stop.
func TestUpUserspace(t *testing.T) {
	cfg := config.Default()
	for i := range cfg.Interfaces {
		cfg.Interfaces[i].Stack = config.StackUserspace
	}
	dir := filepath.Join(t.TempDir(), "run") // created by up
	sock := filepath.Join(dir, "pibgw.sock")
	cfg.Daemon.Control = sock
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- up(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() {
		cancel()
		<-done
	}()
	waitDaemon(t, sock, done)

	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("control socket mode %v, %v; want a 0600 socket", fi.Mode(), err)
	}
	out := mustRun(t, "show", "--control", sock)
	for _, want := range []string{
		"ib0: userspace netstack, datagram mode, mtu 2044, state UP\n",
		"ib1: userspace netstack, datagram mode, mtu 2044, state UP\n",
		"    brd 00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff\n",
		"    inet6 fe80::202:c903:0:401/64\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	// A second daemon on the same socket is refused.
	_, errs, code := pibgw(t, "up", "--userspace", "--control", sock)
	if code != 1 || !strings.HasPrefix(errs, "pibgw: up: a daemon is already running at "+sock+" (pid ") {
		t.Errorf("second up: exit %d, stderr %q", code, errs)
	}
	// devinfo reports the daemon's fabric.
	if out := mustRun(t, "devinfo", "-d", "pib_1", "--control", sock); !strings.Contains(out, "\t\t\tport_lid:\t\t3\n") {
		t.Errorf("devinfo from the daemon:\n%s", out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("up returned %v", err)
	}
	done <- nil // for the deferred receive
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

func waitDaemon(t *testing.T, sock string, done chan error) {
	t.Helper()
	cl := control.NewClient(sock)
	deadline := time.Now().Add(20 * time.Second)
	for !cl.Alive(context.Background()) {
		select {
		case err := <-done:
			t.Fatalf("daemon exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("daemon did not answer in 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A stale socket (its daemon died) is replaced; the directory is created.
func TestListenControlStale(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "a", "b", "pibgw.sock")
	os.MkdirAll(filepath.Dir(sock), 0o755)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln, err = listenControl(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	// Something that is not a socket is not removed.
	notSock := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notSock, []byte("x"), 0o644)
	if _, err := listenControl(context.Background(), notSock); err == nil || !strings.Contains(err.Error(), "exists and is not a socket") {
		t.Errorf("regular file: %v", err)
	}
}

// Under systemd (Type=notify) the daemon says READY=1 once the fabric and the control
// socket are up, and STOPPING=1 when it stops (sd_notify(3), through $NOTIFY_SOCKET).
func TestUpNotifiesSystemd(t *testing.T) {
	dir := t.TempDir()
	ns, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	t.Setenv("NOTIFY_SOCKET", filepath.Join(dir, "notify"))
	cfg := config.Default()
	for i := range cfg.Interfaces {
		cfg.Interfaces[i].Stack = config.StackUserspace
	}
	cfg.Daemon.Control = filepath.Join(dir, "run", "pibgw.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- up(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	read := func() string {
		t.Helper()
		ns.SetReadDeadline(time.Now().Add(20 * time.Second))
		b := make([]byte, 512)
		n, err := ns.Read(b)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(b[:n])
	}
	ready := read()
	if !strings.HasPrefix(ready, "READY=1\n") || !control.NewClient(cfg.Daemon.Control).Alive(context.Background()) {
		t.Errorf("first notification %q (or the socket did not answer after it)", ready)
	}
	cancel()
	if got := read(); got != "STOPPING=1" {
		t.Errorf("at stop: %q", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
