// Package fuzztest fuzzes the packet paths end to end: whatever bytes arrive on a link,
// an HCA port (with UD, RC and MAD agents behind it) and a switch (with its management
// agent and directed-route forwarding) count and drop what they cannot use, and never
// panic.
package fuzztest

import (
	"encoding/binary"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/rc"
	"github.com/pibgw/pibgw/wire"
)

// seeds are valid packets of several kinds, to start the fuzzer somewhere interesting.
func seeds() [][]byte {
	var out [][]byte
	mk := func(op wire.Opcode, dqp uint32, eth int, payload int, vl uint8) []byte {
		n := wire.LRHLen + wire.BTHLen + eth + payload + wire.ICRCLen
		b := make([]byte, n)
		lrh := wire.LRH(b)
		lrh.SetVL(vl)
		lrh.SetLNH(wire.LNHLocal)
		lrh.SetDLID(2)
		lrh.SetSLID(1)
		lrh.SetPktLen(uint16(n / 4))
		bth := wire.BTH(b[wire.LRHLen:])
		bth.SetOpCode(op)
		bth.SetPKey(0xFFFF)
		bth.SetDestQP(dqp)
		wire.SetICRC(b)
		return b
	}
	out = append(out, mk(wire.UDSendOnly, 0x48, wire.DETHLen, 64, 0))
	out = append(out, mk(wire.RCSendOnly, 0x49, 0, 64, 0))
	out = append(out, mk(wire.RCRDMAWriteFirst, 0x49, wire.RETHLen, 256, 0))
	out = append(out, mk(wire.RCRDMAReadRequest, 0x49, wire.RETHLen, 0, 0))
	out = append(out, mk(wire.RCAcknowledge, 0x49, wire.AETHLen, 0, 0))
	out = append(out, mk(wire.RCFetchAdd, 0x49, wire.AtomicETHLen, 0, 0))
	smp := mk(wire.UDSendOnly, 0, wire.DETHLen, wire.MADLen, 15)
	m := smp[wire.LRHLen+wire.BTHLen+wire.DETHLen:]
	m[0], m[1], m[2], m[3] = 1, wire.MgmtClassSubnDirected, 1, wire.MethodGet
	binary.BigEndian.PutUint16(m[16:], wire.AttrNodeInfo)
	wire.SMP(m).SetHopCount(1)
	wire.SMP(m).SetHopPointer(1)
	wire.SMP(m).SetDrSLID(0xFFFF)
	wire.SMP(m).SetDrDLID(0xFFFF)
	wire.LRH(smp).SetDLID(0xFFFF)
	wire.SetICRC(smp)
	out = append(out, smp)
	gmp := mk(wire.UDSendOnly, 1, wire.DETHLen, wire.MADLen, 0)
	g := gmp[wire.LRHLen+wire.BTHLen+wire.DETHLen:]
	g[0], g[1], g[2], g[3] = 1, wire.MgmtClassPerfMgt, 1, wire.MethodGet
	binary.BigEndian.PutUint16(g[16:], wire.AttrPortCounters)
	wire.DETH(gmp[wire.LRHLen+wire.BTHLen:]).SetQKey(hca.GSIQKey)
	wire.SetICRC(gmp)
	out = append(out, gmp)
	return out
}

// FuzzPortReceive feeds arbitrary packets to HCA B's port, behind which sit a UD QP, an
// RC QP connected to A, and the SMA/PMA agents. Half the inputs get a correct ICRC so
// the fuzzer reaches past the CRC check.
func FuzzPortReceive(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s, true)
	}
	fab := hcatest.NewFabric(f, 2, hcatest.Options{Register: rc.Register})
	for _, d := range fab.Devs {
		d.StartAgents()
	}
	port := fab.Devs[1].Port(1)
	ctx := fab.Devs[1].Open()
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(1<<16, nil)
	buf := make([]byte, 1<<16)
	mr, _ := pd.RegMR(buf, hca.AccessLocalWrite|hca.AccessRemoteWrite|hca.AccessRemoteRead|hca.AccessRemoteAtomic)
	ud, _ := pd.CreateQP(hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: hca.QPTypeUD, Cap: hca.QPCap{MaxSendWR: 16, MaxRecvWR: 1024}})
	must(f, ud.Modify(&hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QKey: 0}, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrQKey))
	must(f, ud.Modify(&hca.QPAttr{QPState: hca.QPStateRTR}, hca.QPAttrState))
	rcqp, _ := pd.CreateQP(hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: hca.QPTypeRC, Cap: hca.QPCap{MaxSendWR: 16, MaxRecvWR: 1024}})
	must(f, rcqp.Modify(&hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QPAccessFlags: hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic}, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrAccessFlags))
	must(f, rcqp.Modify(&hca.QPAttr{QPState: hca.QPStateRTR, PathMTU: hca.MTU256, DestQPNum: 0x48, AHAttr: hca.AHAttr{DLID: 1, PortNum: 1}, MaxDestRdAtomic: 4},
		hca.QPAttrState|hca.QPAttrAV|hca.QPAttrPathMTU|hca.QPAttrDestQPN|hca.QPAttrRQPSN|hca.QPAttrMaxDestRdAtomic|hca.QPAttrMinRNRTimer))
	recv := []hca.RecvWR{{SGL: []hca.SGE{{Addr: mr.Addr(), Length: 4096, LKey: mr.LKey()}}}}
	var wcs [64]hca.WC
	f.Fuzz(func(t *testing.T, pkt []byte, fixICRC bool) {
		if fixICRC && len(pkt) >= wire.ICRCLen {
			wire.SetICRC(pkt)
		}
		ud.PostRecv(recv)
		rcqp.PostRecv(recv)
		port.Receive([][]byte{pkt})
		for cq.Poll(wcs[:]) > 0 {
		}
		// An RC QP a fuzzed packet took to ERR is brought back for the next input.
		if rcqp.State() == hca.QPStateErr {
			rcqp.Modify(&hca.QPAttr{QPState: hca.QPStateReset}, hca.QPAttrState)
			rcqp.Modify(&hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QPAccessFlags: hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic}, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrAccessFlags)
			rcqp.Modify(&hca.QPAttr{QPState: hca.QPStateRTR, PathMTU: hca.MTU256, DestQPNum: 0x48, AHAttr: hca.AHAttr{DLID: 1, PortNum: 1}, MaxDestRdAtomic: 4},
				hca.QPAttrState|hca.QPAttrAV|hca.QPAttrPathMTU|hca.QPAttrDestQPN|hca.QPAttrRQPSN|hca.QPAttrMaxDestRdAtomic|hca.QPAttrMinRNRTimer)
		}
	})
}

// FuzzSwitchReceive feeds arbitrary packets into a managed switch port (its SMA, PMA and
// directed-route forwarding) with HCAs on the other ports.
func FuzzSwitchReceive(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s, true)
	}
	fab := hcatest.NewFabric(f, 2, hcatest.Options{})
	for _, d := range fab.Devs {
		d.StartAgents()
	}
	sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: 4, Managed: true})
	a := fabric.NewCable(fab.Devs[0].Port(1), sw.Port(1))
	_ = a
	in := sw.Port(2)
	f.Fuzz(func(t *testing.T, pkt []byte, fixICRC bool) {
		if fixICRC && len(pkt) >= wire.ICRCLen {
			wire.SetICRC(pkt)
		}
		in.Receive([][]byte{pkt})
	})
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
