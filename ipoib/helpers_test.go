package ipoib_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
	"github.com/pibgw/pibgw/tun"
	"github.com/pibgw/pibgw/tun/tuntest"
)

// fakeTUN is tuntest's in-memory Channel with the helpers these tests use: the test
// plays the IP stack through Inject (what the stack sends) and recv (what the interface
// delivered).
type fakeTUN struct {
	*tuntest.Channel
	name string
	out  chan []byte
}

func newFakeTUN(name string) *fakeTUN {
	c := tuntest.NewChannel(name, 1500)
	c.SetBatchSize(64)
	return &fakeTUN{Channel: c, name: name, out: c.Outbound}
}

func (f *fakeTUN) Inject(p []byte) { f.Inbound <- p }
func (f *fakeTUN) pending() int    { return len(f.out) }

// recvAdvancing is recv for a packet that may need a retransmission first (an ARP
// request sent while the SM was still programming the switches): it moves the fake clock
// on by step every few milliseconds while it waits, so the interface's timers fire.
func (f *fakeTUN) recvAdvancing(t testing.TB, clk *clock.Fake, step time.Duration) []byte {
	t.Helper()
	if p, ok := f.awaitAdvancing(clk, step, 10*time.Second); ok {
		return p
	}
	t.Fatalf("%s: nothing delivered", f.name)
	return nil
}

// awaitAdvancing waits up to d (real time) for a packet, moving the fake clock on by step
// every 5 ms meanwhile.
func (f *fakeTUN) awaitAdvancing(clk *clock.Fake, step, d time.Duration) ([]byte, bool) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		select {
		case p := <-f.out:
			return p, true
		case <-time.After(5 * time.Millisecond):
			clk.Advance(step)
		}
	}
	return nil, false
}

// resendAdvancing injects p into src until dst delivers a packet, advancing clk by
// step every 5 ms meanwhile, and returns what dst delivered: what a user's ping does
// when the first attempt's ARP ran out of retries — on the fake clock, which runs far
// faster than the real-time SM that programs a rejoined group's forwarding (under
// -race load that took longer than an ARP's three tries, once in about 30 CI runs).
func resendAdvancing(t testing.TB, src, dst *fakeTUN, p []byte, clk *clock.Fake, step time.Duration) []byte {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		src.Inject(p)
		if got, ok := dst.awaitAdvancing(clk, step, 500*time.Millisecond); ok {
			return got
		}
	}
	t.Fatalf("%s: nothing delivered", dst.name)
	return nil
}

func (f *fakeTUN) recv(t testing.TB) []byte {
	t.Helper()
	select {
	case p := <-f.out:
		return p
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing delivered", f.name)
		return nil
	}
}

// recvMatch waits for a delivered packet for which ok is true, skipping others.
func (f *fakeTUN) recvMatch(t testing.TB, ok func([]byte) bool) []byte {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case p := <-f.out:
			if ok(p) {
				return p
			}
		case <-deadline:
			t.Fatalf("%s: no matching packet delivered", f.name)
			return nil
		}
	}
}

// nothing asserts that no packet is delivered within a short while.
func (f *fakeTUN) nothing(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case p := <-f.out:
		t.Fatalf("%s: unexpected packet delivered: % x", f.name, p[:min(len(p), 48)])
	case <-time.After(d):
	}
}

// testFabric is a switch with n HCAs, the SM and SA on HCA 0, an SA client per port.
type testFabric struct {
	f       *satest.Fabric
	sm      *sa.SM
	agent   *sa.Agent
	clients []*sa.Client
	clk     *clock.Fake
}

func newTestFabric(t testing.TB, n int, cfg sa.Config) *testFabric {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := satest.OneSwitch(t, n, satest.Options{Clock: clk})
	tf := &testFabric{f: f, clk: clk}
	tf.sm = f.StartSM(t, cfg)
	agent, err := sa.StartSA(tf.sm, sa.AgentConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tf.agent = agent
	t.Cleanup(func() { tf.agent.Close() })
	for _, p := range f.Ports() {
		c, err := sa.NewClient(p, sa.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		tf.clients = append(tf.clients, c)
	}
	return tf
}

// iface creates and runs an interface on HCA i.
func (tf *testFabric) iface(t testing.TB, i int, pkey uint16, name string, addrs ...string) (*ipoib.Interface, *fakeTUN) {
	t.Helper()
	dev := newFakeTUN(name)
	return tf.ifaceOn(t, i, pkey, dev, addrs...), dev
}

// ifaceOn creates and runs an interface on HCA i with dev as its IP side.
func (tf *testFabric) ifaceOn(t testing.TB, i int, pkey uint16, dev tun.Device, addrs ...string) *ipoib.Interface {
	t.Helper()
	return tf.ifaceWith(t, i, dev, ipoib.Config{PKey: pkey}, addrs...)
}

// ifaceWith is ifaceOn with more of the configuration (P_Key 0xFFFF if cfg has none).
func (tf *testFabric) ifaceWith(t testing.TB, i int, dev tun.Device, cfg ipoib.Config, addrs ...string) *ipoib.Interface {
	t.Helper()
	name := dev.Name()
	var ps []netip.Prefix
	for _, a := range addrs {
		ps = append(ps, netip.MustParsePrefix(a))
	}
	if cfg.PKey == 0 {
		cfg.PKey = 0xFFFF
	}
	cfg.Name, cfg.Port, cfg.SA, cfg.Device = name, tf.f.HCAs[i].Port(1), tf.clients[i], dev
	cfg.Addrs, cfg.Clock, cfg.NeighborTimeout = ps, tf.clk, time.Minute
	ifc, err := ipoib.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The SA answers a join before the SM has programmed the group's MFT entry (as
	// OpenSM does; ARP's retransmission covers it, on a clock these tests hold still):
	// a heavy sweep's end means every group's forwarding is in place.
	if tf.sm != nil {
		<-tf.sm.Resweep()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ifc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: Run: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: Run did not return", name)
		}
	})
	return ifc
}

