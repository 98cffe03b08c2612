package ipoib

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestE2EIPFollowing is issue 9's acceptance point 1: `ip` on the interfaces does what it
// does on a real IPoIB interface. Addresses added with `ip addr add` answer at once (v4
// and v6); `ip link set down/up` keeps the IPv6 link-local address; an MTU above the
// datagram-mode maximum is put back with a warning; a child whose P_Key is absent shows
// NO-CARRIER and refuses to send; a gateway route reaches a host behind a forwarding
// peer; a child deleted with `ip link del` and re-created is reachable within 2 s; a
// send to an unjoined multicast group goes out, and no interface counts drop_no_group.
func TestE2EIPFollowing(t *testing.T) {
	e2etest.Require(t, "ping")
	start := time.Now()
	nsA, nsB, nsD := e2etest.NetNS("fa"), e2etest.NetNS("fb"), e2etest.NetNS("fd")
	d := e2etest.StartDaemon(t, "", `
[[sm.partitions]]
name = "p1"
pkey = 0x8001
members = ["pib_0", "pib_1"]
`+e2etest.InterfaceTOML("ib0", "pib_0", nsA, "10.10.0.1/24")+e2etest.InterfaceTOML("ib1", "pib_1", nsB, "10.10.0.2/24"), nsA, nsB)
	ip := func(args ...string) {
		t.Helper()
		if out, err := e2etest.RunCmd("ip", args...); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}

	// ip addr add, v4 and v6, on both sides: answered at once; ip addr del: not any more.
	ip("-n", nsB, "addr", "add", "10.10.0.22/24", "dev", "ib1")
	ip("-n", nsA, "-6", "addr", "add", "fd00::1/64", "dev", "ib0", "nodad")
	ip("-n", nsB, "-6", "addr", "add", "fd00::22/64", "dev", "ib1", "nodad")
	if ok, out := e2etest.PingNS(nsA, "10.10.0.22", 3); !ok {
		t.Errorf("ping 10.10.0.22 after ip addr add:\n%s", out)
	}
	if ok, out := e2etest.PingNS(nsA, "fd00::22", 3); !ok {
		t.Errorf("ping fd00::22 after ip -6 addr add:\n%s", out)
	}
	if ib1 := d.Show()["ib1"]; !strings.Contains(strings.Join(ib1.Addrs, " "), "10.10.0.22/24") {
		t.Errorf("pibgw show ib1 lacks 10.10.0.22/24: %v", ib1.Addrs)
	}
	ip("-n", nsB, "addr", "del", "10.10.0.22/24", "dev", "ib1")
	if ok, out := e2etest.UnreachableNS(nsA, "10.10.0.22"); !ok {
		t.Errorf("10.10.0.22 still answers after ip addr del:\n%s", out)
	}

	// ip link set down / up: pibgw show follows; the link-local address is back.
	ip("-n", nsB, "link", "set", "ib1", "down")
	waitE2E(t, "ib1 down in pibgw show", func() bool {
		s := d.Show()["ib1"]
		return !s.Up && strings.Contains(s.Reason, "administratively down")
	})
	ip("-n", nsB, "link", "set", "ib1", "up")
	waitE2E(t, "ib1 up in pibgw show", func() bool { return d.Show()["ib1"].Up })
	if out, err := e2etest.RunCmd("ip", "-n", nsB, "-6", "addr", "show", "dev", "ib1"); err != nil || !strings.Contains(out, "fe80::202:c903:0:401/64") {
		t.Errorf("link-local address after down/up: %v\n%s", err, out)
	}
	if ok, out := e2etest.PingNS(nsA, "fe80::202:c903:0:401%ib0", 3); !ok {
		t.Errorf("ping6 to ib1's link-local address after down/up:\n%s", out)
	}

	// ethtool reports the IB port's rate (ibstat's Rate, Gb/s), full duplex, port Other,
	// as for ipoib (it showed the TUN default, 10000Mb/s Twisted Pair).
	if _, err := exec.LookPath("ethtool"); err == nil {
		rate := e2etest.DiagField(d.MustPibgw("stat", "pib_0"), "Rate")
		out, err := e2etest.RunCmd("ip", "netns", "exec", nsA, "ethtool", "ib0")
		if err != nil || rate == "" || !strings.Contains(out, "Speed: "+rate+"000Mb/s") ||
			!strings.Contains(out, "Duplex: Full") || !strings.Contains(out, "Port: Other") {
			t.Errorf("ethtool ib0 (port rate %s Gb/s): %v\n%s", rate, err, out)
		}
	}

	// ip link set mtu above the maximum: the previous MTU put back (not the maximum), the
	// refusal in the daemon's log and in pibgw show.
	ip("-n", nsA, "link", "set", "ib0", "mtu", "1500") // below the maximum: accepted
	waitE2E(t, "mtu 1500 kept", func() bool {
		out, _ := e2etest.RunCmd("ip", "-n", nsA, "link", "show", "ib0")
		return strings.Contains(out, "mtu 1500")
	})
	ip("-n", nsA, "link", "set", "ib0", "mtu", "4092")
	waitE2E(t, "the previous MTU put back", func() bool {
		out, _ := e2etest.RunCmd("ip", "-n", nsA, "link", "show", "ib0")
		return strings.Contains(out, "mtu 1500") && strings.Contains(d.Logs(), "MTU above the mode's maximum")
	})
	if out := d.MustPibgw("show", "ib0"); !strings.Contains(out, "mtu 4092 refused: above the mode's maximum 2044") || !strings.Contains(out, "put back 1500") {
		t.Errorf("pibgw show ib0 after ip link set mtu 4092:\n%s", out)
	}
	ip("-n", nsA, "link", "set", "ib0", "mtu", "2044")

	// A child whose P_Key is not in the port's table: NO-CARRIER, sends fail at once.
	d.MustPibgw("child", "add", "ib0", "0x8005", "--addr", "10.50.0.1/24")
	waitE2E(t, "NO-CARRIER on ib0.8005", func() bool {
		out, _ := e2etest.RunCmd("ip", "-n", nsA, "link", "show", "ib0.8005")
		return strings.Contains(out, "NO-CARRIER") && strings.Contains(out, "state DOWN")
	})
	if out, err := e2etest.RunCmd("ip", "netns", "exec", nsA, "ping", "-c", "1", "-W", "1", "10.50.0.2"); err == nil || !strings.Contains(out, "Network is unreachable") {
		t.Errorf("ping over a child without carrier: %v\n%s", err, out)
	}
	if strings.Contains(d.Logs(), `msg="interface up" ipoib=ib0.8005`) {
		t.Error(`the log says "interface up" for ib0.8005`)
	}

	// A gateway route: 10.30.0.0/24 is behind B, which forwards to host D on a veth.
	ip("netns", "add", nsD)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsD).Run() })
	ip("-n", nsB, "link", "add", "vb", "type", "veth", "peer", "name", "vd", "netns", nsD)
	ip("-n", nsB, "addr", "add", "10.30.0.1/24", "dev", "vb")
	ip("-n", nsB, "link", "set", "vb", "up")
	ip("-n", nsD, "addr", "add", "10.30.0.7/24", "dev", "vd")
	ip("-n", nsD, "link", "set", "vd", "up")
	ip("-n", nsD, "route", "add", "default", "via", "10.30.0.1")
	if out, err := e2etest.RunCmd("ip", "netns", "exec", nsB, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		t.Fatalf("ip_forward in %s: %v\n%s", nsB, err, out)
	}
	ip("-n", nsA, "route", "add", "10.30.0.0/24", "via", "10.10.0.2", "dev", "ib0")
	if ok, out := e2etest.PingNS(nsA, "10.30.0.7", 3); !ok {
		t.Errorf("ping 10.30.0.7 through the gateway 10.10.0.2:\n%s", out)
	}

	// ip link del of a child acts as pibgw child del; the re-created child (new QPN)
	// is reachable within 2 s (it announces itself).
	d.MustPibgw("child", "add", "ib0", "0x8001", "--addr", "10.20.0.1/24")
	d.MustPibgw("child", "add", "ib1", "0x8001", "--addr", "10.20.0.2/24")
	if ok, out := e2etest.PingNS(nsA, "10.20.0.2", 2); !ok {
		t.Fatalf("ping 10.20.0.2 over the children:\n%s", out)
	}
	oldQPN := d.Show()["ib1.8001"].QPN
	ip("-n", nsB, "link", "del", "ib1.8001")
	waitE2E(t, "ib1.8001 gone from pibgw show", func() bool { _, ok := d.Show()["ib1.8001"]; return !ok })
	d.MustPibgw("child", "add", "ib1", "0x8001", "--addr", "10.20.0.2/24")
	if q := d.Show()["ib1.8001"].QPN; q == oldQPN {
		t.Errorf("the re-created child has the old QPN %#x", q)
	}
	t0 := time.Now()
	for {
		out, err := e2etest.RunCmd("ip", "netns", "exec", nsA, "ping", "-c", "1", "-W", "1", "10.20.0.2")
		if err == nil {
			t.Logf("re-created child reachable after %v", time.Since(t0).Round(time.Millisecond))
			break
		}
		if time.Since(t0) > 2*time.Second {
			t.Errorf("re-created child unreachable for 2 s:\n%s", out)
			break
		}
	}

	// A send to a multicast group nobody joined goes out (a send-only join).
	ip("-n", nsA, "route", "add", "239.0.0.0/8", "dev", "ib0")
	before := d.Show()["ib0"].Counters["tx_multicast"]
	e2etest.RunCmd("ip", "netns", "exec", nsA, "ping", "-c", "2", "-i", "0.2", "-W", "1", "-t", "1", "239.1.2.3")
	waitE2E(t, "the multicast send", func() bool { return d.Show()["ib0"].Counters["tx_multicast"] >= before+2 })

	// No interface counted drop_no_group, idle for at least 30 s since start.
	if rest := 30*time.Second - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	for name, s := range d.Show() {
		if n := s.Counters["drop_no_group"]; n != 0 {
			t.Errorf("%s: drop_no_group %d", name, n)
		}
	}
	d.StopAndCheckClean(map[string]string{"ib0": nsA, "ib1": nsB})
}

// waitE2E waits up to 5 s for ok.
func waitE2E(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
