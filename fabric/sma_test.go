package fabric_test

import (
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/wire"
)

// mgmtFabric is a managed switch with Recorders on every port, as newTestFabric but
// with the ports in Init until the test activates them.
func mgmtFabric(t *testing.T, ports int) *testFabric {
	t.Helper()
	f := &testFabric{
		sw: fabric.NewSwitch(fabric.SwitchConfig{Ports: ports, Managed: true, NodeGUID: 0x0002_c900_0000_1000,
			NodeDesc: "test switch"}),
		hosts:  make([]*fabrictest.Recorder, ports+1),
		cables: make([]*fabric.Cable, ports+1),
	}
	for i := 1; i <= ports; i++ {
		f.hosts[i] = fabrictest.NewRecorder()
		f.cables[i] = fabric.NewCable(f.hosts[i], f.sw.Port(i))
		f.sw.SetLFT(hostLID(i), uint8(i))
	}
	return f
}

// smpOf returns the SMP inside a packet (LRH, BTH, DETH, MAD, ICRC).
func smpOf(t *testing.T, pkt []byte) wire.SMP {
	t.Helper()
	var p wire.Packet
	if err := p.Parse(pkt); err != nil || len(p.Payload) != wire.MADLen {
		t.Fatalf("not a MAD packet: %v", err)
	}
	if !wire.CheckReceivedICRC(pkt) {
		t.Fatal("ICRC does not check")
	}
	return wire.SMP(p.Payload)
}

// last returns the one packet host i received, and clears it.
func (f *testFabric) last(t *testing.T, i int) []byte {
	t.Helper()
	got := f.hosts[i].Packets()
	if len(got) != 1 {
		t.Fatalf("host %d got %d packets, want 1", i, len(got))
	}
	f.hosts[i].Reset()
	return got[0]
}

// TestDRSwitchSMA: a directed-route Get NodeInfo with hop count 1 is answered by the
// switch, out of the port it came in on, with D set, the hop pointer at 1 and the
// return path recording the arrival port (IBA C14-9:3, C14-13:1).
func TestDRSwitchSMA(t *testing.T) {
	f := mgmtFabric(t, 8)
	f.hosts[3].Send(fabrictest.DRSMP(0x42, wire.AttrNodeInfo, 1))
	s := smpOf(t, f.last(t, 3))
	m := s.MAD()
	if m.Method() != wire.MethodGetResp || !s.D() || s.DRStatus() != 0 || m.TID() != 0x42 {
		t.Fatalf("method %#x D %v status %#x tid %#x", m.Method(), s.D(), s.DRStatus(), m.TID())
	}
	if s.HopPointer() != 1 || s.HopCount() != 1 || s.ReturnPath()[1] != 3 {
		t.Fatalf("hp %d hc %d return path %v", s.HopPointer(), s.HopCount(), s.ReturnPath()[:2])
	}
	ni := wire.NodeInfo(s.SMPData())
	if ni.NodeType() != wire.NodeTypeSwitch || ni.NumPorts() != 8 || ni.NodeGUID() != 0x0002_c900_0000_1000 ||
		ni.PortGUID() != ni.NodeGUID() || ni.LocalPortNum() != 3 || ni.PartitionCap() != 32 {
		t.Fatalf("NodeInfo %x", []byte(ni[:wire.NodeInfoLen]))
	}
	f.hosts[3].Send(fabrictest.DRSMP(0x43, wire.AttrNodeDescription, 1))
	if d := wire.NodeDescription(smpOf(t, f.last(t, 3)).SMPData()).String(); d != "test switch" {
		t.Fatalf("NodeDescription %q", d)
	}
	// Links came up in Init: PortStateChange is set until the SM writes 1 to it.
	f.hosts[3].Send(fabrictest.DRSMP(0x44, wire.AttrSwitchInfo, 1))
	si := wire.SwitchInfo(smpOf(t, f.last(t, 3)).SMPData())
	if !si.PortStateChange() || si.LinearFDBCap() != fabric.LFTCap || si.MulticastFDBCap() != fabric.DefaultMFTCap {
		t.Fatalf("SwitchInfo %x", []byte(si[:wire.SwitchInfoLen]))
	}
	set := fabrictest.DRSMP(0x45, wire.AttrSwitchInfo, 1)
	ss := smpOf(t, set)
	ss.MAD().SetMethod(wire.MethodSet)
	wire.SwitchInfo(ss.SMPData()).SetPortStateChange(true)
	wire.SwitchInfo(ss.SMPData()).SetLinearFDBTop(63)
	wire.SetICRC(set)
	f.hosts[3].Send(set)
	si = wire.SwitchInfo(smpOf(t, f.last(t, 3)).SMPData())
	if si.PortStateChange() || si.LinearFDBTop() != 63 || f.sw.PortStateChange() {
		t.Fatalf("after Set: PortStateChange %v top %d", si.PortStateChange(), si.LinearFDBTop())
	}
}

