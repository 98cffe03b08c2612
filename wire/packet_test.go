package wire

import (
	"bytes"
	"errors"
	"testing"
)

// buildPacket assembles a packet LRH..ICRC for op with payLen payload bytes
// (0x00, 0x01, ...), a GRH if global, recognizable header values and a valid
// ICRC.
func buildPacket(op Opcode, global bool, payLen int) []byte {
	pad := 0
	if op.HasPayload() {
		pad = PadFor(payLen)
	} else {
		payLen = 0
	}
	n := LRHLen + BTHLen + op.HeaderLen() + payLen + pad + ICRCLen
	if global {
		n += GRHLen
	}
	b := make([]byte, n)
	l := LRH(b)
	l.SetVL(1)
	l.SetSL(2)
	l.SetDLID(0x0003)
	l.SetSLID(0x0004)
	l.SetPktLen(uint16(n / 4))
	l.SetLNH(LNHLocal)
	off := LRHLen
	if global {
		l.SetLNH(LNHGlobal)
		g := GRH(b[off:])
		g.SetIPVer(6)
		g.SetTClass(0x12)
		g.SetFlowLabel(0x34567)
		g.SetPayLen(uint16(n - LRHLen - GRHLen))
		g.SetNxtHdr(NxtHdrBTH)
		g.SetHopLmt(0xff)
		g.SetSGID(MakeGID(DefaultGIDPrefix, 1))
		g.SetDGID(MakeGID(DefaultGIDPrefix, 2))
		off += GRHLen
	}
	h := BTH(b[off:])
	h.SetOpCode(op)
	h.SetPadCnt(uint8(pad))
	h.SetPKey(DefaultPKey)
	h.SetDestQP(0x000abc)
	h.SetPSN(0x00def0)
	off += BTHLen
	hs := op.Headers()
	if hs&HasRDETH != 0 {
		RDETH(b[off:]).SetEECnxt(0x111111)
		off += RDETHLen
	}
	if hs&HasDETH != 0 {
		DETH(b[off:]).SetQKey(0x22222222)
		DETH(b[off:]).SetSrcQP(0x333333)
		off += DETHLen
	}
	if hs&HasXRCETH != 0 {
		XRCETH(b[off:]).SetSRQ(0xeeeeee)
		off += XRCETHLen
	}
	if hs&HasRETH != 0 {
		RETH(b[off:]).SetVA(0x4444)
		RETH(b[off:]).SetRKey(0x5555)
		RETH(b[off:]).SetDMALen(uint32(payLen))
		off += RETHLen
	}
	if hs&HasAtomicETH != 0 {
		AtomicETH(b[off:]).SetVA(0x6666)
		AtomicETH(b[off:]).SetRKey(0x7777)
		AtomicETH(b[off:]).SetSwapData(0x8888)
		AtomicETH(b[off:]).SetCompareData(0x9999)
		off += AtomicETHLen
	}
	if hs&HasAETH != 0 {
		AETH(b[off:]).SetACK(CreditInvalid, 0xaaaa)
		off += AETHLen
	}
	if hs&HasAtomicAckETH != 0 {
		AtomicAckETH(b[off:]).SetOrigRemData(0xbbbb)
		off += AtomicAckETHLen
	}
	if hs&HasImmDt != 0 {
		ImmDt(b[off:]).SetImm(0xcccc)
		off += ImmDtLen
	}
	if hs&HasIETH != 0 {
		IETH(b[off:]).SetRKey(0xdddd)
		off += IETHLen
	}
	for i := range payLen {
		b[off+i] = byte(i)
	}
	SetICRC(b)
	return b
}

func TestPadFor(t *testing.T) {
	for n, want := range []int{0, 3, 2, 1, 0, 3, 2, 1} {
		if PadFor(n) != want {
			t.Errorf("PadFor(%d) = %d", n, PadFor(n))
		}
	}
}

