package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/examples/internal/extest"
)

func TestUcmatose(t *testing.T) {
	*conns, *msgs = 16, 100
	if err := run(); err != nil {
		t.Fatal(err)
	}
}

// TestUcmatoseProcesses runs the server (-s) and the client (-client) as two processes
// attached to an in-process fabric's attach socket: 8 connections × 100 messages.
func TestUcmatoseProcesses(t *testing.T) {
	f, path := extest.Fabric(t)
	bin := extest.Build(t)
	srv := extest.Start(t, path, bin, "-s", "-c", "8")
	extest.WaitListening(t, f, srv)
	cli := extest.Start(t, path, bin, "-client", "-c", "8", "-C", "100")
	cli.MustSucceed(t, 60*time.Second)
	srv.MustSucceed(t, 20*time.Second)
	for _, p := range []*extest.Proc{srv, cli} {
		if !strings.Contains(p.Stdout.String(), "test complete") {
			t.Errorf("%v: no \"test complete\":\n%s", p.Cmd.Args, p.Stdout.String())
		}
	}
	t.Logf("server: %s", strings.TrimSpace(srv.Stdout.String()))
	t.Logf("client: %s", strings.TrimSpace(cli.Stdout.String()))
}
