package ipoib_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// TestARPAndIPv4 brings up two interfaces, resolves each other by ARP over the
// broadcast group and moves IPv4 packets both ways intact.
func TestARPAndIPv4(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24")
	b, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	for _, x := range []*ipoib.Interface{a, b} {
		if st := x.State(); !st.Up {
			t.Fatalf("%s down: %s", x.Name(), st.Reason)
		}
	}
	if a.MTU() != 2044 || ta.MTU() != 2044 {
		t.Fatalf("MTU %d (tun %d), want 2044", a.MTU(), ta.MTU())
	}
	info := a.Info()
	if info.QKey != 0x0B1B || info.QPN != a.QPN() || info.HWAddr.QPN() != a.QPN() || info.PKey != 0xFFFF {
		t.Fatalf("info %+v", info)
	}
	gid, _ := tf.f.HCAs[0].Port(1).GID(0)
	if info.HWAddr.GID() != gid || info.HWAddr.Flags() != 0 {
		t.Fatalf("hw addr %s, port GID %s", info.HWAddr, gid)
	}
	if want := "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff"; info.Broadcast.String() != want {
		t.Fatalf("broadcast %s, want %s", info.Broadcast, want)
	}

	for k := 0; k < 10; k++ {
		p := udp4("10.10.0.1", "10.10.0.2", 1000, 2000, []byte(fmt.Sprintf("hello %d", k)))
		ta.Inject(p)
		if got := tb.recv(t); !bytes.Equal(got, p) {
			t.Fatalf("A→B packet %d: got % x, want % x", k, got, p)
		}
		r := udp4("10.10.0.2", "10.10.0.1", 2000, 1000, bytes.Repeat([]byte{byte(k)}, 1400))
		tb.Inject(r)
		if got := ta.recv(t); !bytes.Equal(got, r) {
			t.Fatalf("B→A packet %d differs", k)
		}
	}
	// A full-size packet: MTU 2044.
	big := udp4("10.10.0.1", "10.10.0.2", 1, 2, make([]byte, 2044-28))
	ta.Inject(big)
	if got := tb.recv(t); !bytes.Equal(got, big) {
		t.Fatal("MTU-sized packet differs")
	}
	tooBig := udp4("10.10.0.1", "10.10.0.2", 1, 2, make([]byte, 2045-28))
	ta.Inject(tooBig)
	waitFor(t, "drop_too_big", func() bool { return a.Counter("drop_too_big") == 1 })

	na := a.Neighbors()
	if len(na) != 1 || na[0].IP != netip.MustParseAddr("10.10.0.2") || na[0].HWAddr != b.HWAddr() || na[0].State != "REACHABLE" {
		t.Fatalf("A's neighbours: %+v (B is %s)", na, b.HWAddr())
	}
	nb := b.Neighbors()
	if len(nb) != 1 || nb[0].HWAddr != a.HWAddr() {
		t.Fatalf("B's neighbours: %+v", nb)
	}
	ca := a.Info().Counters
	if ca["tx_arp"] != 1 || ca["rx_arp"] != 1 || ca["tx_packets"] < 12 || ca["rx_packets"] != 10 || ca["path_queries"] != 1 {
		t.Fatalf("A's counters: %v", ca)
	}
	if cb := b.Info().Counters; cb["rx_packets"] != 11 || cb["rx_bytes"] == 0 || cb["tx_arp"] != 1 {
		t.Fatalf("B's counters: %v", cb)
	}
	_ = wire.GID{}
}

// hasGroup reports whether the SA knows the group.
func (tf *testFabric) hasGroup(mgid wire.GID) bool {
	for _, g := range tf.agent.Groups() {
		if g == mgid {
			return true
		}
	}
	return false
}

// isMember reports whether HCA i's port is a member of the group at the SA.
func (tf *testFabric) isMember(t testing.TB, i int, mgid wire.GID) bool {
	gid, _ := tf.f.HCAs[i].Port(1).GID(0)
	ms, err := tf.clients[i].MCMembers(context.Background(), mgid)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.PortGID == gid && m.JoinState&wire.JoinFullMember != 0 {
			return true
		}
	}
	return false
}

