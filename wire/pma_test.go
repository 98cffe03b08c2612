package wire

import (
	"bytes"
	"testing"
)

// Offsets from libibmad fields.c (IB_PC_*_F; QP1Dropped from the
// PortCounters additions), IBA 16.1.3.5.
func TestPortCountersFields(t *testing.T) {
	fs := []smField{
		smFld("PortSelect", 8, 8, PortCounters.PortSelect, PortCounters.SetPortSelect),
		smFld("CounterSelect", 16, 16, PortCounters.CounterSelect, PortCounters.SetCounterSelect),
		smFld("SymbolErrorCounter", 32, 16, PortCounters.SymbolErrorCounter, PortCounters.SetSymbolErrorCounter),
		smFld("LinkErrorRecoveryCounter", 48, 8, PortCounters.LinkErrorRecoveryCounter, PortCounters.SetLinkErrorRecoveryCounter),
		smFld("LinkDownedCounter", 56, 8, PortCounters.LinkDownedCounter, PortCounters.SetLinkDownedCounter),
		smFld("PortRcvErrors", 64, 16, PortCounters.PortRcvErrors, PortCounters.SetPortRcvErrors),
		smFld("PortRcvRemotePhysicalErrors", 80, 16, PortCounters.PortRcvRemotePhysicalErrors, PortCounters.SetPortRcvRemotePhysicalErrors),
		smFld("PortRcvSwitchRelayErrors", 96, 16, PortCounters.PortRcvSwitchRelayErrors, PortCounters.SetPortRcvSwitchRelayErrors),
		smFld("PortXmitDiscards", 112, 16, PortCounters.PortXmitDiscards, PortCounters.SetPortXmitDiscards),
		smFld("PortXmitConstraintErrors", 128, 8, PortCounters.PortXmitConstraintErrors, PortCounters.SetPortXmitConstraintErrors),
		smFld("PortRcvConstraintErrors", 136, 8, PortCounters.PortRcvConstraintErrors, PortCounters.SetPortRcvConstraintErrors),
		smFld("CounterSelect2", 144, 8, PortCounters.CounterSelect2, PortCounters.SetCounterSelect2),
		smFld("LocalLinkIntegrityErrors", 152, 4, PortCounters.LocalLinkIntegrityErrors, PortCounters.SetLocalLinkIntegrityErrors),
		smFld("ExcessiveBufferOverrunErrors", 156, 4, PortCounters.ExcessiveBufferOverrunErrors, PortCounters.SetExcessiveBufferOverrunErrors),
		smFld("QP1Dropped", 160, 16, PortCounters.QP1Dropped, PortCounters.SetQP1Dropped),
		smFld("VL15Dropped", 176, 16, PortCounters.VL15Dropped, PortCounters.SetVL15Dropped),
		smFld("PortXmitData", 192, 32, PortCounters.PortXmitData, PortCounters.SetPortXmitData),
		smFld("PortRcvData", 224, 32, PortCounters.PortRcvData, PortCounters.SetPortRcvData),
		smFld("PortXmitPkts", 256, 32, PortCounters.PortXmitPkts, PortCounters.SetPortXmitPkts),
		smFld("PortRcvPkts", 288, 32, PortCounters.PortRcvPkts, PortCounters.SetPortRcvPkts),
		smFld("PortXmitWait", 320, 32, PortCounters.PortXmitWait, PortCounters.SetPortXmitWait),
	}
	smCheckFields(t, PortCountersLen, fs)

	// The generic accessors address the same bits as the named ones
	// (fs[2:] minus CounterSelect2, in PortCounter order).
	named := map[PortCounter]string{
		PCSymbolErrorCounter: "SymbolErrorCounter", PCLinkErrorRecoveryCounter: "LinkErrorRecoveryCounter",
		PCLinkDownedCounter: "LinkDownedCounter", PCPortRcvErrors: "PortRcvErrors",
		PCPortRcvRemotePhysicalErrors: "PortRcvRemotePhysicalErrors", PCPortRcvSwitchRelayErrors: "PortRcvSwitchRelayErrors",
		PCPortXmitDiscards: "PortXmitDiscards", PCPortXmitConstraintErrors: "PortXmitConstraintErrors",
		PCPortRcvConstraintErrors: "PortRcvConstraintErrors", PCLocalLinkIntegrityErrors: "LocalLinkIntegrityErrors",
		PCExcessiveBufferOverrunErrors: "ExcessiveBufferOverrunErrors", PCVL15Dropped: "VL15Dropped",
		PCPortXmitData: "PortXmitData", PCPortRcvData: "PortRcvData", PCPortXmitPkts: "PortXmitPkts",
		PCPortRcvPkts: "PortRcvPkts", PCPortXmitWait: "PortXmitWait", PCQP1Dropped: "QP1Dropped",
	}
	if len(named) != int(NumPortCounters) {
		t.Fatal("counter list incomplete")
	}
	var gen []smField
	for c := range NumPortCounters {
		var f smField
		for _, x := range fs {
			if x.name == named[c] {
				f = x
			}
		}
		if f.name == "" || f.w != c.Width() || c.Max() != 1<<f.w-1 {
			t.Fatalf("%s: width %d, table says %d", named[c], c.Width(), f.w)
		}
		gen = append(gen, smField{"Counter(" + f.name + ")", f.off, f.w,
			func(b []byte) uint64 { return PortCounters(b).Counter(c) },
			func(b []byte, v uint64) { PortCounters(b).SetCounter(c, v) }})
	}
	smCheckFields(t, PortCountersLen, gen)
}

