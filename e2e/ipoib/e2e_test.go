package ipoib

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestEndToEnd is issue 5's acceptance run, as root: the pibgw binary's `up` with kernel
// TUN devices in two namespaces of its own, ping and ping6 across the soft fabric, the
// neighbour table over the control socket, a P_Key child pair, and a SIGTERM that leaves
// no TUN device or namespace behind. Traffic stays inside the namespaces the test made.
func TestEndToEnd(t *testing.T) {
	e2etest.Require(t, "ping")
	nsA, nsB := e2etest.NetNS("a"), e2etest.NetNS("b")
	d := e2etest.StartDaemon(t, "", fmt.Sprintf(`
[[sm.partitions]]
name = "e2e"
pkey = 0x8001
members = ["pib_0", "pib_1"]

[[interfaces]]
name = "ib0"
hca = "pib_0"
netns = %q
addresses = ["10.10.0.1/24"]

[[interfaces]]
name = "ib1"
hca = "pib_1"
netns = %q
addresses = ["10.10.0.2/24"]
`, nsA, nsB), nsA, nsB)

	// The kernel's view of ib0.
	out, err := e2etest.RunCmd("ip", "-n", nsA, "-d", "link", "show", "ib0")
	if err != nil || !strings.Contains(out, "link/infiniband") || !strings.Contains(out, "mtu 2044") {
		t.Errorf("ip -n %s -d link show ib0: %v\n%s", nsA, err, out)
	}

	// IPv4 across the fabric: 20 pings, no loss.
	if ok, out := e2etest.PingNS(nsA, "10.10.0.2", 20); !ok {
		t.Errorf("ping 10.10.0.2:\n%s", out)
	}

	// One log line per event: each interface is created once and comes up once (the pings needed both up).
	for _, ifc := range []string{"ib0", "ib1"} {
		for _, ev := range []string{`msg="interface created" iface=` + ifc + " ", `msg="interface up" ipoib=` + ifc + " "} {
			if n := strings.Count(d.Logs(), ev); n != 1 {
				t.Errorf("%d log lines with %s, want 1:\n%s", n, ev, d.Logs())
			}
		}
	}

	// The neighbour table has B with its QPN and GID.
	var ns []control.Neighbor
	d.JSON(&ns, "neigh", "ib0")
	ib1 := d.Show()["ib1"]
	found := false
	for _, n := range ns {
		if n.IP == "10.10.0.2" {
			found = true
			if n.QPN != ib1.QPN || n.QPN == 0 || n.GID != "fe80::2:c903:0:401" || n.HWAddr != ib1.HWAddr {
				t.Errorf("neighbour 10.10.0.2 = %+v; ib1 is %+v", n, ib1)
			}
		}
	}
	if !found {
		t.Errorf("pibgw neigh ib0 lacks 10.10.0.2: %+v", ns)
	}

	// IPv6 to B's link-local address (fe80:: + pib_1 port 1's GUID, U/L bit flipped).
	out, err = e2etest.RunCmd("ip", "netns", "exec", nsA, "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "fe80::202:c903:0:401%ib0")
	if err != nil || !strings.Contains(out, " 0% packet loss") {
		t.Errorf("ping6 fe80::202:c903:0:401%%ib0: %v\n%s", err, out)
	}

	// P_Key children on both sides carry partition 0x8001; deleting A's leaves ib0 alone.
	for _, c := range [][]string{{"ib0", "10.20.0.1/24"}, {"ib1", "10.20.0.2/24"}} {
		d.MustPibgw("child", "add", c[0], "0x8001", "--addr", c[1])
	}
	out, err = e2etest.RunCmd("ip", "-n", nsA, "-d", "link", "show", "ib0.8001")
	if err != nil || !strings.Contains(out, "link/infiniband") {
		t.Errorf("ib0.8001 in %s: %v\n%s", nsA, err, out)
	}
	if ok, out := e2etest.PingNS(nsA, "10.20.0.2", 5); !ok {
		t.Errorf("ping 10.20.0.2 over ib0.8001:\n%s", out)
	}
	d.MustPibgw("child", "del", "ib0", "8001")
	if ok, out := e2etest.UnreachableNS(nsA, "10.20.0.2"); !ok {
		t.Errorf("ping 10.20.0.2 after child del:\n%s", out)
	}
	if ok, out := e2etest.PingNS(nsA, "10.10.0.2", 3); !ok {
		t.Errorf("parent ping after child del:\n%s", out)
	}

	// SIGTERM: exit 0, nothing left behind.
	d.StopAndCheckClean(map[string]string{"ib0": nsA, "ib1": nsB, "ib1.8001": nsB})
}
