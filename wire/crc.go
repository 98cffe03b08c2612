package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// CRC conventions, and where they were checked.
//
// ICRC (IBA 7.8.1): CRC-32 with Ethernet's polynomial 0x04C11DB7 and
// Ethernet's conventions (bytes fed least significant bit first, register
// preset to all ones, result complemented), i.e. exactly hash/crc32's IEEE
// checksum. It covers the packet from the first LRH byte to the end of the
// payload (pad included), with the variant fields replaced by ones:
//
//   - local packets (LNH = BTH): LRH.VL and BTH.Resv8a;
//   - global packets (LNH = GRH): the whole LRH, GRH.TClass, GRH.FlowLabel,
//     GRH.HopLmt, and BTH.Resv8a.
//
// The four ICRC bytes go on the wire least significant byte first, like
// Ethernet's FCS. Linux rxe (drivers/infiniband/sw/rxe/rxe_icrc.c) starts
// crc32_le from 0xdebb20e3, which is the raw register after eight 0xFF bytes
// (a masked LRH, RoCE's pseudo-LRH) from the all-ones preset, and stores the
// complemented result in host (little-endian) order. The test vector in
// crc_test.go is a RoCEv2 CNP captured from a ConnectX-4 Lx (published in
// scapy's test/contrib/roce.uts): its ICRC bytes 82 fd 00 2a equal
// crc32.ChecksumIEEE(8×FF ‖ masked IP/UDP/BTH ‖ payload) = 0x2a00fd82 stored
// little-endian. That settles seed, bit order and byte order.
//
// VCRC (IBA 7.8.2): CRC-16 with polynomial x^16+x^12+x^3+x+1 (0x100B),
// using the same conventions as the ICRC: reflected (0xD008 in
// least-significant-bit-first form), preset 0xFFFF, result complemented,
// covering the whole packet from the first LRH byte through the ICRC. This
// is the algorithm of Endace's dagcrc.c (dagcrc_infiniband_vcrc16_r; Endace
// wrote Wireshark's InfiniBand dissector and builds IB capture cards), and
// it is consistent with the open InfiniBand FPGA project
// (tmagik/infiniband-fpga, Link/VCRC.vhd: preset X"FFFF", polynomial
// (0 1 3 12 16), output complemented with each byte bit-reversed, which is
// what a reflected register sent low byte first looks like). Neither source
// states the byte placement in prose; we send the VCRC least significant
// byte first, the ICRC's convention, which puts the remainder's x^15
// coefficient first on the serial link as Ethernet does (see vcrcRef in
// crc_test.go). Wireshark only displays the two fields (big-endian) and
// verifies neither, so this choice is not observable there.

// crcTab holds slicing-by-8 tables for the reflected IEEE polynomial: crcTab[0]
// is the bytewise table, crcTab[k][b] the CRC of byte b followed by k zeros.
var crcTab = func() (t [8][256]uint32) {
	for i := range 256 {
		c := uint32(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ crc32.IEEE
			} else {
				c >>= 1
			}
		}
		t[0][i] = c
	}
	for k := 1; k < 8; k++ {
		for i := range 256 {
			c := t[k-1][i]
			t[k][i] = c>>8 ^ t[0][c&0xff]
		}
	}
	return t
}()

// crcSmall continues a crc32.Update-style CRC over p by slicing-by-8. It serves
// the short pieces where hash/crc32's carry-less multiply does not apply, and
// stack buffers: crc32.Update calls through a function value, which would move
// a buffer passed to it to the heap.
func crcSmall(crc uint32, p []byte) uint32 {
	t := &crcTab
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[7][crc&0xff] ^ t[6][crc>>8&0xff] ^ t[5][crc>>16&0xff] ^ t[4][crc>>24] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	for _, v := range p {
		crc = crc>>8 ^ t[0][byte(crc)^v]
	}
	return ^crc
}

