package hca

import (
	"testing"

	"github.com/pibgw/pibgw/wire"
)

// localSMP sends a hop-count-0 directed-route SMP from port p to its own SMA and returns
// the response (no link needed: the originating SMI answers it locally).
func localSMP(t *testing.T, p *Port, method uint8, attr uint16, mod uint32, data []byte) wire.SMP {
	t.Helper()
	var got []byte
	p.RegisterMADHandler(wire.MgmtClassSubnDirected, true, MADHandlerFunc(func(m *MAD) {
		got = append([]byte(nil), m.Data...)
	}))
	b := make([]byte, wire.MADLen)
	m := wire.MAD(b)
	m.SetBaseVersion(1)
	m.SetMgmtClass(wire.MgmtClassSubnDirected)
	m.SetClassVersion(1)
	m.SetMethod(method)
	m.SetAttrID(attr)
	m.SetAttrMod(mod)
	m.SetTID(p.TID())
	s := wire.SMP(b)
	s.SetDrSLID(0xFFFF)
	s.SetDrDLID(0xFFFF)
	copy(s.SMPData(), data)
	if err := p.SendSMP(MADAddr{DLID: 0xFFFF}, b); err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("no response")
	}
	r := wire.SMP(got)
	if !r.D() || r.MAD().Method() != wire.MethodGetResp || r.MAD().TID() != m.TID() || r.HopPointer() != 0 {
		t.Fatalf("response D %v method %#x hp %d", r.D(), r.MAD().Method(), r.HopPointer())
	}
	return r
}

func TestSMALocal(t *testing.T) {
	d := newTestDevice(t, 2)
	d.StartAgents()
	p1, p2 := d.Port(1), d.Port(2)
	ni := wire.NodeInfo(localSMP(t, p2, wire.MethodGet, wire.AttrNodeInfo, 0, nil).SMPData())
	if ni.NodeType() != wire.NodeTypeCA || ni.NumPorts() != 2 || ni.LocalPortNum() != 2 || ni.PortGUID() != p2.GUID() ||
		ni.NodeGUID() != d.Query().NodeGUID || ni.VendorID() != d.Query().VendorID || ni.PartitionCap() != PKeyTableLen {
		t.Fatalf("NodeInfo %x", []byte(ni[:wire.NodeInfoLen]))
	}
	// PortInfo of port 1 asked at port 2: LocalPortNum is where the SMP arrived.
	pi := wire.PortInfo(localSMP(t, p2, wire.MethodGet, wire.AttrPortInfo, 1, nil).SMPData())
	if pi.LocalPortNum() != 2 || pi.PortState() != uint8(PortDown) || pi.MTUCap() != uint8(MTU4096) ||
		pi.NeighborMTU() != uint8(MTU256) || pi.CapabilityMask() != p1.Query().PortCapFlags {
		t.Fatalf("PortInfo %x", []byte(pi))
	}
	// No link: the port cannot be armed.
	set := make([]byte, wire.PortInfoLen)
	copy(set, pi)
	wire.PortInfo(set).SetPortState(uint8(PortArmed))
	if s := localSMP(t, p1, wire.MethodSet, wire.AttrPortInfo, 0, set); s.DRStatus() != wire.StatusInvalidAttrOrModVal {
		t.Fatalf("Arm a Down port: %#x", s.DRStatus())
	}
	wire.PortInfo(set).SetPortState(0)
	wire.PortInfo(set).SetLID(0x10)
	wire.PortInfo(set).SetPortPhysicalState(0)
	if s := localSMP(t, p1, wire.MethodSet, wire.AttrPortInfo, 0, set); s.DRStatus() != 0 || p1.LID() != 0x10 {
		t.Fatalf("Set LID: %#x, LID %#x", s.DRStatus(), p1.LID())
	}
	if s := localSMP(t, p1, wire.MethodGet, wire.AttrPortInfo, 3, nil); s.DRStatus() != wire.StatusInvalidAttrOrModVal {
		t.Fatalf("port 3 of 2: %#x", s.DRStatus())
	}
	// SMInfo goes to the agent of the port it arrived at.
	if s := localSMP(t, p1, wire.MethodGet, wire.AttrSMInfo, 0, nil); s.DRStatus() != wire.StatusMethodAttrNotSupp {
		t.Fatalf("SMInfo without an SM: %#x", s.DRStatus())
	}
	p1.SetSMInfoAgent(SMInfoFunc(func(method uint8, mod uint32, data []byte) uint16 {
		wire.SMInfo(data).SetPriority(7)
		return 0
	}))
	if s := localSMP(t, p1, wire.MethodGet, wire.AttrSMInfo, 0, nil); s.DRStatus() != 0 || wire.SMInfo(s.SMPData()).Priority() != 7 {
		t.Fatalf("SMInfo with an SM: %#x", s.DRStatus())
	}
	// SendSMP refuses a route that does not start at this port.
	b := make([]byte, wire.MADLen)
	wire.MAD(b).SetMgmtClass(wire.MgmtClassSubnDirected)
	s := wire.SMP(b)
	s.SetDrSLID(0xFFFF)
	s.SetDrDLID(0xFFFF)
	s.SetHopCount(1)
	s.InitialPath()[1] = 2
	if err := p1.SendSMP(MADAddr{DLID: 0xFFFF}, b); err == nil {
		t.Fatal("SendSMP sent a route leaving by port 2 from port 1")
	}
}