// TestIPv6NeighborDiscovery resolves global and link-local IPv6 neighbours with NS/NA
// over the solicited-node groups and moves ICMPv6 both ways.
func TestIPv6NeighborDiscovery(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24", "fd00::1/64")
	b, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24", "fd00::2/64")
	llA, llB := a.LinkLocal(), b.LinkLocal()
	guid := tf.f.HCAs[0].Port(1).GUID()
	if want := ipoib.LinkLocalFromGUID(guid); llA != want || !llA.IsLinkLocalUnicast() {
		t.Fatalf("link-local %s, want %s", llA, want)
	}
	// fe80::/64 + GUID with the U/L bit flipped: 0002:c903:0000:0101 → 0202:c903:0:101.
	if llA.String() != "fe80::202:c903:0:101" {
		t.Fatalf("link-local %s", llA)
	}
	pkey := uint16(0xFFFF)
	for _, addr := range []netip.Addr{netip.MustParseAddr("fd00::2"), llB, netip.MustParseAddr("ff02::1")} {
		mgid := ipoib.MGIDForIPv6(ipoib.SolicitedNode(addr), pkey, 2)
		if addr.IsMulticast() {
			mgid = ipoib.MGIDForIPv6(addr, pkey, 2)
		}
		waitFor(t, "group "+mgid.String(), func() bool { return tf.hasGroup(mgid) })
	}
	// The SA answers a join before the SM has programmed the group's MFT entries, and
	// the fake clock holds the NS retransmission back: the first NS must find them in
	// place. A heavy sweep's end means every group's forwarding is.
	<-tf.sm.Resweep()
	for k := 0; k < 5; k++ {
		p := echo6("fd00::1", "fd00::2", uint16(k), []byte("ping6 global"))
		ta.Inject(p)
		if got := tb.recv(t); !bytes.Equal(got, p) {
			t.Fatalf("A→B global: got % x", got)
		}
		r := echo6("fd00::2", "fd00::1", uint16(k), []byte("pong6 global"))
		tb.Inject(r)
		if got := ta.recv(t); !bytes.Equal(got, r) {
			t.Fatalf("B→A global: got % x", got)
		}
		l := echo6(llA.String(), llB.String(), uint16(k), []byte("ping6 link-local"))
		ta.Inject(l)
		if got := tb.recv(t); !bytes.Equal(got, l) {
			t.Fatalf("A→B link-local: got % x", got)
		}
	}
	want := map[netip.Addr]bool{netip.MustParseAddr("fd00::2"): true, llB: true}
	for _, n := range a.Neighbors() {
		if !want[n.IP] || n.HWAddr != b.HWAddr() || n.State != "REACHABLE" {
			t.Fatalf("A's neighbour %+v", n)
		}
		delete(want, n.IP)
	}
	if len(want) != 0 {
		t.Fatalf("A did not resolve %v: %+v", want, a.Neighbors())
	}
	if c := a.Info().Counters; c["tx_nd"] < 2 || c["rx_nd"] < 2 {
		t.Fatalf("A's counters %v", c)
	}
	// ND never reaches the IP stack: only the echo packets were delivered.
	if tb.pending() != 0 || ta.pending() != 0 {
		t.Fatal("extra packets delivered")
	}
}

// TestNeighborAging: an entry goes STALE after NeighborTimeout on the fake clock, is
// re-resolved when used, and an unanswered resolution FAILs and drops what waited.
func TestNeighborAging(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{SweepInterval: -1})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24")
	_, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	p := icmpEcho4("10.10.0.1", "10.10.0.2", 1, []byte("x"))
	ta.Inject(p)
	tb.recv(t)
	if n := a.Neighbors(); len(n) != 1 || n[0].State != "REACHABLE" || n[0].Age != 0 {
		t.Fatalf("neighbours %+v", n)
	}
	tf.clk.Advance(30 * time.Second)
	if n := a.Neighbors(); n[0].State != "REACHABLE" || n[0].Age != 30*time.Second {
		t.Fatalf("after 30 s: %+v", n)
	}
	tf.clk.Advance(31 * time.Second)
	if n := a.Neighbors(); n[0].State != "STALE" {
		t.Fatalf("after 61 s: %+v", n)
	}
	// Used while STALE: the packet goes out at once and an ARP request re-confirms.
	ta.Inject(p)
	tb.recv(t)
	waitFor(t, "re-resolution", func() bool {
		n := a.Neighbors()
		return n[0].State == "REACHABLE" && n[0].Age == 0
	})
	if c := a.Info().Counters; c["tx_arp"] != 2 || c["rx_arp"] != 2 {
		t.Fatalf("counters %v", c)
	}

	// Nobody has 10.10.0.99. Each packet is in its own read; the transmit loop has
	// queued one once it reads the next (the fourth, to 10.10.0.2, closes the series).
	batches := a.Counter("tx_batches")
	for k := 0; k < 3; k++ {
		ta.Inject(icmpEcho4("10.10.0.1", "10.10.0.99", uint16(k), nil))
		waitFor(t, "read", func() bool { return a.Counter("tx_batches") == batches+uint64(k)+1 })
	}
	ta.Inject(p)
	tb.recv(t)
	waitFor(t, "INCOMPLETE", func() bool {
		for _, n := range a.Neighbors() {
			if n.IP == netip.MustParseAddr("10.10.0.99") {
				return n.State == "INCOMPLETE"
			}
		}
		return false
	})
	waitFor(t, "queued", func() bool { return a.Counter("tx_arp") == 3 })
	for k := 0; k < 3; k++ {
		tf.clk.Advance(time.Second)
	}
	var st string
	for _, n := range a.Neighbors() {
		if n.IP == netip.MustParseAddr("10.10.0.99") {
			st = n.State
		}
	}
	c := a.Info().Counters
	if st != "FAILED" || c["drop_arp_timeout"] != 3 || c["neighbors_failed"] != 1 || c["tx_arp"] != 5 {
		t.Fatalf("state %s, counters %v", st, c)
	}
}