// crcUpd continues a CRC over p with whichever method is faster for its length.
func crcUpd(crc uint32, p []byte) uint32 {
	switch {
	case len(p) >= 256 && icrcFold512:
		return crcUpdFold(crc, p)
	case len(p) >= 64:
		return crc32.Update(crc, crc32.IEEETable, p)
	}
	return crcSmall(crc, p)
}

// ICRC returns the invariant CRC (IBA 7.8.1) of pkt, a packet from the first
// LRH byte through the ICRC (no VCRC); the last ICRCLen bytes are not
// covered. Raw packets (LNH 0 or 1) carry no ICRC; for them the result is
// meaningless, and a packet too short for its headers gets an unmasked CRC
// (never a panic). ICRC does not allocate and does not modify pkt: the
// headers are masked in a copy on the stack, the rest is fed as it is.
func ICRC(pkt []byte) uint32 {
	if len(pkt) < ICRCLen {
		return 0
	}
	b := pkt[:len(pkt)-ICRCLen]
	if len(b) >= LRHLen+GRHLen+BTHLen && LRH(b).LNH() == LNHGlobal {
		// IBA 7.8.1: a router rewrites the LRH, so all of it is variant;
		// so are GRH.TClass, FlowLabel and HopLmt, and BTH.Resv8a.
		const g = LRHLen
		var h [LRHLen + GRHLen + BTHLen]byte
		copy(h[:], b)
		copy(h[:LRHLen], ones[:])
		h[g] |= 0x0f                              // IPVer kept, TClass[7:4]
		h[g+1], h[g+2], h[g+3] = 0xff, 0xff, 0xff // TClass[3:0], FlowLabel
		h[g+7] = 0xff                             // HopLmt
		h[g+GRHLen+4] = 0xff                      // BTH.Resv8a
		return crcUpd(crcSmall(0, h[:]), b[len(h):])
	}
	if len(b) >= LRHLen+BTHLen {
		// IBA 7.8.1: local packets mask LRH.VL and BTH.Resv8a.
		var h [LRHLen + BTHLen]byte
		copy(h[:], b)
		h[0] |= 0xf0
		h[LRHLen+4] = 0xff
		return crcUpd(crcHead(h[:]), b[len(h):])
	}
	return crcUpd(0, b)
}

// ones are the all-ones replacements for variant fields.
var ones = [LRHLen]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// SetICRC computes the ICRC of pkt and stores it in its last four bytes.
func SetICRC(pkt []byte) {
	if len(pkt) < ICRCLen {
		return
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCLen:], ICRC(pkt))
}

// CheckICRC reports whether the last four bytes of pkt hold its ICRC.
func CheckICRC(pkt []byte) bool {
	if len(pkt) < LRHLen+BTHLen+ICRCLen {
		return false
	}
	return binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) == ICRC(pkt)
}

// vcrcPoly is 0x100B bit-reversed (least significant bit first).
const vcrcPoly = 0xd008

// vcrcTab holds slicing-by-16 tables: vcrcTab[0] is the classic bytewise
// table, vcrcTab[k][b] is the CRC of byte b followed by k zero bytes.
var vcrcTab = func() (t [16][256]uint16) {
	for i := range 256 {
		c := uint16(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ vcrcPoly
			} else {
				c >>= 1
			}
		}
		t[0][i] = c
	}
	for k := 1; k < 16; k++ {
		for i := range 256 {
			c := t[k-1][i]
			t[k][i] = c>>8 ^ t[0][c&0xff]
		}
	}
	return t
}()

// updateVCRC advances a raw (uncomplemented) CRC-16 register over p: with carry-less
// multiplication where the CPU has it (vcrc_amd64.go), else by the slicing table.
func updateVCRC(crc uint16, p []byte) uint16 { return updateVCRCFast(crc, p) }