// TestPMALocal reads the PMA through the port's own LID (loopback inside the HCA).
func TestPMALocal(t *testing.T) {
	d := newTestDevice(t, 1)
	d.StartAgents()
	p := d.Port(1)
	p.SetLID(5, 0)
	p.SetState(PortActive)
	var got []byte
	p.RegisterMADHandler(wire.MgmtClassPerfMgt, true, MADHandlerFunc(func(m *MAD) { got = append([]byte(nil), m.Data...) }))
	pma := func(method uint8, attr uint16, sel uint8, mask uint16) wire.MAD {
		t.Helper()
		got = nil
		b := make([]byte, wire.MADLen)
		m := wire.MAD(b)
		m.SetBaseVersion(1)
		m.SetMgmtClass(wire.MgmtClassPerfMgt)
		m.SetClassVersion(1)
		m.SetMethod(method)
		m.SetAttrID(attr)
		wire.PortCounters(m.PMAData()).SetPortSelect(sel)
		wire.PortCounters(m.PMAData()).SetCounterSelect(mask)
		if err := p.SendMAD(MADAddr{DLID: 5, QPN: 1, QKey: GSIQKey}, b); err != nil {
			t.Fatal(err)
		}
		if got == nil {
			t.Fatal("no PMA response")
		}
		return wire.MAD(got)
	}
	p.counters.Add(CntRcvErrors, 70000) // beyond PortRcvErrors' 16 bits
	p.counters.Add(CntVL15Dropped, 3)
	m := pma(wire.MethodGet, wire.AttrPortCounters, 1, 0)
	pc := wire.PortCounters(m.PMAData())
	if m.Status() != 0 || pc.PortRcvErrors() != 0xFFFF || pc.VL15Dropped() != 3 || pc.PortRcvPkts() == 0 {
		t.Fatalf("PortCounters: %#x rcverr %d vl15 %d", m.Status(), pc.PortRcvErrors(), pc.VL15Dropped())
	}
	m = pma(wire.MethodSet, wire.AttrPortCounters, 1, wire.CounterSelectPortRcvErrors)
	if pc := wire.PortCounters(m.PMAData()); pc.PortRcvErrors() != 0 || pc.VL15Dropped() != 3 {
		t.Fatalf("after reset of PortRcvErrors: %d, VL15Dropped %d", pc.PortRcvErrors(), pc.VL15Dropped())
	}
	if m := pma(wire.MethodGet, wire.AttrPortCounters, 2, 0); m.Status() != wire.StatusInvalidAttrOrModVal {
		t.Fatalf("PortSelect 2: %#x", m.Status())
	}
	if m := pma(wire.MethodGet, wire.AttrPortSamplesResult, 1, 0); m.Status() != wire.StatusMethodAttrNotSupp {
		t.Fatalf("PortSamplesResult: %#x", m.Status())
	}
	if m := pma(wire.MethodSend, wire.AttrPortCounters, 1, 0); m.Status() != wire.StatusMethodNotSupported {
		t.Fatalf("method Send: %#x", m.Status())
	}
}

// TestUnmatchedGMP: a Get or Set of a class no agent on the port takes (vendor class 0x32,
// ibping's) is answered with "method/attribute combination not supported", as Linux's MAD
// layer answers it; other methods are dropped; a QP1 consumer still gets them all.
func TestUnmatchedGMP(t *testing.T) {
	const vendorPing = 0x32
	d := newTestDevice(t, 1)
	d.StartAgents()
	p := d.Port(1)
	p.SetLID(5, 0)
	p.SetState(PortActive)
	var got []wire.MAD
	p.RegisterMADHandler(vendorPing, true, MADHandlerFunc(func(m *MAD) { got = append(got, append(wire.MAD(nil), m.Data...)) }))
	send := func(method uint8) {
		t.Helper()
		b := make([]byte, wire.MADLen)
		m := wire.MAD(b)
		m.SetBaseVersion(1)
		m.SetMgmtClass(vendorPing)
		m.SetClassVersion(1)
		m.SetMethod(method)
		m.SetAttrID(1)
		m.SetTID(0x1234)
		copy(b[wire.MADLen-4:], "data")
		if err := p.SendMAD(MADAddr{DLID: 5, QPN: 1, QKey: GSIQKey}, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, method := range []uint8{wire.MethodGet, wire.MethodSet} {
		got = nil
		send(method)
		if len(got) != 1 {
			t.Fatalf("method %#x: %d responses, want 1", method, len(got))
		}
		r := got[0]
		if r.Method() != wire.MethodGetResp || r.Status() != wire.StatusMethodAttrNotSupp || r.TID() != 0x1234 ||
			r.AttrID() != 1 || string(r[wire.MADLen-4:]) != "data" {
			t.Fatalf("method %#x: response method %#x status %#x tid %#x attr %#x", method, r.Method(), r.Status(), r.TID(), r.AttrID())
		}
	}
	got = nil
	drops := p.counters.Get(CntDropNoQP)
	send(wire.MethodSend)
	if len(got) != 0 || p.counters.Get(CntDropNoQP) != drops+1 {
		t.Fatalf("method Send: %d responses, drops %d → %d; want none, one drop", len(got), drops, p.counters.Get(CntDropNoQP))
	}
}
