// Package mgmttest holds end-to-end tests of subnet and performance management across
// packages: HCAs (hca, ud) and a switch (fabric) answering SMPs and PMA MADs sent by a
// test "SM" on one HCA port, directed-route and LID-routed. It has only test files.
package mgmttest

import (
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/ud"
	"github.com/pibgw/pibgw/wire"
)

// The rig is ibsim's net.1 in small: HCA A on switch port 1 (the SM's port), HCA B on
// switch port 4. After bringUp: A has LID 1, the switch LID 2, B LID 3.
const (
	guidA  = 0x0002_c903_0000_0300
	guidB  = 0x0002_c903_0000_0400
	guidSw = 0x0002_c900_0000_0200
	lidA   = 1
	lidSw  = 2
	lidB   = 3
	portSw = 4 // B's switch port
)

type rig struct {
	sw     *fabric.Switch
	a, b   *hca.Device
	pa, pb *hca.Port
	ca, cb *fabric.Cable
	resps  [][]byte // responses that reached A (SMP and PMA classes)
}

// newRig builds the fabric; wrap, if set, wraps both directions of A's cable.
func newRig(t testing.TB, wrap func(fabric.Link) fabric.Link) *rig {
	t.Helper()
	r := &rig{sw: fabric.NewSwitch(fabric.SwitchConfig{Ports: 8, Managed: true, NodeGUID: guidSw, NodeDesc: "Switch1"})}
	var err error
	if r.a, err = hca.NewDevice(hca.Config{Name: "pib_0", NodeGUID: guidA, NodeDesc: "Hca1"}); err != nil {
		t.Fatal(err)
	}
	if r.b, err = hca.NewDevice(hca.Config{Name: "pib_1", NodeGUID: guidB, NodeDesc: "Hca2"}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*hca.Device{r.a, r.b} {
		ud.Register(d)
		d.StartAgents()
	}
	r.pa, r.pb = r.a.Port(1), r.b.Port(1)
	var opts []fabric.CableOption
	if wrap != nil {
		opts = append(opts, fabric.WithLinkWrapper(wrap))
	}
	r.ca = fabric.NewCable(r.pa, r.sw.Port(1), opts...)
	r.cb = fabric.NewCable(r.pb, r.sw.Port(portSw))
	rec := hca.MADHandlerFunc(func(m *hca.MAD) { r.resps = append(r.resps, append([]byte(nil), m.Data...)) })
	for _, c := range []uint8{wire.MgmtClassSubnDirected, wire.MgmtClassSubnLID, wire.MgmtClassPerfMgt} {
		r.pa.RegisterMADHandler(c, true, rec)
	}
	return r
}

// take returns the one response that arrived since the last call.
func (r *rig) take(t testing.TB) []byte {
	t.Helper()
	if len(r.resps) != 1 {
		t.Fatalf("%d responses arrived, want 1", len(r.resps))
	}
	m := r.resps[0]
	r.resps = r.resps[:0]
	return m
}

func newMAD(class uint8, method uint8, attr uint16, mod uint32, tid uint64) []byte {
	b := make([]byte, wire.MADLen)
	m := wire.MAD(b)
	m.SetBaseVersion(wire.MADBaseVersion)
	m.SetMgmtClass(class)
	m.SetClassVersion(1)
	m.SetMethod(method)
	m.SetAttrID(attr)
	m.SetAttrMod(mod)
	m.SetTID(tid)
	return b
}

// dr sends a directed-route SMP from A along path (the ports to leave by from hop 1
// on; empty for A itself) and returns the response.
func (r *rig) dr(t testing.TB, method uint8, attr uint16, mod uint32, data []byte, path ...uint8) wire.SMP {
	t.Helper()
	b := newMAD(wire.MgmtClassSubnDirected, method, attr, mod, r.pa.TID())
	s := wire.SMP(b)
	s.SetHopCount(uint8(len(path)))
	s.SetDrSLID(0xFFFF)
	s.SetDrDLID(0xFFFF)
	copy(s.InitialPath()[1:], path)
	copy(s.SMPData(), data)
	if err := r.pa.SendSMP(hca.MADAddr{DLID: 0xFFFF}, b); err != nil {
		t.Fatal(err)
	}
	resp := wire.SMP(r.take(t))
	if resp.MAD().TID() != wire.MAD(b).TID() || !resp.D() || resp.MAD().Method() != wire.MethodGetResp {
		t.Fatalf("response tid %#x D %v method %#x", resp.MAD().TID(), resp.D(), resp.MAD().Method())
	}
	return resp
}

// lid sends a LID-routed SMP from A to dlid and returns the response.
func (r *rig) lid(t testing.TB, dlid uint16, method uint8, attr uint16, mod uint32, data []byte) wire.SMP {
	t.Helper()
	b := newMAD(wire.MgmtClassSubnLID, method, attr, mod, r.pa.TID())
	copy(wire.SMP(b).SMPData(), data)
	if err := r.pa.SendMAD(hca.MADAddr{DLID: dlid, QPN: 0}, b); err != nil {
		t.Fatal(err)
	}
	resp := wire.SMP(r.take(t))
	if resp.MAD().TID() != wire.MAD(b).TID() || resp.MAD().Method() != wire.MethodGetResp {
		t.Fatalf("response tid %#x method %#x", resp.MAD().TID(), resp.MAD().Method())
	}
	return resp
}

// pma sends a PMA MAD (GMP to QP1) from A to dlid and returns the response.
func (r *rig) pma(t testing.TB, dlid uint16, method uint8, attr uint16, data []byte) wire.MAD {
	t.Helper()
	b := newMAD(wire.MgmtClassPerfMgt, method, attr, 0, r.pa.TID())
	copy(wire.MAD(b).PMAData(), data)
	if err := r.pa.SendMAD(hca.MADAddr{DLID: dlid, QPN: 1, QKey: hca.GSIQKey}, b); err != nil {
		t.Fatal(err)
	}
	resp := wire.MAD(r.take(t))
	if resp.TID() != wire.MAD(b).TID() || resp.Method() != wire.MethodGetResp {
		t.Fatalf("response tid %#x method %#x", resp.TID(), resp.Method())
	}
	return resp
}

// setPI reads the PortInfo at mod along path, lets f change it, and writes it back, as
// an SM does; it returns the Set's response.
func (r *rig) setPI(t testing.TB, mod uint32, f func(pi wire.PortInfo), path ...uint8) wire.SMP {
	t.Helper()
	cur := mustOK(t, r.dr(t, wire.MethodGet, wire.AttrPortInfo, mod, nil, path...), "Get PortInfo")
	pi := append([]byte(nil), cur.SMPData()...)
	wire.PortInfo(pi).SetPortState(wire.PortStateNoChange)
	wire.PortInfo(pi).SetPortPhysicalState(wire.PhysStateNoChange)
	f(wire.PortInfo(pi))
	return r.dr(t, wire.MethodSet, wire.AttrPortInfo, mod|wire.PortInfoAttrModSMSupportsExtSpeeds, pi, path...)
}

// mustOK fails on a non-zero DR status.
func mustOK(t testing.TB, s wire.SMP, what string) wire.SMP {
	t.Helper()
	if st := s.DRStatus(); st != 0 {
		t.Fatalf("%s: status %#x", what, st)
	}
	return s
}

// bringUp does what opensm did on ibsim's net.1 (ibsim-protocol.md §4): clear
// PortStateChange, LIDs and SM LID everywhere, the LFT, then Armed and Active.
func (r *rig) bringUp(t testing.TB) {
	t.Helper()
	si := make([]byte, wire.SwitchInfoLen)
	wire.SwitchInfo(si).SetPortStateChange(true)
	wire.SwitchInfo(si).SetLinearFDBTop(lidB)
	mustOK(t, r.dr(t, wire.MethodSet, wire.AttrSwitchInfo, 0, si, 1), "SwitchInfo")
	lids := func(lid uint16) func(pi wire.PortInfo) {
		return func(pi wire.PortInfo) {
			pi.SetLID(lid)
			pi.SetMasterSMLID(lidA)
			pi.SetGIDPrefix(hca.DefaultGIDPrefix)
			pi.SetSubnetTimeOut(18)
			pi.SetNeighborMTU(wire.MTU4096)
		}
	}
	mustOK(t, r.setPI(t, 0, lids(lidSw), 1), "switch port 0")
	mustOK(t, r.setPI(t, 1, lids(lidA)), "A")
	mustOK(t, r.setPI(t, 1, lids(lidB), 1, portSw), "B")
	lft := make([]byte, wire.LinearForwardingTableLen)
	for i := range lft {
		lft[i] = wire.LFTNoPort
	}
	lft[lidA], lft[lidSw], lft[lidB] = 1, 0, portSw
	mustOK(t, r.dr(t, wire.MethodSet, wire.AttrLinearForwardingTable, 0, lft, 1), "LFT")
	for _, st := range []uint8{wire.PortStateArmed, wire.PortStateActive} {
		state := func(pi wire.PortInfo) { pi.SetPortState(st) }
		mustOK(t, r.setPI(t, 1, state, 1), "switch port 1")
		mustOK(t, r.setPI(t, portSw, state, 1), "switch port 4")
		mustOK(t, r.setPI(t, 1, state), "A")
		mustOK(t, r.setPI(t, 1, state, 1, portSw), "B")
	}
}
