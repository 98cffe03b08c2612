package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/daemon"
)

// A fabric from a topology file (fabric.topology): two switches, two parallel links. The
// SM routes pib_2 (on Switch1) to pib_1 (on Switch2) over one of them and a packet
// crosses it; pulling that cable out, the SM's next sweep routes over the other, and the
// same packet crosses there.
func TestTopologyTwoSwitches(t *testing.T) {
	dir := t.TempDir()
	// ibsim's 2sw2path4hca.ibnd: two switches joined by two parallel links (ports 3 and 5),
	// two HCAs on each.
	b, err := os.ReadFile("../../fabric/topology/testdata/2sw2path4hca.ibnd")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "2sw.ibnd"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := buildFabric(ctx, t, filepath.Join(dir, "f.toml"), "interfaces = []\n[fabric]\nhca_count = 4\ntopology = \"2sw.ibnd\"\n[sm]\nsweep_interval = \"1s\"\n")
	if len(f.Switches) != 2 {
		t.Fatalf("%d switches", len(f.Switches))
	}
	sw1, sw2 := f.Switches[0], f.Switches[1]
	for _, d := range f.Devs {
		if p := d.Port(1); p.State() != 4 || p.LID() == 0 {
			t.Fatalf("%s port 1: state %v lid %d", d.Name(), p.State(), p.LID())
		}
	}
	src, dst := f.Devs[2].Port(1), f.Devs[1].Port(1) // Hca3 on Switch1, Hca2 on Switch2
	pkt := fabrictest.UD{DLID: dst.LID(), SLID: src.LID(), DestQP: 1, QKey: 0x80010000, Payload: make([]byte, 256)}.Build()
	cross := func() uint8 {
		t.Helper()
		out := sw1.LFT(dst.LID())
		if out != 3 && out != 5 {
			t.Fatalf("Switch1 routes LID %d to port %d, want 3 or 5", dst.LID(), out)
		}
		before, arrived := sw1.Counters(int(out)).XmitPkts, sw2.Counters(1).XmitPkts
		src.Transmit([][]byte{pkt})
		if sw1.Counters(int(out)).XmitPkts != before+1 || sw2.Counters(1).XmitPkts != arrived+1 {
			t.Fatalf("the packet did not cross Switch1 port %d to Switch2 port 1", out)
		}
		return out
	}
	used := cross()
	if _, err := f.SetLink(fmt.Sprintf("Switch1/%d", used), false); err != nil {
		t.Fatal(err)
	}
	// The next light sweep sees PortStateChange; the heavy sweep it starts re-routes.
	if err := f.SM.WaitSweep(ctx); err != nil {
		t.Fatal(err)
	}
	if now := cross(); now == used {
		t.Fatalf("still routed over the cut link (port %d)", used)
	}
	t.Logf("Switch1 → Switch2 over port %d, after the cut over the other link", used)
}

// `pibgw counters` on a one-process fabric: the switch's ports' counters and drops by
// reason — what perfquery's PortRcvSwitchRelayErrors sums — not only a switch process's.
func TestSwitchPortCounters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := buildFabric(ctx, t, "/tmp/f.toml", "interfaces = []\n")
	src := f.Devs[0].Port(1)
	// A LID the SM gave nobody: the switch's LFT has no route for it.
	pkt := fabrictest.UD{DLID: 0x0100, SLID: src.LID(), DestQP: 1, QKey: 0x80010000, Payload: make([]byte, 256)}.Build()
	src.Transmit([][]byte{pkt})
	c := f.LinkCounters()
	if c["switch_port_1_drop_no_route"] != 1 || c["switch_port_1_rcv_pkts"] == 0 || c["switch_port_2_xmit_pkts"] == 0 {
		t.Fatalf("switch counters %v: want port 1's no-route drop and both ports' traffic", c)
	}
}

// buildFabric builds the fabric of the configuration body (read as if from path), closed
// when the test ends.
func buildFabric(ctx context.Context, t *testing.T, path, body string) *daemon.Fabric {
	t.Helper()
	cfg, err := config.Parse(path, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	f, err := daemon.BuildFabric(ctx, cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}