func TestPortCountersSaturation(t *testing.T) {
	p := PortCounters(make([]byte, PortCountersLen))
	for c := range NumPortCounters {
		p.SetCounter(c, c.Max()+12345)
		if p.Counter(c) != c.Max() {
			t.Errorf("counter %d: SetCounter above max gave %#x", c, p.Counter(c))
		}
		p.SetCounter(c, c.Max()-2)
		p.AddCounter(c, 1)
		if p.Counter(c) != c.Max()-1 {
			t.Errorf("counter %d: add below max", c)
		}
		p.AddCounter(c, 5)
		if p.Counter(c) != c.Max() {
			t.Errorf("counter %d: add past max gave %#x", c, p.Counter(c))
		}
		p.AddCounter(c, ^uint64(0))
		if p.Counter(c) != c.Max() {
			t.Errorf("counter %d: huge add", c)
		}
	}
	// 4-bit neighbours stay independent when one saturates.
	p = PortCounters(make([]byte, PortCountersLen))
	p.AddCounter(PCLocalLinkIntegrityErrors, 100)
	p.AddCounter(PCExcessiveBufferOverrunErrors, 3)
	if p[19] != 0xf3 || p.LocalLinkIntegrityErrors() != 15 || p.ExcessiveBufferOverrunErrors() != 3 {
		t.Errorf("byte 19 = %#x", p[19])
	}
	// 32-bit data counters: 5e9 words saturate.
	p.SetCounter(PCPortXmitData, 5_000_000_000)
	if p.PortXmitData() != 0xffffffff {
		t.Error("PortXmitData not saturated")
	}
}

func TestPortCountersSelect(t *testing.T) {
	p := PortCounters(make([]byte, PortCountersLen))
	// perfquery -R with XmitWait supported: mask 0xffff | 1<<16.
	p.SetCounterSelect(CounterSelectAll)
	p.SetCounterSelect2(CounterSelect2PortXmitWait)
	if p.SelectMask() != 0x1ffff {
		t.Errorf("mask %#x", p.SelectMask())
	}
	for c := range NumPortCounters {
		if p.Selected(c) != (c != PCQP1Dropped) {
			t.Errorf("counter %d selected %v", c, p.Selected(c))
		}
	}
	p.SetCounterSelect(CounterSelectPortXmitData | CounterSelectSymbolError)
	p.SetCounterSelect2(0)
	if !p.Selected(PCPortXmitData) || !p.Selected(PCSymbolErrorCounter) || p.Selected(PCPortRcvData) ||
		p.Selected(PCPortXmitWait) {
		t.Error("single selects")
	}
	if CounterSelectPortXmitData != 0x1000 || CounterSelectPortRcvPkts != 0x8000 || CounterSelectVL15Dropped != 0x0800 {
		t.Error("CounterSelect bit values (IBA 16.1.3.5)")
	}
}