// waitFor polls cond until it holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Packet builders.

func csum(b []byte) uint16 {
	var s uint32
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return ^uint16(s)
}

// ipv4 builds an IPv4 packet of protocol proto around payload.
func ipv4(src, dst string, proto byte, ttl byte, payload []byte) []byte {
	p := make([]byte, 20+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	binary.BigEndian.PutUint16(p[4:], 0x1234)
	p[8], p[9] = ttl, proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	binary.BigEndian.PutUint16(p[10:], csum(p[:20]))
	copy(p[20:], payload)
	return p
}

// udp4 builds an IPv4 UDP packet (checksum 0, allowed for IPv4).
func udp4(src, dst string, sport, dport uint16, data []byte) []byte {
	u := make([]byte, 8+len(data))
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	copy(u[8:], data)
	return ipv4(src, dst, 17, 64, u)
}

// icmpEcho4 builds an ICMP echo request.
func icmpEcho4(src, dst string, seq uint16, data []byte) []byte {
	m := make([]byte, 8+len(data))
	m[0] = 8
	binary.BigEndian.PutUint16(m[4:], 1)
	binary.BigEndian.PutUint16(m[6:], seq)
	copy(m[8:], data)
	binary.BigEndian.PutUint16(m[2:], csum(m))
	return ipv4(src, dst, 1, 64, m)
}

// ipv6 builds an IPv6 packet.
func ipv6(src, dst string, next byte, payload []byte) []byte {
	p := make([]byte, 40+len(payload))
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:], uint16(len(payload)))
	p[6], p[7] = next, 64
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	copy(p[40:], payload)
	return p
}

// echo6 builds an ICMPv6 echo request with its checksum.
func echo6(src, dst string, seq uint16, data []byte) []byte {
	m := make([]byte, 8+len(data))
	m[0] = 128
	binary.BigEndian.PutUint16(m[4:], 1)
	binary.BigEndian.PutUint16(m[6:], seq)
	copy(m[8:], data)
	p := ipv6(src, dst, 58, m)
	var ph []byte
	ph = append(ph, p[8:40]...)
	ph = binary.BigEndian.AppendUint32(ph, uint32(len(m)))
	ph = append(ph, 0, 0, 0, 58)
	ph = append(ph, m...)
	binary.BigEndian.PutUint16(p[42:], csum(ph))
	return p
}

// igmpv3 builds an IGMPv3 membership report with one record (type typ, no sources).
func igmpv3(src, group string, typ byte) []byte {
	m := make([]byte, 16)
	m[0] = 0x22
	binary.BigEndian.PutUint16(m[6:], 1)
	m[8] = typ
	g := netip.MustParseAddr(group).As4()
	copy(m[12:], g[:])
	binary.BigEndian.PutUint16(m[2:], csum(m))
	return ipv4(src, "224.0.0.22", 2, 1, m)
}

// igmpv2 builds an IGMPv2 report (0x16) or leave (0x17).
func igmpv2(src, group string, typ byte) []byte {
	m := make([]byte, 8)
	m[0] = typ
	g := netip.MustParseAddr(group).As4()
	copy(m[4:], g[:])
	binary.BigEndian.PutUint16(m[2:], csum(m))
	dst := group
	if typ == 0x17 {
		dst = "224.0.0.2"
	}
	return ipv4(src, dst, 2, 1, m)
}

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }

// sendUntilDelivered injects p at from until to delivers it (5 s at most). A joiner
// attaches its QP once the SA's answer is back, just after the SA shows the membership,
// so the first packet to a new group can arrive before the attachment.
func sendUntilDelivered(t testing.TB, from, to *fakeTUN, p []byte) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		from.Inject(p)
		select {
		case got := <-to.out:
			if !bytes.Equal(got, p) {
				t.Fatalf("%s: got % x, want % x", to.name, got, p)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: nothing delivered", to.name)
		}
	}
}