// TestDRForwarding follows an SMP through the switch both ways: out by the initial path
// with the arrival port recorded in the return path, back by the return path.
func TestDRForwarding(t *testing.T) {
	f := mgmtFabric(t, 8)
	// From host 1 through the switch (hop 1) out of port 4 to host 4 (hop 2).
	f.hosts[1].Send(fabrictest.DRSMP(7, wire.AttrNodeInfo, 1, 4))
	if f.hosts[1].Len() != 0 {
		t.Fatal("request came back")
	}
	pkt := f.last(t, 4)
	s := smpOf(t, pkt)
	if s.D() || s.HopPointer() != 2 || s.ReturnPath()[1] != 1 {
		t.Fatalf("at hop 2: D %v hp %d return path %v", s.D(), s.HopPointer(), s.ReturnPath()[:3])
	}
	// Host 4 answers as an end node does: D=1, hop pointer at the hop count.
	resp := append([]byte(nil), pkt...)
	rs := smpOf(t, resp)
	rs.MAD().SetMethod(wire.MethodGetResp)
	rs.SetD(true)
	rs.ReturnPath()[2] = 1
	wire.SetICRC(resp)
	f.hosts[4].Send(resp)
	back := smpOf(t, f.last(t, 1))
	if !back.D() || back.HopPointer() != 1 || back.MAD().Method() != wire.MethodGetResp {
		t.Fatalf("back at the SM: D %v hp %d", back.D(), back.HopPointer())
	}
	// A bad initial path entry (port 9 of 8) and a hop count of 0 go nowhere.
	f.hosts[1].Send(fabrictest.DRSMP(8, wire.AttrNodeInfo, 1, 9))
	f.hosts[1].Send(fabrictest.DRSMP(9, wire.AttrNodeInfo))
	if n := f.lens(); n[1]+n[2]+n[3]+n[4] != 0 {
		t.Fatalf("bad directed routes delivered: %v", n)
	}
	if d := f.sw.Counters(1).Dropped(fabric.DropManagement); d != 1 {
		t.Fatalf("management drops on port 1 = %d, want 1 (hop count 0)", d)
	}
}

