package mgmttest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/wire"
)

// TestCaptureDecodes captures the SM port's cable while the fabric is discovered, brought
// up and queried (directed-route and LID-routed SMPs, PMA MADs, both directions), and
// checks with tshark that every frame decodes as the IBA SMP/PMA it is, with no
// malformed frame or expert warning.
func TestCaptureDecodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mgmt.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cw := fabric.NewCaptureWriter(f, fabric.CaptureOptions{})
	r := newRig(t, fabric.CaptureWrapper(cw, 0))
	mustOK(t, r.dr(t, wire.MethodGet, wire.AttrNodeInfo, 0, nil, 1), "switch NodeInfo")
	mustOK(t, r.dr(t, wire.MethodGet, wire.AttrNodeInfo, 0, nil, 1, portSw), "B NodeInfo")
	mustOK(t, r.dr(t, wire.MethodGet, wire.AttrSwitchInfo, 0, nil, 1), "SwitchInfo")
	r.bringUp(t)
	r.lid(t, lidB, wire.MethodGet, wire.AttrPortInfo, 0, nil)
	pc := make([]byte, wire.PortCountersLen)
	wire.PortCounters(pc).SetPortSelect(1)
	r.pma(t, lidB, wire.MethodGet, wire.AttrPortCounters, pc)
	wire.PortCounters(pc).SetPortSelect(wire.PortSelectAll)
	r.pma(t, lidSw, wire.MethodGet, wire.AttrPortCounters, pc)
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	fabrictest.RequireCleanDecode(t, path, fabrictest.NoEoIBHeuristic...)
	if os.Getenv("MGMT_KEEP") != "" {
		b, _ := os.ReadFile(path)
		os.WriteFile(os.Getenv("MGMT_KEEP"), b, 0o644)
	}
	rows := fabrictest.TsharkFields(t, path, "infiniband.mad.mgmtclass", "infiniband.mad.method",
		"infiniband.mad.attributeid", "infiniband.smpdirected.hopcount", "infiniband.smpdirected.hoppointer",
		"infiniband.smpdirected.d")
	if len(rows) < 40 {
		t.Fatalf("tshark shows %d frames", len(rows))
	}
	seen := map[string]int{}
	for _, row := range rows {
		class, _ := strconv.ParseUint(strings.TrimPrefix(row[0], "0x"), 16, 8)
		method, _ := strconv.ParseUint(strings.TrimPrefix(row[1], "0x"), 16, 8)
		switch class {
		case wire.MgmtClassSubnDirected:
			seen["dr"]++
			if row[3] == "" || row[4] == "" {
				t.Fatalf("directed-route SMP without hop fields: %v", row)
			}
			if method == wire.MethodGetResp {
				seen["dr-resp"]++
			}
		case wire.MgmtClassSubnLID:
			seen["lid"]++
		case wire.MgmtClassPerfMgt:
			seen["pma"]++
		default:
			t.Fatalf("unexpected frame %v", row)
		}
	}
	if seen["dr"] < 30 || seen["dr-resp"]*2 != seen["dr"] || seen["lid"] != 2 || seen["pma"] != 4 {
		t.Fatalf("frames by kind: %v", seen)
	}
	// The attributes decode as what the agents put in them.
	want := map[string]bool{
		"0x0011|0x81|0x02|0x0002c90000000200||": true, // switch NodeInfo response
		"0x0011|0x81|0x01|0x0002c90300000400||": true, // B's NodeInfo response
		"0x0015|0x81|||0x0002|0x04":             true, // switch port 0 PortInfo: LID 2, Active
		"0x0015|0x81|||0x0003|0x04":             true, // B's PortInfo: LID 3, Active
	}
	for _, row := range fabrictest.TsharkFields(t, path, "infiniband.mad.attributeid", "infiniband.mad.method",
		"infiniband.nodeinfo.nodetype", "infiniband.nodeinfo.nodeguid", "infiniband.portinfo.lid",
		"infiniband.portinfo.portstate") {
		delete(want, strings.Join(row, "|"))
	}
	if len(want) != 0 {
		t.Fatalf("tshark did not show %v", want)
	}
}