func TestParseRoundTrip(t *testing.T) {
	var p Packet
	for op := range opcodeSpec {
		for _, global := range []bool{false, true} {
			for _, pl := range []int{0, 1, 2, 3, 4, 5, 256, 4093} {
				b := buildPacket(op, global, pl)
				if err := p.Parse(b); err != nil {
					t.Fatalf("%v global=%v len=%d: %v", op, global, pl, err)
				}
				if !CheckICRC(b) {
					t.Fatalf("%v: ICRC", op)
				}
				if p.BTH.OpCode() != op || p.BTH.DestQP() != 0xabc || p.BTH.PSN() != 0xdef0 || p.LRH.SLID() != 4 {
					t.Fatalf("%v: BTH/LRH fields", op)
				}
				if (p.GRH != nil) != global || (global && p.GRH.DGID() != MakeGID(DefaultGIDPrefix, 2)) {
					t.Fatalf("%v: GRH", op)
				}
				hs := op.Headers()
				present := map[HeaderSet]bool{
					HasRDETH: p.RDETH != nil, HasDETH: p.DETH != nil, HasRETH: p.RETH != nil,
					HasAtomicETH: p.AtomicETH != nil, HasAETH: p.AETH != nil,
					HasAtomicAckETH: p.AtomicAckETH != nil, HasImmDt: p.ImmDt != nil, HasIETH: p.IETH != nil,
					HasXRCETH: p.XRCETH != nil,
				}
				for bit, ok := range present {
					if hs.Has(bit) != ok {
						t.Fatalf("%v: header %#x present=%v", op, bit, ok)
					}
				}
				if p.RDETH != nil && p.RDETH.EECnxt() != 0x111111 ||
					p.DETH != nil && (p.DETH.QKey() != 0x22222222 || p.DETH.SrcQP() != 0x333333) ||
					p.RETH != nil && (p.RETH.VA() != 0x4444 || p.RETH.RKey() != 0x5555) ||
					p.AtomicETH != nil && (p.AtomicETH.CompareData() != 0x9999 || p.AtomicETH.SwapData() != 0x8888) ||
					p.AETH != nil && p.AETH.MSN() != 0xaaaa ||
					p.AtomicAckETH != nil && p.AtomicAckETH.OrigRemData() != 0xbbbb ||
					p.ImmDt != nil && p.ImmDt.Imm() != 0xcccc ||
					p.IETH != nil && p.IETH.RKey() != 0xdddd ||
					p.XRCETH != nil && p.XRCETH.SRQ() != 0xeeeeee {
					t.Fatalf("%v: ETH values", op)
				}
				wantPay := 0
				if op.HasPayload() {
					wantPay = pl
				}
				if len(p.Payload) != wantPay || (wantPay > 0 && p.Payload[wantPay-1] != byte(wantPay-1)) {
					t.Fatalf("%v: payload %d want %d", op, len(p.Payload), wantPay)
				}
				if len(p.ICRC) != ICRCLen || p.ICRCValue() != ICRC(b) {
					t.Fatalf("%v: ICRC slice", op)
				}
			}
		}
	}
}

func TestParseRaw(t *testing.T) {
	var p Packet
	b := make([]byte, 24)
	l := LRH(b)
	l.SetPktLen(6)
	l.SetLNH(LNHRaw)
	if err := p.Parse(b); err != nil || len(p.Payload) != 16 || p.BTH != nil || p.ICRC != nil {
		t.Fatalf("raw: %v %d", err, len(p.Payload))
	}
	b = make([]byte, 48)
	l = LRH(b)
	l.SetPktLen(12)
	l.SetLNH(LNHIPv6)
	b[8] = 0x60
	if err := p.Parse(b); err != nil || len(p.Payload) != 40 {
		t.Fatalf("ipv6: %v", err)
	}
	if p.ICRCValue() != 0 {
		t.Error("raw ICRCValue")
	}
}