// TestSwitchPortStateForwarding: a managed switch forwards data only between Active
// ports, SMPs always; the SM arms and activates ports by PortInfo Set.
func TestSwitchPortStateForwarding(t *testing.T) {
	f := mgmtFabric(t, 4)
	if s := f.sw.PortState(2); s != fabric.PortStateInit {
		t.Fatalf("port 2 state %d after link up, want Init", s)
	}
	f.hosts[1].Send(udPkt(hostLID(2), "data"))
	if f.hosts[2].Len() != 0 || f.sw.Counters(1).Dropped(fabric.DropPortState) != 1 {
		t.Fatal("data forwarded by an Init port")
	}
	setState := func(port int, state uint8) uint16 {
		t.Helper()
		pkt := fabrictest.DRSMP(0x100, wire.AttrPortInfo, 1)
		s := smpOf(t, pkt)
		s.MAD().SetMethod(wire.MethodSet)
		s.MAD().SetAttrMod(uint32(port) | wire.PortInfoAttrModSMSupportsExtSpeeds)
		wire.PortInfo(s.SMPData()).SetPortState(state)
		wire.SetICRC(pkt)
		f.hosts[1].Send(pkt)
		r := smpOf(t, f.last(t, 1))
		if got := wire.PortInfo(r.SMPData()).PortState(); r.DRStatus() == 0 && state != 0 && got != state {
			t.Fatalf("port %d state %d after Set %d", port, got, state)
		}
		return r.DRStatus()
	}
	if st := setState(2, fabric.PortStateActive); st != wire.StatusInvalidAttrOrModVal {
		t.Fatalf("Init → Active: status %#x, want 0x1C", st)
	}
	if st := setState(2, wire.PortStateInit); st != wire.StatusInvalidAttrOrModVal {
		t.Fatalf("Set Init: status %#x, want 0x1C", st)
	}
	for _, p := range []int{1, 2} {
		if st := setState(p, fabric.PortStateArmed); st != 0 {
			t.Fatalf("Armed: %#x", st)
		}
	}
	f.hosts[1].Send(udPkt(hostLID(2), "data"))
	if f.hosts[2].Len() != 0 {
		t.Fatal("data forwarded by an Armed port")
	}
	for _, p := range []int{1, 2} {
		if st := setState(p, fabric.PortStateActive); st != 0 {
			t.Fatalf("Active: %#x", st)
		}
	}
	f.hosts[1].Send(udPkt(hostLID(2), "data"))
	if f.hosts[2].Len() != 1 {
		t.Fatal("data not forwarded between Active ports")
	}
	// Pulling the cable takes the port Down and sets PortStateChange; the hook sees it.
	var hooked []int
	f.sw.OnPortStateChange(func(sw *fabric.Switch, port int, up bool) { hooked = append(hooked, port) })
	f.cables[2].SetUp(false)
	if f.sw.PortState(2) != fabric.PortStateDown || f.sw.PortPhysState(2) != fabric.PhysStatePolling ||
		!f.sw.PortStateChange() || len(hooked) != 1 || hooked[0] != 2 {
		t.Fatalf("after unplug: state %d phys %d change %v hook %v", f.sw.PortState(2), f.sw.PortPhysState(2),
			f.sw.PortStateChange(), hooked)
	}
	f.cables[2].SetUp(true)
	if f.sw.PortState(2) != fabric.PortStateInit {
		t.Fatalf("replugged port state %d, want Init", f.sw.PortState(2))
	}
	// Bad modifier: port 5 of 4.
	if st := setState(5, 0); st != wire.StatusInvalidAttrOrModVal {
		t.Fatalf("PortInfo of port 5: %#x", st)
	}
}

