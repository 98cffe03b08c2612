package wire

import (
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestICRCRoCEVector checks the ICRC convention (seed, bit order, byte
// order) against a RoCEv2 CNP captured from a ConnectX-4 Lx, published in
// scapy's test/contrib/roce.uts. RoCE computes the IBA ICRC over a
// pseudo-LRH of eight 0xFF bytes followed by the IP and UDP headers with
// their variant fields set to ones, then BTH (Resv8a masked) and payload.
func TestICRCRoCEVector(t *testing.T) {
	const frame = `e41d2dab2bc2 7cfe90643b32 0800
		45c2 003c 718c 4000 4011 9161 0a00 1101 0a00 1201
		0000 12b7 0028 0000
		8100 ffff 4000 0118 0000 0000
		0000 0000 0000 0000 0000 0000 0000 0000
		82fd 002a`
	b, err := hex.DecodeString(strings.Join(strings.Fields(frame), ""))
	if err != nil {
		t.Fatal(err)
	}
	ip := b[14:]
	hdr := make([]byte, 0, 8+28+BTHLen)
	hdr = append(hdr, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff) // pseudo-LRH
	hdr = append(hdr, ip[:28+BTHLen]...)
	m := hdr[8:]
	m[1] = 0xff               // IPv4 TOS
	m[8] = 0xff               // TTL
	m[10], m[11] = 0xff, 0xff // IPv4 checksum
	m[26], m[27] = 0xff, 0xff // UDP checksum
	m[28+4] = 0xff            // BTH.Resv8a
	rest := ip[28+BTHLen : len(ip)-ICRCLen]
	got := crcUpd(crcSmall(0, hdr), rest)
	if want := binary.LittleEndian.Uint32(ip[len(ip)-ICRCLen:]); got != want {
		t.Fatalf("ICRC %#08x, wire carries %#08x", got, want)
	}
}

func TestICRCSeed(t *testing.T) {
	// Linux rxe seeds crc32_le with 0xdebb20e3: the raw register after
	// eight 0xFF bytes (a masked LRH) from the all-ones preset.
	var reg uint32 = 0xffffffff
	for range 8 {
		reg ^= 0xff
		for range 8 {
			if reg&1 != 0 {
				reg = reg>>1 ^ 0xedb88320
			} else {
				reg >>= 1
			}
		}
	}
	if reg != 0xdebb20e3 {
		t.Fatalf("register %#x", reg)
	}
}

func TestICRCMasks(t *testing.T) {
	type edit struct {
		name    string
		f       func(b []byte)
		variant bool
	}
	local := []edit{
		{"VL", func(b []byte) { LRH(b).SetVL(15) }, true},
		{"Resv8a", func(b []byte) { b[LRHLen+4] = 0x5a }, true},
		{"SL", func(b []byte) { LRH(b).SetSL(9) }, false},
		{"DLID", func(b []byte) { LRH(b).SetDLID(9) }, false},
		{"SLID", func(b []byte) { LRH(b).SetSLID(9) }, false},
		{"PKey", func(b []byte) { BTH(b[LRHLen:]).SetPKey(9) }, false},
		{"PSN", func(b []byte) { BTH(b[LRHLen:]).SetPSN(9) }, false},
		{"DETH", func(b []byte) { DETH(b[LRHLen+BTHLen:]).SetQKey(9) }, false},
		{"payload", func(b []byte) { b[len(b)-5] ^= 1 }, false},
	}
	global := []edit{
		{"VL", func(b []byte) { LRH(b).SetVL(15) }, true},
		{"SL", func(b []byte) { LRH(b).SetSL(9) }, true},
		{"DLID", func(b []byte) { LRH(b).SetDLID(9) }, true},
		{"TClass", func(b []byte) { GRH(b[LRHLen:]).SetTClass(9) }, true},
		{"FlowLabel", func(b []byte) { GRH(b[LRHLen:]).SetFlowLabel(9) }, true},
		{"HopLmt", func(b []byte) { GRH(b[LRHLen:]).SetHopLmt(9) }, true},
		{"Resv8a", func(b []byte) { b[LRHLen+GRHLen+4] = 0x5a }, true},
		{"PayLen", func(b []byte) { GRH(b[LRHLen:]).SetPayLen(9) }, false},
		{"SGID", func(b []byte) { b[LRHLen+8] ^= 1 }, false},
		{"DGID", func(b []byte) { b[LRHLen+39] ^= 1 }, false},
		{"PSN", func(b []byte) { BTH(b[LRHLen+GRHLen:]).SetPSN(9) }, false},
		{"payload", func(b []byte) { b[len(b)-5] ^= 1 }, false},
	}
	for _, g := range []bool{false, true} {
		edits := local
		if g {
			edits = global
		}
		for _, e := range edits {
			b := buildPacket(UDSendOnly, g, 64)
			e.f(b)
			if CheckICRC(b) != e.variant {
				t.Errorf("global=%v %s: ICRC still valid = %v, want %v", g, e.name, CheckICRC(b), e.variant)
			}
		}
	}
	// The mask is applied to a copy: the packet is left as it was.
	b := buildPacket(UDSendOnly, true, 8)
	c := append([]byte(nil), b...)
	ICRC(b)
	if string(b) != string(c) {
		t.Error("ICRC modified its input")
	}
	// Short and odd inputs do not panic.
	for n := range 70 {
		x := make([]byte, n)
		if n > 2 {
			LRH(x).SetLNH(LNHGlobal)
		}
		_ = ICRC(x)
		SetICRC(x)
		_ = CheckICRC(x)
	}
}

// vcrcRef is a bit-serial VCRC written from IBA 7.8.2's description:
// polynomial x^16+x^12+x^3+x+1, register preset to ones, each byte fed
// least significant bit first (the order bits leave on the link), the
// remainder complemented. It returns the value in the reflected form VCRC
// uses (coefficient of x^15 in bit 0).
func vcrcRef(p []byte) uint16 {
	var reg uint16 = 0xffff
	for _, v := range p {
		for i := range 8 {
			in := uint16(v>>i) & 1
			fb := reg>>15 ^ in
			reg <<= 1
			if fb != 0 {
				reg ^= 0x100b
			}
		}
	}
	return bits.Reverse16(^reg)
}

func TestVCRC(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 4200)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for n := range 200 {
		if got, want := VCRC(buf[:n]), vcrcRef(buf[:n]); got != want {
			t.Fatalf("len %d: VCRC %#04x, reference %#04x", n, got, want)
		}
	}
	for _, n := range []int{255, 256, 1000, 4096, 4107} {
		off := r.IntN(64)
		if got, want := VCRC(buf[off:off+n]), vcrcRef(buf[off:off+n]); got != want {
			t.Fatalf("len %d: VCRC %#04x, reference %#04x", n, got, want)
		}
	}
	// With the VCRC appended low byte first, the register over packet and
	// VCRC ends at one constant residue, as for Ethernet's FCS.
	var residue uint16
	for i, n := range []int{0, 1, 7, 64, 333} {
		b := AppendVCRC(append([]byte(nil), buf[:n]...))
		if !CheckVCRC(b) {
			t.Fatalf("CheckVCRC false for len %d", n)
		}
		res := updateVCRC(0xffff, b)
		if i == 0 {
			residue = res
		} else if res != residue {
			t.Fatalf("residue %#x != %#x", res, residue)
		}
		b[r.IntN(len(b))] ^= 1 << r.IntN(8)
		if CheckVCRC(b) {
			t.Fatalf("single bit flip not detected (len %d)", n)
		}
	}
	if CheckVCRC(nil) || CheckVCRC([]byte{1}) {
		t.Error("CheckVCRC on short input")
	}
	// A known value: the VCRC of the empty packet is 0 (preset ^ complement).
	if VCRC(nil) != 0 {
		t.Error("VCRC(nil)")
	}
}

func TestCRCAllocs(t *testing.T) {
	b := buildPacket(RCRDMAWriteOnly, true, 4096)
	if n := testing.AllocsPerRun(50, func() { _ = ICRC(b); _ = VCRC(b); _ = CheckICRC(b) }); n != 0 {
		t.Errorf("CRCs allocate %v", n)
	}
}

func TestCRCSmallMatchesStdlib(t *testing.T) {
	p := make([]byte, 300)
	for i := range p {
		p[i] = byte(i*37 + 11)
	}
	for n := 0; n <= len(p); n++ {
		for _, seed := range []uint32{0, 0xdeadbeef} {
			if got, want := crcSmall(seed, p[:n]), crc32.Update(seed, crc32.IEEETable, p[:n]); got != want {
				t.Fatalf("len %d seed %#x: crcSmall %#08x, crc32 %#08x", n, seed, got, want)
			}
		}
	}
}

func TestICRCPending(t *testing.T) {
	for _, global := range []bool{false, true} {
		pkt := make([]byte, 8+40+12+8+100+4)
		for i := range pkt {
			pkt[i] = byte(i * 13)
		}
		lnh := LNHLocal
		if global {
			lnh = LNHGlobal
		} else {
			pkt = pkt[40:]
		}
		LRH(pkt).SetLNH(lnh)
		o := bthOffset(pkt)
		pkt[o+4] = 0
		SetICRC(pkt)
		want := append([]byte(nil), pkt...)
		SetICRCPending(pkt)
		if !ICRCPending(pkt) || !CheckReceivedICRC(pkt) {
			t.Fatal("pending packet not recognised")
		}
		clear(pkt[len(pkt)-ICRCLen:])
		Finalize(pkt)
		if string(pkt) != string(want) || ICRCPending(pkt) {
			t.Fatalf("global=%v: finalized packet differs from one built with SetICRC", global)
		}
		pkt[o+20] ^= 1
		if CheckReceivedICRC(pkt) {
			t.Fatal("a damaged finalized packet passed")
		}
	}
}

// TestVCRCFoldMatchesTable checks the carry-less-multiplication VCRC against the
// slicing table for every length around the fold boundaries and random registers.
func TestVCRCFoldMatchesTable(t *testing.T) {
	buf := make([]byte, 9000)
	for i := range buf {
		buf[i] = byte(i*131 + i>>8*7 + 1)
	}
	for n := 0; n <= 1100; n++ {
		for _, init := range []uint16{0, 0xffff, uint16(n * 2654435761)} {
			p := buf[n%13 : n%13+n]
			if got, want := updateVCRC(init, p), updateVCRCTable(init, p); got != want {
				t.Fatalf("len %d init %#x: fold %#04x, table %#04x", n, init, got, want)
			}
		}
	}
	for _, n := range []int{1024, 2048, 2061, 4096, 4111, 8999} {
		p := buf[1 : 1+n]
		if got, want := VCRC(p), ^updateVCRCTable(0xffff, p); got != want {
			t.Fatalf("len %d: fold %#04x, table %#04x", n, got, want)
		}
	}
}