func TestParseErrors(t *testing.T) {
	mod := func(op Opcode, global bool, pl int, f func(b []byte) []byte) []byte {
		return f(buildPacket(op, global, pl))
	}
	setLen := func(b []byte) []byte { LRH(b).SetPktLen(uint16(len(b) / 4)); return b }
	cases := []struct {
		name string
		b    []byte
		err  error
	}{
		{"empty", nil, ErrShort},
		{"short lrh", make([]byte, 7), ErrShort},
		{"lver", mod(UDSendOnly, false, 4, func(b []byte) []byte { LRH(b).SetLVer(1); return b }), ErrLVer},
		{"pktlen big", mod(UDSendOnly, false, 4, func(b []byte) []byte { LRH(b).SetPktLen(LRH(b).PktLen() + 1); return b }), ErrPktLen},
		{"pktlen small", mod(UDSendOnly, false, 4, func(b []byte) []byte { LRH(b).SetPktLen(LRH(b).PktLen() - 1); return b }), ErrPktLen},
		{"unaligned", mod(UDSendOnly, false, 4, func(b []byte) []byte { return append(b, 0) }), ErrPktLen},
		{"raw short", setLen(func() []byte { b := make([]byte, 8); LRH(b).SetLNH(LNHRaw); return b }()), ErrLNH},
		{"ipv6 short", setLen(func() []byte { b := make([]byte, 16); LRH(b).SetLNH(LNHIPv6); return b }()), ErrLNH},
		{"ipv6 version", setLen(func() []byte { b := make([]byte, 48); LRH(b).SetLNH(LNHIPv6); b[8] = 0x40; return b }()), ErrLNH},
		{"local no bth", setLen(func() []byte { b := make([]byte, 16); LRH(b).SetLNH(LNHLocal); return b }()), ErrShort},
		{"global no grh", setLen(func() []byte { b := make([]byte, 44); LRH(b).SetLNH(LNHGlobal); return b }()), ErrShort},
		{"grh ipver", mod(UDSendOnly, true, 4, func(b []byte) []byte { GRH(b[8:]).SetIPVer(4); return b }), ErrGRH},
		{"grh nxthdr", mod(UDSendOnly, true, 4, func(b []byte) []byte { GRH(b[8:]).SetNxtHdr(17); return b }), ErrGRH},
		{"grh paylen", mod(UDSendOnly, true, 4, func(b []byte) []byte { GRH(b[8:]).SetPayLen(4); return b }), ErrGRH},
		{"global short bth", setLen(func() []byte {
			b := make([]byte, 56)
			LRH(b).SetLNH(LNHGlobal)
			g := GRH(b[8:])
			g.SetIPVer(6)
			g.SetNxtHdr(NxtHdrBTH)
			g.SetPayLen(8)
			return b
		}()), ErrShort},
		{"opcode reserved", mod(RCSendOnly, false, 4, func(b []byte) []byte { BTH(b[8:]).SetOpCode(0x15); return b }), ErrOpcode},
		{"opcode cnp", mod(RCSendOnly, false, 4, func(b []byte) []byte { BTH(b[8:]).SetOpCode(0x81); return b }), ErrOpcode},
		{"opcode ud 0x60", mod(RCSendOnly, false, 4, func(b []byte) []byte { BTH(b[8:]).SetOpCode(0x60); return b }), ErrOpcode},
		{"tver", mod(RCSendOnly, false, 4, func(b []byte) []byte { BTH(b[8:]).SetTVer(1); return b }), ErrTVer},
		{"short deth", mod(RCSendOnly, false, 0, func(b []byte) []byte { BTH(b[8:]).SetOpCode(UDSendOnly); return b }), ErrShort},
		{"short atomic", mod(RCAcknowledge, false, 0, func(b []byte) []byte { BTH(b[8:]).SetOpCode(RCCompareSwap); return b }), ErrShort},
		{"ack with payload", mod(RCSendOnly, false, 8, func(b []byte) []byte { BTH(b[8:]).SetOpCode(RCAcknowledge); return b }), ErrPayload},
		{"ack with pad", mod(RCAcknowledge, false, 0, func(b []byte) []byte { BTH(b[8:]).SetPadCnt(1); return b }), ErrPad},
		{"pad beyond payload", mod(RCSendOnly, false, 0, func(b []byte) []byte { BTH(b[8:]).SetPadCnt(3); return b }), ErrPad},
	}
	var p Packet
	for _, c := range cases {
		if err := p.Parse(c.b); !errors.Is(err, c.err) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.err)
		}
	}
	// A successful parse after a failed one leaves no stale views.
	_ = p.Parse(buildPacket(RCRDMAWriteOnlyImm, true, 8))
	if err := p.Parse(buildPacket(UDSendOnly, false, 8)); err != nil || p.GRH != nil || p.RETH != nil || p.ImmDt != nil {
		t.Fatal("stale fields after reuse")
	}
}

func TestParseAllocs(t *testing.T) {
	b := buildPacket(RCRDMAWriteOnlyImm, true, 1000)
	var p Packet
	if n := testing.AllocsPerRun(100, func() { _ = p.Parse(b) }); n != 0 {
		t.Errorf("Parse allocates %v", n)
	}
	bad := buildPacket(RCSendOnly, false, 4)
	BTH(bad[8:]).SetOpCode(0x15)
	if n := testing.AllocsPerRun(100, func() { _ = p.Parse(bad) }); n != 0 {
		t.Errorf("Parse error path allocates %v", n)
	}
	if !bytes.Equal(p.LRH, bad[:8]) {
		t.Error("LRH view")
	}
}