// TestSwitchTablesBySMP programs the LFT and MFT by SMP and checks forwarding follows.
func TestSwitchTablesBySMP(t *testing.T) {
	f := newTestFabric(t, 4) // unmanaged: ports Active at once
	set := func(attr uint16, mod uint32, data []byte) wire.SMP {
		t.Helper()
		pkt := fabrictest.DRSMP(0x200, attr, 1)
		s := smpOf(t, pkt)
		s.MAD().SetMethod(wire.MethodSet)
		s.MAD().SetAttrMod(mod)
		copy(s.SMPData(), data)
		wire.SetICRC(pkt)
		f.hosts[1].Send(pkt)
		return smpOf(t, f.last(t, 1))
	}
	lft := make([]byte, 64)
	for i := range lft {
		lft[i] = fabric.PortDrop
	}
	lft[0x11] = 3 // LID 0x11 (host 1's) now goes to port 3
	r := set(wire.AttrLinearForwardingTable, 0, lft)
	if r.DRStatus() != 0 || wire.LinearForwardingTable(r.SMPData()).Port(0x11) != 3 || f.sw.LFT(0x11) != 3 {
		t.Fatalf("LFT Set: status %#x, LFT(0x11) = %d", r.DRStatus(), f.sw.LFT(0x11))
	}
	f.hosts[2].Send(udPkt(0x11, "x"))
	if f.hosts[3].Len() != 1 {
		t.Fatal("traffic does not follow the LFT set by SMP")
	}
	if r := set(wire.AttrLinearForwardingTable, fabric.LFTCap/64, lft); r.DRStatus() != wire.StatusInvalidAttrOrModVal {
		t.Fatalf("LFT block beyond the table: %#x", r.DRStatus())
	}
	// MFT block 0, position 0: MLID 0xC001 to ports 2 and 4.
	mft := make([]byte, 64)
	wire.MulticastForwardingTable(mft).SetPortMask(1, 1<<2|1<<4)
	r = set(wire.AttrMulticastForwardingTable, wire.MFTAttrMod(0, 0), mft)
	if r.DRStatus() != 0 || f.sw.MFT(0xC001) != fabric.MakePortMask(2, 4) {
		t.Fatalf("MFT Set: %#x %v", r.DRStatus(), f.sw.MFT(0xC001).Ports())
	}
	// P_Key table of port 3, block 0; block 1 is beyond PartitionEnforcementCap 32.
	pk := make([]byte, 64)
	wire.PKeyTable(pk).SetEntry(0, 0xFFFF)
	wire.PKeyTable(pk).SetEntry(1, 0x8001)
	if r := set(wire.AttrPKeyTable, wire.PKeyTableAttrMod(3, 0), pk); r.DRStatus() != 0 || wire.PKeyTable(r.SMPData()).Entry(1) != 0x8001 {
		t.Fatalf("P_Key Set: %#x", r.DRStatus())
	}
	if r := set(wire.AttrPKeyTable, wire.PKeyTableAttrMod(3, 1), pk); r.DRStatus() != wire.StatusInvalidAttrOrModVal {
		t.Fatalf("P_Key block 1: %#x", r.DRStatus())
	}
	// SMInfo: no SM on a switch.
	if r := set(wire.AttrSMInfo, 0, nil); r.DRStatus() != wire.StatusMethodAttrNotSupp {
		t.Fatalf("SMInfo on a switch: %#x", r.DRStatus())
	}
}

// TestDRForwardingAllocs: forwarding a directed-route SMP and answering one allocate
// nothing in steady state.
func TestDRForwardingAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: 4, Managed: true})
	var sinks [3]fabrictest.Sink
	for i := 1; i <= 2; i++ {
		fabric.NewCable(&sinks[i], sw.Port(i))
	}
	batch := [][]byte{fabrictest.DRSMP(1, wire.AttrNodeInfo, 1, 2), fabrictest.DRSMP(2, wire.AttrPortInfo, 1)}
	l := sinks[1].Link()
	n := testing.AllocsPerRun(1000, func() { l.Send(batch) })
	if n != 0 {
		t.Fatalf("%.1f allocations per forwarded and answered SMP", n)
	}
	if sinks[2].Packets.Load() == 0 || sinks[1].Packets.Load() == 0 {
		t.Fatal("nothing forwarded or answered")
	}
}