// TestIPv4Multicast: an IGMP report from A's stack makes A join the group's MGID; B
// sends to the group and A receives, C (not joined) does not; after A's leave, nothing.
func TestIPv4Multicast(t *testing.T) {
	tf := newTestFabric(t, 3, sa.Config{})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24")
	_, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	_, tc := tf.iface(t, 2, 0xFFFF, "ib2", "10.10.0.3/24")
	mgid := ipoib.MGIDForIPv4(netip.MustParseAddr("239.1.2.3"), 0xFFFF, 2)
	if mgid.String() != "ff12:401b:ffff::f01:203" {
		t.Fatalf("MGID %s", mgid)
	}
	ta.Inject(igmpv3("10.10.0.1", "239.1.2.3", 4)) // CHANGE_TO_EXCLUDE {}: join
	waitFor(t, "A's join", func() bool { return tf.isMember(t, 0, mgid) })
	if a.Counter("membership_reports") != 1 {
		t.Fatal("report not counted")
	}
	for k := 0; k < 3; k++ {
		p := udp4("10.10.0.2", "239.1.2.3", 5000, 5001, []byte(fmt.Sprintf("to the group %d", k)))
		if k == 0 {
			sendUntilDelivered(t, tb, ta, p) // A attaches its QP just after the SA shows it a member
			continue
		}
		tb.Inject(p)
		if got := ta.recv(t); !bytes.Equal(got, p) {
			t.Fatalf("A got % x", got)
		}
	}
	tc.nothing(t, 50*time.Millisecond)
	// Broadcast reaches everyone but the sender.
	bc := udp4("10.10.0.2", "10.10.0.255", 67, 68, []byte("broadcast"))
	tb.Inject(bc)
	if got := ta.recv(t); !bytes.Equal(got, bc) {
		t.Fatal("A: broadcast differs")
	}
	if got := tc.recv(t); !bytes.Equal(got, bc) {
		t.Fatal("C: broadcast differs")
	}
	tb.nothing(t, 20*time.Millisecond)

	ta.Inject(igmpv3("10.10.0.1", "239.1.2.3", 3)) // CHANGE_TO_INCLUDE {}: leave
	waitFor(t, "A's leave", func() bool { return !tf.isMember(t, 0, mgid) })
	tb.Inject(udp4("10.10.0.2", "239.1.2.3", 5000, 5001, []byte("after leave")))
	ta.nothing(t, 50*time.Millisecond)
	// IGMPv2 works too.
	ta.Inject(igmpv2("10.10.0.1", "239.1.2.4", 0x16))
	mgid4 := ipoib.MGIDForIPv4(netip.MustParseAddr("239.1.2.4"), 0xFFFF, 2)
	waitFor(t, "IGMPv2 join", func() bool { return tf.isMember(t, 0, mgid4) })
	p := udp4("10.10.0.3", "239.1.2.4", 1, 2, []byte("v2"))
	sendUntilDelivered(t, tc, ta, p)
}

