package ipoib_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

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