// A PortCounters GetResp as a PMA builds it: class 4, attribute at byte 64.
func TestPortCountersMAD(t *testing.T) {
	m := MAD(make([]byte, MADLen))
	m.SetBaseVersion(MADBaseVersion)
	m.SetMgmtClass(MgmtClassPerfMgt)
	m.SetClassVersion(ClassVersionPerf)
	m.SetMethod(MethodGetResp)
	m.SetAttrID(AttrPortCounters)
	p := PortCounters(m.PMAData())
	p.SetPortSelect(1)
	p.SetCounterSelect(CounterSelectAll)
	p.SetSymbolErrorCounter(0x0102)
	p.SetLinkDownedCounter(3)
	p.SetPortXmitData(0x11223344)
	p.SetPortRcvPkts(7)
	p.SetPortXmitWait(0xaabbccdd)
	want := []byte{0, 1, 0xff, 0xff, 0x01, 0x02, 0, 3}
	if !bytes.Equal(m[64:72], want) || !bytes.Equal(m[88:92], []byte{0x11, 0x22, 0x33, 0x44}) ||
		m[103] != 7 || !bytes.Equal(m[104:108], []byte{0xaa, 0xbb, 0xcc, 0xdd}) || len(m.PMAData()) != 192 {
		t.Errorf("% x", []byte(m[64:108]))
	}
	if !bytes.Equal(m[24:64], make([]byte, 40)) {
		t.Error("reserved bytes 24-63 touched")
	}
	if m.AttrID() != 0x12 || AttrPortCountersExtended != 0x1d || AttrClassPortInfo != 1 {
		t.Error("attribute IDs")
	}
}

// Offsets from fields.c (IB_PC_EXT_*_F), IBA 16.1.4.11.
func TestPortCountersExtendedFields(t *testing.T) {
	type pce = PortCountersExtended
	smCheckFields(t, PortCountersExtendedLen, []smField{
		smFld("PortSelect", 8, 8, pce.PortSelect, pce.SetPortSelect),
		smFld("CounterSelect", 16, 16, pce.CounterSelect, pce.SetCounterSelect),
		smFld("CounterSelect2", 32, 32, pce.CounterSelect2, pce.SetCounterSelect2),
		smFld("PortXmitData", 64, 64, pce.PortXmitData, pce.SetPortXmitData),
		smFld("PortRcvData", 128, 64, pce.PortRcvData, pce.SetPortRcvData),
		smFld("PortXmitPkts", 192, 64, pce.PortXmitPkts, pce.SetPortXmitPkts),
		smFld("PortRcvPkts", 256, 64, pce.PortRcvPkts, pce.SetPortRcvPkts),
		smFld("PortUnicastXmitPkts", 320, 64, pce.PortUnicastXmitPkts, pce.SetPortUnicastXmitPkts),
		smFld("PortUnicastRcvPkts", 384, 64, pce.PortUnicastRcvPkts, pce.SetPortUnicastRcvPkts),
		smFld("PortMulticastXmitPkts", 448, 64, pce.PortMulticastXmitPkts, pce.SetPortMulticastXmitPkts),
		smFld("PortMulticastRcvPkts", 512, 64, pce.PortMulticastRcvPkts, pce.SetPortMulticastRcvPkts),
	})
}

// The PMA ClassPortInfo ibsim answers (ibsim-protocol.md §4): CapMask
// 0x1200 on a CA, 0x1300 on a switch, RespTimeValue 0x12.
func TestPMAClassPortInfo(t *testing.T) {
	m := MAD(make([]byte, MADLen))
	c := ClassPortInfo(m.PMAData())
	c.SetBaseVersion(MADBaseVersion)
	c.SetClassVersion(ClassVersionPerf)
	c.SetCapabilityMask(PMACapPortCountersXmitWaitSupported | PMACapExtendedWidthSupported)
	c.SetRespTimeValue(0x12)
	if !bytes.Equal(m[64:72], []byte{1, 1, 0x12, 0x00, 0, 0, 0, 0x12}) {
		t.Errorf("CA: % x", []byte(m[64:72]))
	}
	c.SetCapabilityMask(c.CapabilityMask() | PMACapAllPortSelect)
	if c.CapabilityMask() != 0x1300 {
		t.Errorf("switch CapMask %#x", c.CapabilityMask())
	}
}

func TestPMAAllocs(t *testing.T) {
	m := MAD(make([]byte, MADLen))
	var sink uint64
	n := testing.AllocsPerRun(100, func() {
		p := PortCounters(m.PMAData())
		p.AddCounter(PCPortXmitData, 1000)
		p.AddCounter(PCLocalLinkIntegrityErrors, 1)
		sink += p.Counter(PCPortXmitData) + uint64(p.SelectMask())
		e := PortCountersExtended(m.PMAData())
		e.SetPortRcvData(e.PortRcvData() + 1)
		sink += e.PortRcvData()
	})
	if n != 0 {
		t.Errorf("%v allocations", n)
	}
	_ = sink
}
