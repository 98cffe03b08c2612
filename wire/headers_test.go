package wire

import (
	"bytes"
	"testing"
)

func TestLRH(t *testing.T) {
	// IBA 7.7: VL=3 LVer=0 | SL=5 Rsv2=0 LNH=2 | DLID=0x1234 | PktLen=0x7ff | SLID=0xbeef
	want := []byte{0x30, 0x52, 0x12, 0x34, 0x07, 0xff, 0xbe, 0xef}
	h := LRH(make([]byte, LRHLen))
	h.SetVL(3)
	h.SetLVer(0)
	h.SetSL(5)
	h.SetLNH(LNHLocal)
	h.SetDLID(0x1234)
	h.SetPktLen(0x7ff)
	h.SetSLID(0xbeef)
	if !bytes.Equal(h, want) {
		t.Fatalf("built % x, want % x", []byte(h), want)
	}
	if h.VL() != 3 || h.LVer() != 0 || h.SL() != 5 || h.LNH() != LNHLocal ||
		h.DLID() != 0x1234 || h.PktLen() != 0x7ff || h.SLID() != 0xbeef {
		t.Fatalf("getters: %d %d %d %v %#x %#x %#x", h.VL(), h.LVer(), h.SL(), h.LNH(), h.DLID(), h.PktLen(), h.SLID())
	}
	// Setters must not disturb neighbouring fields and must clear reserved bits.
	h = LRH(bytes.Repeat([]byte{0xff}, LRHLen))
	h.SetVL(0)
	if h[0] != 0x0f {
		t.Errorf("SetVL: %#x", h[0])
	}
	h.SetLVer(0)
	if h[0] != 0x00 {
		t.Errorf("SetLVer: %#x", h[0])
	}
	h.SetSL(0xa)
	if h[1] != 0xa3 || h.LNH() != LNHGlobal {
		t.Errorf("SetSL: %#x", h[1])
	}
	h.SetLNH(LNHRaw)
	if h[1] != 0xa0 {
		t.Errorf("SetLNH: %#x", h[1])
	}
	h.SetPktLen(0xffff)
	if h[4] != 0x07 || h[5] != 0xff {
		t.Errorf("SetPktLen reserved bits: % x", []byte(h[4:6]))
	}
	for l := LNH(0); l < 5; l++ {
		if l.String() == "" {
			t.Error("empty LNH name")
		}
	}
}

func TestGRH(t *testing.T) {
	sgid := MakeGID(DefaultGIDPrefix, 0x0002c90300000001)
	dgid := MakeGID(0xff12401bffff0000, 0x00000000ffffffff)
	h := GRH(make([]byte, GRHLen))
	h.SetIPVer(6)
	h.SetTClass(0xab)
	h.SetFlowLabel(0xcdef1)
	h.SetPayLen(0x1234)
	h.SetNxtHdr(NxtHdrBTH)
	h.SetHopLmt(0x40)
	h.SetSGID(sgid)
	h.SetDGID(dgid)
	want := append([]byte{0x6a, 0xbc, 0xde, 0xf1, 0x12, 0x34, 0x1b, 0x40}, append(sgid[:], dgid[:]...)...)
	if !bytes.Equal(h, want) {
		t.Fatalf("built % x\nwant  % x", []byte(h), want)
	}
	if h.IPVer() != 6 || h.TClass() != 0xab || h.FlowLabel() != 0xcdef1 || h.PayLen() != 0x1234 ||
		h.NxtHdr() != 0x1b || h.HopLmt() != 0x40 || h.SGID() != sgid || h.DGID() != dgid {
		t.Fatal("getters disagree")
	}
	h.SetTClass(0)
	if h.IPVer() != 6 || h.FlowLabel() != 0xcdef1 {
		t.Error("SetTClass disturbed neighbours")
	}
	h.SetFlowLabel(0xfffffff)
	if h.TClass() != 0 || h.IPVer() != 6 || h.FlowLabel() != 0xfffff {
		t.Error("SetFlowLabel disturbed neighbours")
	}
}

