package mgmttest

import (
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

const udQKey = 0x1111

// udEnd is a UD QP in RTS with a registered buffer and receives posted.
type udEnd struct {
	qp       *hca.QP
	scq, rcq *hca.CQ
	mr       *hca.MR
	buf      []byte
	pd       *hca.PD
}

func newUDEnd(t testing.TB, d *hca.Device) *udEnd {
	t.Helper()
	e := &udEnd{buf: make([]byte, 33*2048)}
	ctx := d.Open()
	t.Cleanup(func() { ctx.Close() })
	var err error
	if e.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.scq, err = ctx.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if e.rcq, err = ctx.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(hca.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: hca.QPTypeUD,
		Cap: hca.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		a    hca.QPAttr
		mask hca.QPAttrMask
	}{
		{hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QKey: udQKey}, hca.QPAttrState | hca.QPAttrPKeyIndex | hca.QPAttrPort | hca.QPAttrQKey},
		{hca.QPAttr{QPState: hca.QPStateRTR}, hca.QPAttrState},
		{hca.QPAttr{QPState: hca.QPStateRTS}, hca.QPAttrState | hca.QPAttrSQPSN},
	} {
		if err := e.qp.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	if e.mr, err = e.pd.RegMR(e.buf, hca.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 32; i++ {
		sge := hca.SGE{Addr: e.mr.Addr() + uint64(i)*2048, Length: 2048, LKey: e.mr.LKey()}
		if _, err := e.qp.PostRecv([]hca.RecvWR{{WRID: uint64(i), SGL: []hca.SGE{sge}}}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// send sends n messages of size bytes to dst at dlid and returns how many completed
// successfully at the sender.
func (e *udEnd) send(t testing.TB, dst *udEnd, dlid uint16, n, size int) {
	t.Helper()
	ah, err := e.pd.CreateAH(hca.AHAttr{DLID: dlid, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		wr := hca.SendWR{WRID: uint64(i), Opcode: hca.WRSend, SendFlags: hca.SendSignaled, AH: ah,
			RemoteQPN: dst.qp.Num(), RemoteQKey: udQKey,
			SGL: []hca.SGE{{Addr: e.mr.Addr() + 32*2048, Length: uint32(size), LKey: e.mr.LKey()}}}
		if _, err := e.qp.PostSend([]hca.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		var wc [1]hca.WC
		if e.scq.Poll(wc[:]) != 1 || wc[0].Status != hca.WCSuccess {
			t.Fatalf("send %d: %+v", i, wc[0])
		}
	}
}

// received counts and drains the completions at e.
func (e *udEnd) received() int {
	var wc [64]hca.WC
	return e.rcq.Poll(wc[:])
}

// TestDataNeedsActivePorts: UD traffic flows only once the SM has made every port on
// the way Active, and then follows the LFT the SM programs.
func TestDataNeedsActivePorts(t *testing.T) {
	r := newRig(t, nil)
	ea, eb := newUDEnd(t, r.a), newUDEnd(t, r.b)
	// Give everyone LIDs and routes but leave the ports in Init/Armed.
	r.pa.SetLID(lidA, 0)
	r.pb.SetLID(lidB, 0)
	r.pa.SetState(hca.PortActive) // A may send; the switch ports still block data
	r.pb.SetState(hca.PortActive)
	r.sw.SetLFT(lidB, portSw)
	ea.send(t, eb, lidB, 3, 64)
	if eb.received() != 0 || r.sw.Counters(1).Dropped(fabric.DropPortState) != 3 {
		t.Fatalf("data crossed Init switch ports (port-state drops %d)", r.sw.Counters(1).Dropped(fabric.DropPortState))
	}
	r.pa.SetState(hca.PortInit)
	r.pb.SetState(hca.PortInit)
	r.bringUp(t)
	ea.send(t, eb, lidB, 3, 64)
	if n := eb.received(); n != 3 {
		t.Fatalf("B received %d after bring-up, want 3", n)
	}
	// The SM moves LID 3 to port 5 (nothing plugged there): traffic follows the LFT.
	lft := wire.LinearForwardingTable(mustOK(t, r.dr(t, wire.MethodGet, wire.AttrLinearForwardingTable, 0, nil, 1), "LFT").SMPData())
	if lft.Port(lidB) != portSw || lft.Port(lidA) != 1 || lft.Port(lidSw) != 0 || lft.Port(4) != wire.LFTNoPort {
		t.Fatalf("LFT block 0: %x", []byte(lft))
	}
	moved := append([]byte(nil), lft...)
	moved[lidB] = 5
	mustOK(t, r.dr(t, wire.MethodSet, wire.AttrLinearForwardingTable, 0, moved, 1), "LFT Set")
	ea.send(t, eb, lidB, 2, 64)
	if n := eb.received(); n != 0 || r.sw.Counters(5).XmitDiscards != 2 {
		t.Fatalf("B received %d with LID 3 routed to port 5; port 5 discards %d", n, r.sw.Counters(5).XmitDiscards)
	}
	moved[lidB] = portSw
	mustOK(t, r.dr(t, wire.MethodSet, wire.AttrLinearForwardingTable, 0, moved, 1), "LFT Set")
	ea.send(t, eb, lidB, 2, 64)
	if n := eb.received(); n != 2 {
		t.Fatalf("B received %d after the LFT was restored", n)
	}
}

// udWords is the PortXmitData/PortRcvData size of a UD SEND of n payload bytes without
// GRH: LRH through ICRC plus VCRC, in 4-byte words (IBA 16.1.3.5).
func udWords(n int) uint64 {
	return uint64(wire.LRHLen+wire.BTHLen+wire.DETHLen+n+wire.PadFor(n)+wire.ICRCLen+wire.VCRCLen) / 4
}

// madWords is the same for a MAD packet without GRH.
var madWords = uint64(wire.LRHLen+wire.BTHLen+wire.DETHLen+wire.MADLen+wire.ICRCLen+wire.VCRCLen) / 4

// TestPMACountsTraffic reads real UD traffic in PortCounters and PortCountersExtended of
// the HCA and the switch, and resets them by Set.
func TestPMACountsTraffic(t *testing.T) {
	r := newRig(t, nil)
	r.bringUp(t)
	ea, eb := newUDEnd(t, r.a), newUDEnd(t, r.b)

	// ClassPortInfo: a CA has no AllPortSelect, a switch does.
	cpi := func(dlid uint16) wire.ClassPortInfo {
		m := r.pma(t, dlid, wire.MethodGet, wire.AttrClassPortInfo, nil)
		if m.Status() != 0 {
			t.Fatalf("ClassPortInfo of %d: %#x", dlid, m.Status())
		}
		return wire.ClassPortInfo(m.PMAData())
	}
	if c := cpi(lidB); c.CapabilityMask() != 0x1200 || c.ClassVersion() != 1 {
		t.Fatalf("CA PMA CapabilityMask %#x", c.CapabilityMask())
	}
	if c := cpi(lidSw); c.CapabilityMask() != 0x1300 {
		t.Fatalf("switch PMA CapabilityMask %#x", c.CapabilityMask())
	}

	// Reset B's counters, both sets (they share the 64-bit counters): each reset
	// Set's own request is gone, its response counted.
	sel := make([]byte, wire.PortCountersLen)
	wire.PortCounters(sel).SetPortSelect(1)
	wire.PortCounters(sel).SetCounterSelect(wire.CounterSelectAll)
	if m := r.pma(t, lidB, wire.MethodSet, wire.AttrPortCounters, sel); m.Status() != 0 {
		t.Fatalf("PortCounters Set: %#x", m.Status())
	}
	xsel := make([]byte, wire.PortCountersExtendedLen)
	wire.PortCountersExtended(xsel).SetPortSelect(1)
	wire.PortCountersExtended(xsel).SetCounterSelect(wire.CounterSelectExtAll)
	if m := r.pma(t, lidB, wire.MethodSet, wire.AttrPortCountersExtended, xsel); m.Status() != 0 {
		t.Fatalf("PortCountersExtended Set: %#x", m.Status())
	}
	const n, size = 10, 100
	ea.send(t, eb, lidB, n, size)
	if got := eb.received(); got != n {
		t.Fatalf("B received %d", got)
	}
	get := make([]byte, wire.PortCountersLen)
	wire.PortCounters(get).SetPortSelect(1)
	m := r.pma(t, lidB, wire.MethodGet, wire.AttrPortCounters, get)
	pc := wire.PortCounters(m.PMAData())
	// Received: the 10 sends and this Get; sent: the Set's response.
	if m.Status() != 0 || pc.PortRcvPkts() != n+1 || pc.PortRcvData() != uint32(n*udWords(size)+madWords) ||
		pc.PortXmitPkts() != 1 || pc.PortXmitData() != uint32(madWords) || pc.PortRcvErrors() != 0 || pc.PortSelect() != 1 {
		t.Fatalf("B PortCounters: status %#x rcv %d/%d xmit %d/%d, want rcv %d/%d xmit 1/%d", m.Status(),
			pc.PortRcvPkts(), pc.PortRcvData(), pc.PortXmitPkts(), pc.PortXmitData(), n+1, n*udWords(size)+madWords, madWords)
	}
	ext := make([]byte, wire.PortCountersExtendedLen)
	wire.PortCountersExtended(ext).SetPortSelect(1)
	m = r.pma(t, lidB, wire.MethodGet, wire.AttrPortCountersExtended, ext)
	pe := wire.PortCountersExtended(m.PMAData())
	if m.Status() != 0 || pe.PortRcvPkts() != n+2 || pe.PortUnicastRcvPkts() != n+2 || pe.PortXmitPkts() != 2 ||
		pe.PortMulticastRcvPkts() != 0 {
		t.Fatalf("B PortCountersExtended: rcv %d unicast %d xmit %d", pe.PortRcvPkts(), pe.PortUnicastRcvPkts(), pe.PortXmitPkts())
	}
	// A's sender side, read through its own PMA by LID (loopback).
	wire.PortCounters(get).SetPortSelect(1)
	m = r.pma(t, lidA, wire.MethodGet, wire.AttrPortCounters, get)
	if pa := wire.PortCounters(m.PMAData()); m.Status() != 0 || pa.PortXmitPkts() < n {
		t.Fatalf("A PortXmitPkts %d", pa.PortXmitPkts())
	}

	// The switch: port 4 sent the 10 sends (and the PMA traffic to B); AllPortSelect sums.
	swGet := func(sel uint8) wire.PortCounters {
		b := make([]byte, wire.PortCountersLen)
		wire.PortCounters(b).SetPortSelect(sel)
		m := r.pma(t, lidSw, wire.MethodGet, wire.AttrPortCounters, b)
		if m.Status() != 0 {
			t.Fatalf("switch PortCounters %d: %#x", sel, m.Status())
		}
		return wire.PortCounters(append([]byte(nil), m.PMAData()...))
	}
	p4 := swGet(portSw)
	c4 := r.sw.Counters(portSw)
	if p4.PortXmitPkts() < n || uint64(p4.PortXmitPkts()) != c4.XmitPkts || uint64(p4.PortXmitData()) != c4.XmitData {
		t.Fatalf("switch port 4 PortCounters xmit %d/%d, counters %+v", p4.PortXmitPkts(), p4.PortXmitData(), c4)
	}
	all := swGet(wire.PortSelectAll)
	var sum uint64
	for i := 1; i <= r.sw.NumPorts(); i++ {
		sum += r.sw.Counters(i).RcvPkts
	}
	// The Get of "all" arrives on port 1 before it is read, so the sum includes it.
	if uint64(all.PortRcvPkts()) != sum {
		t.Fatalf("AllPortSelect PortRcvPkts %d, sum of ports %d", all.PortRcvPkts(), sum)
	}
	// Reset the switch's port 4 extended counters.
	xs := make([]byte, wire.PortCountersExtendedLen)
	wire.PortCountersExtended(xs).SetPortSelect(portSw)
	wire.PortCountersExtended(xs).SetCounterSelect(wire.CounterSelectExtAll)
	if m := r.pma(t, lidSw, wire.MethodSet, wire.AttrPortCountersExtended, xs); m.Status() != 0 ||
		wire.PortCountersExtended(m.PMAData()).PortXmitPkts() != 0 || r.sw.Counters(portSw).UnicastXmitPkts != 0 {
		t.Fatalf("switch extended reset: %#x", m.Status())
	}

	// Errors: a CA's PortSelect must be its port; unknown attributes are not supported.
	wire.PortCounters(get).SetPortSelect(2)
	if m := r.pma(t, lidB, wire.MethodGet, wire.AttrPortCounters, get); m.Status() != wire.StatusInvalidAttrOrModVal {
		t.Fatalf("PortSelect 2 on a CA: %#x", m.Status())
	}
	wire.PortCounters(get).SetPortSelect(9)
	if m := r.pma(t, lidSw, wire.MethodGet, wire.AttrPortCounters, get); m.Status() != wire.StatusInvalidAttrOrModVal {
		t.Fatalf("PortSelect 9 on an 8-port switch: %#x", m.Status())
	}
	if m := r.pma(t, lidB, wire.MethodGet, wire.AttrPortSamplesControl, nil); m.Status() != wire.StatusMethodAttrNotSupp {
		t.Fatalf("PortSamplesControl: %#x", m.Status())
	}
}

// TestPMASaturates: the 32-bit PortCounters fields stop at all ones (IBA 16.1.3.5) while
// PortCountersExtended keeps counting.
func TestPMASaturates(t *testing.T) {
	r := newRig(t, nil)
	r.bringUp(t)
	r.pb.Counters().Add(hca.CntXmitData, 1<<33)
	get := make([]byte, wire.PortCountersLen)
	wire.PortCounters(get).SetPortSelect(1)
	m := r.pma(t, lidB, wire.MethodGet, wire.AttrPortCounters, get)
	if d := wire.PortCounters(m.PMAData()).PortXmitData(); d != 0xFFFFFFFF {
		t.Fatalf("PortXmitData %#x, want saturated", d)
	}
	ext := make([]byte, wire.PortCountersExtendedLen)
	wire.PortCountersExtended(ext).SetPortSelect(1)
	m = r.pma(t, lidB, wire.MethodGet, wire.AttrPortCountersExtended, ext)
	if d := wire.PortCountersExtended(m.PMAData()).PortXmitData(); d < 1<<33 {
		t.Fatalf("extended PortXmitData %#x", d)
	}
}