// mldv2 builds an MLDv2 report with one record (type typ, no sources) behind a
// hop-by-hop router-alert header, as the kernel sends it.
func mldv2(src, group string, typ byte) []byte {
	hbh := []byte{58, 0, 5, 2, 0, 0, 1, 0}
	m := make([]byte, 8+20)
	m[0] = 143
	binary.BigEndian.PutUint16(m[6:], 1)
	m[8] = typ
	g := netip.MustParseAddr(group).As16()
	copy(m[12:], g[:])
	return ipv6(src, "ff02::16", 0, append(hbh, m...))
}

// TestMLDAndSetAddrs: an MLDv2 report joins an IPv6 group (B's sends reach A, not C);
// addresses added with SetAddrs are answered by ARP and ND.
func TestMLDAndSetAddrs(t *testing.T) {
	tf := newTestFabric(t, 3, sa.Config{})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24", "fd00::1/64")
	b, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24", "fd00::2/64")
	_, tc := tf.iface(t, 2, 0xFFFF, "ib2", "10.10.0.3/24", "fd00::3/64")
	group := "ff05::1:3"
	ta.Inject(mldv2(a.LinkLocal().String(), group, 4))
	mgid := ipoib.MGIDForIPv6(netip.MustParseAddr(group), 0xFFFF, 2)
	waitFor(t, "A's join", func() bool { return tf.isMember(t, 0, mgid) })
	u := make([]byte, 8+5)
	binary.BigEndian.PutUint16(u[0:], 1)
	binary.BigEndian.PutUint16(u[2:], 2)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	copy(u[8:], "hello")
	p := ipv6("fd00::2", group, 17, u)
	sendUntilDelivered(t, tb, ta, p) // A attaches its QP just after the SA shows it a member
	tc.nothing(t, 30*time.Millisecond)
	ta.Inject(mldv2(a.LinkLocal().String(), group, 3)) // CHANGE_TO_INCLUDE {}: leave
	waitFor(t, "A's leave", func() bool { return !tf.isMember(t, 0, mgid) })

	b.SetAddrs([]netip.Prefix{netip.MustParsePrefix("10.10.0.2/24"), netip.MustParsePrefix("10.10.0.22/24"),
		netip.MustParsePrefix("fd00::2/64"), netip.MustParsePrefix("fd00::22/64")})
	sn := ipoib.MGIDForIPv6(ipoib.SolicitedNode(netip.MustParseAddr("fd00::22")), 0xFFFF, 2)
	waitFor(t, "B's new solicited-node group", func() bool { return tf.hasGroup(sn) })
	for _, q := range [][]byte{
		icmpEcho4("10.10.0.1", "10.10.0.22", 1, []byte("new v4")),
		echo6("fd00::1", "fd00::22", 1, []byte("new v6")),
	} {
		ta.Inject(q)
		if got := tb.recv(t); !bytes.Equal(got, q) {
			t.Fatal("packet to the new address differs")
		}
	}
	if got := b.Info().Addrs; len(got) != 4 {
		t.Fatalf("Info.Addrs %v", got)
	}
}

// TestSendOnlyJoin: a send to a group nobody joined makes the sender a send-only full
// member (JoinState bit 3, IBA 1.3) — the SA creates the group and the packet goes out,
// instead of being dropped as drop_no_group — and a later joiner receives the next one.
func TestSendOnlyJoin(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24")
	b, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	mgid := ipoib.MGIDForIPv4(netip.MustParseAddr("239.5.5.5"), 0xFFFF, 2)
	waitFor(t, "the announcements", func() bool { return a.Counter("tx_announce") == 2 && b.Counter("tx_announce") == 2 })
	sent := b.Counter("tx_multicast")
	tb.Inject(udp4("10.10.0.2", "239.5.5.5", 1, 2, []byte("nobody listens yet")))
	waitFor(t, "the send-only send", func() bool { return tf.hasGroup(mgid) && b.Counter("tx_multicast") > sent })
	if !tf.hasGroup(mgid) || tf.isMember(t, 1, mgid) {
		t.Fatalf("group created %v, B receiving %v: want created, B send-only", tf.hasGroup(mgid), tf.isMember(t, 1, mgid))
	}
	ta.Inject(igmpv3("10.10.0.1", "239.5.5.5", 4))
	waitFor(t, "A's join", func() bool { return tf.isMember(t, 0, mgid) })
	sendUntilDelivered(t, tb, ta, udp4("10.10.0.2", "239.5.5.5", 1, 2, []byte("now A listens")))
	for _, x := range []*ipoib.Interface{a, b} {
		if n := x.Counter("drop_no_group"); n != 0 {
			t.Errorf("%s: drop_no_group %d", x.Name(), n)
		}
	}
}
