package wire

import (
	"encoding/binary"
	"testing"
)

// FuzzParsePacket checks that Parse never panics, that the views it returns
// lie within the input and are consistent with each other, and that
// whatever it accepts keeps its shape.
func FuzzParsePacket(f *testing.F) {
	for _, op := range []Opcode{RCSendOnly, RCRDMAWriteOnlyImm, RCAtomicAcknowledge, RCCompareSwap, RDRDMAReadResponseFirst, UDSendOnlyImm, 0xAB, 0xB3} {
		f.Add(buildPacket(op, false, 5))
		f.Add(buildPacket(op, true, 3))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		err := p.Parse(b)
		_ = ICRC(b)
		_ = VCRC(b)
		if err != nil {
			return
		}
		if int(p.LRH.PktLen())*4 != len(b) {
			t.Fatal("accepted bad PktLen")
		}
		if p.BTH == nil {
			if p.LRH.LNH() >= LNHLocal {
				t.Fatal("IBA packet without BTH")
			}
			return
		}
		op := p.BTH.OpCode()
		if !op.Valid() {
			t.Fatal("accepted invalid opcode")
		}
		n := LRHLen + BTHLen + op.HeaderLen() + len(p.Payload) + int(p.BTH.PadCnt()) + ICRCLen
		if p.GRH != nil {
			n += GRHLen
		}
		if n != len(b) {
			t.Fatalf("lengths add up to %d, packet is %d", n, len(b))
		}
		if len(p.ICRC) != ICRCLen {
			t.Fatal("ICRC view")
		}
		if (p.DETH != nil) != op.Headers().Has(HasDETH) || (p.AETH != nil) != op.Headers().Has(HasAETH) ||
			(p.XRCETH != nil) != op.Headers().Has(HasXRCETH) {
			t.Fatal("header views disagree with opcode")
		}
		// Set then check the ICRC round-trips.
		c := append([]byte(nil), b...)
		SetICRC(c)
		if !CheckICRC(c) {
			t.Fatal("SetICRC/CheckICRC")
		}
	})
}

// FuzzParseMAD checks that ParseMAD never panics and that every accessor
// works on what it accepts.
func FuzzParseMAD(f *testing.F) {
	m := make([]byte, MADLen)
	m[0], m[1], m[2], m[3] = 1, MgmtClassSubnDirected, 1, MethodGet
	f.Add(m)
	f.Add(make([]byte, 10))
	f.Fuzz(func(t *testing.T, b []byte) {
		mad, err := ParseMAD(b)
		if err != nil {
			return
		}
		_ = mad.MgmtClass() + mad.ClassVersion() + mad.Method()
		_ = uint64(mad.Status()) + uint64(mad.ClassSpecific()) + mad.TID() + uint64(mad.AttrID()) + uint64(mad.AttrMod())
		if len(mad.Data()) != MADDataLen {
			t.Fatal("data length")
		}
		s := SMP(mad)
		_ = s.MKey() + uint64(s.DrSLID()) + uint64(s.DrDLID()) + uint64(s.HopCount()) + uint64(s.HopPointer())
		if len(s.SMPData())+len(s.InitialPath())+len(s.ReturnPath()) != 192 {
			t.Fatal("SMP views")
		}
	})
}

// FuzzICRC checks that SetICRC/CheckICRC and AppendVCRC/CheckVCRC round
// trip on any input and that the slicing VCRC matches the bit-serial one.
func FuzzICRC(f *testing.F) {
	f.Add(buildPacket(UDSendOnly, false, 17))
	f.Add(buildPacket(RCSendFirst, true, 100))
	f.Fuzz(func(t *testing.T, b []byte) {
		if VCRC(b) != vcrcRef(b) {
			t.Fatal("VCRC differs from reference")
		}
		if !CheckVCRC(AppendVCRC(append([]byte(nil), b...))) {
			t.Fatal("VCRC round trip")
		}
		if len(b) < LRHLen+BTHLen+ICRCLen {
			return
		}
		c := append([]byte(nil), b...)
		SetICRC(c)
		if !CheckICRC(c) || binary.LittleEndian.Uint32(c[len(c)-4:]) != ICRC(b) {
			t.Fatal("ICRC round trip")
		}
	})
}

// FuzzVCRC checks the carry-less-multiplication VCRC against the slicing table.
func FuzzVCRC(f *testing.F) {
	f.Add(uint16(0xffff), make([]byte, 4096))
	f.Add(uint16(0), []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdefXYZ"))
	f.Fuzz(func(t *testing.T, init uint16, p []byte) {
		if got, want := updateVCRC(init, p), updateVCRCTable(init, p); got != want {
			t.Fatalf("len %d init %#x: fold %#04x, table %#04x", len(p), init, got, want)
		}
	})
}
