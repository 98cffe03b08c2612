package ipoib_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/sa"
)

// TestCaptureDecodesInTshark captures ARP, IPv4 (unicast, multicast), IPv6 ND and
// ICMPv6 over IPoIB on A's cable (both directions) and checks that tshark decodes the
// frames as InfiniBand → IPoIB → ARP / IPv4 / IPv6 with nothing malformed.
func TestCaptureDecodesInTshark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipoib.pcap")
	if p := os.Getenv("PIBGW_KEEP_CAPTURE"); p != "" {
		path = p
	}
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tf := newTestFabric(t, 2, sa.Config{SweepInterval: -1})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24", "fd00::1/64")
	b, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24", "fd00::2/64")
	mgid := ipoib.MGIDForIPv6(ipoib.SolicitedNode(b.LinkLocal()), 0xFFFF, 2)
	waitFor(t, "B's solicited-node group", func() bool { return tf.hasGroup(mgid) })
	cw := fabric.NewCaptureWriter(file, fabric.CaptureOptions{Clock: tf.clk})
	c := tf.f.HCACables[0]
	c.Wrap(fabric.AtoB, fabric.CaptureWrapper(cw, 0))
	c.Wrap(fabric.BtoA, fabric.CaptureWrapper(cw, 1))

	exchange := func(from, to *fakeTUN, p []byte) {
		t.Helper()
		from.Inject(p)
		if got := to.recv(t); !bytes.Equal(got, p) {
			t.Fatalf("packet differs: % x", got[:min(len(got), 64)])
		}
	}
	exchange(ta, tb, icmpEcho4("10.10.0.1", "10.10.0.2", 1, []byte("ping over IPoIB")))
	exchange(tb, ta, icmpEcho4("10.10.0.2", "10.10.0.1", 1, []byte("pong over IPoIB")))
	exchange(ta, tb, udp4("10.10.0.1", "10.10.0.2", 4000, 4001, make([]byte, 1400)))
	exchange(ta, tb, echo6("fd00::1", "fd00::2", 1, []byte("ping6")))
	exchange(tb, ta, echo6(b.LinkLocal().String(), a.LinkLocal().String(), 2, []byte("ping6 link-local")))
	ta.Inject(igmpv3("10.10.0.1", "239.9.9.9", 4))
	waitFor(t, "A's join", func() bool { return tf.isMember(t, 0, ipoib.MGIDForIPv4(netipMust("239.9.9.9"), 0xFFFF, 2)) })
	sendUntilDelivered(t, tb, ta, udp4("10.10.0.2", "239.9.9.9", 5000, 5001, []byte("multicast"))) // A attaches just after the SA shows it a member
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	if n := cw.Stats().Packets; n < 10 {
		t.Fatalf("only %d packets captured", n)
	}

	fabrictest.RequireCleanDecode(t, path, fabrictest.NoEoIBHeuristic...)
	rows := fabrictest.TsharkFields(t, path, "frame.protocols")
	seen := map[string]int{}
	for _, r := range rows {
		p := r[0]
		switch {
		case strings.Contains(p, "infiniband:ethertype:arp"):
			seen["arp"]++
		case strings.Contains(p, "infiniband:ethertype:ip:icmp"):
			seen["icmp"]++
		case strings.Contains(p, "infiniband:ethertype:ip:udp"):
			seen["udp"]++
		case strings.Contains(p, "infiniband:ethertype:ipv6:icmpv6"):
			seen["icmpv6"]++
		}
	}
	if seen["arp"] < 2 || seen["icmp"] < 2 || seen["udp"] < 2 || seen["icmpv6"] < 4 {
		var all []string
		for _, r := range rows {
			all = append(all, r[0])
		}
		t.Fatalf("decoded protocols %v:\n%s", seen, strings.Join(all, "\n"))
	}
	// The ARP packets carry hardware type 32 and 20-byte addresses; the IPoIB header's
	// EtherTypes are ARP, IPv4 and IPv6.
	for _, r := range tsharkFiltered(t, path, "arp", "arp.hw.type", "arp.hw.size", "arp.proto.size", "arp.src.proto_ipv4") {
		if r[0] != "32" || r[1] != "20" || r[2] != "4" || !strings.HasPrefix(r[3], "10.10.0.") {
			t.Errorf("ARP decoded as %v", r)
		}
	}
	// NS and NA carry the 24-byte link-layer address option (length 3), checksums good.
	nd := tsharkFiltered(t, path, "icmpv6.type == 135 || icmpv6.type == 136", "icmpv6.type", "icmpv6.opt.length", "icmpv6.checksum.status")
	if len(nd) < 2 {
		t.Errorf("%d ND messages decoded", len(nd))
	}
	for _, r := range nd {
		if r[1] != "3" || r[2] != "1" {
			t.Errorf("ND message decoded as %v", r)
		}
	}
	types := map[string]bool{}
	for _, r := range tsharkFiltered(t, path, "infiniband.rwh.etype", "infiniband.rwh.etype") {
		types[r[0]] = true
	}
	for _, want := range []string{"0x0806", "0x0800", "0x86dd"} {
		if !types[want] {
			t.Errorf("EtherType %s not decoded (saw %v)", want, types)
		}
	}
}

// tsharkFiltered returns the fields of the frames that match filter.
func tsharkFiltered(t *testing.T, path, filter string, fields ...string) [][]string {
	t.Helper()
	args := []string{"-Y", filter, "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(fabrictest.Tshark(t, path, args...)), "\n") {
		if line != "" {
			rows = append(rows, strings.Split(line, "|"))
		}
	}
	return rows
}
