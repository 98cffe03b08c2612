package main

import (
	"context"
	"net/netip"
	"testing"

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
	a := netip.MustParseAddrPort("10.10.0.2:7174")
	ready, done := make(chan error, 1), make(chan error, 1)
	go func() { done <- runServer(f.RDMA(), a, ready) }()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	if err := runClient(f.RDMA(), netip.MustParseAddr("10.10.0.1"), a); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
