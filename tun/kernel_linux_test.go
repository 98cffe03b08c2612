package tun

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// These tests create network namespaces and TUN devices: they need root. All traffic
// stays inside namespaces the test created.

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (creates network namespaces and TUN devices)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("skipping: no /dev/net/tun (%v)", err)
	}
}

var nsSeq atomic.Int32

// testNetNS creates a network namespace unique to this test, deleted at cleanup.
func testNetNS(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("pibgwt-%d-%d", os.Getpid(), nsSeq.Add(1))
	if err := CreateNetNS(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := DeleteNetNS(name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return name
}

func testKernel(t testing.TB, cfg KernelConfig) *Kernel {
	t.Helper()
	k, err := CreateKernel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

func ipCmd(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// readUntil reads from d until match accepts a packet or the timeout passes.
func readUntil(t testing.TB, d Device, timeout time.Duration, match func(p []byte) bool) []byte {
	t.Helper()
	type result struct {
		p   []byte
		err error
	}
	done := make(chan result, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		bufs := make([][]byte, d.BatchSize())
		sizes := make([]int, len(bufs))
		for i := range bufs {
			bufs[i] = make([]byte, MinOffset+65535)
		}
		for {
			n, err := d.Read(bufs, sizes, MinOffset)
			if err != nil {
				done <- result{err: err}
				return
			}
			for i := range n {
				p := bufs[i][MinOffset : MinOffset+sizes[i]]
				if match(p) {
					done <- result{p: bytes.Clone(p)}
					return
				}
			}
			select {
			case <-stop:
				done <- result{err: errors.New("stopped")}
				return
			default:
			}
		}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("read %s: %v", d.Name(), r.err)
		}
		return r.p
	case <-time.After(timeout):
		close(stop)
		d.Close() // unblock the reader
		wg.Wait()
		t.Fatalf("read %s: no matching packet within %v", d.Name(), timeout)
		return nil
	}
}

func TestKernelInfinibandInNetNS(t *testing.T) {
	needRoot(t)
	ns := testNetNS(t)
	k := testKernel(t, KernelConfig{
		Name:       "ib0",
		MTU:        2044,
		NetNS:      ns,
		Infiniband: true,
		Addrs: []netip.Prefix{
			netip.MustParsePrefix("10.99.0.1/24"),
			netip.MustParsePrefix("fe80::1/64"),
		},
		Up: true,
	})
	if k.Name() != "ib0" || k.NetNS() != ns || k.MTU() != 2044 || k.Index() <= 0 {
		t.Fatalf("name %q netns %q mtu %d index %d", k.Name(), k.NetNS(), k.MTU(), k.Index())
	}
	if k.BatchSize() < 2 {
		t.Errorf("BatchSize %d: offloads not enabled", k.BatchSize())
	}
	link := ipCmd(t, "-n", ns, "-d", "link", "show", "ib0")
	t.Logf("ip -n %s -d link show ib0:\n%s", ns, link)
	for _, want := range []string{"link/infiniband", "mtu 2044", "MULTICAST", "UP"} {
		if !strings.Contains(link, want) {
			t.Errorf("ip link lacks %q", want)
		}
	}
	addr := ipCmd(t, "-n", ns, "addr", "show", "ib0")
	for _, want := range []string{"10.99.0.1/24", "fe80::1/64"} {
		if !strings.Contains(addr, want) {
			t.Errorf("ip addr lacks %q:\n%s", want, addr)
		}
	}
	// Link type infiniband: the kernel generated no link-local address of its own.
	if n := strings.Count(addr, "inet6 fe80"); n != 1 {
		t.Errorf("%d link-local addresses, want only ours:\n%s", n, addr)
	}
	// The device must not exist in our namespace.
	if _, err := net.InterfaceByIndex(k.Index()); err == nil {
		if ifi, _ := net.InterfaceByName("ib0"); ifi != nil && ifi.Index == k.Index() {
			t.Errorf("ib0 visible in the test's own namespace")
		}
	}

	payload := []byte("pibgw tun echo test")
	t.Run("ICMPv4Echo", func(t *testing.T) {
		req := icmp4Echo(netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.1"), 8, 0x4242, 1, payload)
		writePacket(t, k, req)
		rep := readUntil(t, k, 5*time.Second, func(p []byte) bool {
			v, proto, m := ipProto(p)
			return v == 4 && proto == 1 && len(m) >= 8 && m[0] == 0
		})
		want := icmp4Echo(netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2"), 0, 0x4242, 1, payload)
		if !bytes.Equal(rep[20:], want[20:]) || !bytes.Equal(rep[12:20], want[12:20]) {
			t.Fatalf("echo reply\n got %x\nwant %x", rep, want)
		}
		if checksum(rep[:20], 0) != 0 {
			t.Errorf("reply IPv4 header checksum bad")
		}
	})
	t.Run("ICMPv6Echo", func(t *testing.T) {
		src, dst := netip.MustParseAddr("fe80::2"), netip.MustParseAddr("fe80::1")
		req := icmp6Echo(src, dst, 128, 0x4343, 1, payload)
		writePacket(t, k, req)
		rep := readUntil(t, k, 5*time.Second, func(p []byte) bool {
			v, proto, m := ipProto(p)
			return v == 6 && proto == 58 && len(m) >= 8 && m[0] == 129
		})
		want := icmp6Echo(dst, src, 129, 0x4343, 1, payload)
		if !bytes.Equal(rep[8:], want[8:]) {
			t.Fatalf("echo reply\n got %x\nwant %x", rep, want)
		}
	})
	t.Run("IGMPReport", func(t *testing.T) {
		// Join 239.1.2.3 on ib0 inside the namespace: the kernel reports the membership
		// through the device (IPoIB reads these reports to join multicast groups).
		var fd int
		err := InNetNS(ns, func() error {
			var err error
			fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			return unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
				&unix.IPMreqn{Multiaddr: [4]byte{239, 1, 2, 3}, Ifindex: int32(k.Index())})
		})
		if fd > 0 {
			defer unix.Close(fd)
		}
		if err != nil {
			t.Fatal(err)
		}
		rep := readUntil(t, k, 5*time.Second, func(p []byte) bool {
			v, proto, m := ipProto(p)
			return v == 4 && proto == 2 && bytes.Contains(m, []byte{239, 1, 2, 3})
		})
		t.Logf("IGMP report %x", rep)
	})
	t.Run("MLDReport", func(t *testing.T) {
		var fd int
		group := netip.MustParseAddr("ff12::1:2:3").As16()
		err := InNetNS(ns, func() error {
			var err error
			fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			return unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP,
				&unix.IPv6Mreq{Multiaddr: group, Interface: uint32(k.Index())})
		})
		if fd > 0 {
			defer unix.Close(fd)
		}
		if err != nil {
			t.Fatal(err)
		}
		rep := readUntil(t, k, 5*time.Second, func(p []byte) bool {
			v, proto, m := ipProto(p)
			return v == 6 && proto == 58 && len(m) > 0 && m[0] == 143 && bytes.Contains(m, group[:])
		})
		t.Logf("MLDv2 report %x", rep)
	})
	t.Run("SetMTU", func(t *testing.T) {
		if err := k.SetMTU(1500); err != nil {
			t.Fatal(err)
		}
		if k.MTU() != 1500 || !strings.Contains(ipCmd(t, "-n", ns, "link", "show", "ib0"), "mtu 1500") {
			t.Fatalf("MTU %d after SetMTU(1500)", k.MTU())
		}
		if err := k.SetMTU(2044); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Carrier", func(t *testing.T) {
		if err := k.SetCarrier(false); err != nil {
			t.Fatal(err)
		}
		if l := ipCmd(t, "-n", ns, "link", "show", "ib0"); !strings.Contains(l, "NO-CARRIER") {
			t.Errorf("carrier off: %s", l)
		}
		if err := k.SetCarrier(true); err != nil {
			t.Fatal(err)
		}
		if l := ipCmd(t, "-n", ns, "link", "show", "ib0"); strings.Contains(l, "NO-CARRIER") {
			t.Errorf("carrier on: %s", l)
		}
	})

	// Close removes the device and leaves the namespace.
	bufs, sizes := [][]byte{make([]byte, MinOffset+4096)}, []int{0}
	closeWhileReading(t, "Read", func() error {
		_, err := k.Read(bufs, sizes, MinOffset)
		return err
	}, k.Close)
	if _, err := k.Write([][]byte{make([]byte, MinOffset+20)}, MinOffset); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
	if out, err := exec.Command("ip", "-n", ns, "link", "show", "ib0").CombinedOutput(); err == nil {
		t.Errorf("ib0 still exists after Close:\n%s", out)
	}
	if !NetNSExists(ns) {
		t.Errorf("netns %s gone after Close", ns)
	}
}

func writePacket(t testing.TB, d Device, p []byte) {
	t.Helper()
	buf := make([]byte, MinOffset+len(p))
	copy(buf[MinOffset:], p)
	if n, err := d.Write([][]byte{buf}, MinOffset); err != nil || n != 1 {
		t.Fatalf("write %s: %d, %v", d.Name(), n, err)
	}
}

func TestKernelErrors(t *testing.T) {
	needRoot(t)
	if _, err := CreateKernel(KernelConfig{Name: "x", NetNS: "pibgwt-no-such-ns"}); err == nil || !strings.Contains(err.Error(), "pibgwt-no-such-ns") {
		t.Errorf("missing netns: %v", err)
	}
	if _, err := CreateKernel(KernelConfig{Name: "a-name-far-too-long"}); err == nil {
		t.Errorf("long name accepted")
	}
	if _, err := CreateKernel(KernelConfig{MTU: 1000, Addrs: []netip.Prefix{netip.MustParsePrefix("fe80::1/64")}}); err == nil {
		t.Errorf("IPv6 with MTU 1000 accepted")
	}
	ns := testNetNS(t)
	testKernel(t, KernelConfig{Name: "ib0", NetNS: ns})
	_, err := CreateKernel(KernelConfig{Name: "ib0", NetNS: ns})
	if err == nil || !strings.Contains(err.Error(), "ib0") || !strings.Contains(err.Error(), ns) {
		t.Errorf("duplicate device: %v", err)
	}
	t.Logf("duplicate: %v", err)
	if err := CreateNetNS(ns); err == nil {
		t.Errorf("duplicate netns accepted")
	}
}

// relayPair creates two namespaces with one TUN each, in 10.98.0.0/24, joined by Copy
// both ways.
func relayPair(t testing.TB, mtu int) (nsA, nsB string, a, b *Kernel) {
	nsA, nsB = testNetNS(t), testNetNS(t)
	a = testKernel(t, KernelConfig{Name: "ib0", MTU: mtu, NetNS: nsA, Infiniband: true, Up: true,
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.98.0.1/24"), netip.MustParsePrefix("fe80::1/64")}})
	b = testKernel(t, KernelConfig{Name: "ib1", MTU: mtu, NetNS: nsB, Infiniband: true, Up: true,
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.98.0.2/24"), netip.MustParsePrefix("fe80::2/64")}})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); Copy(b, a) }()
	go func() { defer wg.Done(); Copy(a, b) }()
	t.Cleanup(func() {
		a.Close()
		b.Close()
		wg.Wait()
	})
	return
}

func TestKernelRelay(t *testing.T) {
	needRoot(t)
	nsA, nsB, _, _ := relayPair(t, 2044)

	t.Run("TCP", func(t *testing.T) {
		// 32 MiB over TCP from A to B: the kernel hands over TSO segments, which Read
		// splits, and Write coalesces them again on the other side.
		const size = 32 << 20
		var ln net.Listener
		if err := InNetNS(nsB, func() (err error) {
			ln, err = net.Listen("tcp4", "10.98.0.2:5201")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		got := make(chan [32]byte, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- [32]byte{}
				return
			}
			defer c.Close()
			h := sha256.New()
			io.Copy(h, c)
			got <- [32]byte(h.Sum(nil))
		}()
		var c net.Conn
		if err := InNetNS(nsA, func() (err error) {
			c, err = net.DialTimeout("tcp4", "10.98.0.2:5201", 5*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		start := time.Now()
		if _, err := io.Copy(c, io.TeeReader(io.LimitReader(rand.Reader, size), h)); err != nil {
			t.Fatal(err)
		}
		c.Close()
		select {
		case sum := <-got:
			if sum != [32]byte(h.Sum(nil)) {
				t.Fatal("TCP stream corrupted across the relay")
			}
		case <-time.After(60 * time.Second):
			t.Fatal("TCP stream did not finish")
		}
		d := time.Since(start)
		t.Logf("32 MiB TCP through the kernel TUN relay in %v (%.0f MB/s)", d, float64(size)/d.Seconds()/1e6)
	})
	t.Run("UDP6", func(t *testing.T) {
		var pc net.PacketConn
		if err := InNetNS(nsB, func() (err error) {
			pc, err = net.ListenPacket("udp6", "[fe80::2%ib1]:5300")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		go func() {
			buf := make([]byte, 2000)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo(buf[:n], from)
			}
		}()
		var c net.Conn
		if err := InNetNS(nsA, func() (err error) {
			c, err = net.Dial("udp6", "[fe80::2%ib0]:5300")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		msg := []byte("over the relay, link-local")
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("UDP6 echo: %q, %v", buf[:n], err)
		}
	})
	t.Run("Ping", func(t *testing.T) {
		if _, err := exec.LookPath("ping"); err != nil {
			t.Skip("skipping: no ping binary")
		}
		out, err := exec.Command("ip", "netns", "exec", nsA, "ping", "-c", "3", "-W", "1", "10.98.0.2").CombinedOutput()
		if err != nil {
			t.Fatalf("ping: %v\n%s", err, out)
		}
		t.Logf("%s", out)
	})
}

// BenchmarkKernelRelay (root) measures TCP throughput between two namespaces whose TUN
// devices are joined by Copy: the kernel's TSO segments are split on Read and coalesced
// again on Write.
func BenchmarkKernelRelay(b *testing.B) {
	needRoot(b)
	for _, mtu := range []int{2044, 65520} {
		b.Run(fmt.Sprintf("MTU%d", mtu), func(b *testing.B) {
			nsA, nsB, _, _ := relayPair(b, mtu)
			var ln net.Listener
			if err := InNetNS(nsB, func() (err error) { ln, err = net.Listen("tcp4", "10.98.0.2:5201"); return }); err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			done := make(chan int64, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					done <- 0
					return
				}
				n, _ := io.CopyBuffer(io.Discard, c, make([]byte, 256<<10))
				c.Close()
				done <- n
			}()
			var c net.Conn
			if err := InNetNS(nsA, func() (err error) { c, err = net.Dial("tcp4", "10.98.0.2:5201"); return }); err != nil {
				b.Fatal(err)
			}
			chunk := make([]byte, 256<<10)
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			if n := <-done; n != int64(b.N)*int64(len(chunk)) {
				b.Fatalf("received %d of %d bytes", n, int64(b.N)*int64(len(chunk)))
			}
		})
	}
}

// TestKernelWatch: Watch reports what `ip` does to the device — addresses added and
// removed, down and up, MTU, a gateway route — and its deletion, from netlink
// notifications in the device's namespace.
func TestKernelWatch(t *testing.T) {
	needRoot(t)
	ns := testNetNS(t)
	k := testKernel(t, KernelConfig{
		Name: "ib0", NetNS: ns, MTU: 2044, Infiniband: true, Up: true,
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.10.0.1/24")},
	})
	// CreateNetNS left lo up.
	if lo := ipCmd(t, "-n", ns, "link", "show", "lo"); !strings.Contains(lo, "state UNKNOWN") && !strings.Contains(lo, ",UP") {
		t.Errorf("lo in a created namespace: %s", lo)
	}
	states := make(chan LinkState, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Watch(ctx, func(s LinkState) { states <- s }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	// wait returns the first state reported that satisfies ok.
	wait := func(what string, ok func(LinkState) bool) LinkState {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case s := <-states:
				if ok(s) {
					return s
				}
			case <-deadline:
				t.Fatalf("no state with %s", what)
			}
		}
	}
	has := func(s LinkState, p string) bool { return slices.Contains(s.Addrs, netip.MustParsePrefix(p)) }
	wait("the initial address", func(s LinkState) bool { return s.Up && s.MTU == 2044 && has(s, "10.10.0.1/24") })
	ipCmd(t, "-n", ns, "addr", "add", "10.10.0.22/24", "dev", "ib0")
	ipCmd(t, "-n", ns, "-6", "addr", "add", "fd00::22/64", "dev", "ib0", "nodad")
	wait("the added addresses", func(s LinkState) bool { return has(s, "10.10.0.22/24") && has(s, "fd00::22/64") })
	ipCmd(t, "-n", ns, "addr", "del", "10.10.0.22/24", "dev", "ib0")
	wait("the address removed", func(s LinkState) bool { return !has(s, "10.10.0.22/24") })
	ipCmd(t, "-n", ns, "link", "set", "ib0", "down")
	wait("down", func(s LinkState) bool { return !s.Up })
	ipCmd(t, "-n", ns, "link", "set", "ib0", "up")
	wait("up", func(s LinkState) bool { return s.Up })
	ipCmd(t, "-n", ns, "link", "set", "ib0", "mtu", "1500")
	wait("mtu 1500", func(s LinkState) bool { return s.MTU == 1500 })
	ipCmd(t, "-n", ns, "route", "add", "10.30.0.0/24", "via", "10.10.0.2", "dev", "ib0")
	s := wait("the gateway route", func(s LinkState) bool {
		return slices.Contains(s.Routes, Route{Dst: netip.MustParsePrefix("10.30.0.0/24"), Gateway: netip.MustParseAddr("10.10.0.2")})
	})
	if !slices.Contains(s.Routes, Route{Dst: netip.MustParsePrefix("10.10.0.0/24")}) {
		t.Errorf("no connected route in %+v", s.Routes)
	}
	if err := k.AddAddr(netip.MustParsePrefix("fe80::1/64")); err != nil {
		t.Fatal(err)
	}
	wait("AddAddr's address", func(s LinkState) bool { return has(s, "fe80::1/64") })
	ipCmd(t, "-n", ns, "link", "del", "ib0")
	wait("the deletion", func(s LinkState) bool { return s.Deleted })
	if err := <-done; err != nil {
		t.Errorf("Watch after the deletion: %v", err)
	}
	done <- nil
}

// TestKernelSetOffloads: with its offloads off the device gets UDP packets with their
// checksum done by the kernel; with checksum offload only (IPoIB connected mode) or all
// offloads, CHECKSUM_PARTIAL again.
func TestKernelSetOffloads(t *testing.T) {
	needRoot(t)
	ns := testNetNS(t)
	k := testKernel(t, KernelConfig{Name: "ib0", MTU: 9000, NetNS: ns, Infiniband: true, Up: true,
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.97.0.1/24")}})
	if !k.Offloads() {
		t.Skip("skipping: the kernel TUN has no virtio-net header here")
	}
	var conn net.PacketConn
	if err := InNetNS(ns, func() (err error) {
		conn, err = net.ListenPacket("udp4", "10.97.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dst := &net.UDPAddr{IP: net.IPv4(10, 97, 0, 9), Port: 5400}
	payload := bytes.Repeat([]byte("x"), 3000)
	readUDP := func() ([]byte, GSO) {
		t.Helper()
		buf := make([]byte, MinOffset+65535)
		for range 20 {
			if _, err := conn.WriteTo(payload, dst); err != nil {
				t.Fatal(err)
			}
			n, g, err := k.ReadGSO(buf, MinOffset)
			if err != nil {
				t.Fatal(err)
			}
			p := buf[MinOffset : MinOffset+n]
			if len(p) > 28 && p[0]>>4 == 4 && p[9] == 17 && binary.BigEndian.Uint16(p[22:]) == 5400 {
				return p, g
			}
		}
		t.Fatal("no UDP packet read")
		return nil, GSO{}
	}
	if _, g := readUDP(); !g.NeedsCsum {
		t.Fatalf("offloads on: metadata %+v, want CHECKSUM_PARTIAL", g)
	}
	if err := k.SetOffloads(OffloadsNone); err != nil {
		t.Fatal(err)
	}
	p, g := readUDP()
	if g.NeedsCsum || g.Type != GSONone {
		t.Fatalf("offloads off: metadata %+v, want none", g)
	}
	if sum := udpSum(p); sum != 0xFFFF {
		t.Fatalf("offloads off: UDP checksum does not verify (sum %#x)", sum)
	}
	if err := k.SetOffloads(OffloadsCsum); err != nil {
		t.Fatal(err)
	}
	if _, g := readUDP(); !g.NeedsCsum || g.Type != GSONone {
		t.Fatalf("checksum offload only: metadata %+v, want CHECKSUM_PARTIAL", g)
	}
	if err := k.SetOffloads(OffloadsAll); err != nil {
		t.Fatal(err)
	}
	if _, g := readUDP(); !g.NeedsCsum {
		t.Fatalf("offloads back on: metadata %+v, want CHECKSUM_PARTIAL", g)
	}
}

// udpSum is the ones'-complement sum of an IPv4 UDP packet's pseudo-header and
// datagram: 0xFFFF when its checksum is right.
func udpSum(p []byte) uint16 {
	ihl := int(p[0]&0xF) * 4
	u := p[ihl:]
	var s uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
	}
	add(p[12:20])
	s += 17 + uint32(len(u))
	add(u)
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}

// TestKernelGSOClose: a ReadGSO waiting for a packet returns ErrClosed when the device
// is closed, as Read does, and WriteGSO after Close fails with ErrClosed; both go
// through raw system calls on the non-blocking TUN file, whose wait is the poller's.
func TestKernelGSOClose(t *testing.T) {
	needRoot(t)
	ns := testNetNS(t)
	k := testKernel(t, KernelConfig{Name: "ib0", MTU: 9000, NetNS: ns, Infiniband: true, Up: true,
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.98.0.1/24")}})
	if !k.Offloads() {
		t.Skip("skipping: the kernel TUN has no virtio-net header here")
	}
	if k.raw == nil {
		t.Error("the TUN file is not non-blocking: ReadGSO and WriteGSO fall back to its Read and Write")
	}
	buf := make([]byte, MinOffset+65535)
	closeWhileReading(t, "ReadGSO", func() error {
		_, _, err := k.ReadGSO(buf, MinOffset)
		return err
	}, k.Close)
	if err := k.WriteGSO(make([]byte, MinOffset+20), MinOffset, GSO{}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteGSO after Close: %v, want ErrClosed", err)
	}
}