func TestGID(t *testing.T) {
	g := MakeGID(DefaultGIDPrefix, 0x0002c90300000001)
	if s := g.String(); s != "fe80::2:c903:0:1" {
		t.Errorf("String = %q", s)
	}
	if g.SubnetPrefix() != DefaultGIDPrefix || g.InterfaceID() != 0x0002c90300000001 {
		t.Error("prefix/interface ID")
	}
	if g.IsMulticast() || g.IsZero() {
		t.Error("unicast GID reported multicast or zero")
	}
	m := MakeGID(0xff12401bffff0000, 0xffffffff)
	if !m.IsMulticast() || m.String() != "ff12:401b:ffff::ffff:ffff" {
		t.Errorf("multicast %v", m)
	}
	if !(GID{}).IsZero() {
		t.Error("zero GID")
	}
}

func TestBTH(t *testing.T) {
	h := BTH(make([]byte, BTHLen))
	h.SetOpCode(RCRDMAWriteOnlyImm)
	h.SetSE(true)
	h.SetMigReq(true)
	h.SetPadCnt(3)
	h.SetTVer(0)
	h.SetPKey(0xffff)
	h.SetDestQP(0x123456)
	h.SetAckReq(true)
	h.SetPSN(0xabcdef)
	// IBA 9.2: opcode | SE M PadCnt TVer | P_Key | Resv8a | DestQP | A Resv7 | PSN
	want := []byte{0x0b, 0xf0, 0xff, 0xff, 0x00, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef}
	if !bytes.Equal(h, want) {
		t.Fatalf("built % x, want % x", []byte(h), want)
	}
	if h.OpCode() != RCRDMAWriteOnlyImm || !h.SE() || !h.MigReq() || h.PadCnt() != 3 || h.TVer() != 0 ||
		h.PKey() != 0xffff || h.DestQP() != 0x123456 || !h.AckReq() || h.PSN() != 0xabcdef {
		t.Fatal("getters disagree")
	}
	h.SetSE(false)
	h.SetMigReq(false)
	h.SetPadCnt(1)
	h.SetTVer(0xf)
	if h[1] != 0x1f || h.SE() || h.MigReq() || h.PadCnt() != 1 || h.TVer() != 0xf {
		t.Errorf("byte 1 = %#x", h[1])
	}
	h.SetDestQP(0xffffffff)
	if h[4] != 0 || h.DestQP() != 0xffffff {
		t.Error("SetDestQP must keep Resv8a zero and mask to 24 bits")
	}
	h.SetPSN(0x1000000)
	if !h.AckReq() || h.PSN() != 0 {
		t.Error("SetPSN must keep A")
	}
	h.SetAckReq(false)
	if h.AckReq() || h.PSN() != 0 || h[8] != 0 {
		t.Error("SetAckReq(false)")
	}
}

