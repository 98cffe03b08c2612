package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/tun"
)

func TestParseSide(t *testing.T) {
	s, err := parseSide("pib0:ib0:10.10.0.1/24,fe80::1/64")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.10.0.1/24"), netip.MustParsePrefix("fe80::1/64")}
	if s.netns != "pib0" || s.name != "ib0" || len(s.addrs) != 2 || s.addrs[0] != want[0] || s.addrs[1] != want[1] {
		t.Fatalf("%+v", s)
	}
	for _, bad := range []string{"", "pib0", "pib0:ib0", ":ib0:10.0.0.1/24", "pib0:ib0:10.0.0.1", "pib0:ib0:nonsense/8"} {
		if _, err := parseSide(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if st := run([]string{"-a", "x:y:10.0.0.1/24"}, &out, nil); st != 2 || !strings.Contains(out.String(), "need -a and -b") {
		t.Fatalf("status %d: %s", st, out.String())
	}
	out.Reset()
	if st := run([]string{"-a", "x", "-b", "y"}, &out, nil); st != 2 || !strings.Contains(out.String(), "-a") {
		t.Fatalf("status %d: %s", st, out.String())
	}
}

// TestRelay (root) runs the relay between two namespaces it creates, sends TCP through
// it, stops it, and checks that devices and namespaces are gone; with -gso, that the
// kernel's large segments crossed whole (more bytes per packet than the MTU).
func TestRelay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (creates network namespaces and TUN devices)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("skipping: no /dev/net/tun (%v)", err)
	}
	t.Run("copy", func(t *testing.T) { testRelay(t, "c", 97, nil) })
	t.Run("gso", func(t *testing.T) { testRelay(t, "g", 98, []string{"-gso"}) })
}

func testRelay(t *testing.T, tag string, net3 int, flags []string) {
	nsA, nsB := fmt.Sprintf("pibgwr-%d-%sa", os.Getpid(), tag), fmt.Sprintf("pibgwr-%d-%sb", os.Getpid(), tag)
	addrA, addrB := fmt.Sprintf("10.%d.0.1", net3), fmt.Sprintf("10.%d.0.2", net3)
	t.Cleanup(func() { // in case the relay failed to clean up
		for _, ns := range []string{nsA, nsB} {
			if tun.NetNSExists(ns) {
				tun.DeleteNetNS(ns)
			}
		}
	})
	stop := make(chan struct{})
	var out bytes.Buffer
	done := make(chan int, 1)
	go func() {
		args := append([]string{"-a", nsA + ":ib0:" + addrA + "/24", "-b", nsB + ":ib1:" + addrB + "/24", "-mtu", "2044"}, flags...)
		done <- run(args, &out, stop)
	}()
	// Wait for the second device and its address (the relay configures it after
	// creating it).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if a, err := exec.Command("ip", "-n", nsB, "addr", "show", "ib1").Output(); err == nil && strings.Contains(string(a), addrB+"/24") {
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("relay did not come up: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var ln net.Listener
	if err := tun.InNetNS(nsB, func() (err error) { ln, err = net.Listen("tcp4", addrB+":5201"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	payload := bytes.Repeat([]byte("tunrelay "), 1<<20)
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		got <- b
	}()
	var c net.Conn
	if err := tun.InNetNS(nsA, func() (err error) {
		c, err = net.DialTimeout("tcp4", addrB+":5201", 5*time.Second)
		return
	}); err != nil {
		t.Fatal(err)
	}
	c.Write(payload)
	c.Close()
	select {
	case b := <-got:
		if !bytes.Equal(b, payload) {
			t.Fatalf("received %d bytes, sent %d", len(b), len(payload))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("TCP through the relay did not finish")
	}
	close(stop)
	if st := <-done; st != 0 {
		t.Fatalf("relay exit status %d: %s", st, out.String())
	}
	t.Logf("%s", out.String())
	var pkts, bytes int
	_, summary, _ := strings.Cut(out.String(), "a→b:")
	if _, err := fmt.Sscanf(summary, "%d packets, %d bytes", &pkts, &bytes); err != nil || bytes < len(payload) {
		t.Fatalf("relay summary: %v: %s", err, out.String())
	}
	if len(flags) > 0 && bytes/pkts <= 2044 {
		t.Errorf("-gso relayed %d bytes in %d packets: the segments were cut to the MTU", bytes, pkts)
	}
	if tun.NetNSExists(nsA) || tun.NetNSExists(nsB) {
		t.Fatalf("namespaces left behind")
	}
}
