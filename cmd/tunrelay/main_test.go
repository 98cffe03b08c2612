package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/tun"
	"github.com/pibgw/pibgw/wire"
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

// sendTCP sends payload over TCP from netns nsA to addrB:5201 in nsB and checks that it
// arrives whole.
func sendTCP(t *testing.T, nsA, nsB, addrB string, payload []byte) {
	t.Helper()
	var ln net.Listener
	if err := tun.InNetNS(nsB, func() (err error) { ln, err = net.Listen("tcp4", addrB+":5201"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
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
		t.Fatal("TCP did not finish")
	}
}

// TestUDPChain (root): two sides and a forwarder (-udp, -forward), each its own run as
// the benchmark starts three processes; a TCP transfer at MTU 65520 crosses whole, in
// segments larger than one datagram that went over UDP in datagrams of at most
// chunkHdr+chunkData bytes; stopped, the sides remove their devices and namespaces.
func TestUDPChain(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (creates network namespaces and TUN devices)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("skipping: no /dev/net/tun (%v)", err)
	}
	t.Run("plain", func(t *testing.T) { testUDPChain(t, "p", 96, nil) })
	t.Run("crc", func(t *testing.T) { testUDPChain(t, "c", 95, []string{"-crc"}) })
}

func testUDPChain(t *testing.T, tag string, net2 int, flags []string) {
	pid := os.Getpid()
	nsA, nsB := fmt.Sprintf("pibgwu-%d-%sa", pid, tag), fmt.Sprintf("pibgwu-%d-%sb", pid, tag)
	addrA, addrB := fmt.Sprintf("10.%d.0.1", net2), fmt.Sprintf("10.%d.0.2", net2)
	t.Cleanup(func() {
		for _, ns := range []string{nsA, nsB} {
			if tun.NetNSExists(ns) {
				tun.DeleteNetNS(ns)
			}
		}
	})
	port := 30000 + pid%20000 + 3*(100-net2)
	fw, sa, sb := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", port+1), fmt.Sprintf("127.0.0.1:%d", port+2)
	stop := make(chan struct{})
	var outs [3]syncBuffer
	done := make(chan int, 3)
	go func() {
		done <- run(append([]string{"-forward", fw, "-between", sa + "," + sb}, flags...), &outs[0], stop)
	}()
	go func() {
		done <- run(append([]string{"-a", nsA + ":ib0:" + addrA + "/24", "-udp", sa, "-peer", fw, "-mtu", "65520"}, flags...), &outs[1], stop)
	}()
	go func() {
		done <- run(append([]string{"-a", nsB + ":ib0:" + addrB + "/24", "-udp", sb, "-peer", fw, "-mtu", "65520"}, flags...), &outs[2], stop)
	}()
	stopped := false
	stopAll := func() []int {
		if stopped {
			return nil
		}
		stopped = true
		close(stop)
		var st []int
		for range 3 {
			st = append(st, <-done)
		}
		return st
	}
	defer stopAll()
	for _, ns := range []string{nsA, nsB} {
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(func() string { b, _ := exec.Command("ip", "-n", ns, "addr", "show", "ib0").Output(); return string(b) }(), fmt.Sprintf("10.%d.0.", net2)) {
			if time.Now().After(deadline) {
				t.Fatalf("side %s did not come up: %s %s", ns, outs[1].String(), outs[2].String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	payload := bytes.Repeat([]byte("udp chain "), 2<<20)
	sendTCP(t, nsA, nsB, addrB, payload)
	for i, st := range stopAll() {
		if st != 0 {
			t.Fatalf("process %d exit status %d: %s", i, st, outs[i].String())
		}
	}
	t.Logf("%s%s%s", outs[0].String(), outs[1].String(), outs[2].String())
	var segs, n, dgrams, dropped int
	_, summary, _ := strings.Cut(outs[1].String(), "device→udp:")
	if _, err := fmt.Sscanf(summary, " %d segments, %d bytes, %d datagrams, %d dropped", &segs, &n, &dgrams, &dropped); err != nil || n < len(payload) {
		t.Fatalf("side A's summary: %v: %s", err, outs[1].String())
	}
	if n/segs <= chunkData || dgrams < n/chunkData || dropped != 0 {
		t.Errorf("side A sent %d bytes in %d segments, %d datagrams, %d dropped: want segments larger than a datagram, datagrams of at most %d bytes, none dropped",
			n, segs, dgrams, dropped, chunkData)
	}
	_, rx, _ := strings.Cut(outs[2].String(), "udp→device:")
	if _, err := fmt.Sscanf(rx, " %d segments, %d bytes, %d datagrams, %d dropped", &segs, &n, &dgrams, &dropped); err != nil || n < len(payload) || dropped != 0 {
		t.Errorf("side B received %d bytes, %d dropped (%v): want all, none dropped", n, dropped, err)
	}
	if !strings.Contains(outs[0].String(), "forwarded:") || !strings.Contains(outs[0].String(), ", 0 dropped") || strings.Contains(outs[0].String(), " 0 datagrams") {
		t.Errorf("forwarder: %s", outs[0].String())
	}
	if tun.NetNSExists(nsA) || tun.NetNSExists(nsB) {
		t.Fatalf("namespaces left behind")
	}
}

// TestChunkCRC: with -crc, a chunk whose payload changed after its CRCs were made fails
// the receiver's check (both CRCs) and the forwarder's (the CRC-16).
func TestChunkCRC(t *testing.T) {
	d := make([]byte, chunkHdr+chunkData)
	for i := range d {
		d[i] = byte(i * 7)
	}
	h, p := d[:chunkHdr], d[chunkHdr:]
	binary.BigEndian.PutUint32(h[hdrCRC32:], wire.ICRC(p))
	binary.BigEndian.PutUint16(h[hdrCRC16:], wire.VCRC(p))
	if !crcOK(h, p, false) || !forwardOK(d, len(d)) {
		t.Fatal("a correct chunk failed")
	}
	p[100] ^= 1
	if crcOK(h, p, false) || forwardOK(d, len(d)) {
		t.Fatal("a corrupted chunk passed")
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in different goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
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
	payload := bytes.Repeat([]byte("tunrelay "), 1<<20)
	sendTCP(t, nsA, nsB, addrB, payload)
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
