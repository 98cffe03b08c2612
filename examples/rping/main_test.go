package main

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/examples/internal/extest"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/inproc"
)

// TestRping runs the acceptance: 10,000 validated iterations in process.
func TestRping(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 500
	}
	*count, *validate = n, true
	f, err := inproc.Start(context.Background(), inproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pingInProcess(t, f, "10.10.0.2:7174", nil)
}

// pingInProcess runs rping's server on f at addr and, once it listens and serving (if
// not nil) has run, the client from 10.10.0.1; both must succeed.
func pingInProcess(t *testing.T, f *inproc.Fabric, addr string, serving func()) {
	t.Helper()
	a := netip.MustParseAddrPort(addr)
	ready, done := make(chan error, 1), make(chan error, 1)
	go func() { done <- runServer(f.RDMA(), a, ready) }()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	if serving != nil {
		serving()
	}
	if err := runClient(f.RDMA(), netip.MustParseAddr("10.10.0.1"), a); err != nil {
		// The server's side of the story, if it has one by now (a server that failed
		// sends no DREP, and the client waits out its DREQ's retries).
		select {
		case serr := <-done:
			t.Fatalf("client: %v; server: %v", err, serr)
		case <-time.After(5 * time.Second):
			t.Fatalf("client: %v; the server still runs", err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRpingLoss runs validated iterations with 2 % of the packets on the server's cable
// lost, both ways: RC recovers every loss, and rping takes the completions in the order
// they come (the peer's answer can complete before the ACK of the SEND it answers). The
// SM's packet_life_time of 8 makes a retransmission wait 2 ms, not opensm's 2.1 s.
func TestRpingLoss(t *testing.T) {
	*count, *validate = 300, true
	defer func() { *count, *validate = 10, false }()
	f, err := inproc.Start(context.Background(), inproc.Options{Config: "[sm]\npacket_life_time = 8\n"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pingInProcess(t, f, "10.10.0.2:7175", func() {
		if err := f.Fault("pib_1/1", fabric.FaultConfig{Loss: 0.02, Seed: 7}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRpingProcesses runs the server and the client as two processes attached to an
// in-process fabric's attach socket: rping -s, and rping -c validating every iteration.
func TestRpingProcesses(t *testing.T) {
	n := "2000"
	if testing.Short() {
		n = "200"
	}
	f, path := extest.Fabric(t)
	bin := extest.Build(t)
	srv := extest.Start(t, path, bin, "-s", "-a", "10.10.0.2", "-C", n, "-V", "-d")
	extest.WaitListening(t, f, srv)
	cli := extest.Start(t, path, bin, "-c", "-a", "10.10.0.2", "-I", "10.10.0.1", "-C", n, "-V", "-d")
	cli.MustSucceed(t, 60*time.Second)
	srv.MustSucceed(t, 10*time.Second)
	t.Logf("client: %s", strings.TrimSpace(cli.Stderr.String()))
	if !strings.Contains(cli.Stderr.String(), n+" iterations in") {
		t.Errorf("client's -d report missing:\n%s", cli.Stderr.String())
	}
	// Both processes exited: the fabric freed their sessions.
	extest.WaitFor(t, 5*time.Second, nil, func() bool { return len(f.Attached()) == 0 })
}