// TestSwitchLIDRoutedAgents: a LID-routed SMP and a PMA GMP to the switch's LID are
// answered to the sender's LID and QP.
func TestSwitchLIDRoutedAgents(t *testing.T) {
	f := newTestFabric(t, 3)
	const swLID = 0x0001
	f.sw.SetLID(swLID, 0)
	if f.sw.LFT(swLID) != 0 || f.sw.LID() != swLID {
		t.Fatal("SetLID did not route the switch's LID to port 0")
	}
	mad := make([]byte, wire.MADLen)
	m := wire.MAD(mad)
	m.SetBaseVersion(1)
	m.SetMgmtClass(wire.MgmtClassSubnLID)
	m.SetClassVersion(1)
	m.SetMethod(wire.MethodGet)
	m.SetTID(0x77)
	m.SetAttrID(wire.AttrPortInfo)
	m.SetAttrMod(0)
	f.hosts[2].Send(fabrictest.UD{VL: 15, DLID: swLID, SLID: hostLID(2), DestQP: 0, SrcQP: 0, Payload: mad}.Build())
	resp := f.last(t, 2)
	lrh := wire.LRH(resp)
	s := smpOf(t, resp)
	if lrh.DLID() != hostLID(2) || lrh.SLID() != swLID || lrh.VL() != 15 || s.MAD().Status() != 0 ||
		s.MAD().Method() != wire.MethodGetResp || s.MAD().TID() != 0x77 {
		t.Fatalf("LID-routed SMP response: dlid %#x slid %#x status %#x", lrh.DLID(), lrh.SLID(), s.MAD().Status())
	}
	if pi := wire.PortInfo(s.SMPData()); pi.LID() != swLID || pi.LocalPortNum() != 2 || pi.PortState() != wire.PortStateActive {
		t.Fatalf("port 0 PortInfo %x", []byte(pi))
	}
	// PMA: PortCounters of port 2 over QP1 with the GSI Q_Key, from QP 0x55.
	clear(mad)
	m.SetBaseVersion(1)
	m.SetMgmtClass(wire.MgmtClassPerfMgt)
	m.SetClassVersion(1)
	m.SetMethod(wire.MethodGet)
	m.SetAttrID(wire.AttrPortCounters)
	wire.PortCounters(m.PMAData()).SetPortSelect(2)
	f.hosts[2].Send(fabrictest.UD{DLID: swLID, SLID: hostLID(2), DestQP: 1, SrcQP: 0x55, QKey: 0x80010000, Payload: mad}.Build())
	resp = f.last(t, 2)
	var p wire.Packet
	if err := p.Parse(resp); err != nil || p.BTH.DestQP() != 0x55 || p.DETH.SrcQP() != 1 || p.DETH.QKey() != 0x80010000 {
		t.Fatalf("PMA response addressing: %v", err)
	}
	pc := wire.PortCounters(wire.MAD(p.Payload).PMAData())
	if wire.MAD(p.Payload).Status() != 0 || pc.PortRcvPkts() != 2 || pc.PortXmitPkts() != 1 {
		t.Fatalf("port 2 PortCounters: status %#x rcv %d xmit %d", wire.MAD(p.Payload).Status(), pc.PortRcvPkts(), pc.PortXmitPkts())
	}
	// A GMP with the wrong Q_Key is dropped and counted.
	f.hosts[2].Send(fabrictest.UD{DLID: swLID, SLID: hostLID(2), DestQP: 1, SrcQP: 0x55, QKey: 0x1234, Payload: mad}.Build())
	if f.hosts[2].Len() != 0 || f.sw.Counters(2).Dropped(fabric.DropManagement) != 1 {
		t.Fatal("GMP with a bad Q_Key answered")
	}
	// A Get of a class the switch has no agent for (ibping's vendor class 0x32): answered
	// "method/attribute combination not supported", as Linux answers one; a Send is dropped.
	clear(mad)
	m.SetBaseVersion(1)
	m.SetMgmtClass(0x32)
	m.SetClassVersion(1)
	m.SetMethod(wire.MethodGet)
	m.SetAttrID(1)
	m.SetTID(0x99)
	f.hosts[2].Send(fabrictest.UD{DLID: swLID, SLID: hostLID(2), DestQP: 1, SrcQP: 0x55, QKey: 0x80010000, Payload: mad}.Build())
	resp = f.last(t, 2)
	if err := p.Parse(resp); err != nil || p.BTH.DestQP() != 0x55 {
		t.Fatalf("unmatched Get response addressing: %v", err)
	}
	if r := wire.MAD(p.Payload); r.Method() != wire.MethodGetResp || r.Status() != wire.StatusMethodAttrNotSupp || r.TID() != 0x99 {
		t.Fatalf("unmatched Get: method %#x status %#x tid %#x", r.Method(), r.Status(), r.TID())
	}
	m.SetMethod(wire.MethodSend)
	f.hosts[2].Send(fabrictest.UD{DLID: swLID, SLID: hostLID(2), DestQP: 1, SrcQP: 0x55, QKey: 0x80010000, Payload: mad}.Build())
	if f.hosts[2].Len() != 0 || f.sw.Counters(2).Dropped(fabric.DropManagement) != 2 {
		t.Fatal("unmatched Send answered or not counted")
	}
}