func TestETHs(t *testing.T) {
	r := RDETH(make([]byte, RDETHLen))
	r.SetEECnxt(0xff123456)
	if !bytes.Equal(r, []byte{0, 0x12, 0x34, 0x56}) || r.EECnxt() != 0x123456 {
		t.Errorf("RDETH % x", []byte(r))
	}

	d := DETH(make([]byte, DETHLen))
	d.SetQKey(QP1QKey)
	d.SetSrcQP(0xabcdef01)
	if !bytes.Equal(d, []byte{0x80, 0x01, 0x00, 0x00, 0x00, 0xcd, 0xef, 0x01}) ||
		d.QKey() != QP1QKey || d.SrcQP() != 0xcdef01 {
		t.Errorf("DETH % x", []byte(d))
	}

	re := RETH(make([]byte, RETHLen))
	re.SetVA(0x0102030405060708)
	re.SetRKey(0x090a0b0c)
	re.SetDMALen(0x0d0e0f10)
	if !bytes.Equal(re, seq(1, 16)) || re.VA() != 0x0102030405060708 || re.RKey() != 0x090a0b0c || re.DMALen() != 0x0d0e0f10 {
		t.Errorf("RETH % x", []byte(re))
	}

	a := AtomicETH(make([]byte, AtomicETHLen))
	a.SetVA(0x0102030405060708)
	a.SetRKey(0x090a0b0c)
	a.SetSwapData(0x0d0e0f1011121314)
	a.SetCompareData(0x15161718191a1b1c)
	if !bytes.Equal(a, seq(1, 28)) || a.VA() != 0x0102030405060708 || a.RKey() != 0x090a0b0c ||
		a.SwapData() != 0x0d0e0f1011121314 || a.CompareData() != 0x15161718191a1b1c {
		t.Errorf("AtomicETH % x", []byte(a))
	}

	aa := AtomicAckETH(make([]byte, AtomicAckETHLen))
	aa.SetOrigRemData(0x0102030405060708)
	if !bytes.Equal(aa, seq(1, 8)) || aa.OrigRemData() != 0x0102030405060708 {
		t.Error("AtomicAckETH")
	}

	im := ImmDt(make([]byte, ImmDtLen))
	im.SetImm(0x01020304)
	if !bytes.Equal(im, seq(1, 4)) || im.Imm() != 0x01020304 {
		t.Error("ImmDt")
	}

	ie := IETH(make([]byte, IETHLen))
	ie.SetRKey(0x01020304)
	if !bytes.Equal(ie, seq(1, 4)) || ie.RKey() != 0x01020304 {
		t.Error("IETH")
	}
}

func TestAETH(t *testing.T) {
	a := AETH(make([]byte, AETHLen))
	for _, c := range []struct {
		name          string
		set           func()
		syn           uint8
		ack, rnr, nak bool
		val           uint8
	}{
		{"ack", func() { a.SetACK(CreditInvalid, 0x123456) }, 0x1f, true, false, false, 0x1f},
		{"ack0", func() { a.SetACK(0, 0x123456) }, 0x00, true, false, false, 0},
		{"rnr", func() { a.SetRNRNAK(14, 0x123456) }, 0x2e, false, true, false, 14},
		{"psn", func() { a.SetNAK(NAKPSNSequenceError, 0x123456) }, 0x60, false, false, true, 0},
		{"inv", func() { a.SetNAK(NAKInvalidRequest, 0x123456) }, 0x61, false, false, true, 1},
		{"acc", func() { a.SetNAK(NAKRemoteAccessError, 0x123456) }, 0x62, false, false, true, 2},
		{"op", func() { a.SetNAK(NAKRemoteOpError, 0x123456) }, 0x63, false, false, true, 3},
		{"rd", func() { a.SetNAK(NAKInvalidRDRequest, 0x123456) }, 0x64, false, false, true, 4},
	} {
		c.set()
		if !bytes.Equal(a, []byte{c.syn, 0x12, 0x34, 0x56}) {
			t.Errorf("%s: % x", c.name, []byte(a))
		}
		if a.Syndrome() != c.syn || a.MSN() != 0x123456 || a.IsACK() != c.ack || a.IsRNRNAK() != c.rnr || a.IsNAK() != c.nak {
			t.Errorf("%s: getters", c.name)
		}
		if a.Credit() != c.val || a.RNRTimer() != c.val || a.NAKCode() != c.val {
			t.Errorf("%s: value %d", c.name, a.Credit())
		}
	}
	a.SetMSN(0xffffffff)
	if a.Syndrome() != 0x64 || a.MSN() != 0xffffff {
		t.Error("SetMSN disturbed syndrome")
	}
	a.SetSyndrome(0x20)
	if a.MSN() != 0xffffff || !a.IsRNRNAK() {
		t.Error("SetSyndrome")
	}
}

func seq(from, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(from + i)
	}
	return b
}
