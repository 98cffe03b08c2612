package ipoib

import (
	"os"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestE2EPartitions is issue 5's acceptance point 2, as root, on configs/partitions.toml
// (its namespaces renamed to the test's own): three hosts, each HCA's interface in its
// own namespace; partition 0x8001 has A and B as members, not C. A↔B ping over the
// children, C's child is down and C reaches neither child nor receives anything of the
// partition's traffic, the parents keep working, and deleting A's child stops A↔B on
// 0x8001 only. It also checks, on the running daemon, that bad CLI input names the
// offending value (point 6).
func TestE2EPartitions(t *testing.T) {
	e2etest.Require(t, "ping")
	nsA, nsB, nsC := e2etest.NetNS("pa"), e2etest.NetNS("pb"), e2etest.NetNS("pc")
	example, err := os.ReadFile("../../configs/partitions.toml")
	if err != nil {
		t.Fatal(err)
	}
	body := strings.NewReplacer(`"hosta"`, `"`+nsA+`"`, `"hostb"`, `"`+nsB+`"`, `"hostc"`, `"`+nsC+`"`).Replace(string(example))
	if strings.Count(body, `"pibgwe2e-`) != 3 {
		t.Fatalf("configs/partitions.toml no longer names netns hosta, hostb and hostc:\n%s", example)
	}
	d := e2etest.StartDaemon(t, "", body, nsA, nsB, nsC)

	show := d.Show()
	for _, name := range []string{"ib0", "ib1", "ib2", "ib0.8001", "ib1.8001", "ib2.8001"} {
		if _, ok := show[name]; !ok {
			t.Fatalf("pibgw show lacks %s: %+v", name, show)
		}
	}
	for _, name := range []string{"ib0", "ib1", "ib2", "ib0.8001", "ib1.8001"} {
		if i := show[name]; !i.Up {
			t.Errorf("%s is down: %s", name, i.Reason)
		}
	}
	if c := show["ib2.8001"]; c.Up || !strings.Contains(c.Reason, "0x8001") || c.PKey != 0x8001 || c.Parent != "ib2" || c.NetNS != nsC {
		t.Errorf("ib2.8001 (C is no member of 0x8001) = %+v; want down because P_Key 0x8001 is not in the port's table", c)
	}

	// A↔B over partition 0x8001, both ways; C's counters do not move.
	before := d.Show()
	if ok, out := e2etest.PingNS(nsA, "10.20.0.2", 5); !ok {
		t.Errorf("A → B on ib0.8001:\n%s", out)
	}
	if ok, out := e2etest.PingNS(nsB, "10.20.0.1", 3); !ok {
		t.Errorf("B → A on ib1.8001:\n%s", out)
	}
	after := d.Show()
	for _, name := range []string{"ib2", "ib2.8001"} {
		for _, k := range []string{"rx_packets", "rx_bytes", "rx_arp", "rx_multicast"} {
			if b, a := before[name].Counters[k], after[name].Counters[k]; a != b {
				t.Errorf("%s %s went from %d to %d during A↔B traffic on 0x8001", name, k, b, a)
			}
		}
	}
	if a, b := after["ib0.8001"].Counters["rx_packets"], before["ib0.8001"].Counters["rx_packets"]; a < b+8 {
		t.Errorf("ib0.8001 rx_packets %d → %d: the pings were not delivered on the child", b, a)
	}
	if after["ib2.8001"].Counters["rx_packets"] != 0 {
		t.Errorf("ib2.8001 delivered packets: %v", after["ib2.8001"].Counters)
	}

	// C cannot reach the partition: its child is down, and 10.20.0.x is not routed anywhere else.
	for _, addr := range []string{"10.20.0.1", "10.20.0.2"} {
		if ok, out := e2etest.UnreachableNS(nsC, addr); !ok {
			t.Errorf("C reached %s:\n%s", addr, out)
		}
	}
	if n := d.Show()["ib2.8001"].Counters["rx_packets"]; n != 0 {
		t.Errorf("ib2.8001 delivered %d packets", n)
	}

	// The parents keep working, every pair.
	for _, p := range [][2]string{{nsA, "10.10.0.3"}, {nsB, "10.10.0.3"}, {nsA, "10.10.0.2"}, {nsC, "10.10.0.1"}} {
		if ok, out := e2etest.PingNS(p[0], p[1], 3); !ok {
			t.Errorf("%s → %s on the parents:\n%s", p[0], p[1], out)
		}
	}

	// Bad input on the running daemon names the offending value (point 6).
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"show", "nosuch"}, `pibgw: unknown interface "nosuch" (have ib0, ib0.8001, ib1, ib1.8001, ib2, ib2.8001)`},
		{[]string{"neigh", "nosuch"}, `pibgw: unknown interface "nosuch"`},
		{[]string{"child", "add", "nosuch", "0x8001"}, `pibgw: unknown interface "nosuch"`},
		{[]string{"child", "add", "ib0", "0x8001"}, `pibgw: child ib0.8001 already exists`},
		{[]string{"child", "add", "ib0", "8001"}, `pibgw: child ib0.8001 already exists`},
		{[]string{"child", "add", "ib0", "0"}, `pibgw: invalid P_Key "0": partition number 0 is reserved (0 and 0x8000 are not allowed)`},
		{[]string{"child", "add", "ib0", "0x8000"}, `pibgw: invalid P_Key "0x8000": partition number 0 is reserved (0 and 0x8000 are not allowed)`},
		{[]string{"child", "add", "ib0", "0x10000"}, `pibgw: invalid P_Key "0x10000": more than 16 bits (at most 0xffff)`},
		{[]string{"child", "add", "ib0", "zz"}, `pibgw: invalid P_Key "zz": want a hexadecimal number such as 0x8001`},
		{[]string{"child", "add", "ib0", "0x8002", "--addr", "10.20.0.300/24"}, `pibgw: malformed address "10.20.0.300/24": want CIDR such as 10.20.0.1/24 or fd00::1/64`},
		{[]string{"child", "del", "ib2", "0x8002"}, `pibgw: ib2 has no child for P_Key 0x8002 (no interface ib2.8002)`},
	} {
		out, errs, err := d.Pibgw(tc.args...)
		if err == nil || out != "" || !strings.HasPrefix(errs, tc.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("pibgw %v: %v, stdout %q, stderr %q; want one line starting %q", tc.args, err, out, errs, tc.want)
		}
	}
	if _, ok := d.Show()["ib0.8002"]; ok {
		t.Error("a rejected child add created ib0.8002")
	}

	// A leaves 0x8001: A↔B on the partition stops, both ways; B's child stays; the parents work.
	if out := d.MustPibgw("child", "del", "ib0", "0x8001"); out != "ib0.8001 deleted\n" {
		t.Errorf("child del ib0 0x8001: %q", out)
	}
	if out, err := e2etest.RunCmd("ip", "-n", nsA, "link", "show", "ib0.8001"); err == nil {
		t.Errorf("ib0.8001 still in %s after child del:\n%s", nsA, out)
	}
	show = d.Show()
	if _, ok := show["ib0.8001"]; ok {
		t.Error("pibgw show still lists ib0.8001")
	}
	if !show["ib0"].Up || !show["ib1.8001"].Up {
		t.Errorf("after child del: ib0 %+v, ib1.8001 %+v", show["ib0"], show["ib1.8001"])
	}
	if ok, out := e2etest.UnreachableNS(nsA, "10.20.0.2"); !ok {
		t.Errorf("A reached 10.20.0.2 after child del:\n%s", out)
	}
	if ok, out := e2etest.UnreachableNS(nsB, "10.20.0.1"); !ok {
		t.Errorf("B reached 10.20.0.1 after A's child del:\n%s", out)
	}
	for _, p := range [][2]string{{nsA, "10.10.0.2"}, {nsB, "10.10.0.1"}, {nsA, "10.10.0.3"}} {
		if ok, out := e2etest.PingNS(p[0], p[1], 3); !ok {
			t.Errorf("%s → %s on the parents after child del:\n%s", p[0], p[1], out)
		}
	}
	var neigh []control.Neighbor
	d.JSON(&neigh, "neigh", "ib1.8001")
	t.Logf("ib1.8001 neighbours after A left: %+v", neigh)

	d.StopAndCheckClean(map[string]string{"ib0": nsA, "ib1": nsB, "ib1.8001": nsB, "ib2": nsC, "ib2.8001": nsC})
}
