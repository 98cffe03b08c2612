package mgmttest

import (
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// TestDRDiscovery is opensm's discovery: NodeInfo, NodeDescription, PortInfo of the SM's
// own port (hop count 0), the switch (hop 1) and the far HCA (hop 2).
func TestDRDiscovery(t *testing.T) {
	r := newRig(t, nil)
	// Hop 0: A itself, answered without touching the link.
	before := r.ca.Counters(fabric.AtoB).Packets
	s := mustOK(t, r.dr(t, wire.MethodGet, wire.AttrNodeInfo, 0, nil), "hop 0")
	if r.ca.Counters(fabric.AtoB).Packets != before {
		t.Fatal("a hop-count-0 SMP left the node")
	}
	ni := wire.NodeInfo(s.SMPData())
	if ni.NodeType() != wire.NodeTypeCA || ni.NumPorts() != 1 || ni.NodeGUID() != guidA || ni.PortGUID() != guidA|1 ||
		ni.LocalPortNum() != 1 || ni.PartitionCap() != hca.PartitionCap || ni.SystemImageGUID() == 0 ||
		ni.BaseVersion() != 1 || ni.ClassVersion() != 1 || s.HopPointer() != 0 {
		t.Fatalf("A's NodeInfo %x hp %d", []byte(ni[:wire.NodeInfoLen]), s.HopPointer())
	}
	// Hop 1: the switch.
	s = mustOK(t, r.dr(t, wire.MethodGet, wire.AttrNodeInfo, 0, nil, 1), "hop 1")
	ni = wire.NodeInfo(s.SMPData())
	if ni.NodeType() != wire.NodeTypeSwitch || ni.NumPorts() != 8 || ni.NodeGUID() != guidSw || ni.LocalPortNum() != 1 ||
		s.HopPointer() != 1 || s.ReturnPath()[1] != 1 {
		t.Fatalf("switch NodeInfo %x hp %d rpath %v", []byte(ni[:wire.NodeInfoLen]), s.HopPointer(), s.ReturnPath()[:2])
	}
	if d := wire.NodeDescription(mustOK(t, r.dr(t, wire.MethodGet, wire.AttrNodeDescription, 0, nil, 1), "desc").SMPData()).String(); d != "Switch1" {
		t.Fatalf("switch NodeDescription %q", d)
	}
	// Hop 2: B through switch port 4.
	s = mustOK(t, r.dr(t, wire.MethodGet, wire.AttrNodeInfo, 0, nil, 1, portSw), "hop 2")
	ni = wire.NodeInfo(s.SMPData())
	if ni.NodeType() != wire.NodeTypeCA || ni.NodeGUID() != guidB || ni.PortGUID() != guidB|1 || ni.LocalPortNum() != 1 ||
		s.HopPointer() != 1 || s.ReturnPath()[1] != 1 || s.ReturnPath()[2] != 1 {
		t.Fatalf("B's NodeInfo %x hp %d rpath %v", []byte(ni[:wire.NodeInfoLen]), s.HopPointer(), s.ReturnPath()[:3])
	}
	if d := wire.NodeDescription(mustOK(t, r.dr(t, wire.MethodGet, wire.AttrNodeDescription, 0, nil, 1, portSw), "desc").SMPData()).String(); d != "Hca2" {
		t.Fatalf("B's NodeDescription %q", d)
	}
	// PortInfo of A (modifier 0 = the arrival port), as ibsim shows a fresh CA port.
	pi := wire.PortInfo(mustOK(t, r.dr(t, wire.MethodGet, wire.AttrPortInfo, 0, nil), "A PortInfo").SMPData())
	if pi.LocalPortNum() != 1 || pi.PortState() != wire.PortStateInit || pi.PortPhysicalState() != wire.PhysStateLinkUp ||
		pi.MTUCap() != wire.MTU4096 || pi.CapabilityMask() != r.pa.Query().PortCapFlags || pi.GUIDCap() != 1 ||
		pi.VLCap() != wire.VLCapVL0 || pi.OperationalVLs() != wire.VLCapVL0 || pi.LinkWidthActive() != wire.LinkWidth12X ||
		pi.LinkSpeedActive() != wire.LinkSpeedQDR || pi.GIDPrefix() != hca.DefaultGIDPrefix || pi.LID() != 0 {
		t.Fatalf("A's PortInfo %x", []byte(pi))
	}
	// The switch's port 0 and port 4, and B's port.
	pi = wire.PortInfo(mustOK(t, r.dr(t, wire.MethodGet, wire.AttrPortInfo, 0, nil, 1), "switch port 0").SMPData())
	if pi.PortState() != wire.PortStateActive || pi.LocalPortNum() != 1 || pi.CapabilityMask() == 0 {
		t.Fatalf("switch port 0 PortInfo %x", []byte(pi))
	}
	pi = wire.PortInfo(mustOK(t, r.dr(t, wire.MethodGet, wire.AttrPortInfo, portSw, nil, 1), "switch port 4").SMPData())
	if pi.PortState() != wire.PortStateInit || pi.PortPhysicalState() != wire.PhysStateLinkUp {
		t.Fatalf("switch port 4 PortInfo %x", []byte(pi))
	}
	pi = wire.PortInfo(mustOK(t, r.dr(t, wire.MethodGet, wire.AttrPortInfo, 2, nil, 1), "switch port 2").SMPData())
	if pi.PortState() != wire.PortStateDown || pi.PortPhysicalState() != wire.PhysStatePolling {
		t.Fatalf("unplugged switch port 2: state %d phys %d", pi.PortState(), pi.PortPhysicalState())
	}
	pi = wire.PortInfo(mustOK(t, r.dr(t, wire.MethodGet, wire.AttrPortInfo, 0, nil, 1, portSw), "B").SMPData())
	if pi.PortState() != wire.PortStateInit || pi.LocalPortNum() != 1 {
		t.Fatalf("B's PortInfo %x", []byte(pi))
	}
	// P_Key tables: entry 0 is the default partition.
	pk := wire.PKeyTable(mustOK(t, r.dr(t, wire.MethodGet, wire.AttrPKeyTable, 0, nil, 1, portSw), "B P_Keys").SMPData())
	if pk.Entry(0) != 0xFFFF || pk.Entry(1) != 0 {
		t.Fatalf("B's P_Key table %x", []byte(pk))
	}
	g := wire.GUIDInfo(mustOK(t, r.dr(t, wire.MethodGet, wire.AttrGUIDInfo, 0, nil, 1, portSw), "B GUIDInfo").SMPData())
	if g.GUID(0) != guidB|1 || g.GUID(1) != 0 {
		t.Fatalf("B's GUIDInfo %x", []byte(g))
	}
}

// TestPortInfoSetRules: the SM moves a port Init → Armed → Active; other transitions and
// out-of-range values are refused with 0x1C and change nothing.
func TestPortInfoSetRules(t *testing.T) {
	r := newRig(t, nil)
	ctx := r.b.Open()
	defer ctx.Close()
	setState := func(st uint8) uint16 {
		return r.setPI(t, 1, func(pi wire.PortInfo) { pi.SetPortState(st) }, 1, portSw).DRStatus()
	}
	const bad = wire.StatusInvalidAttrOrModVal
	if st := setState(wire.PortStateActive); st != bad {
		t.Fatalf("Init → Active: %#x", st)
	}
	if st := setState(wire.PortStateInit); st != bad {
		t.Fatalf("Set Init: %#x", st)
	}
	if st := setState(wire.PortStateActiveDefer); st != bad {
		t.Fatalf("Set ActDefer: %#x", st)
	}
	if st := setState(wire.PortStateArmed); st != 0 || r.pb.State() != hca.PortArmed {
		t.Fatalf("Init → Armed: %#x, state %s", st, r.pb.State())
	}
	if st := setState(wire.PortStateActive); st != 0 || r.pb.State() != hca.PortActive {
		t.Fatalf("Armed → Active: %#x, state %s", st, r.pb.State())
	}
	if st := setState(wire.PortStateArmed); st != bad || r.pb.State() != hca.PortActive {
		t.Fatalf("Active → Armed: %#x, state %s", st, r.pb.State())
	}
	// Down: the link retrains at once (the cable is there) and the port is in Init.
	if st := setState(wire.PortStateDown); st != 0 || r.pb.State() != hca.PortInit {
		t.Fatalf("Down: %#x, state %s", st, r.pb.State())
	}
	// Values out of range refuse the whole Set: the LID in it is not applied.
	for name, f := range map[string]func(pi wire.PortInfo){
		"NeighborMTU 8192": func(pi wire.PortInfo) { pi.SetNeighborMTU(6) },
		"OperVLs > VLCap":  func(pi wire.PortInfo) { pi.SetOperationalVLs(wire.VLCapVL0To1) },
		"width 8X":         func(pi wire.PortInfo) { pi.SetLinkWidthEnabled(wire.LinkWidth8X) },
		"multicast LID":    func(pi wire.PortInfo) { pi.SetLID(0xC001) },
	} {
		s := r.setPI(t, 1, func(pi wire.PortInfo) { pi.SetLID(0x77); f(pi) }, 1, portSw)
		if s.DRStatus() != bad || r.pb.LID() == 0x77 {
			t.Fatalf("%s: status %#x, LID %#x", name, s.DRStatus(), r.pb.LID())
		}
	}
	// A good Set applies every field and raises the async events.
	s := mustOK(t, r.setPI(t, 1, func(pi wire.PortInfo) {
		pi.SetLID(0x33)
		pi.SetLMC(1)
		pi.SetMasterSMLID(lidA)
		pi.SetMasterSMSL(2)
		pi.SetNeighborMTU(wire.MTU2048)
		pi.SetSubnetTimeOut(17)
		pi.SetLinkWidthEnabled(wire.LinkWidth4X)
		pi.SetClientReregister(true)
	}, 1, portSw), "Set")
	pi := wire.PortInfo(s.SMPData())
	q := r.pb.Query()
	if q.LID != 0x33 || q.LMC != 1 || q.SMLID != lidA || q.SMSL != 2 || q.ActiveMTU != hca.MTU2048 || q.SubnetTimeout != 17 ||
		q.ActiveWidth != wire.LinkWidth4X || pi.LID() != 0x33 || pi.NeighborMTU() != wire.MTU2048 || pi.ClientReregister() {
		t.Fatalf("after Set: %+v / %x", q, []byte(pi))
	}
	want := map[hca.EventType]bool{hca.EventLIDChange: true, hca.EventSMChange: true, hca.EventClientReregister: true}
	for len(want) > 0 {
		select {
		case ev := <-ctx.Events():
			delete(want, ev.Type)
		default:
			t.Fatalf("events missing: %v", want)
		}
	}
}

// TestBringUpLIDRouted brings the fabric up as opensm does, then queries by LID.
func TestBringUpLIDRouted(t *testing.T) {
	r := newRig(t, nil)
	r.bringUp(t)
	if r.pa.State() != hca.PortActive || r.pb.State() != hca.PortActive || r.pa.LID() != lidA || r.pb.LID() != lidB ||
		r.sw.LID() != lidSw || r.sw.PortState(1) != fabric.PortStateActive || r.sw.PortState(portSw) != fabric.PortStateActive {
		t.Fatalf("not up: A %s/%d B %s/%d switch %d ports %d %d", r.pa.State(), r.pa.LID(), r.pb.State(), r.pb.LID(),
			r.sw.LID(), r.sw.PortState(1), r.sw.PortState(portSw))
	}
	if r.pb.ActiveMTU() != hca.MTU4096 || r.pb.Query().SMLID != lidA {
		t.Fatal("MTU or SM LID not set")
	}
	s := r.lid(t, lidB, wire.MethodGet, wire.AttrNodeInfo, 0, nil)
	if s.MAD().Status() != 0 || wire.NodeInfo(s.SMPData()).NodeGUID() != guidB {
		t.Fatalf("LID-routed NodeInfo of B: %#x", s.MAD().Status())
	}
	s = r.lid(t, lidSw, wire.MethodGet, wire.AttrPortInfo, portSw, nil)
	if s.MAD().Status() != 0 || wire.PortInfo(s.SMPData()).PortState() != wire.PortStateActive {
		t.Fatalf("LID-routed PortInfo of switch port 4: %#x", s.MAD().Status())
	}
	s = r.lid(t, lidSw, wire.MethodGet, wire.AttrSwitchInfo, 0, nil)
	if si := wire.SwitchInfo(s.SMPData()); si.PortStateChange() || si.LinearFDBTop() != lidB {
		t.Fatalf("SwitchInfo after bring-up %x", []byte(si[:wire.SwitchInfoLen]))
	}
	// A's own LID: loopback inside the HCA.
	if s := r.lid(t, lidA, wire.MethodGet, wire.AttrNodeInfo, 0, nil); wire.NodeInfo(s.SMPData()).NodeGUID() != guidA {
		t.Fatal("LID-routed SMP to A's own LID")
	}
}

// TestMixedRoutes: directed routes with a LID-routed part (IBA 14.2.2: DrDLID and
// DrSLID not permissive).
func TestMixedRoutes(t *testing.T) {
	r := newRig(t, nil)
	r.bringUp(t)
	// DR to the switch, then LID routed to DrDLID = B.
	b := newMAD(wire.MgmtClassSubnDirected, wire.MethodGet, wire.AttrNodeInfo, 0, r.pa.TID())
	s := wire.SMP(b)
	s.SetHopCount(1)
	s.SetDrSLID(0xFFFF)
	s.SetDrDLID(lidB)
	s.InitialPath()[1] = 1
	if err := r.pa.SendSMP(hca.MADAddr{DLID: 0xFFFF}, b); err != nil {
		t.Fatal(err)
	}
	resp := wire.SMP(r.take(t))
	if resp.DRStatus() != 0 || wire.NodeInfo(resp.SMPData()).NodeGUID() != guidB || resp.HopPointer() != 1 {
		t.Fatalf("DR then LID: status %#x hp %d NodeInfo %x", resp.DRStatus(), resp.HopPointer(), resp.SMPData()[:40])
	}
	// LID routed to the switch (DrSLID = A's LID), then DR out of port 4 to B; the
	// response returns by DR to the switch, then LID routed to A.
	b = newMAD(wire.MgmtClassSubnDirected, wire.MethodGet, wire.AttrNodeInfo, 0, r.pa.TID())
	s = wire.SMP(b)
	s.SetHopCount(1)
	s.SetDrSLID(lidA)
	s.SetDrDLID(0xFFFF)
	s.InitialPath()[1] = portSw
	if err := r.pa.SendMAD(hca.MADAddr{DLID: lidSw}, b); err != nil {
		t.Fatal(err)
	}
	resp = wire.SMP(r.take(t))
	if resp.DRStatus() != 0 || wire.NodeInfo(resp.SMPData()).NodeGUID() != guidB || resp.HopPointer() != 0 {
		t.Fatalf("LID then DR: status %#x hp %d", resp.DRStatus(), resp.HopPointer())
	}
}

// TestSMAStatus: unsupported attributes and methods, bad modifiers, read-only Sets.
func TestSMAStatus(t *testing.T) {
	r := newRig(t, nil)
	const bad, unsupp = wire.StatusInvalidAttrOrModVal, wire.StatusMethodAttrNotSupp
	cases := []struct {
		name   string
		method uint8
		attr   uint16
		mod    uint32
		path   []uint8
		want   uint16
	}{
		{"SwitchInfo of a CA", wire.MethodGet, wire.AttrSwitchInfo, 0, nil, unsupp},
		{"LFT of a CA", wire.MethodGet, wire.AttrLinearForwardingTable, 0, []uint8{1, portSw}, unsupp},
		{"VendorDiag", wire.MethodGet, wire.AttrVendorDiag, 0, nil, unsupp},
		{"SMInfo without an SM", wire.MethodGet, wire.AttrSMInfo, 0, []uint8{1, portSw}, unsupp},
		{"Set NodeInfo", wire.MethodSet, wire.AttrNodeInfo, 0, nil, unsupp},
		{"Set NodeDescription on a switch", wire.MethodSet, wire.AttrNodeDescription, 0, []uint8{1}, unsupp},
		{"method Send", wire.MethodSend, wire.AttrNodeInfo, 0, nil, wire.StatusMethodNotSupported},
		{"PortInfo of port 2 of 1", wire.MethodGet, wire.AttrPortInfo, 2, nil, bad},
		{"PortInfo of switch port 9 of 8", wire.MethodGet, wire.AttrPortInfo, 9, []uint8{1}, bad},
		{"P_Key block 1 of 32 entries", wire.MethodGet, wire.AttrPKeyTable, 1, []uint8{1, portSw}, bad},
		{"VLArb block 0", wire.MethodGet, wire.AttrVLArbitrationTable, 0, nil, bad},
		{"GUIDInfo block 1", wire.MethodGet, wire.AttrGUIDInfo, 1, nil, bad},
		{"switch MFT block beyond the table", wire.MethodGet, wire.AttrMulticastForwardingTable, 1024 / 32, []uint8{1}, bad},
		{"switch SLtoVL port 9", wire.MethodGet, wire.AttrSLtoVLMappingTable, 9 << 8, []uint8{1}, bad},
	}
	for _, c := range cases {
		if s := r.dr(t, c.method, c.attr, c.mod, nil, c.path...); s.DRStatus() != c.want {
			t.Errorf("%s: status %#x, want %#x", c.name, s.DRStatus(), c.want)
		}
	}
	// Class version 2 is not SM's.
	b := newMAD(wire.MgmtClassSubnDirected, wire.MethodGet, wire.AttrNodeInfo, 0, r.pa.TID())
	wire.MAD(b).SetClassVersion(2)
	wire.SMP(b).SetDrSLID(0xFFFF)
	wire.SMP(b).SetDrDLID(0xFFFF)
	if err := r.pa.SendSMP(hca.MADAddr{}, b); err != nil {
		t.Fatal(err)
	}
	if s := wire.SMP(r.take(t)); s.DRStatus() != wire.StatusBadVersion {
		t.Fatalf("class version 2: %#x", s.DRStatus())
	}
	// Tables the SMA stores and returns: SLtoVL and VLArb.
	sl := make([]byte, 8)
	wire.SLtoVLMappingTable(sl).SetVL(15, 15)
	if s := mustOK(t, r.dr(t, wire.MethodSet, wire.AttrSLtoVLMappingTable, 0, sl, 1, portSw), "SLtoVL"); wire.SLtoVLMappingTable(s.SMPData()).VL(15) != 15 {
		t.Fatal("SLtoVL not stored")
	}
	va := make([]byte, 64)
	wire.VLArbitrationTable(va).SetWeight(0, 0x40)
	if s := mustOK(t, r.dr(t, wire.MethodSet, wire.AttrVLArbitrationTable, wire.VLArbHighBlock0<<16, va, 1, portSw), "VLArb"); wire.VLArbitrationTable(s.SMPData()).Weight(0) != 0x40 {
		t.Fatal("VLArb not stored")
	}
	// P_Key table Set on B reaches the port's table.
	pk := make([]byte, 64)
	wire.PKeyTable(pk).SetEntry(0, 0xFFFF)
	wire.PKeyTable(pk).SetEntry(1, 0x8001)
	mustOK(t, r.dr(t, wire.MethodSet, wire.AttrPKeyTable, 0, pk, 1, portSw), "P_Key Set")
	if k, _ := r.pb.PKey(1); k != 0x8001 {
		t.Fatalf("B's P_Key 1 = %#x", k)
	}
}

// TestSMInfoAndTraps: the SM on a port answers SMInfo there; a switch sends trap 128 to
// the SM's LID when a link goes down, and sets PortStateChange.
func TestSMInfoAndTraps(t *testing.T) {
	r := newRig(t, nil)
	r.pa.SetSMInfoAgent(hca.SMInfoFunc(func(method uint8, mod uint32, data []byte) uint16 {
		clear(data)
		wire.SMInfo(data).SetGUID(guidA | 1)
		wire.SMInfo(data).SetPriority(5)
		wire.SMInfo(data).SetSMState(wire.SMStateMaster)
		return 0
	}))
	s := mustOK(t, r.dr(t, wire.MethodGet, wire.AttrSMInfo, 0, nil), "SMInfo")
	if si := wire.SMInfo(s.SMPData()); si.GUID() != guidA|1 || si.SMState() != wire.SMStateMaster {
		t.Fatalf("SMInfo %x", s.SMPData()[:21])
	}
	r.bringUp(t)
	var traps []wire.Notice
	r.pa.SetTrapHandler(hca.MADHandlerFunc(func(m *hca.MAD) {
		traps = append(traps, wire.Notice(append([]byte(nil), wire.SMP(m.Data).SMPData()...)))
	}))
	var hooked int
	r.sw.OnPortStateChange(func(sw *fabric.Switch, port int, up bool) { hooked = port })
	r.cb.SetUp(false)
	if len(traps) != 1 || traps[0].TrapNumber() != wire.TrapLinkStateChange || traps[0].Trap128LID() != lidSw ||
		traps[0].IssuerLID() != lidSw || !traps[0].IsGeneric() || hooked != portSw || !r.sw.PortStateChange() {
		t.Fatalf("traps %d hook %d PortStateChange %v", len(traps), hooked, r.sw.PortStateChange())
	}
	if r.sw.PortState(portSw) != fabric.PortStateDown || r.pb.State() != hca.PortDown {
		t.Fatal("unplugged ports not Down")
	}
	s = mustOK(t, r.dr(t, wire.MethodGet, wire.AttrSwitchInfo, 0, nil, 1), "SwitchInfo")
	if !wire.SwitchInfo(s.SMPData()).PortStateChange() {
		t.Fatal("PortStateChange not set in SwitchInfo")
	}
}
