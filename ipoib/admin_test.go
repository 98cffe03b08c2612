package ipoib_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/sa"
)

// TestAdminDownUp: `ip link set ib0 down` leaves the broadcast group at the SA and stops
// traffic, with the reason in State; up rejoins and traffic flows again.
func TestAdminDownUp(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24")
	_, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	bcast := ipoib.BroadcastMGID(0xFFFF)
	p := udp4("10.10.0.1", "10.10.0.2", 1, 2, []byte("before"))
	ta.Inject(p)
	if got := tb.recv(t); !bytes.Equal(got, p) {
		t.Fatal("before: differs")
	}
	a.SetAdminUp(false)
	if st := a.State(); st.Up || st.Reason != "administratively down" || a.AdminUp() {
		t.Fatalf("after down: %+v", st)
	}
	if tf.isMember(t, 0, bcast) {
		t.Error("still a member of the broadcast group after down")
	}
	ta.Inject(udp4("10.10.0.1", "10.10.0.2", 1, 2, []byte("while down")))
	waitFor(t, "drop_down", func() bool { return a.Counter("drop_down") >= 1 })
	tb.nothing(t, 20*time.Millisecond)
	a.SetAdminUp(true)
	tf.waitUp(t, a)
	if !tf.isMember(t, 0, bcast) {
		t.Error("not a member of the broadcast group after up")
	}
	p = udp4("10.10.0.1", "10.10.0.2", 1, 2, []byte("after"))
	sendUntilDelivered(t, ta, tb, p)
}

// TestGatewayRoute: with `ip route add 10.30.0.0/24 via 10.10.0.2`, a packet for
// 10.30.0.7 goes to 10.10.0.2's hardware address (resolved by ARP for the gateway).
func TestGatewayRoute(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24")
	_, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	a.SetRoutes([]ipoib.Route{
		{Dst: netip.MustParsePrefix("10.10.0.0/24")},
		{Dst: netip.MustParsePrefix("10.30.0.0/24"), Gateway: netip.MustParseAddr("10.10.0.2")},
	})
	p := udp4("10.10.0.1", "10.30.0.7", 1, 2, []byte("behind the gateway"))
	ta.Inject(p)
	if got := tb.recv(t); !bytes.Equal(got, p) {
		t.Fatal("routed packet differs")
	}
	n := a.Neighbors()
	if len(n) != 1 || n[0].IP != netip.MustParseAddr("10.10.0.2") {
		t.Fatalf("neighbours %+v: want only the gateway", n)
	}
	// Without the route the destination itself is resolved (and nobody has it).
	a.SetRoutes(nil)
	ta.Inject(udp4("10.10.0.1", "10.30.0.8", 1, 2, []byte("no route")))
	waitFor(t, "a resolution for 10.30.0.8", func() bool {
		for _, n := range a.Neighbors() {
			if n.IP == netip.MustParseAddr("10.30.0.8") {
				return true
			}
		}
		return false
	})
}

// TestAnnounceOnUp: a re-created interface (new QPN) announces itself when it comes up:
// the peer's cache holds the new hardware address at once, without waiting for it to
// go stale, and the gratuitous ARP is not a drop.
func TestAnnounceOnUp(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24")
	b, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	p := udp4("10.10.0.1", "10.10.0.2", 1, 2, []byte("x"))
	ta.Inject(p)
	tb.recv(t)
	old := b.HWAddr()
	b.Close()
	b2, tb2 := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	if b2.HWAddr() == old {
		t.Fatal("the re-created interface has the old QPN")
	}
	waitFor(t, "A learning B's new address", func() bool {
		n := a.Neighbors()
		return len(n) == 1 && n[0].HWAddr == b2.HWAddr()
	})
	ta.Inject(p)
	if got := tb2.recv(t); !bytes.Equal(got, p) {
		t.Fatal("to the re-created B: differs")
	}
	if c := a.Info().Counters; c["rx_announce"] == 0 || c["drop_not_for_us"] != 0 {
		t.Errorf("A's counters %v", c)
	}
}

// TestNeighborTableBounded: sends to 5,000 distinct unresolvable addresses never grow the
// table past MaxNeighbors; the refused ones are counted; FAILED entries are collected so
// that later addresses get entries; traffic to a real peer goes on throughout.
func TestNeighborTableBounded(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{SweepInterval: -1})
	dev := newFakeTUN("ib0")
	a := tf.ifaceWith(t, 0, dev, ipoib.Config{MaxNeighbors: 64}, "10.10.0.1/16")
	_, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/16")
	peer := udp4("10.10.0.1", "10.10.0.2", 1, 2, []byte("to the real peer"))
	dev.Inject(peer)
	if got := tb.recv(t); !bytes.Equal(got, peer) {
		t.Fatal("to B differs")
	}
	most := 0
	for k := 0; k < 5000; k++ {
		dst := netip.AddrFrom4([4]byte{10, 10, byte(1 + k/250), byte(1 + k%250)})
		dev.Inject(udp4("10.10.0.1", dst.String(), 1, 2, []byte("nobody")))
		if k%500 == 499 {
			waitFor(t, "the burst read", func() bool { return len(dev.Inbound) == 0 })
			time.Sleep(10 * time.Millisecond)
			most = max(most, len(a.Neighbors()))
			if armed, n := a.ArmedNeighborTimers(), len(a.Neighbors()); armed > n {
				t.Fatalf("%d neighbour timers armed for %d entries", armed, n)
			}
			tf.clk.Advance(4 * time.Second) // the probes fail
			dev.Inject(peer)
			if got := tb.recv(t); !bytes.Equal(got, peer) {
				t.Fatal("to B during the scan differs")
			}
		}
	}
	c := a.Info().Counters
	if most > 64 || c["drop_neigh_overflow"] == 0 || c["neighbors_failed"] <= 64 {
		t.Fatalf("largest table %d (limit 64), counters %v", most, c)
	}
	// Every entry that failed was solicited maxProbes (3) times, its retransmissions
	// driven by the table's one timer (neightimer.go); the real peer's few besides.
	if f, arp := c["neighbors_failed"], c["tx_arp"]; arp < 3*f || arp > 3*f+8 {
		t.Errorf("tx_arp %d for %d failed entries: want 3 solicitations each", arp, f)
	}
	t.Logf("largest table %d, %d refused, %d failed and collected", most, c["drop_neigh_overflow"], c["neighbors_failed"])
}
