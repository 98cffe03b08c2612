package main

import (
	"context"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/examples/internal/extest"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/inproc"
	"github.com/pibgw/pibgw/rdmacm"
)

// TestEchoInProcess runs both sides in one process: a line, then 1 MiB by SHA-256.
func TestEchoInProcess(t *testing.T) {
	bin := extest.Build(t)
	out, err := exec.Command(bin, "-m", "hello over RC").CombinedOutput()
	if err != nil || string(out) != "hello over RC\n" {
		t.Fatalf("echo -m: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "-n", "1M").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1048576 bytes echoed") {
		t.Fatalf("echo -n 1M: %v\n%s", err, out)
	}
}

var sumRE = regexp.MustCompile(`SHA-256 ([0-9a-f]{64})`)

// TestEchoProcesses runs the server (-s) and the client (-c) as two processes attached
// to an in-process fabric's attach socket: a line, then 8 MiB checked by SHA-256 on both
// sides; the server stops on SIGTERM with status 0.
func TestEchoProcesses(t *testing.T) {
	f, path := extest.Fabric(t)
	bin := extest.Build(t)
	srv := extest.Start(t, path, bin, "-s", "-a", "10.10.0.2:7471")
	extest.WaitListening(t, f, srv)

	line := extest.Start(t, path, bin, "-c", "-a", "10.10.0.2:7471", "-I", "10.10.0.1", "-m", "hello, other process")
	line.MustSucceed(t, 30*time.Second)
	if got := line.Stdout.String(); got != "hello, other process\n" {
		t.Errorf("echoed %q", got)
	}

	cli := extest.Start(t, path, bin, "-c", "-a", "10.10.0.2:7471", "-I", "10.10.0.1", "-n", "8M")
	cli.MustSucceed(t, 60*time.Second)
	out := cli.Stdout.String()
	t.Log(strings.TrimSpace(out))
	m := sumRE.FindStringSubmatch(out)
	if !strings.Contains(out, "8388608 bytes echoed") || m == nil {
		t.Fatalf("client output:\n%s", out)
	}
	// The server logs each connection as it ends, with the SHA-256 of what it echoed.
	extest.WaitFor(t, 10*time.Second, srv, func() bool { return strings.Contains(srv.Stderr.String(), "8388608 bytes echoed, SHA-256 "+m[1]) })

	srv.Cmd.Process.Signal(syscall.SIGTERM)
	srv.MustSucceed(t, 10*time.Second)
}

// TestEchoDelayedCable echoes 16 MiB over a cable that delays every packet by 100 µs, so
// that a writer keeps its send slots in flight while its own reader frees receive
// buffers: the credits for those must still reach the peer (a report that waited for
// the next Read left both sides waiting for each other).
func TestEchoDelayedCable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := inproc.Start(ctx, inproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Fault("pib_1/1", fabric.FaultConfig{Delay: 100 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	l, err := rdmacm.Listen(f.RDMA(), "10.10.0.2:7472")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go serve(l)
	c, err := rdmacm.DialFrom(ctx, f.RDMA(), netip.MustParseAddr("10.10.0.1"), "10.10.0.2:7472")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() { done <- bulk(c, 16<<20) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("16 MiB not echoed in 45 s: the stream stalled")
	}
}