// vcrcK holds the folding constants of vcrcFold for the bit-reflected VCRC polynomial
// (vcrc_amd64.s): a 128-bit lane A = A_hi·x^64 + A_lo moved d bits on is A_hi·x^(d+64) +
// A_lo·x^d ≡ A_hi·(x^(d+63) mod P)·x + A_lo·(x^(d−1) mod P)·x, where the factor x is the
// one-bit offset of a carry-less product of two bit-reflected 64-bit words; the lane's
// first (low) word holds A_hi. d = 512 for four lanes at once, 128 for one.
var vcrcK = [4]uint64(foldConsts(vcrcPolyFull, 16, 512, 128))

// vcrcK512 holds fold512's: d = 2048 for sixteen lanes, 512 for four, 128 for one.
var vcrcK512 = [6]uint64(foldConsts(vcrcPolyFull, 16, 2048, 512, 128))

// icrcK512 holds fold512's constants for the ICRC's CRC-32 (the reflected IEEE
// polynomial), as vcrcK512 does for the VCRC's.
var icrcK512 = [6]uint64(foldConsts(0x104C11DB7, 32, 2048, 512, 128))

// vcrcPolyFull is P = x^16+x^12+x^3+x+1 (IBA 7.8.2's 0x100B) with its x^16 term.
const vcrcPolyFull = 0x1100B

// foldConsts returns, for each fold distance d (bits), x^(d+63) mod P and x^(d−1) mod P
// for the polynomial poly of degree deg (given with its x^deg term), each bit-reflected
// into a 64-bit word: the coefficient of x^i at bit 63−i.
func foldConsts(poly uint64, deg int, ds ...int) []uint64 {
	xPowMod := func(n int) uint64 {
		r := uint64(1)
		for range n {
			r <<= 1
			if r>>deg&1 != 0 {
				r ^= poly
			}
		}
		return r
	}
	reflect := func(k uint64) uint64 {
		var r uint64
		for i := range deg {
			if k>>i&1 != 0 {
				r |= 1 << (63 - i)
			}
		}
		return r
	}
	var out []uint64
	for _, d := range ds {
		out = append(out, reflect(xPowMod(d+63)), reflect(xPowMod(d-1)))
	}
	return out
}

// updateVCRCTable advances the CRC-16 register over p with slicing-by-16 tables.
func updateVCRCTable(crc uint16, p []byte) uint16 {
	t := &vcrcTab
	for len(p) >= 16 {
		a := binary.LittleEndian.Uint64(p)
		b := binary.LittleEndian.Uint64(p[8:])
		a ^= uint64(crc)
		crc = t[15][a&0xff] ^ t[14][a>>8&0xff] ^ t[13][a>>16&0xff] ^ t[12][a>>24&0xff] ^
			t[11][a>>32&0xff] ^ t[10][a>>40&0xff] ^ t[9][a>>48&0xff] ^ t[8][a>>56] ^
			t[7][b&0xff] ^ t[6][b>>8&0xff] ^ t[5][b>>16&0xff] ^ t[4][b>>24&0xff] ^
			t[3][b>>32&0xff] ^ t[2][b>>40&0xff] ^ t[1][b>>48&0xff] ^ t[0][b>>56]
		p = p[16:]
	}
	for _, v := range p {
		crc = crc>>8 ^ t[0][byte(crc)^v]
	}
	return crc
}

// VCRC returns the variant CRC (IBA 7.8.2) of pkt, which must be the whole
// packet from the first LRH byte through the ICRC (without a VCRC).
func VCRC(pkt []byte) uint16 { return ^updateVCRC(0xffff, pkt) }

// AppendVCRC appends the VCRC of pkt to pkt, least significant byte first.
func AppendVCRC(pkt []byte) []byte {
	return binary.LittleEndian.AppendUint16(pkt, VCRC(pkt))
}

// CheckVCRC reports whether b, a packet followed by its two VCRC bytes,
// carries a correct VCRC.
func CheckVCRC(b []byte) bool {
	if len(b) < VCRCLen {
		return false
	}
	n := len(b) - VCRCLen
	return binary.LittleEndian.Uint16(b[n:]) == VCRC(b[:n])
}
